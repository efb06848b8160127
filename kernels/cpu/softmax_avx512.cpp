// AVX-512 softmax row (see softmax.cpp). Call only after active_isa() returned kAvx512.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/simd_internal.h"

// GCC 12's avx512fintrin.h initialises the unused pass-through operand of unmasked intrinsics
// (_mm512_max_ps, _mm512_scalef_ps, ...) from itself, which -W(maybe-)uninitialized reports once
// inlined (GCC PR 105593, fixed in GCC 13). The code here is not affected.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tessera::kernels::cpu::detail::avx512 {

// y may alias x.
void softmax_row(const float* x, float* y, int64_t n) {
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  __m512 mx = neg_inf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(x + i));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(neg_inf, m, x + i));
  }
  const float row_max = _mm512_reduce_max_ps(mx);
  if (row_max == -__builtin_inff()) {  // fully masked row: zeros, not NaN
    for (i = 0; i < n; ++i) y[i] = 0.0f;
    return;
  }
  const __m512 inv = _mm512_set1_ps(1.0f / exp_sub_sum(x, row_max, y, n));
  for (i = 0; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), inv));
  }
}

}  // namespace tessera::kernels::cpu::detail::avx512
