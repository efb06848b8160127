// Internals shared by the diffusion ops of kernels/cpu (diffusion_*.cpp): the per-ISA kernels
// (written once in diffusion_kernels.inc and compiled three times: diffusion_simd.cpp portable,
// diffusion_simd_avx2.cpp, diffusion_simd_avx512.cpp with those ISAs' flags), the GEMM they all
// use, the per-thread scratch and the 3x3 im2col tap walk. Declarations and one inline template,
// safe to include from any file.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/diffusion_ops.h"

// The activations' ISA bodies (activations_kernels.inc, compiled by activations_avx2.cpp /
// activations_avx512.cpp; declared in activations.cpp by a file-local macro): the fused
// GroupNorm+SiLU and the unfused GEGLU call them on rows that are already in L1.
namespace tessera::kernels::cpu::detail::avx2 {
void silu(const float* x, float* y, int64_t n);
void gelu_erf(const float* x, float* y, int64_t n);
}  // namespace tessera::kernels::cpu::detail::avx2
namespace tessera::kernels::cpu::detail::avx512 {
void silu(const float* x, float* y, int64_t n);
void gelu_erf(const float* x, float* y, int64_t n);
}  // namespace tessera::kernels::cpu::detail::avx512

namespace tessera::kernels::cpu::diffusion_detail {

// Channels per step of the Winograd transforms: the local tile arrays are [36][kLanes], one
// AVX-512 vector (two AVX2 vectors) per tile position.
constexpr int64_t kLanes = 16;

#define TESSERA_DIFFUSION_ISA_DECLS                                                                \
  /* For c < channels: s1[c] += sum_p (x[p*channels + c] - shift[c]) and s2[c] += (...)^2, over    \
     p < pixels (f32; callers keep pixels small and fold into double). */                          \
  void channel_sums(const float* x, int64_t pixels, int64_t channels, const float* shift,          \
                    float* s1, float* s2);                                                         \
  /* y[p*channels + c] = ((x[p*channels + c] - hi[c]) - lo[c]) * scale[c] + shift[c]: the center   \
     as an unevaluated sum hi + lo, so x - center is exact to f32 rounding. y may alias x. */      \
  void affine_rows(const float* x, float* y, int64_t pixels, int64_t channels, const float* hi,    \
                   const float* lo, const float* scale, const float* shift);                       \
  /* y[i] *= a[i] for i < n. */                                                                    \
  void mul_inplace(const float* a, float* y, int64_t n);                                           \
  /* max(x[0..n)), n >= 1 (NaN-free input). */                                                     \
  float row_max(const float* x, int64_t n);                                                        \
  /* Winograd F(4x4,3x3) input transform of one 6x6 tile: src[i*6 + j] points at the channels of   \
     input pixel (i, j) of the tile, or is null for padding (zeros). Writes V = B^T d B for every  \
     channel: v[p*v_stride + c] for tile position p < 36, c < channels. */                         \
  void winograd_input_tile(const float* const* src, int64_t channels, float* v, int64_t v_stride); \
  /* Output transform of one tile: Y = A^T M A (+ bias[c] when bias != null), with M's position p  \
     at m[p*m_stride + c]; dst[i*4 + j] receives output pixel (i, j)'s channels, or is null when   \
     that pixel is outside the image. */                                                           \
  void winograd_output_tile(const float* m, int64_t m_stride, int64_t channels, const float* bias, \
                            float* const* dst);
namespace scalar {
TESSERA_DIFFUSION_ISA_DECLS
}  // namespace scalar
namespace avx2 {
TESSERA_DIFFUSION_ISA_DECLS
}  // namespace avx2
namespace avx512 {
TESSERA_DIFFUSION_ISA_DECLS
}  // namespace avx512
#undef TESSERA_DIFFUSION_ISA_DECLS

// One ISA's kernels, plus the activations and exp helper that go with it.
struct IsaKernels {
  decltype(&scalar::channel_sums) channel_sums;
  decltype(&scalar::affine_rows) affine_rows;
  decltype(&scalar::mul_inplace) mul_inplace;
  decltype(&scalar::row_max) row_max;
  decltype(&scalar::winograd_input_tile) winograd_input_tile;
  decltype(&scalar::winograd_output_tile) winograd_output_tile;
  void (*silu)(const float* x, float* y, int64_t n);
  void (*gelu_erf)(const float* x, float* y, int64_t n);
  // y[i] = exp(x[i] - shift), returns the sum (simd_internal.h).
  float (*exp_sub_sum)(const float* x, float shift, float* y, int64_t n);
};
const IsaKernels& isa_kernels(Isa isa);

// c[m, n] = alpha * a[m, k] . op(b) + beta * c, row-major with leading dimensions; op(b) = b
// ([k, n]) or, with b_trans, b^T (b is [n, k]). beta == 0 ignores c's old contents. Single
// threaded: callers split the work across cpu_pool() themselves. OpenBLAS sgemm
// (single-threaded, as cpu::linear sets it) while SIMD is enabled; a plain loop nest otherwise
// (the all-scalar path, TESSERA_NO_SIMD=1, uses no vector code of OpenBLAS's either).
void sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, bool b_trans, float beta, float* c, int64_t ldc);

// Per-thread scratch of at least `count` elements, kept for the life of the thread and grown on
// demand (the engine owns scratch). A slot's buffer is valid until the same thread asks for that
// slot again; slots let one op hold several buffers at once. slot < kScratchSlots.
constexpr int kScratchSlots = 4;
float* thread_scratch(int slot, int64_t count);
double* thread_scratch_f64(int slot, int64_t count);

// The nine taps of output pixel p (flattened over the batch) of a 3x3 convolution, in the kGemm
// weight order (ky, kx): tap(t, src) with src the tap's in_c input floats, or nullptr where the tap
// falls in the zero padding. Both im2col paths (f32 and bf16 rows) fill their rows through this.
template <class Tap>
inline void for_each_tap3x3(const float* x, const Conv2dShape& s, int64_t p, const Tap& tap) {
  const int64_t ih = s.conv_in_h(), iw = s.conv_in_w(), oh = s.out_h(), ow = s.out_w();
  const int64_t up = s.upsample2x ? 1 : 0;
  const int64_t n = p / (oh * ow), oy = (p / ow) % oh, ox = p % ow;
  const int64_t before = s.pad_begin();
  for (int64_t ky = 0; ky < 3; ++ky) {
    const int64_t iy = oy * s.stride + ky - before;
    for (int64_t kx = 0; kx < 3; ++kx) {
      const int64_t ix = ox * s.stride + kx - before;
      const bool pad = iy < 0 || iy >= ih || ix < 0 || ix >= iw;
      tap(ky * 3 + kx,
          pad ? nullptr : x + ((n * s.in_h + (iy >> up)) * s.in_w + (ix >> up)) * s.in_c);
    }
  }
}

}  // namespace tessera::kernels::cpu::diffusion_detail
