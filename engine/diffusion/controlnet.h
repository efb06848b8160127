// A ControlNet for SD 1.x (docs/diffusion.md, "ControlNet"; the PyTorch reference is
// tools/tessera_ref/sd_controlnet.py): a copy of the UNet's encoder half (time embedding, input
// blocks, middle block) that also sees a control image (a depth map, edges, ...) through a small
// convolutional hint encoder, and gives one residual per input block plus one for the middle block
// (1x1 "zero" convolutions), which the UNet adds to its skips and middle output
// (UNet::forward's ControlResiduals).
//
// Tensor names (prefix `control_model.` in a v1.1 file; a file without the prefix works with ""):
//   time_embed.{0,2}, input_blocks.*, middle_block.*   as the UNet's (sd_config.h)
//   input_hint_block.{0,2,...,2n}                      3x3 convolutions, SiLU between them
//   zero_convs.K.0                                     1x1, one per input block
//   middle_block_out.0                                 1x1 on the middle block's output
//
// The hint encoder's strides are not in the shapes. The rule every published SD 1.x ControlNet
// follows (16, 16, 32, 32, 96, 96, 256 -> 320 with three stride-2 convolutions) and tessera-tiny's
// does too: a convolution that changes the channel count and is neither the first nor the last has
// stride 2, the others stride 1. Their count must make the hint's downscale the VAE's (a hint the
// size of the image lands at the latent's size).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "engine/diffusion/layers.h"
#include "engine/diffusion/sd_config.h"
#include "engine/diffusion/unet.h"
#include "engine/weights/weight_store.h"

namespace tessera::diffusion {

inline constexpr const char* kControlPrefix = "control_model.";

struct HintEncoderConfig {
  int64_t in_channels = 3;
  // Output channels and stride of each convolution, the last one's output being the UNet's model
  // channels (SD 1.5: 16, 16, 32, 32, 96, 96, 256, 320; strides 1, 1, 2, 1, 2, 1, 2, 1).
  std::vector<int64_t> channels;
  std::vector<int64_t> strides;
  // Image pixels per latent pixel along each axis (8 for SD 1.5's).
  int64_t downscale() const;
};

struct ControlNetConfig {
  UNetConfig unet;  // its encoder half (in_channels: the latents' channels, even for inpainting)
  HintEncoderConfig hint;
  // "hint 16/16/32/32/96/96/256/320 (x8), encoder <unet summary>"
  std::string summary() const;
};

// The stride rule above for hint convolutions with these output channels.
std::vector<int64_t> hint_strides(const std::vector<int64_t>& channels);

// The SD 1.5 ControlNet (control_v11*_sd15_*: 361,279,120 parameters).
ControlNetConfig sd15_controlnet_config();
// Every tensor ControlNet::load reads for `config`, with its shape, under `prefix`.
TensorShapes controlnet_tensor_shapes(const ControlNetConfig& config,
                                      const std::string& prefix = kControlPrefix);
int64_t controlnet_parameter_count(const ControlNetConfig& config);

// The config of the ControlNet in `file` under `prefix`, for steering a UNet of config `steered`
// (the head count and the constants come from it). Errors name the tensor and the file:
// kNotFound when `prefix + "input_hint_block.0.weight"` or the encoder's tensors are missing,
// kUnsupported for a ControlNet of another SD version (SDXL's add_embedding; a cross-attention
// context other than the UNet's, e.g. SD 2.x's 1024), kInvalidArgument when its encoder's levels or
// channels are not the UNet's, or its hint encoder's downscale is not `latent_downscale` (the
// VAE's).
Expected<ControlNetConfig> infer_controlnet_config(const SafeTensors& file,
                                                   const UNetConfig& steered,
                                                   int64_t latent_downscale,
                                                   const std::string& prefix = kControlPrefix);

// The guess-mode scales of the original ControlNet: residual i of n gets strength * 0.825^(n-1-i)
// (the middle block's 1, the first skip's ~0.1 for SD 1.5); the unconditional pass gets none.
std::vector<float> guess_mode_scales(float strength, int count);

class ControlNet {
 public:
  // Loads the weights under `prefix` (every tensor's shape checked; errors name it).
  // `backend` must outlive the model; null: a CPU backend the model owns.
  static Expected<std::unique_ptr<ControlNet>> load(WeightStore& store,
                                                    const ControlNetConfig& config,
                                                    const std::string& prefix = kControlPrefix,
                                                    kernels::Backend* backend = nullptr);
  const ControlNetConfig& config() const { return config_; }
  void set_options(const KernelOptions& options);
  // Input blocks + 1 (13 for SD 1.5).
  int residual_count() const { return encoder_->input_block_count() + 1; }

  // The control image through the hint encoder, kept for every forward() until the next call (it
  // does not depend on the step). `hint`: backend memory, [height, width, hint.in_channels] NHWC
  // in [0, 1] (an 8-bit RGB image / 255), height and width multiples of hint.downscale().
  Status set_hint(const float* hint, int64_t height, int64_t width);
  bool has_hint() const { return hint_height_ > 0; }

  // The residuals for latents x (backend memory [batch, height, width, unet.in_channels], height x
  // width the hint's over its downscale) at timesteps t with `context`, as UNet::forward takes
  // them. Residual k of image b is multiplied by scales[k] * row_scales[b] (a row scale 0 gives
  // that image zeros: guess mode's unconditional pass). The pointers stay valid until the next
  // forward(). kInvalidArgument: no hint, a latent size that is not the hint's, scale counts that
  // are not residual_count() / batch; the UNet encoder's errors as they come.
  Expected<const ControlResiduals*> forward(const float* x, const float* t, const float* context,
                                            int64_t batch, int64_t height, int64_t width,
                                            int64_t context_len, const std::vector<float>& scales,
                                            const std::vector<float>& row_scales);

 private:
  ControlNet() = default;

  std::unique_ptr<kernels::Backend> own_backend_;  // first: destroyed last
  kernels::Backend* backend_ = nullptr;
  std::vector<kernels::DeviceBuffer> storage_;
  ControlNetConfig config_;
  KernelOptions options_;
  std::unique_ptr<UNet> encoder_;
  std::vector<Conv2d> hint_convs_;
  std::vector<Linear> zero_convs_;
  Linear middle_out_;
  Workspace ws_;    // the convolutions' scratch
  Workspace hint_;  // slots 0, 1: the hint encoder's ping-pong; 2: the hint features
  Workspace out_;   // slot k: residual k
  int64_t hint_height_ = 0, hint_width_ = 0;  // the latent size of the current hint features
  ControlResiduals residuals_;
};

}  // namespace tessera::diffusion
