// Sizes of a Stable Diffusion 1.x UNet and VAE decoder, inferred from the tensor shapes of a
// CompVis single-file checkpoint (docs/diffusion.md; the PyTorch reference is
// tools/tessera_ref/sd_unet.py and sd_vae.py).
//
// UNet (prefix `model.diffusion_model.`), what each size comes from:
//   model_channels C0, in_channels  input_blocks.0.0.weight [C0, in, 3, 3]
//   level channels, num_res_blocks  the ResBlocks input_blocks.N.0.in_layers.2.weight [C, Cin, 3,
//   3]
//                                   between the stride-2 downsamples input_blocks.N.0.op.weight
//   attention per level             presence of input_blocks.N.1.proj_in.weight
//   context_dim                     attn2.to_k.weight [C, context_dim] of the first transformer
//   out_channels                    out.2.weight [out, C0, 3, 3]
// The head count is not visible in the shapes (SD 1.x uses 8 everywhere): the caller passes it.
// GroupNorm's 32 groups and the eps values are SD's constants (fields below).
//
// VAE decoder (prefix `first_stage_model.`):
//   z_channels        post_quant_conv.weight [z, z, 1, 1]
//   level channels    decoder.up.L.block.0.conv2.weight [C_L, C_L, 3, 3], L = 0.. (up.0 is the
//                     full-resolution level; the decoder runs the levels from the last to up.0)
//   blocks per level  the count of decoder.up.0.block.J
//   out_channels      decoder.conv_out.weight [out, C_0, 3, 3]
//
// Only what decides the structure is read here; the models check every tensor's shape when they
// load (engine/diffusion/unet.h, vae_decoder.h), so a wrong shape anywhere is named there.
// Errors: kNotFound naming the missing tensor and the file, kCorruptData naming the tensor whose
// shape disagrees, kUnsupported for other SD versions' layouts (SD 2.x's linear proj_in, more than
// one transformer block per attention).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"

namespace tessera::diffusion {

inline constexpr const char* kUNetPrefix = "model.diffusion_model.";
inline constexpr const char* kVaePrefix = "first_stage_model.";
// SD 1.x's latent scale: the VAE decodes z / kSdLatentScale.
inline constexpr float kSdLatentScale = 0.18215f;

struct UNetConfig {
  int64_t in_channels = 4;
  int64_t out_channels = 4;
  int64_t model_channels = 320;  // C0; the timestep embedding is 4 * C0 wide
  // Channels of each resolution level (SD 1.5: 320, 640, 1280, 1280); a stride-2 downsample
  // follows every level but the last.
  std::vector<int64_t> level_channels;
  std::vector<bool> level_attention;  // a SpatialTransformer after each ResBlock of the level
  int64_t num_res_blocks = 2;         // per level going down; num_res_blocks + 1 going up
  int64_t context_dim = 768;
  int64_t num_heads = 8;  // per transformer; head_dim = level channels / num_heads
  int64_t groups = 32;
  float res_eps = 1e-5f;          // GroupNorm in ResBlocks and before conv_out
  float transformer_eps = 1e-6f;  // GroupNorm before proj_in
  float layer_norm_eps = 1e-5f;   // norm1..3 of the transformer blocks

  int64_t levels() const { return static_cast<int64_t>(level_channels.size()); }
  int64_t time_embed_dim() const { return 4 * model_channels; }
  // Latent height/width must be a multiple of this (one halving per downsample).
  int64_t size_multiple() const { return int64_t{1} << (levels() - 1); }
  // "320/640/1280/1280, 2 res blocks, attention at levels 0,1,2 + middle, 8 heads, context 768"
  std::string summary() const;
};

struct VaeDecoderConfig {
  int64_t z_channels = 4;
  int64_t out_channels = 3;
  // Channels of up level L (index 0 = full resolution; SD: 128, 256, 512, 512). conv_in and the
  // middle block run at level_channels.back(); every level but 0 ends with a x2 upsample.
  std::vector<int64_t> level_channels;
  int64_t blocks_per_level = 3;  // ResnetBlocks per up level (the config's num_res_blocks + 1)
  int64_t groups = 32;
  float eps = 1e-6f;
  float latent_scale = kSdLatentScale;

  int64_t levels() const { return static_cast<int64_t>(level_channels.size()); }
  // Image pixels per latent pixel along each axis (8 for SD).
  int64_t upscale() const { return int64_t{1} << (levels() - 1); }
  std::string summary() const;
};

// The VAE encoder (image-to-image, inpainting; prefix `first_stage_model.`, keys `encoder.*` and
// `quant_conv`), what each size comes from:
//   in_channels, base channels  encoder.conv_in.weight [ch, in, 3, 3]
//   level channels              encoder.down.L.block.0.conv2.weight [C_L, C_L, 3, 3], L = 0..
//                               (every level but the last ends with a stride-2 Downsample)
//   blocks per level            the count of encoder.down.0.block.J
//   z_channels                  quant_conv.weight [2z, 2z, 1, 1] (mean | log-variance)
struct VaeEncoderConfig {
  int64_t in_channels = 3;
  int64_t base_channels = 128;          // conv_in's output (the config's `ch`)
  std::vector<int64_t> level_channels;  // SD: 128, 256, 512, 512
  int64_t blocks_per_level = 2;         // the config's num_res_blocks
  int64_t z_channels = 4;
  int64_t groups = 32;
  float eps = 1e-6f;
  float latent_scale = kSdLatentScale;

  int64_t levels() const { return static_cast<int64_t>(level_channels.size()); }
  // Image pixels per latent pixel along each axis (8 for SD).
  int64_t downscale() const { return int64_t{1} << (levels() - 1); }
  std::string summary() const;
};

// The full SD 1.5 configurations (for benchmarks with random weights and the parameter checks).
UNetConfig sd15_unet_config();
VaeDecoderConfig sd15_vae_decoder_config();
VaeEncoderConfig sd15_vae_encoder_config();

// Tensor name -> shape.
using TensorShapes = std::map<std::string, std::vector<int64_t>>;

// Every tensor the models read for `config`, with its shape, under `prefix` (the layout of
// tools/tessera_ref/sd_unet.py / sd_vae.py, i.e. of a CompVis checkpoint).
TensorShapes unet_tensor_shapes(const UNetConfig& config, const std::string& prefix = kUNetPrefix);
TensorShapes vae_decoder_tensor_shapes(const VaeDecoderConfig& config,
                                       const std::string& prefix = kVaePrefix);
TensorShapes vae_encoder_tensor_shapes(const VaeEncoderConfig& config,
                                       const std::string& prefix = kVaePrefix);

// Parameters the model holds for `config` (SD 1.5: UNet 859,520,964; VAE decoder with
// post_quant_conv 49,490,199): the sum of every tensor shape the loaders ask for.
int64_t unet_parameter_count(const UNetConfig& config);
int64_t vae_decoder_parameter_count(const VaeDecoderConfig& config);
// SD 1.5: 34,163,664 (encoder + quant_conv).
int64_t vae_encoder_parameter_count(const VaeEncoderConfig& config);

// Infer the configs from `file` (tensor names under `prefix`). num_heads: see above (> 0 and
// dividing every attention level's channels, else kInvalidArgument).
Expected<UNetConfig> infer_unet_config(const SafeTensors& file, int64_t num_heads = 8,
                                       const std::string& prefix = kUNetPrefix);
// The encoder half alone (time embedding, input blocks, middle block: what a ControlNet copies);
// out_channels is set to in_channels.
Expected<UNetConfig> infer_unet_encoder_config(const SafeTensors& file, int64_t num_heads = 8,
                                               const std::string& prefix = kUNetPrefix);
Expected<VaeDecoderConfig> infer_vae_decoder_config(const SafeTensors& file,
                                                    const std::string& prefix = kVaePrefix);
// kNotFound naming `encoder.conv_in.weight` when the file has no encoder (SD files that ship only
// the decoder: image-to-image then needs another VAE).
Expected<VaeEncoderConfig> infer_vae_encoder_config(const SafeTensors& file,
                                                    const std::string& prefix = kVaePrefix);

}  // namespace tessera::diffusion
