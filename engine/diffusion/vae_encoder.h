// The Stable Diffusion 1.x VAE encoder (encoder + quant_conv) on a kernels::Backend, NHWC
// activations: an image in [-1, 1] to the posterior's moments (mean | log-variance), for
// image-to-image and inpainting.
//
// Structure and key names: engine/diffusion/sd_config.h (VaeEncoderConfig),
// tools/tessera_ref/sd_vae.py `VaeEncoder` (the PyTorch reference of the parity tests). Weights
// come from a WeightStore that must outlive the encoder; loading checks every tensor the config
// implies (errors name the tensor and the file). Buffers are backend memory owned and reused as in
// VaeDecoder. Not thread-safe.
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

class VaeEncoder {
 public:
  static Expected<std::unique_ptr<VaeEncoder>> load(WeightStore& store,
                                                    const VaeEncoderConfig& config,
                                                    const std::string& prefix = kVaePrefix,
                                                    kernels::Backend* backend = nullptr);
  kernels::Backend& backend() const { return *backend_; }

  const VaeEncoderConfig& config() const { return config_; }
  const KernelOptions& options() const { return options_; }
  void set_options(const KernelOptions& options) { options_ = options; }
  // Called with "down.L" (after down level L, its Downsample included) and "mid".
  void set_tap(ActivationTap tap) { tap_ = std::move(tap); }

  // moments = quant_conv(encoder(image)); image and moments are backend memory.
  //   image    [batch, height, width, in_channels] NHWC in [-1, 1]; height and width multiples
  //            of config().downscale()
  //   moments  [batch, height / f, width / f, 2 * z_channels]: mean (channels 0..z-1) and the
  //            log-variance, unclamped (posterior_latents clamps it)
  // Errors (kInvalidArgument): null pointers, batch < 1, a side that is not a positive multiple of
  // the downscale; the backend's errors.
  Status encode(const float* image, int64_t batch, int64_t height, int64_t width, float* moments);

 private:
  struct Level {
    std::vector<ResBlock> blocks;
    std::optional<Conv2d> downsample;
  };
  VaeEncoder() = default;

  std::unique_ptr<kernels::Backend> own_backend_;  // first: destroyed last
  kernels::Backend* backend_ = nullptr;
  std::vector<kernels::DeviceBuffer> storage_;
  VaeEncoderConfig config_;
  KernelOptions options_;
  ActivationTap tap_;
  std::optional<Conv2d> conv_in_;
  std::vector<Level> down_;
  std::optional<VaeMiddle> mid_;
  GroupNorm norm_out_;
  std::optional<Conv2d> conv_out_;
  Linear quant_;
  Workspace ws_;
  Workspace main_;  // slots 0, 1: ping-pong activations
  std::vector<float> tap_host_;
};

// The UNet's latents from the posterior (host memory), per latent pixel p < pixels:
// z = mean + exp(clamp(logvar, -30, 20) / 2) * noise (noise null: z = mean, the mode), scaled:
// latents[p][c] = scale * z[c]. moments [pixels][2 * z_channels], noise and latents
// [pixels][z_channels].
void posterior_latents(const float* moments, int64_t pixels, int64_t z_channels, const float* noise,
                       float scale, float* latents);

// RGB8 (row-major, 3 bytes per pixel) -> NHWC floats in [-1, 1]: v / 127.5 - 1.
void rgb8_to_image(const uint8_t* rgb, int64_t pixels, float* image);

}  // namespace tessera::diffusion
