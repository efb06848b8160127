// How a shape was made, as the JSON object every written mesh carries (engine/mesh/metadata.h):
// the one builder the CLI (`generate`) and the studio (Export) share, so a file from either is
// read back the same way (`tessera generate --from`, the studio's Open).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/runtime/defaults.h"
#include "engine/runtime/session.h"

namespace tessera::runtime {

// {"tessera": version, "prompt", "sampling": {"sample", and when sampling "seed", "temperature",
// "top_k", "top_p"}, "guidance", "bbox" (3 numbers or null), "resolution", "tokens",
// "model": {"name", "gpt_sha256"}}. `seed` is the candidate's own (base seed + its index);
// `resolution` the final mesh's. Export settings are the front end's ("export").
nlohmann::json shape_settings_json(const JobOptions& job, uint64_t seed, int resolution,
                                   const std::string& model_name, const std::string& gpt_sha256);

// How an image was made, as a front end writes it into the PNG: Tessera's JSON {"tessera",
// "prompt", "negative_prompt", "seed", "steps", "guidance", "sampler", "width", "height",
// "model", "precision", and for image-to-image "init_image" (the file's name as given),
// "strength", "mask"} and A1111's "parameters" text (the convention image tools read: the prompt,
// "Negative prompt: ..." when there is one, then "Steps: 20, Sampler: Euler, CFG scale: 7.5,
// Seed: 0, Size: 512x512, Model: name, Denoising strength: 0.6, Version: Tessera x").
struct ImageProvenance {
  const ImageJobOptions* job = nullptr;  // not null
  int64_t width = 0, height = 0;         // the image made
  std::string model_name, precision;
  std::string init_name, mask_name;  // "" when the job has none
  // The control image ("" when none: e.g. "depth.png", "depth of chair.glb, front") and the
  // ControlNet that used it (ImageEvent::control_net).
  std::string control_name, control_net;
};
nlohmann::json image_settings_json(const ImageProvenance& p);
std::string a1111_parameters(const ImageProvenance& p);
// Both as PNG text: Software, "tessera" (the JSON) and "parameters".
std::vector<std::pair<std::string, std::string>> image_png_text(const ImageProvenance& p);
// The provenance of `made` (an image job's result): its job, size and ControlNet, and the loaded
// image model's name and precision. The pictures' names are the caller's (what it read them from).
ImageProvenance image_provenance(const ImageJobOptions& job, const ImageEvent& made,
                                 const std::optional<ImageModelInfo>& model);
// `made`'s image as PNG bytes carrying image_png_text(p), or, with `metadata` false (the privacy
// switch), only the Software entry.
Expected<std::string> image_png(const ImageEvent& made, const ImageProvenance& p,
                                bool metadata = true);

// How a mesh was painted, the "paint" record a painted file carries beside the shape's settings:
// {"prompt", "negative_prompt", "seed" (the first view's), "steps", "guidance", "sampler",
// "image_model" (folder or file name), "loras" (file, multiplier; the model's merged ones) when
// any, "control_model" (file name, "" for the model's own), "control_scale", "tiny_decoder" when
// used, "views": {"ring", "elevation", "top", "bottom"}, "view_size" (as made), "texture_size",
// "new_atlas" (the uvs were made by the painter)}.
nlohmann::json paint_settings_json(const PaintJobOptions& job,
                                   const std::optional<ImageModelInfo>& model, int64_t view_size,
                                   bool new_atlas);

// The model's identity for the metadata: its folder name and the SHA-256 (hex) of its shape GPT
// file. Errors: reading the file.
struct ModelIdentity {
  std::string name;
  std::string gpt_sha256;
};
Expected<ModelIdentity> model_identity(const ShapeModelInfo& model);

// The "export" record read back (export_asset.h's export_record): the fields present, checked.
struct RestoredExport {
  std::string preset, up_axis, forward, unit;  // "": not given
  std::string pivot = "origin";
  std::optional<float> scale;
  std::optional<double> size, height;
  std::optional<int64_t> max_faces;
  std::optional<int> lods;
  std::optional<int64_t> max_texture;  // the texture limit asked (0: none)
  std::optional<bool> closed;          // what was asked: close small holes or not
};

// What a front end restores from a file's metadata (the fields present; the rest keep theirs):
// the studio's Open, `tessera generate --from`, the library's interrupted jobs.
struct RestoredSettings {
  std::string prompt;
  // The fields present over the product's defaults, checked (check_sampling). has_sampling: the
  // file has a "sampling" object (sample, seed, temperature, top_k, top_p); has_seed: with a seed;
  // has_guidance: a "guidance".
  SamplingSettings sampling = kDefaultSampling;
  bool has_sampling = false;
  bool has_seed = false;
  bool has_guidance = false;
  std::optional<std::array<float, 3>> bbox;
  int resolution = 0;  // 0: not given
  int64_t tokens = 0;  // 0: not given (the model's)
  std::optional<RestoredExport> exporting;
  std::string model_name;
  // What the text rule repaired in the file's text (engine/runtime/user_text.h), one line each.
  std::vector<std::string> notes;
};
// kInvalidArgument naming `file` and the field for a missing prompt, a field of the wrong type or
// value (an unknown preset, unit or axis included; sampling settings out of range with
// check_sampling's message), or a prompt the text rule refuses; the prompt comes back repaired by
// the rule.
Expected<RestoredSettings> restored_settings(const nlohmann::json& metadata,
                                             const std::string& file);

}  // namespace tessera::runtime
