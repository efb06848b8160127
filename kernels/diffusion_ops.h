// Ops of the diffusion engine (UNet / VAE of Stable Diffusion 1.x): GroupNorm(+SiLU), GEGLU,
// attention with a per-shape algorithm, 3x3 / 1x1 convolution (im2col+GEMM or Winograd
// F(4x4,3x3)), nearest x2 upsampling. Like kernels/ops.h, each op exists as a plain reference
// (tessera::kernels::ref, kernels/ref/diffusion_*.cpp, double accumulation, tests only) and a fast
// version (tessera::kernels::cpu, kernels/cpu/diffusion_*.cpp, SIMD + cpu_pool()).
// The techniques are those of Chen et al. 2023, "Speed Is All You Need: On-Device Acceleration of
// Large Diffusion Models via GPU-Aware Optimizations"; Winograd after Lavin & Gray 2016, "Fast
// Algorithms for Convolutional Neural Networks".
//
// Activation layout: NHWC, element (n, y, x, c) at ((n * height + y) * width + x) * channels + c.
// Why channels-last rather than PyTorch's NCHW, for the CPU:
// - 1x1 convolutions (proj_in/proj_out, the VAE attention's q/k/v, the res-block shortcut) are
//   exactly cpu::linear over [pixels, channels] with the PyTorch weight [out_c, in_c] as is, and
//   the transformer blocks see [tokens = pixels, channels] without a transpose on the way in or
//   out (NCHW costs two transposes of the activation per transformer block).
// - 3x3 im2col copies runs of in_c contiguous floats (one memcpy per tap) and the GEMM output rows
//   are output pixels, already NHWC; the Winograd transforms vectorise over channels, and the 36
//   tile GEMMs are [tiles, in_c] x [in_c, out_c] with no layout change.
// - GroupNorm reads each pixel's channel row contiguously: the statistics pass accumulates
//   per-channel sums over pixels with full-width vectors (NCHW would give contiguous groups, but
//   the convolutions dominate the step time ~20:1).
// Weights stay in PyTorch's layout (conv [out_c][in_c][kh][kw]); convolutions take them packed
// once at load time by cpu::conv2d_pack_weights.
//
// Off switches: every fusion can be switched off per call (Fusion::kOff, the unfused algorithm
// choices), so the benchmark measures each fusion's saving and tests check both forms agree.
//
// Conventions as kernels/ops.h: f32, sizes in elements (int64_t), callers own outputs, shapes are
// asserted, not validated (model code checked them when it loaded). Scratch the CPU ops need is
// per thread (thread_local, the engine owns scratch), grows on first use to the largest block
// seen and is kept for the thread's life: convolutions up to 16 MiB (im2col block, or Winograd's
// V and M blocks) on the calling thread, attention ~0.6 MiB per pool thread (a block of scores
// and an exp tile), GroupNorm a few KiB. Only the naive attention baseline takes caller scratch
// (its whole score matrix, the point of the baseline).
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels {

// An NHWC activation tensor's sizes.
struct ImageShape {
  int64_t batch = 1;
  int64_t height = 1;
  int64_t width = 1;
  int64_t channels = 1;
  int64_t pixels() const { return batch * height * width; }
  int64_t elements() const { return pixels() * channels; }
};

// A fusion's off switch: kOn runs the fused kernel, kOff the same math as separate passes through
// memory (the ablation baseline).
enum class Fusion { kOn, kOff };

// A convolution with square kernel 1 or 3. Kernel 3 pads by 1 (SD's convolutions, and its
// stride-2 downsample); kernel 1 has no padding and stride 1.
struct Conv2dShape {
  int64_t batch = 1;
  int64_t in_h = 1, in_w = 1;  // of x as stored, before the optional upsampling
  int64_t in_c = 1;
  int64_t out_c = 1;
  int64_t kernel = 3;  // 1 or 3
  int64_t stride = 1;  // 1 or 2 (2 only with kernel 3)
  // Nearest x2 upsampling of x before the convolution (SD's Upsample: interpolate then conv),
  // read through the convolution's input indexing: x is never expanded in memory. Kernel 3,
  // stride 1 only.
  bool upsample2x = false;
  // The VAE encoder's Downsample: x padded by one zero row at the bottom and one zero column on the
  // right only (torch pad (0, 1, 0, 1), then padding 0), instead of one on every side. Kernel 3,
  // stride 2 only.
  bool pad_end_only = false;

  int64_t conv_in_h() const { return upsample2x ? 2 * in_h : in_h; }
  int64_t conv_in_w() const { return upsample2x ? 2 * in_w : in_w; }
  // Zero rows / columns before the input (kernel 3): 1, or 0 with pad_end_only.
  int64_t pad_begin() const { return kernel == 1 || pad_end_only ? 0 : 1; }
  int64_t out_h() const { return out_size(conv_in_h()); }
  int64_t out_w() const { return out_size(conv_in_w()); }
  int64_t out_size(int64_t in) const {
    return kernel == 1 ? in : (in + pad_begin() + 1 - 3) / stride + 1;
  }
};

// How a convolution is computed (cpu::conv2d).
// kGemm: kernel 1 is one GEMM over pixels (cpu::linear's layout); kernel 3 copies blocks of
//   output pixels' 3x3 neighbourhoods (im2col, [pixels, 9 * in_c]) and multiplies them by the
//   packed weights [out_c, 9 * in_c]. Exact up to f32 summation order.
// kWinograd: F(4x4, 3x3), kernel 3 stride 1 only: 6x6 input tiles (stride 4) through B^T d B,
//   36 GEMMs [tiles, in_c] x [in_c, out_c] per block of tiles against the filters transformed
//   once (G g G^T), output tiles through A^T m A. 4x fewer multiplications than direct 3x3 for
//   large channel counts; the transforms' constants (up to 8 and 1/24) cost precision: on a
//   320->320 layer with SD-like values (post-SiLU inputs in [-0.3, 3], PyTorch-init weights)
//   max |error| = 7.7e-6 x max |output|, vs 4.3e-7 for kGemm (tests/kernels/diffusion_conv_test.cpp
//   measures it and states the bounds, 2e-5 and 5e-6).
enum class ConvAlgo { kGemm, kWinograd };

// Attention algorithm for the UNet/VAE (cpu::diffusion_attention). All exact (f32).
// kFlash: cpu::attention (ops.h): tiles with online softmax, no score matrix anywhere.
// kPartialFused: per block of queries, S = scale * Q K^T is written once (a block of rows x all
//   keys, per thread); the row max and row sum of exp are reduced into two small vectors; then
//   exp(S - max) / sum is computed tile by tile into an L1 buffer that feeds the product with V,
//   so the normalised score matrix is never written (Chen et al.'s partially fused softmax).
// kNaive: the unfused baseline: per (batch, head) the whole S = scale * Q K^T into caller
//   scratch, an in-place row softmax (cpu::softmax), then P V. Needs scratch.
// kAuto: choose_attention_algo(s).
enum class AttentionAlgo { kAuto, kFlash, kPartialFused, kNaive };

// The arithmetic of the products (convolutions, linear layers, attention).
// kF32: f32 operands (the reference-exact default; the tiny model and the parity tests).
// kBf16: operands rounded to bf16 (8 significant bits), products accumulated in f32, on AVX-512
//   BF16 CPUs (cpu::bf16_compute_available()): 3x3 convolutions as im2col (written as bf16) times
//   weights packed once (cpu::conv2d_bf16), 1x1 convolutions and linear layers through the same
//   packed GEMM (cpu::linear_bf16), attention through cpu::attention's bf16 path
//   (AttentionShape::allow_bf16). GroupNorm, LayerNorm, softmax, GEGLU's GELU, residual adds stay
//   f32. Winograd's products are not run in bf16: its transforms (constants up to 8, 1/24 in the
//   filters) multiply the operands' rounding error. Measured on a 64->48 layer: the 36 tile
//   products in bf16 gave 3.7e-2 x max |y| (2.5e-2 with V split into two bf16 halves: U's
//   rounding dominates), 15x the im2col path's 2.3e-3. The diffusion layers therefore keep
//   Winograd layers in f32 (engine/diffusion/layers.h, KernelOptions::precision).
//   Error (tests/kernels/diffusion_bf16_test.cpp): max |y - y_ref| <= 2e-2 x max |y_ref| per op
//   on random inputs (measured ~3e-3 to 8e-3: relative 2^-9 per operand, summed over k terms of
//   random sign).
enum class Precision { kF32, kBf16 };

// A pointwise map y = f(x) (DiffusionOps::pointwise): kRelu max(x, 0); kScaledTanh
// a * tanh(x / a) (a soft clamp to (-a, a)); kAffine a * x + b.
struct Pointwise {
  enum class Kind { kRelu, kScaledTanh, kAffine };
  Kind kind = Kind::kRelu;
  float a = 1.0f, b = 0.0f;
};

}  // namespace tessera::kernels

namespace tessera::kernels::ref {

// y = GroupNorm(x) * gamma[c] + beta[c] over NHWC x (statistics per image and group of
// channels / groups consecutive channels; biased variance, eps inside the square root, as
// torch.nn.GroupNorm), then SiLU when silu. channels % groups == 0. gamma/beta may be null
// (1 and 0). In place OK.
void group_norm(const float* x, const float* gamma, const float* beta, float* y,
                const ImageShape& s, int64_t groups, float eps, bool silu);

// Direct convolution, double accumulation: y[n, oy, ox, co] = bias[co] + sum over ci, ky, kx of
// w[co][ci][ky][kx] * xin[n, oy * stride + ky - pad, ox * stride + kx - pad, ci] (zero outside),
// with xin = nearest-upsampled x when s.upsample2x. w is PyTorch's [out_c][in_c][k][k]; bias may
// be null. y is [batch, out_h, out_w, out_c].
void conv2d(const float* x, const float* w, const float* bias, float* y, const Conv2dShape& s);

// Nearest x2 upsampling: y[n, 2i + a, 2j + b, c] = x[n, i, j, c] (a, b in {0, 1}); s is x's
// shape, y is [batch, 2 * height, 2 * width, channels].
void upsample_nearest2x(const float* x, float* y, const ImageShape& s);
// y[i] = f(x[i]) for i < n, in double (the reference of every backend's pointwise).
void pointwise(const float* x, float* y, int64_t n, const Pointwise& f);

}  // namespace tessera::kernels::ref

namespace tessera::kernels::cpu {

// ---- GroupNorm(+SiLU) ---------------------------------------------------------------------------
// ref::group_norm's contract. kOn: one kernel per image: a statistics pass (per-channel shifted
// sums over pixel blocks, f32 within a block of 64 pixels, double across blocks, combined per
// group with Chan's formula, so a large mean does not cancel the variance), then one pass that
// writes y = (x - mean) * gamma * rstd + beta with the SiLU applied while the rows are in L1. No
// intermediate tensor. kOff (silu only): the same GroupNorm, then cpu::silu as a second pass over
// y.
void group_norm(const float* x, const float* gamma, const float* beta, float* y,
                const ImageShape& s, int64_t groups, float eps, bool silu,
                Fusion fusion = Fusion::kOn);

// ---- GEGLU --------------------------------------------------------------------------------------
// SD's feed-forward gate, diffusers' GEGLU order: x rows are [value (hidden) | gate (hidden)]
// (`hidden, gate = proj(x).chunk(2, dim=-1)`), y[r, i] = value * gelu_erf(gate) (exact GELU).
// kOn: cpu::geglu of ops.h, which is that kernel (split, GELU and multiply in one pass).
// kOff: gelu_erf(gate) written to y, then a second pass y *= value. y must not alias x.
void geglu_ff(const float* x, float* y, int64_t rows, int64_t hidden, Fusion fusion = Fusion::kOn);

// ---- Attention ----------------------------------------------------------------------------------
// The algorithm kAuto runs for s, by measurement on 2 Zen 4 cores (diffusion_attention.cpp holds
// the numbers): kPartialFused for every non-causal shape (UNet self- and cross-attention at head
// dims 40/80/160, the VAE's single head of 512), kFlash for causal ones.
AttentionAlgo choose_attention_algo(const AttentionShape& s);
// Floats of caller scratch `algo` needs for s: s.q_len * s.kv_len for kNaive, else 0.
int64_t attention_scratch_floats(const AttentionShape& s, AttentionAlgo algo);
// ops.h's attention contract (strided [batch][token][head][head_dim] q/k/v/o, scale) with the
// chosen algorithm; with kAuto and s.allow_bf16 (Precision::kBf16), cpu::attention's bf16 path
// where it applies (AttentionShape::allow_bf16). s.causal must be false for kPartialFused and
// kNaive (the UNet has no causal attention; kAuto sends causal shapes to kFlash). scratch:
// attention_scratch_floats(s, algo) floats, may be null when that is 0. o must not alias q, k, v or
// scratch.
void diffusion_attention(const float* q, const float* k, const float* v, float* o,
                         const AttentionShape& s, AttentionAlgo algo, float* scratch);

// ---- Convolution --------------------------------------------------------------------------------
// The algorithm to use for s, by measurement (diffusion_conv.cpp holds the numbers): kWinograd
// for 3x3 stride-1 convolutions with >= 32 input channels and >= 16 output tiles (batch x 4x4
// tiles), kGemm otherwise (1x1, stride 2, the 4-channel latent input, 8x8 images whose work does
// not pay for reading Winograd's 4x larger filters). Never kWinograd where winograd_applies(s) is
// false.
ConvAlgo choose_conv_algo(const Conv2dShape& s);
// True for kernel 3, stride 1.
bool winograd_applies(const Conv2dShape& s);

// Floats of packed weights for (s, algo): kGemm out_c * in_c * kernel^2, kWinograd 36 * in_c *
// out_c. Only s.in_c, s.out_c, s.kernel matter.
int64_t conv2d_packed_floats(const Conv2dShape& s, ConvAlgo algo);
// Packs PyTorch weights w[out_c][in_c][k][k] for conv2d (done once when a model loads):
// kGemm -> [out_c][ky][kx][in_c]; kWinograd -> U[36][in_c][out_c], U = G g G^T computed in
// double. packed holds conv2d_packed_floats(s, algo) floats. kWinograd needs winograd_applies(s).
void conv2d_pack_weights(const float* w, const Conv2dShape& s, ConvAlgo algo, float* packed);
// ref::conv2d's contract with weights packed for `algo`; bias may be null. x is
// [batch, in_h, in_w, in_c] (upsampled on the fly when s.upsample2x), y [batch, out_h, out_w,
// out_c]; y must not alias x.
void conv2d(const float* x, const float* packed, const float* bias, float* y, const Conv2dShape& s,
            ConvAlgo algo);

// Nearest x2 upsampling, ref's contract (the unfused form of Conv2dShape::upsample2x).
void upsample_nearest2x(const float* x, float* y, const ImageShape& s);
// y[i] = f(x[i]) for i < n over the pool; in place OK.
void pointwise(const float* x, float* y, int64_t n, const Pointwise& f);

// ---- bf16 compute (Precision::kBf16) -----------------------------------------------------------
// True when the CPU's bf16 products can run (AVX-512 BF16, SIMD on, not switched off by
// gemm_bf16::set_enabled / TESSERA_NO_BF16_GEMM=1): the packing and the products themselves are
// in kernels/cpu/diffusion_bf16.h, reached through the CPU backend's DiffusionOps.
bool bf16_compute_available();

}  // namespace tessera::kernels::cpu
