// Where a Stable Diffusion 1.x model's files are, from what a user gives (the diffusion engine's
// counterpart of engine/shape/model_dir.h): a diffusers folder (unet/, vae/, text_encoder/,
// tokenizer/), a folder holding exactly one CompVis single-file .safetensors, or that file itself.
// Only the layout is decided here; the files' contents are checked when they are loaded
// (DiffusionModel::load, pipeline.h). Errors name the path: kNotFound for a path that does not
// exist or a folder with neither layout, kInvalidArgument for a folder with several checkpoints.
// Threads: pure (reads the file system only).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/diffusion/pipeline.h"

namespace tessera::diffusion {

inline constexpr const char* kDiffusersWeights = "diffusion_pytorch_model.safetensors";

struct DiffusionModelLocation {
  DiffusionModelFiles files;  // layout, unet, vae (text encoder and vocabulary: found later)
  std::string dir;  // absolute: where the companion files (text encoder, tokenizer) are looked for
};

Expected<DiffusionModelLocation> locate_diffusion_model(const std::string& path);

// The JSON object in `path` (a model card, a diffusers config.json): a null json when the file
// does not exist (the caller's default applies), kIoError / kCorruptData naming the file when it
// cannot be read or is not a JSON object.
Expected<nlohmann::json> read_json_file(const std::string& path);

}  // namespace tessera::diffusion
