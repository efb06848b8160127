// AVX2 int8 dot kernel (linear_int8.h), for CPUs without VNNI: 16 int8 weights widened to int16
// (vpmovsxbw) and multiplied in pairs with the int16 x_q by vpmaddwd into int32 sums (exact:
// |products| <= 2 * 127 * 127), one group at a time, then scaled into f32. Compiled with AVX2
// flags.
#include <immintrin.h>

#include "kernels/cpu/linear_int8.h"

namespace tessera::kernels::cpu::linear_detail {

namespace {
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
}  // namespace

namespace {

template <int R>
void avx2_rows(const Int8Rows& p, const Weight& w, const float* bias, float* y, int64_t ldy,
               int64_t n_begin, int64_t n_end) {
  const auto* wq = static_cast<const int8_t*>(w.data);
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  for (int64_t n = n_begin; n < n_end; ++n) {
    const int8_t* w_row = wq + n * cols;
    const float* sw = w.scales + n * groups;
    __m256 accf[R];
    for (int i = 0; i < R; ++i) accf[i] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m256i acc[R];
      for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_si256();
      for (int64_t c = g * group; c < (g + 1) * group; c += 16) {
        const __m256i wv =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w_row + c)));
        for (int i = 0; i < R; ++i) {
          const __m256i xq =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.q + i * cols + c));
          acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(wv, xq));
        }
      }
      for (int i = 0; i < R; ++i) {
        const __m256 s = _mm256_set1_ps(sw[g] * p.scale[i * groups + g]);
        accf[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i]), s, accf[i]);
      }
    }
    for (int i = 0; i < R; ++i) y[i * ldy + n] = hsum(accf[i]) + (bias ? bias[n] : 0.0f);
  }
}

}  // namespace

void dot_prepared_i8_avx2(const Int8Rows& p, const Weight& w, const float* bias, float* y,
                          int64_t ldy, int64_t n_begin, int64_t n_end) {
  switch (p.rows) {
    case 1:
      return avx2_rows<1>(p, w, bias, y, ldy, n_begin, n_end);
    case 2:
      return avx2_rows<2>(p, w, bias, y, ldy, n_begin, n_end);
    case 3:
      return avx2_rows<3>(p, w, bias, y, ldy, n_begin, n_end);
    default:
      return avx2_rows<4>(p, w, bias, y, ldy, n_begin, n_end);
  }
}

}  // namespace tessera::kernels::cpu::linear_detail
