// The tiny latent decoder (TAESD, "Tiny AutoEncoder for Stable Diffusion"): a 1.2M-parameter
// stand-in for the VAE decoder, about 20x less work, for fast images and previews (what
// stable-diffusion.cpp's --taesd and ComfyUI's previews use). It reads the latents the UNet makes
// (no 1 / latent_scale) and writes the same [-1, 1] NHWC image as VaeDecoder::decode.
//
// Structure (docs/diffusion.md, "Tiny decoder"; tools/tessera_ref/sd_taesd.py is the PyTorch
// reference): 3 * tanh(z / 3), conv 3x3 to W channels, ReLU; then four stages of 3, 3, 3 and 1
// blocks with a nearest x2 upsample and a bias-free conv 3x3 after each of the first three; a
// final conv 3x3 to RGB. A block is relu(conv(relu(conv(relu(conv(x))))) + x). The raw output is
// in [0, 1]; decode() returns 2 * raw - 1.
//
// Two layouts load:
//   the TAESD release (taesd_decoder.safetensors): "1.weight" ... "19.weight", the module
//     indices of its nn.Sequential, blocks as "3.conv.0.weight", optionally under "decoder.";
//   diffusers' AutoencoderTiny (diffusion_pytorch_model.safetensors): "decoder.layers.0.weight"
//     ... "decoder.layers.18.weight" (no clamp module: indices one lower).
// The latent channels and the width come from the first convolution; every tensor is checked
// against them and errors name the tensor and the file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "engine/diffusion/layers.h"
#include "engine/weights/weight_store.h"
#include "kernels/backend.h"

namespace tessera::diffusion {

struct TinyDecoderConfig {
  int64_t latent_channels = 4;
  int64_t width = 64;
  int64_t out_channels = 3;
  std::string prefix;  // "", "decoder." or "decoder.layers."
  int offset = 0;      // added to the TAESD release's module index (-1 for diffusers)
  int64_t upscale() const { return 8; }
};

// The layout and sizes of a tiny decoder in `file`. kInvalidArgument naming the file when it
// holds none (e.g. a full VAE or a UNet: the message says what a tiny decoder file looks like).
Expected<TinyDecoderConfig> infer_tiny_decoder_config(const SafeTensors& file);

// Every tensor of the decoder in `config`'s layout (name -> shape), for random checkpoints and
// the fuzzer's seeds.
std::vector<std::pair<std::string, std::vector<int64_t>>> tiny_decoder_tensor_shapes(
    const TinyDecoderConfig& config);

class TinyDecoder {
 public:
  // Loads every tensor of `config` from `store` (which must outlive the decoder).
  static Expected<std::unique_ptr<TinyDecoder>> load(WeightStore& store,
                                                     const TinyDecoderConfig& config,
                                                     kernels::Backend* backend = nullptr);
  const TinyDecoderConfig& config() const { return config_; }
  void set_options(const KernelOptions& options) { options_ = options; }
  // VaeDecoder::decode's contract: z [batch, height, width, latent_channels] backend memory,
  // image [batch, 8 height, 8 width, 3] in [-1, 1] (not clamped).
  Status decode(const float* z, int64_t batch, int64_t height, int64_t width, float* image);

 private:
  struct Block {
    std::optional<Conv2d> conv[3];
  };
  TinyDecoder() = default;
  std::unique_ptr<kernels::Backend> own_backend_;  // first: destroyed last
  kernels::Backend* backend_ = nullptr;
  std::vector<kernels::DeviceBuffer> storage_;
  TinyDecoderConfig config_;
  KernelOptions options_;
  std::optional<Conv2d> conv_in_;
  std::vector<std::vector<Block>> stages_;  // 3, 3, 3, 1 blocks
  std::vector<std::optional<Conv2d>> up_;   // after stages 0..2 (upsample fused)
  std::optional<Conv2d> conv_out_;
  Workspace ws_;
  Workspace main_;  // slots 0..2: the activation and a block's two temporaries
};

}  // namespace tessera::diffusion
