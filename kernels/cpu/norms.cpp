// CPU LayerNorm / RMSNorm: rows spread over the default thread pool, each row normalised by an
// AVX-512 or AVX2 body (norms_kernels.inc, compiled per ISA by norms_avx512.cpp and
// norms_avx2.cpp) or the scalar loop below when SIMD is off.
//
// Row statistics use the corrected two-pass scheme in f32: mean0 = sum(x)/n, then
// d = x - mean0, mean = mean0 + sum(d)/n, var = sum(d^2)/n - (sum(d)/n)^2 (biased, clamped at 0).
// The correction term removes the first pass's rounding, so rows with a large common offset stay
// accurate without double accumulation.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/isa.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu {

namespace detail {
#define TESSERA_NORM_ISA_DECLS                                                          \
  void layer_norm_row(const float* x, const float* weight, const float* bias, float* y, \
                      int64_t dim, float eps);                                          \
  void rms_norm_row(const float* x, const float* weight, float* y, int64_t dim, float eps);
namespace avx512 {
TESSERA_NORM_ISA_DECLS
}  // namespace avx512
namespace avx2 {
TESSERA_NORM_ISA_DECLS
}  // namespace avx2
#undef TESSERA_NORM_ISA_DECLS
}  // namespace detail

namespace {

void layer_norm_row_scalar(const float* x, const float* weight, const float* bias, float* y,
                           int64_t dim, float eps) {
  const float n = static_cast<float>(dim);  // divisions, not * (1/n): exact for constant rows
  float sum = 0.0f;
  for (int64_t i = 0; i < dim; ++i) sum += x[i];
  const float mean0 = sum / n;
  float s1 = 0.0f, s2 = 0.0f;
  for (int64_t i = 0; i < dim; ++i) {
    const float d = x[i] - mean0;
    s1 += d;
    s2 += d * d;
  }
  const float shift = s1 / n;
  const float mean = mean0 + shift;
  const float var = std::max(0.0f, s2 / n - shift * shift);
  const float rstd = 1.0f / std::sqrt(var + eps);
  for (int64_t i = 0; i < dim; ++i) {
    float v = (x[i] - mean) * rstd;
    if (weight) v *= weight[i];
    if (bias) v += bias[i];
    y[i] = v;
  }
}

void rms_norm_row_scalar(const float* x, const float* weight, float* y, int64_t dim, float eps) {
  float sq = 0.0f;
  for (int64_t i = 0; i < dim; ++i) sq += x[i] * x[i];
  const float rrms = 1.0f / std::sqrt(sq / static_cast<float>(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) y[i] = weight ? x[i] * rrms * weight[i] : x[i] * rrms;
}

// Rows per task: about 16K elements, so small row counts (decode: one row) stay on the caller.
int64_t row_grain(int64_t dim) {
  return std::max<int64_t>(1, (16 * 1024) / std::max<int64_t>(1, dim));
}
}  // namespace

void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                int64_t dim, float eps) {
  if (rows <= 0 || dim <= 0) return;
  const Isa isa = active_isa();
  kernels::cpu::cpu_pool().parallel_for(rows, row_grain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      switch (isa) {
        case Isa::kAvx512:
          detail::avx512::layer_norm_row(xr, weight, bias, yr, dim, eps);
          break;
        case Isa::kAvx2:
          detail::avx2::layer_norm_row(xr, weight, bias, yr, dim, eps);
          break;
        case Isa::kScalar:
          layer_norm_row_scalar(xr, weight, bias, yr, dim, eps);
          break;
      }
    }
  });
}

void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) {
  if (rows <= 0 || dim <= 0) return;
  const Isa isa = active_isa();
  kernels::cpu::cpu_pool().parallel_for(rows, row_grain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      switch (isa) {
        case Isa::kAvx512:
          detail::avx512::rms_norm_row(xr, weight, yr, dim, eps);
          break;
        case Isa::kAvx2:
          detail::avx2::rms_norm_row(xr, weight, yr, dim, eps);
          break;
        case Isa::kScalar:
          rms_norm_row_scalar(xr, weight, yr, dim, eps);
          break;
      }
    }
  });
}

}  // namespace tessera::kernels::cpu
