// Building blocks shared by the SD UNet and VAE decoder (engine/diffusion/unet.h, vae_decoder.h):
// kernel choices, a reusable activation workspace, convolutions with packed weights, GroupNorm,
// ResBlocks and attention blocks over NHWC activations. Every op goes through a kernels::Backend
// (kernels/backend.h, its diffusion section): the CPU backend runs the kernels of
// kernels/diffusion_ops.h, the CUDA backend those of kernels/cuda/diffusion_cuda_ops.h, and the
// layers never branch on the device. Activations and the pointers the run functions take are the
// backend's memory. Weights are read from a WeightStore, which must outlive the layers (they keep
// pointers into it, and the CPU backend uses its memory in place; other backends copy each weight
// once at load time into the model's LoadContext::storage). Loading checks every tensor's name,
// dtype and shape: errors come back from the WeightStore naming the tensor, the file and expected
// vs actual shape. Run functions return the backend's errors (launch failures, out of memory).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/weights/weight_store.h"
#include "kernels/backend.h"
#include "kernels/diffusion_ops.h"

namespace tessera::diffusion {

// How 3x3 convolutions are computed.
enum class ConvPolicy {
  kAuto,      // the backend's choose_conv_algo per layer and shape (the CPU's is by measurement)
  kGemm,      // im2col + GEMM everywhere (the exact path)
  kWinograd,  // Winograd F(4x4,3x3) wherever it applies (3x3 stride 1), GEMM elsewhere
};

// Every fusion's switch (the ablation and the parity tests run each combination); defaults are
// the fast path. Changing them between forward passes is allowed (packed weights for another
// convolution algorithm are made on first use).
struct KernelOptions {
  kernels::Fusion group_norm_silu = kernels::Fusion::kOn;  // GroupNorm + SiLU in one pass
  kernels::Fusion geglu = kernels::Fusion::kOn;            // GEGLU split, GELU and gate in one pass
  kernels::Fusion upsample = kernels::Fusion::kOn;  // nearest x2 read inside the conv, not stored
  kernels::AttentionAlgo attention = kernels::AttentionAlgo::kAuto;
  ConvPolicy conv = ConvPolicy::kAuto;
  // kBf16: 1x1 convolutions, the 3x3 convolutions that `conv` sends to im2col (8x8 levels,
  // stride 2, the latent input; and all with ConvPolicy::kGemm), linear layers with at least
  // kMinBf16Rows rows and attention run in bf16 compute (kernels::Precision says what is rounded
  // and the error) where kernels::cpu::bf16_compute_available(), f32 otherwise. Winograd layers
  // stay f32 Winograd (faster than bf16 im2col here, Conv2d::run says by how much). The bf16
  // weight panels are packed on first use, once per layer, and kept (about 2 bytes per weight).
  kernels::Precision precision = kernels::Precision::kF32;
};

// Linear layers with fewer rows (the timestep embedding: one row per image) stay f32 in kBf16
// mode: a GEMV gains nothing from bf16 products and their packing.
inline constexpr int64_t kMinBf16Rows = 32;

// Whether opt asks for bf16 compute and the backend can run it (Backend::bf16_compute()).
bool use_bf16(const KernelOptions& opt, const kernels::Backend& backend);
// Whether opt's kBf16 becomes TF32 tensor-core products on this backend (a device): the
// attention products, and the convolutions too where the device has no bf16 weight products.
bool use_tf32(const KernelOptions& opt, const kernels::Backend& backend);
// Whether opt's kBf16 runs the weight products on a device's bf16 tensor cores
// (Backend::bf16_products_available): linear layers with at least kMinBf16Rows rows and every
// convolution (im2col; Winograd is f32 only), with bf16 copies of their weights made on first use.
bool use_device_bf16(const KernelOptions& opt, const kernels::Backend& backend);
// The backend's diffusion facet; the models' backends have one (model_backend checked it).
kernels::DiffusionOps& diffusion_ops(kernels::Backend& backend);

// TF32 products on the backend for one forward when use_tf32(opt, backend); the previous state
// is restored after it.
class Tf32Scope {
 public:
  Tf32Scope(kernels::Backend& backend, const KernelOptions& opt) : on_(use_tf32(opt, backend)) {
    if (!on_) return;
    ops_ = backend.diffusion();
    previous_ = ops_->tf32_products();
    ops_->set_tf32_products(true);
  }
  ~Tf32Scope() {
    if (on_) ops_->set_tf32_products(previous_);
  }
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  kernels::DiffusionOps* ops_ = nullptr;
  bool on_;
  bool previous_ = false;
};

// What layers load into: the checkpoint's tensors (host memory) and the backend the model runs
// on. Weights are handed to the backend once (Backend::upload_f32 / upload_weight: the CPU
// backend returns the store's memory, a device copies it into a buffer appended to `storage`,
// which the model owns and keeps for its life).
struct LoadContext {
  WeightStore& store;
  kernels::Backend& backend;
  std::vector<kernels::DeviceBuffer>& storage;

  // store.f32(name, shape) on the backend.
  Expected<const float*> f32(const std::string& name, const std::vector<int64_t>& shape);
  // A weight read from the store (tensor `name`, for messages) on the backend.
  Expected<kernels::Weight> weight(const std::string& name, const kernels::Weight& host);

 private:
  // Keeps a device copy in `storage`; an upload error names the tensor.
  template <typename T>
  Expected<T> keep(const std::string& name, Expected<T> uploaded, kernels::DeviceBuffer buffer) {
    if (!uploaded.ok()) {
      return Status(uploaded.status().code(),
                    "tensor '" + name + "': " + uploaded.status().message());
    }
    if (buffer.data() != nullptr) storage.push_back(std::move(buffer));
    return uploaded;
  }
};

// The backend a model runs on: `given`, or (null) a CPU backend made into *own. kUnsupported
// naming `model` when the backend has no diffusion ops (Backend::can_diffuse()).
Expected<kernels::Backend*> model_backend(kernels::Backend* given,
                                          std::unique_ptr<kernels::Backend>* own,
                                          const char* model);

// Named scratch buffers of backend memory that grow to the largest size requested and are then
// reused, so a denoising loop at a fixed size allocates only in its first step. Pointers are
// valid until the same slot is requested with a larger size (the old contents are not kept).
// The models also keep their activations in Workspaces of their own (any slot number).
class Workspace {
 public:
  Workspace() = default;
  explicit Workspace(kernels::Backend* backend) : backend_(backend) {}
  kernels::Backend& backend() const { return *backend_; }
  // At least `floats` floats in `slot` (kOutOfMemory from the backend).
  Expected<float*> get(int slot, int64_t floats);
  // The slot's current buffer (null before its first get).
  float* data(int slot) const;

  enum Slot : int {
    kResA,
    kResB,
    kEmb,  // ResBlock temporaries
    kTokens,
    kNorm,
    kQ,
    kK,
    kV,
    kO,
    kFf1,
    kFf2,
    kAttnScratch,  // transformer / attention
    kUpsample,     // unfused upsample
    kSlotCount
  };

 private:
  kernels::Backend* backend_ = nullptr;
  std::vector<kernels::DeviceBuffer> buffers_;
};

struct GroupNorm {
  kernels::Backend* backend = nullptr;
  const float* gamma = nullptr;  // backend memory
  const float* beta = nullptr;
  int64_t channels = 0;
  int64_t groups = 32;
  float eps = 1e-5f;

  static Expected<GroupNorm> load(LoadContext& ctx, const std::string& name, int64_t channels,
                                  int64_t groups, float eps);
  Status run(const float* x, float* y, const kernels::ImageShape& s, bool silu,
             const KernelOptions& opt) const;
};

// A convolution (kernel 1 or 3, stride 1 or 2, optional fused nearest x2 upsample of its input;
// pad_end_only: the VAE encoder's Downsample padding, kernels::Conv2dShape says).
// Weights are packed for an algorithm on its first use (kernels::cpu::conv2d_pack_weights on the
// host, then on the backend), so switching KernelOptions between passes costs one packing.
class Conv2d {
 public:
  static Expected<Conv2d> load(LoadContext& ctx, const std::string& name, int64_t in_c,
                               int64_t out_c, int64_t kernel, int64_t stride = 1,
                               bool upsample2x = false, bool pad_end_only = false,
                               bool has_bias = true);
  // x [batch, h, w, in_c] -> y [batch, out_h, out_w, out_c]; y must not alias x.
  Status run(const float* x, int64_t batch, int64_t h, int64_t w, float* y,
             const KernelOptions& opt, Workspace& ws);
  int64_t out_channels() const { return out_c_; }

 private:
  kernels::Backend* backend_ = nullptr;
  const float* weight_ = nullptr;  // PyTorch [out][in][k][k], in the store (host)
  const float* bias_ = nullptr;    // backend memory
  int64_t in_c_ = 0, out_c_ = 0, kernel_ = 3, stride_ = 1;
  bool upsample2x_ = false;
  bool pad_end_only_ = false;
  // By kernels::ConvAlgo, made on first use: the host packing (kept while the backend reads it
  // in place), its copy on a device, and the pointer the backend gets.
  // Not value-initialised: the packing writes every float, and zeroing gigabytes of Winograd
  // filters first would cost a pass over them on the first use.
  std::array<std::unique_ptr<float[]>, 2> packed_host_;
  std::array<kernels::DeviceBuffer, 2> packed_storage_;
  std::array<const float*, 2> packed_ = {nullptr, nullptr};
  kernels::PackedWeight packed_bf16_;  // Precision::kBf16 (host backends), first use
  // Precision::kBf16 on a device (use_device_bf16): the kGemm packing in bf16, on the device.
  kernels::DeviceBuffer device_bf16_storage_;
  kernels::Weight device_bf16_;
};

// A linear layer (weight in the store's format, optional bias).
struct Linear {
  kernels::Backend* backend = nullptr;
  kernels::Weight w;            // backend memory
  kernels::Weight host;         // the store's (packed for bf16 compute)
  const float* bias = nullptr;  // backend memory
  static Expected<Linear> load(LoadContext& ctx, const std::string& name, int64_t out, int64_t in,
                               bool bias);
  // A 1x1 convolution's weight [out, in, 1, 1] used as a linear layer (always f32).
  static Expected<Linear> load_conv1x1(LoadContext& ctx, const std::string& name, int64_t out,
                                       int64_t in);
  // f32: Backend::linear in the weight's format.
  Status run(const float* x, int64_t rows, float* y) const;
  // With opt: linear_bf16 on the packed weight when use_bf16(opt) and rows >= kMinBf16Rows, else
  // as above. Packs on first such use (so not thread-safe, like the models that own the layers).
  Status run(const float* x, int64_t rows, float* y, const KernelOptions& opt) const;

  mutable kernels::PackedWeight packed_bf16;  // cache of host for the bf16 path
  // use_device_bf16: the weight in bf16 on the device (w itself when it is bf16 already).
  mutable kernels::DeviceBuffer device_bf16_storage;
  mutable kernels::Weight device_bf16;
};

// The residual block of both models: y = skip(x) + conv2(act(norm2(conv1(act(norm1(x))) + e))),
// act = SiLU, e = Linear(SiLU(emb)) per image when the block has a timestep projection (UNet).
struct ResBlockNames {
  const char* norm1;
  const char* conv1;
  const char* emb;  // nullptr: no timestep projection (VAE)
  const char* norm2;
  const char* conv2;
  const char* skip;
};
inline constexpr ResBlockNames kUNetResNames = {"in_layers.0",  "in_layers.2",  "emb_layers.1",
                                                "out_layers.0", "out_layers.3", "skip_connection"};
inline constexpr ResBlockNames kVaeResNames = {"norm1", "conv1", nullptr,
                                               "norm2", "conv2", "nin_shortcut"};

class ResBlock {
 public:
  static Expected<ResBlock> load(LoadContext& ctx, const std::string& prefix,
                                 const ResBlockNames& names, int64_t in_c, int64_t out_c,
                                 int64_t emb_dim, int64_t groups, float eps);
  // x [batch, h, w, in_c] -> y [.., out_c]; silu_emb [batch, emb_dim] (SiLU already applied)
  // when the block has a timestep projection, else ignored. y must not alias x.
  Status run(const float* x, float* y, int64_t batch, int64_t h, int64_t w, const float* silu_emb,
             const KernelOptions& opt, Workspace& ws);

 private:
  int64_t in_c_ = 0, out_c_ = 0;
  GroupNorm norm1_, norm2_;
  Conv2d conv1_, conv2_;
  std::optional<Linear> emb_;
  std::optional<Linear> skip_;
};

// SD 1.x SpatialTransformer with one BasicTransformerBlock: y = x + proj_out(block(proj_in(
// GroupNorm(x)))), block = self-attention, cross-attention over the context, GEGLU feed-forward,
// each pre-LayerNorm and residual.
class SpatialTransformer {
 public:
  static Expected<SpatialTransformer> load(LoadContext& ctx, const std::string& prefix,
                                           int64_t channels, int64_t context_dim, int64_t heads,
                                           int64_t groups, float gn_eps, float ln_eps);
  // x [batch, h, w, C] -> y (must not alias x); context [batch, context_len, context_dim].
  Status run(const float* x, float* y, int64_t batch, int64_t h, int64_t w, const float* context,
             int64_t context_len, const KernelOptions& opt, Workspace& ws) const;

 private:
  int64_t c_ = 0, ctx_dim_ = 0, heads_ = 1;
  float ln_eps_ = 1e-5f;
  GroupNorm norm_;
  Linear proj_in_, proj_out_;
  const float* ln_[3][2] = {};  // norm1..3 weight, bias
  Linear q1_, k1_, v1_, out1_, q2_, k2_, v2_, out2_, ff1_, ff2_;
};

// The VAE's single-head attention over all channels: y = x + proj_out(attn(q, k, v)(norm(x))).
class VaeAttention {
 public:
  static Expected<VaeAttention> load(LoadContext& ctx, const std::string& prefix, int64_t channels,
                                     int64_t groups, float eps);
  Status run(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
             const KernelOptions& opt, Workspace& ws) const;

 private:
  int64_t c_ = 0;
  GroupNorm norm_;
  Linear q_, k_, v_, proj_out_;
};

// The VAE's middle block, the same in the encoder and the decoder: ResnetBlock, single-head
// attention, ResnetBlock, all `channels` wide (`prefix`: "encoder.mid." / "decoder.mid." under the
// VAE's prefix).
class VaeMiddle {
 public:
  static Expected<VaeMiddle> load(LoadContext& ctx, const std::string& prefix, int64_t channels,
                                  int64_t groups, float eps);
  // Runs on the ping-pong activations `main` (slots 0 and 1): from slot *cur, leaving the result
  // in the slot it then sets *cur to.
  Status run(Workspace& main, int* cur, int64_t batch, int64_t h, int64_t w,
             const KernelOptions& opt, Workspace& ws);

 private:
  int64_t c_ = 0;
  std::optional<ResBlock> block_1_, block_2_;
  std::optional<VaeAttention> attn_;
};

// Attention over contiguous [batch][len][heads][head_dim] q, k, v into o with opt.attention.
Status run_attention(const float* q, const float* k, const float* v, float* o, int64_t batch,
                     int64_t heads, int64_t q_len, int64_t kv_len, int64_t head_dim,
                     const KernelOptions& opt, Workspace& ws);

// NCHW <-> NHWC copies of host memory (fixtures and PyTorch-side tensors are NCHW).
void nchw_to_nhwc(const float* x, float* y, int64_t batch, int64_t channels, int64_t h, int64_t w);
void nhwc_to_nchw(const float* x, float* y, int64_t batch, int64_t channels, int64_t h, int64_t w);

}  // namespace tessera::diffusion
