// Checkpoint kind inference: which model a safetensors file holds and its sizes, from tensor names
// and shapes alone (public checkpoints ship without config files; the tensor names are those of
// Roblox/cube and of Stable Diffusion 1.x CompVis / diffusers files).
//
// Recognised kinds (CheckpointKindInfo::name):
//   "cube3d-gpt"             Cube 3D DualStreamRoformer; version "v0.5" when bbox_proj.* exists,
//                            else "v0.1".
//   "cube3d-shape-tokenizer" Cube 3D OneDAutoEncoder; version from the latent count (512: v0.1,
//                            1024: v0.5).
//   "clip-text"              Hugging Face CLIPTextModel (`text_model.*`, maybe under a prefix).
//   "sd-unet"                SD 1.x UNet alone (CompVis `model.diffusion_model.*` or diffusers).
//   "sd-vae"                 SD 1.x VAE alone (CompVis `first_stage_model.*` or diffusers).
//   "sd-checkpoint"          CompVis full checkpoint (UNet + VAE, usually + CLIP text).
//   "unknown"                none of the above.
// This is a coarse classification for `tessera info` and for early, clear error messages; model
// loaders still check every tensor they use (SafeTensors::expect) and report what is missing.
// Config values that the shapes cannot show are not invented, with one documented exception:
// cube3d-gpt's "num_latents" (generation length), which the spec fixes per version for the
// published full-size checkpoints (other sizes get a note instead).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"

namespace tessera {

enum class CheckpointKind {
  kUnknown,
  kCube3dGpt,
  kCube3dShapeTokenizer,
  kClipText,
  kSdUnet,
  kSdVae,
  kSdCheckpoint,
};

// "cube3d-gpt", ..., "unknown".
const char* checkpoint_kind_name(CheckpointKind kind);

struct CheckpointKindInfo {
  CheckpointKind kind = CheckpointKind::kUnknown;
  std::string name = "unknown";  // checkpoint_kind_name(kind)
  std::string version;           // "v0.1" / "v0.5" for Cube 3D, else empty
  // Sizes inferred from shapes, in a stable, readable order. Keys per kind:
  //   cube3d-gpt: n_embd, n_head, head_dim, n_dual_blocks, n_single_blocks, vocab_size,
  //     mlp_hidden, text_dim, code_dim, num_latents
  //   cube3d-shape-tokenizer: num_latents, width, n_head, head_dim, codebook_size, codebook_dim,
  //     n_encoder_layers, n_decoder_layers, mlp_hidden, fourier_freqs
  //   clip-text: width, n_layers, vocab_size, max_positions, mlp_hidden, projection_dim (if a
  //     text_projection is present)
  //   sd-unet / sd-checkpoint: unet_in_channels, unet_model_channels, unet_out_channels,
  //     unet_context_dim; sd-vae / sd-checkpoint: vae_latent_channels, vae_decoder_channels,
  //     vae_out_channels; sd-checkpoint with a text encoder also clip_width, clip_layers.
  // A key is absent when the tensor it comes from is missing.
  std::vector<std::pair<std::string, int64_t>> config;
  // Human-readable remarks (e.g. "heads not stored; CLIP convention width/64 = 12").
  std::vector<std::string> notes;
  // Name prefix of the recognised model in the file ("" or e.g. "first_stage_model.").
  std::string prefix;

  std::optional<int64_t> get(const std::string& key) const;
};

// Minimal description of one tensor for inference: what a header lists.
struct TensorShapeEntry {
  std::string name;
  std::vector<int64_t> shape;
};

CheckpointKindInfo infer_checkpoint_kind(const std::vector<TensorShapeEntry>& tensors);
CheckpointKindInfo infer_checkpoint_kind(const SafeTensors& file);

}  // namespace tessera
