// What the diffusion pipeline's stage files (pipeline*.cpp; pipeline.h says which holds what)
// share; internal to engine/diffusion. Callers use pipeline.h.
//
// DiffusionModel::Impl is the loaded model and its generation buffers. Each stage is a member
// defined in its own file, so that a stage grows (image-to-image, inpainting, ControlNet, LoRA)
// without the others' files: load_text_stage and DiffusionModel::encode_prompts in
// pipeline_text.cpp, denoise in pipeline_denoise.cpp, decode_latents in pipeline_vae.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "engine/diffusion/controlnet.h"
#include "engine/diffusion/lora.h"
#include "engine/diffusion/pipeline.h"
#include "engine/diffusion/unet.h"
#include "engine/diffusion/vae_decoder.h"
#include "engine/diffusion/vae_encoder.h"
#include "engine/text/clip_text_encoder.h"
#include "engine/text/clip_tokenizer.h"
#include "kernels/backend.h"

namespace tessera::diffusion {

// Where a CompVis checkpoint keeps its CLIP text encoder.
inline constexpr const char* kCompVisText = "cond_stage_model.transformer.";

namespace pipeline_detail {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

inline bool is_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

// `s` with `prefix` before its message: which part of the model an error came from.
inline Status with_prefix(const Status& s, const std::string& prefix) {
  return Status(s.code(), prefix + s.message());
}

// A checkpoint whose tensors were renamed (and possibly reshaped) into an owned buffer; the
// SafeTensors views point into `bytes`, which therefore must outlive every store made from it.
struct RenamedFile {
  std::unique_ptr<uint8_t[]> bytes;
  SafeTensors file;
};

// A diffusers UNet / VAE file under CompVis names, with kUNetPrefix / kVaePrefix
// (pipeline_diffusers.cpp). Errors: kUnsupported for an SDXL UNet, kNotFound when the file is no
// diffusers UNet / VAE decoder.
Expected<RenamedFile> open_diffusers_unet(const std::string& path);
Expected<RenamedFile> open_diffusers_vae(const std::string& path);
// A diffusers ControlNetModel file under v1.1 names with kControlPrefix. kUnsupported for SDXL's,
// kNotFound when the file is no diffusers ControlNet.
Expected<RenamedFile> open_diffusers_controlnet(const std::string& path);

}  // namespace pipeline_detail

struct DiffusionModel::Impl {
  // Declaration order = destruction order reversed: the renamed bytes and stores outlive the
  // models that point into them; the backend outlives the text encoder.
  std::unique_ptr<kernels::Backend> backend;
  std::string device_note;
  std::vector<std::unique_ptr<uint8_t[]>> renamed_bytes;
  std::unique_ptr<WeightStore> unet_store, vae_store;  // vae_store null when shared with the UNet
  std::optional<text::ClipTextEncoder> text;
  std::optional<text::ClipTokenizer> tokenizer;
  std::unique_ptr<UNet> unet;
  std::unique_ptr<VaeDecoder> vae;
  std::unique_ptr<VaeEncoder> encoder;  // null: the model has none (no image-to-image)
  // The ControlNet (load_control_net), its weights (and their renamed bytes for a diffusers file)
  // and the file it came from; null / empty when none is loaded.
  std::unique_ptr<uint8_t[]> control_bytes;
  std::unique_ptr<WeightStore> control_store;
  std::unique_ptr<ControlNet> control;
  std::string control_path;
  // The tiny decoder (load_tiny_decoder), its weights and file; null / empty when none is loaded.
  std::unique_ptr<WeightStore> tiny_store;
  std::unique_ptr<TinyDecoder> tiny;
  std::string tiny_path;
  // LoRAs (DiffusionLoadOptions::loras): their modules, read at load, and what merging did (one
  // entry per LoRA, the UNet's counts filled before the UNet loads, the text encoder's in
  // load_text_stage).
  std::vector<std::pair<LoraSpec, LoraFileModules>> pending_loras;
  std::vector<LoraMerged> loras;
  // Generation buffers, reused between calls: host, then the backend's (slots: Dev).
  std::vector<float> context, x, x_in, t, eps, guided, decoded;
  // Image-to-image and inpainting (encode_inputs): the init image's latents (NHWC, scaled), the
  // latent mask (1 = repaint, one per latent pixel; empty without a mask) and an inpainting
  // UNet's extra input per latent pixel [mask | masked image latents] (empty for a standard UNet).
  std::vector<float> init_latents, latent_mask, unet_extra, noise0, image_in, moments;
  std::vector<float> hint, x_control;  // the control image in [0, 1]; the ControlNet's latents
  enum Dev : int { kDevContext, kDevX, kDevEps, kDevImage, kDevHint, kDevXControl };
  Workspace dev;
  std::vector<uint8_t> preview;

  // One image's latents, NHWC: height x width x channels (the image's size over the VAE's upscale).
  struct LatentGrid {
    int64_t height = 0, width = 0, channels = 0;
  };

  // Text stage, loading (pipeline_text.cpp): the text encoder and the tokenizer found (the files
  // of `path`, in `dir`), loaded, and checked against the UNet's context dim; fills
  // files->text_encoder and files->vocab. Errors name the part ("text encoder: ", "tokenizer: ").
  Status load_text_stage(const std::string& path, const std::filesystem::path& dir,
                         bool text_in_checkpoint, const UNetConfig& unet,
                         const DiffusionLoadOptions& options, DiffusionModelFiles* files);

  // The generation stages are static, with the model as `m`: their locals (the device `context`,
  // `guided`, `preview`) share names with the buffers above, and `m.` says which is meant.
  //
  // UNet stage (pipeline_denoise.cpp): from the sampler's initial latents (or the request's
  // initial noise) through every step into m.x, with m.context (encode_prompts' [negative,
  // prompt]) as the UNet's cross-attention input. Sets out->denoise_ms. kCancelled between steps.
  static Status denoise(Impl& m, const GenerateRequest& request, const GenerateCallbacks& callbacks,
                        Sampler& sampler, const LatentGrid& grid, int64_t context_length,
                        int64_t text_width, GeneratedImage* out);

  // VAE encoder stage (pipeline_vae.cpp): the request's init image and mask into m.init_latents,
  // m.latent_mask and m.unet_extra (each cleared when not used). Sets out->encode_ms.
  // kInvalidArgument for a mask with nothing to repaint.
  static Status encode_inputs(Impl& m, const GenerateRequest& request, const LatentGrid& grid,
                              GeneratedImage* out);
  // The posterior's mean of `rgb` (request-sized RGB8 as floats in [-1, 1], m.image_in) times the
  // latent scale, into `latents` (NHWC).
  static Status encode_image(Impl& m, const LatentGrid& grid, int64_t width, int64_t height,
                             std::vector<float>* latents);

  // VAE stage (pipeline_vae.cpp): m.x decoded into out's image (decoded, rgb, latents, width,
  // height, vae_ms). kCorruptData when the image is not finite.
  static Status decode_latents(Impl& m, const GenerateRequest& request, const LatentGrid& grid,
                               GeneratedImage* out);
};

}  // namespace tessera::diffusion
