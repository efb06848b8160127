// DiffusionOps: the facet of a backend that runs the UNet and VAE layers of engine/diffusion
// (layers.h) (docs/adding-an-op.md). Backend::diffusion() is null where a backend has none.
// Semantics: the ops of the same names in kernels/diffusion_ops.h (namespace cpu); the CUDA
// backend runs kernels/cuda/diffusion_cuda_ops.h. Scratch (im2col / Winograd blocks, attention
// scores) is the backend's own, grown on demand. Everything below the first section is optional:
// the defaults say the backend has no such thing, and the layers fall back to f32.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "core/status.h"
#include "kernels/diffusion_ops.h"
#include "kernels/ops.h"

namespace tessera::kernels {

// A weight packed once, by a backend, for its own products (DiffusionOps::pack_linear_bf16 and
// pack_conv2d_bf16): opaque to everyone else. Copies share the packing; it lives while any copy
// does. Only the facet that made it may run it (`maker`): another one refuses it.
class PackedWeight {
 public:
  PackedWeight() = default;
  PackedWeight(std::shared_ptr<const void> data, const void* maker)
      : data_(std::move(data)), maker_(maker) {}
  bool empty() const { return data_ == nullptr; }
  const void* maker() const { return maker_; }
  // The packing as the maker's own type; for the maker only.
  template <typename T>
  const T& as() const {
    return *static_cast<const T*>(data_.get());
  }

 private:
  std::shared_ptr<const void> data_;
  const void* maker_ = nullptr;
};

class DiffusionOps {
 public:
  virtual ~DiffusionOps() = default;

  // The algorithm conv2d runs best for s here (ConvPolicy::kAuto).
  virtual ConvAlgo choose_conv_algo(const Conv2dShape& s) const = 0;
  // GroupNorm(+SiLU) over NHWC x; `fusion` kOff runs the SiLU as a second pass.
  virtual Status group_norm(const float* x, const float* gamma, const float* beta, float* y,
                            const ImageShape& s, int64_t groups, float eps, bool silu,
                            Fusion fusion) = 0;
  // A 3x3 / 1x1 convolution with weights packed for `algo` by cpu::conv2d_pack_weights (a host
  // packing in a backend-neutral float layout, copied to the backend's memory as it is).
  virtual Status conv2d(const float* x, const float* packed, const float* bias, float* y,
                        const Conv2dShape& s, ConvAlgo algo) = 0;
  virtual Status upsample_nearest2x(const float* x, float* y, const ImageShape& s) = 0;
  // GEGLU feed-forward split: x [rows, 2 hidden] (value | gate) -> y [rows, hidden].
  virtual Status geglu_ff(const float* x, float* y, int64_t rows, int64_t hidden,
                          Fusion fusion) = 0;
  // Non-causal attention with `algo` (kAuto: the backend's own choice per shape).
  virtual Status diffusion_attention(const float* q, const float* k, const float* v, float* o,
                                     const AttentionShape& s, AttentionAlgo algo) = 0;
  // y[n, p, c] += rows[n, c] for n < batch, p < pixels, c < channels (a ResBlock's timestep
  // projection added to every pixel of its image).
  virtual Status add_per_image(float* y, const float* rows, int64_t batch, int64_t pixels,
                               int64_t channels) = 0;
  // y[p] = [a[p] (a_channels) | b[p] (b_channels)] per pixel p < pixels (NHWC channel
  // concatenation, torch.cat(dim=1) of NCHW). y must not alias a or b.
  virtual Status concat_channels(const float* a, int64_t a_channels, const float* b,
                                 int64_t b_channels, float* y, int64_t pixels) = 0;
  // y[i] = x[i] / divisor (a division, as PyTorch's z / scale), i < n; in place OK.
  virtual Status divide(const float* x, float divisor, float* y, int64_t n) = 0;
  // y[i] = f(x[i]), i < n; in place OK (the tiny decoder's activations and clamps).
  virtual Status pointwise(const float* x, float* y, int64_t n, const Pointwise& f) = 0;

  // ---- bf16 compute on the host (Precision::kBf16; optional) ------------------------------------
  // Whether the four ops below run here (the CPU backend on AVX-512 BF16 CPUs).
  virtual bool bf16_compute() const { return false; }
  // A linear layer's weight (f32 or bf16, [rows = out][cols = in], host memory) packed for
  // linear_bf16.
  virtual Expected<PackedWeight> pack_linear_bf16(const Weight& w) {
    (void)w;
    return unsupported("this backend has no bf16 compute (pack_linear_bf16)");
  }
  // PyTorch conv weights w[out_c][in_c][k][k] (kernel 1 or 3, host memory) packed for conv2d_bf16.
  virtual Expected<PackedWeight> pack_conv2d_bf16(const float* w, const Conv2dShape& s) {
    (void)w, (void)s;
    return unsupported("this backend has no bf16 compute (pack_conv2d_bf16)");
  }
  // y[m, out] = bf16(x) . W^T (+ bias), f32 sums; w from pack_linear_bf16 of this backend.
  virtual Status linear_bf16(const float* x, int64_t rows, const PackedWeight& w, const float* bias,
                             float* y) {
    (void)x, (void)rows, (void)w, (void)bias, (void)y;
    return unsupported("this backend has no bf16 compute (linear_bf16)");
  }
  // conv2d's contract with x and the weights rounded to bf16; w from pack_conv2d_bf16.
  virtual Status conv2d_bf16(const float* x, const PackedWeight& w, const float* bias, float* y,
                             const Conv2dShape& s) {
    (void)x, (void)w, (void)bias, (void)y, (void)s;
    return unsupported("this backend has no bf16 compute (conv2d_bf16)");
  }

  // ---- reduced precision on a device (Precision::kBf16; optional) -------------------------------
  // TF32 tensor-core products (the CUDA backend: cuBLAS TF32 math for the im2col convolution
  // GEMMs only, as PyTorch, whose default allows TF32 in convolutions and not in matmuls; with it
  // on, choose_conv_algo picks im2col, since Winograd's transforms would amplify the TF32
  // rounding). A state of the backend until switched off: the models switch it on for one forward
  // and restore the previous state after it.
  virtual bool tf32_products_available() const { return false; }
  virtual void set_tf32_products(bool on) { (void)on; }
  virtual bool tf32_products() const { return false; }
  // bf16 tensor-core products for the linear layers (Backend::linear with a bf16 Weight from
  // upload_weight) and the im2col convolutions (conv2d_weight below): x rounded to bf16 as ops.h's
  // bf16 linear contract, f32 sums and outputs. The models use them instead of TF32 for every
  // product with a weight; TF32 (above) is left for the activation-by-activation products of
  // attention.
  virtual bool bf16_products_available() const { return false; }
  // conv2d's contract (ConvAlgo::kGemm) with the weights as a backend Weight of out_c rows and
  // kernel^2 * in_c columns in cpu::conv2d_pack_weights' kGemm order ([out_c][ky][kx][in_c]), in
  // any dtype linear() takes (bf16 on a device: the tensor cores).
  virtual Status conv2d_weight(const float* x, const Weight& w, const float* bias, float* y,
                               const Conv2dShape& s) {
    (void)x, (void)w, (void)bias, (void)y, (void)s;
    return unsupported("this backend has no convolution with backend weights (conv2d_weight)");
  }
};

}  // namespace tessera::kernels
