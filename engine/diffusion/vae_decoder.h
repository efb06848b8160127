// The Stable Diffusion 1.x VAE decoder (post_quant_conv + decoder) on a kernels::Backend (the CPU
// or CUDA), NHWC activations.
//
// Structure and key names: engine/diffusion/sd_config.h, tools/tessera_ref/sd_vae.py (the PyTorch
// reference of the parity tests). Weights come from a WeightStore that must outlive the decoder;
// loading checks every tensor the config implies (errors name the tensor and the file). Buffers
// are backend memory owned and reused as in UNet (no allocation after the first decode at a
// size). Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/weights/weight_store.h"
#include "engine/diffusion/layers.h"
#include "engine/diffusion/sd_config.h"
#include "engine/diffusion/unet.h"

namespace tessera::diffusion {

class VaeDecoder {
 public:
  // Loads the weights under `prefix` for `config` (see infer_vae_decoder_config). Errors as
  // UNet::load.
  static Expected<std::unique_ptr<VaeDecoder>> load(WeightStore& store,
                                                    const VaeDecoderConfig& config,
                                                    const std::string& prefix = kVaePrefix,
                                                    kernels::Backend* backend = nullptr);
  kernels::Backend& backend() const { return *backend_; }

  const VaeDecoderConfig& config() const { return config_; }
  const KernelOptions& options() const { return options_; }
  void set_options(const KernelOptions& options) { options_ = options; }
  // Called with "mid" (after the middle block) and "up.L" (after up level L, upsample included).
  void set_tap(ActivationTap tap) { tap_ = std::move(tap); }

  // image = decoder(post_quant_conv(z / config().latent_scale)); z and image are backend memory
  // (asynchronous on a device, as UNet::forward).
  //   z      [batch, height, width, z_channels] NHWC latents as the UNet produces them (scaled)
  //   image  [batch, height * upscale(), width * upscale(), out_channels] NHWC, nominally in
  //          [-1, 1] (not clamped)
  // Errors (kInvalidArgument): null pointers, batch / height / width < 1; the backend's errors.
  Status decode(const float* z, int64_t batch, int64_t height, int64_t width, float* image);

 private:
  struct Level {
    std::vector<ResBlock> blocks;
    std::optional<Conv2d> upsample;
  };
  VaeDecoder() = default;

  // First: destroyed last, after every buffer and layer that frees memory through it.
  std::unique_ptr<kernels::Backend> own_backend_;
  kernels::Backend* backend_ = nullptr;
  std::vector<kernels::DeviceBuffer> storage_;  // weights copied to a device backend
  VaeDecoderConfig config_;
  KernelOptions options_;
  ActivationTap tap_;
  Linear post_quant_;
  std::optional<Conv2d> conv_in_;
  std::optional<VaeMiddle> mid_;
  std::vector<Level> up_;  // index = level (up.0 = full resolution); run from the back
  GroupNorm norm_out_;
  std::optional<Conv2d> conv_out_;
  Workspace ws_;    // the layers' scratch
  Workspace main_;  // slots 0, 1: ping-pong activations
  std::vector<float> tap_host_;
};

}  // namespace tessera::diffusion
