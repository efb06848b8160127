// AVX-512 VNNI int8 dot kernel (linear_int8.h); compiled with -mavx512vnni, called only on CPUs
// that have it.
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized flags
// (as in gemm_bf16_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/linear_int8.h"

namespace tessera::kernels::cpu::linear_detail {

void dot_rows_i8_vnni(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                      int64_t ldy, int64_t n_begin, int64_t n_end) {
  const Int8Rows p = prepare_int8_rows(x, rows, w);
  const auto* wq = static_cast<const uint8_t*>(w.data);
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* w_row = wq + n * cols;
    const float* sw = w.scales + n * groups;
    if (n + 1 < n_end) _mm_prefetch(reinterpret_cast<const char*>(w_row + cols), _MM_HINT_T0);
    __m512 accf[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                      _mm512_setzero_ps()};
    for (int64_t g = 0; g < groups; ++g) {
      __m512i acc[4];
      for (int64_t i = 0; i < rows; ++i) {
        // Lane 0 starts at -128 * sum(x_q): the weights' +128 offset, taken out.
        acc[i] = _mm512_zextsi128_si512(_mm_cvtsi32_si128(-128 * p.sum[i * groups + g]));
      }
      for (int64_t c = g * group; c < (g + 1) * group; c += 64) {
        const __m512i wv = _mm512_loadu_si512(w_row + c);
        for (int64_t i = 0; i < rows; ++i) {
          acc[i] = _mm512_dpbusd_epi32(acc[i], wv, _mm512_loadu_si512(p.q + i * cols + c));
        }
      }
      for (int64_t i = 0; i < rows; ++i) {
        const __m512 s = _mm512_set1_ps(sw[g] * p.scale[i * groups + g]);
        accf[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i]), s, accf[i]);
      }
    }
    for (int64_t i = 0; i < rows; ++i) {
      y[i * ldy + n] = _mm512_reduce_add_ps(accf[i]) + (bias ? bias[n] : 0.0f);
    }
  }
}

}  // namespace tessera::kernels::cpu::linear_detail
