// The Stable Diffusion 1.x UNet (epsilon prediction) on a kernels::Backend (the CPU or CUDA), NHWC
// activations.
//
// Structure and key names: engine/diffusion/sd_config.h, tools/tessera_ref/sd_unet.py (the
// PyTorch reference the parity tests compare against, tests/fixtures/diffusion/). Weights come from
// a WeightStore (F32 / F16 / BF16 tensors; linear layers run in the store's format, convolutions,
// norms and 1x1 convolutions in f32; KernelOptions::precision kBf16 moves the products to bf16
// compute, layers.h); the store must outlive the model. Loading checks every tensor
// the config implies: a missing tensor or a wrong shape comes back as a Status naming the tensor
// and the file.
//
// Memory: activations live in backend buffers the model owns and reuses; they grow on the first
// forward at a size (and packed convolution weights are made on first use of an algorithm), so
// later steps at the same size allocate nothing. Weights stay in the store on the CPU backend and
// are copied once to a device at load time. Not thread-safe: one forward at a time per model (the
// CPU kernels use default_thread_pool() inside).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/weights/weight_store.h"
#include "engine/diffusion/layers.h"
#include "engine/diffusion/sd_config.h"

namespace tessera::diffusion {

// SD's sinusoidal timestep embedding (flip_sin_to_cos: cos first): out[n] = [cos(t_n f_i) for i <
// dim/2, sin(t_n f_i) for i < dim/2], f_i = 10000^(-i / (dim/2)), computed in f32 in the order
// PyTorch does. t holds batch timesteps (fractional allowed); out is [batch, dim], dim even.
void timestep_embedding(const float* t, int64_t batch, int64_t dim, float* out);

// Receives intermediate activations during a forward (tests, debugging). data is NHWC
// [shape.batch, shape.height, shape.width, shape.channels] ("time_embed": [batch, 1, 1, 4 C0]),
// valid only during the call.
using ActivationTap = std::function<void(const std::string& name, const float* data,
                                         const kernels::ImageShape& shape)>;

// Which part of the UNet load() reads: all of it, or the encoder half a ControlNet copies
// (time_embed, input blocks, middle block; forward() then refuses, encode() works).
enum class UNetPart { kWhole, kEncoder };

// A ControlNet's residuals for one forward (engine/diffusion/controlnet.h), backend memory laid
// out like the tensors they join, already scaled: skips[k] is added to input block k's output
// where the decoder half reads it as a skip (not where the next input block reads it), middle to
// the middle block's output. A null entry adds nothing.
struct ControlResiduals {
  int64_t batch = 0, height = 0, width = 0;  // the latents they were made for
  // They join rows [first_row, first_row + batch) of the pass (guess mode: the prompt's row only).
  int64_t first_row = 0;
  std::vector<const float*> skips;  // one per input block
  const float* middle = nullptr;
};

class UNet {
 public:
  // Loads the weights under `prefix` for `config` (see infer_unet_config). Errors: kInvalidArgument
  // for a config whose channels do not split into its groups / heads; the WeightStore's kNotFound /
  // kInvalidArgument naming a missing tensor or one of the wrong shape or dtype.
  // `backend` runs every op and must outlive the model; null: a CPU backend the model owns.
  static Expected<std::unique_ptr<UNet>> load(WeightStore& store, const UNetConfig& config,
                                              const std::string& prefix = kUNetPrefix,
                                              kernels::Backend* backend = nullptr,
                                              UNetPart part = UNetPart::kWhole);
  kernels::Backend& backend() const { return *backend_; }

  const UNetConfig& config() const { return config_; }
  const KernelOptions& options() const { return options_; }
  void set_options(const KernelOptions& options) { options_ = options; }
  // Called with "time_embed", "input_blocks.N", "middle_block", "output_blocks.N" (N as in the
  // checkpoint). Empty (default) = no taps. The data is copied to the host for the call.
  void set_tap(ActivationTap tap) { tap_ = std::move(tap); }

  // eps = UNet(x, t, context) for a batch of latents. x, context and eps are backend memory, t is
  // host memory.
  //   x        [batch, height, width, in_channels] NHWC latents (already scaled for the sigma,
  //            as the scheduler feeds them)
  //   t        [batch] timesteps in [0, 1000)
  //   context  [batch, context_len, context_dim] cross-attention context (CLIP hidden states)
  //   eps      [batch, height, width, out_channels]; must not alias x
  // Errors (kInvalidArgument): null pointers, batch / context_len < 1, height or width not a
  // positive multiple of config().size_multiple(); the backend's errors (out of memory, a failed
  // launch) as they come. Asynchronous on a device backend: eps is complete after its
  // synchronize() (a download waits for it).
  // `control`: a ControlNet's residuals for this batch (null: none); kInvalidArgument when their
  // count is not the input blocks' or they were made for other rows or another latent size.
  Status forward(const float* x, const float* t, const float* context, int64_t batch,
                 int64_t height, int64_t width, int64_t context_len, float* eps,
                 const ControlResiduals* control = nullptr);

  // The encoder half alone (what a ControlNet runs): time embedding, input blocks, middle block,
  // with the arguments and errors of forward(). `first_add` (backend memory, null: nothing) is
  // added to every image of input block 0's output, [height, width, model_channels] (a
  // ControlNet's hint features). Afterwards, until the next encode()/forward():
  // block_output(k) is input block k's output [batch, block_size(k)], middle_output() the middle
  // block's [batch, middle size, level_channels.back()].
  Status encode(const float* x, const float* t, const float* context, int64_t batch, int64_t height,
                int64_t width, int64_t context_len, const float* first_add = nullptr);
  struct BlockSize {
    int64_t height = 0, width = 0, channels = 0;
  };
  int input_block_count() const { return static_cast<int>(input_.size()); }
  BlockSize block_size(int k) const;  // for the last encode()'s latent size
  const float* block_output(int k) const;
  const float* middle_output() const;
  BlockSize middle_size() const {
    return BlockSize{encoded_.middle_height, encoded_.middle_width, middle_.back().out_c};
  }

 private:
  struct Block {
    std::optional<Conv2d> conv;  // conv_in or a stride-2 downsample (input blocks)
    std::optional<ResBlock> res;
    std::optional<SpatialTransformer> attn;
    std::optional<Conv2d> upsample;  // output blocks: nearest x2 + conv
    int64_t out_c = 0;
    int64_t skip_c = 0;  // output blocks: channels of the skip concatenated to the input
  };
  struct EncodedSizes {
    int64_t batch = 0, height = 0, width = 0, middle_height = 0, middle_width = 0;
  };
  UNet() = default;
  // encode() without its Tf32Scope (forward() holds one for the whole pass).
  Status encode_half(const float* x, const float* t, const float* context, int64_t batch,
                     int64_t height, int64_t width, int64_t context_len, const float* first_add);
  Status tap(const std::string& name, const float* data, int64_t b, int64_t h, int64_t w,
             int64_t c);

  // First: destroyed last, after every buffer and layer that frees memory through it.
  std::unique_ptr<kernels::Backend> own_backend_;
  kernels::Backend* backend_ = nullptr;
  std::vector<kernels::DeviceBuffer> storage_;  // weights copied to a device backend
  UNetConfig config_;
  KernelOptions options_;
  ActivationTap tap_;
  EncodedSizes encoded_;
  Linear time_embed0_, time_embed2_;
  std::vector<Block> input_, middle_, output_;
  GroupNorm out_norm_;
  std::optional<Conv2d> out_conv_;
  Workspace ws_;     // the layers' scratch
  Workspace skips_;  // slot n: input block n's output
  Workspace main_;   // slots 0, 1: ping-pong activations; 2: the concatenation
  Workspace emb_;    // slots 0-2: sinusoid, hidden, SiLU(embedding)
  std::vector<float> sinus_host_, tap_host_;
};

}  // namespace tessera::diffusion
