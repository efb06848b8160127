// Shared pieces of the diffusion ops (diffusion_internal.h): the single-threaded GEMM, the
// per-thread scratch and the per-ISA kernel table.
#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/diffusion_internal.h"
#include "kernels/cpu/simd_internal.h"

namespace tessera::kernels::cpu::diffusion_detail {

namespace {

// The all-scalar GEMM (SIMD off): i-k-j order so the inner loop streams rows of b and c; with
// b_trans, a dot product per element. Slow but simple: it is the path that must not depend on
// OpenBLAS's vector kernels, and tests run it on small sizes only.
void sgemm_scalar(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, bool b_trans, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(ci, ci + n, 0.0f);
    } else if (beta != 1.0f) {
      for (int64_t j = 0; j < n; ++j) ci[j] *= beta;
    }
    const float* ai = a + i * lda;
    if (b_trans) {
      for (int64_t j = 0; j < n; ++j) {
        const float* bj = b + j * ldb;
        float s = 0.0f;
        for (int64_t p = 0; p < k; ++p) s += ai[p] * bj[p];
        ci[j] += alpha * s;
      }
    } else {
      for (int64_t p = 0; p < k; ++p) {
        const float ap = alpha * ai[p];
        const float* bp = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) ci[j] += ap * bp[j];
      }
    }
  }
}

void scalar_silu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}
void scalar_gelu_erf(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

}  // namespace

void sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, bool b_trans, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (!simd_enabled()) {
    sgemm_scalar(m, n, k, alpha, a, lda, b, ldb, b_trans, beta, c, ldc);
    return;
  }
  // OpenBLAS runs single-threaded inside the pool's tasks (kernels/cpu/threads.h): every caller
  // here already splits its work over the pool.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, b_trans ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

float* thread_scratch(int slot, int64_t count) {
  assert(slot >= 0 && slot < kScratchSlots);
  thread_local std::vector<float> buffers[kScratchSlots];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < count) b.resize(static_cast<size_t>(count));
  return b.data();
}

double* thread_scratch_f64(int slot, int64_t count) {
  assert(slot >= 0 && slot < kScratchSlots);
  thread_local std::vector<double> buffers[kScratchSlots];
  std::vector<double>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < count) b.resize(static_cast<size_t>(count));
  return b.data();
}

const IsaKernels& isa_kernels(Isa isa) {
  static const IsaKernels kScalar{scalar::channel_sums,
                                  scalar::affine_rows,
                                  scalar::mul_inplace,
                                  scalar::row_max,
                                  scalar::winograd_input_tile,
                                  scalar::winograd_output_tile,
                                  scalar_silu,
                                  scalar_gelu_erf,
                                  detail::scalar::exp_sub_sum};
  static const IsaKernels kAvx2{
      avx2::channel_sums, avx2::affine_rows,         avx2::mul_inplace,
      avx2::row_max,      avx2::winograd_input_tile, avx2::winograd_output_tile,
      detail::avx2::silu, detail::avx2::gelu_erf,    detail::avx2::exp_sub_sum};
  static const IsaKernels kAvx512{
      avx512::channel_sums, avx512::affine_rows,         avx512::mul_inplace,
      avx512::row_max,      avx512::winograd_input_tile, avx512::winograd_output_tile,
      detail::avx512::silu, detail::avx512::gelu_erf,    detail::avx512::exp_sub_sum};
  switch (isa) {
    case Isa::kAvx512:
      return kAvx512;
    case Isa::kAvx2:
      return kAvx2;
    case Isa::kScalar:
      break;
  }
  return kScalar;
}

}  // namespace tessera::kernels::cpu::diffusion_detail
