// AVX2 softmax row (see softmax.cpp). Call only after active_isa() returned kAvx2 or
// better.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/simd_internal.h"

namespace tessera::kernels::cpu::detail::avx2 {

// y may alias x.
void softmax_row(const float* x, float* y, int64_t n) {
  __m256 mx = _mm256_set1_ps(-__builtin_inff());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float row_max = _mm_cvtss_f32(m4);
  for (; i < n; ++i) row_max = x[i] > row_max ? x[i] : row_max;
  if (row_max == -__builtin_inff()) {  // fully masked row: zeros, not NaN
    for (i = 0; i < n; ++i) y[i] = 0.0f;
    return;
  }
  const float inv_sum = 1.0f / exp_sub_sum(x, row_max, y, n);
  const __m256 inv = _mm256_set1_ps(inv_sum);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
  for (; i < n; ++i) y[i] *= inv_sum;
}

}  // namespace tessera::kernels::cpu::detail::avx2
