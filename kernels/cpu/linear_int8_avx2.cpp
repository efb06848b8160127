// AVX2 int8 dot kernel (linear_int8.h): vpmaddubsw on |x_q| and sign(x_q) * q_w (|products| <=
// 2 * 127 * 127, no saturation), vpmaddwd to int32. Compiled with AVX2 flags.
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

void dot_rows_i8_avx2(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                      int64_t ldy, int64_t n_begin, int64_t n_end) {
  const Int8Rows p = prepare_int8_rows(x, rows, w);
  const auto* wq = static_cast<const uint8_t*>(w.data);
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* w_row = wq + n * cols;
    const float* sw = w.scales + n * groups;
    __m256 accf[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                      _mm256_setzero_ps()};
    for (int64_t g = 0; g < groups; ++g) {
      __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()};
      for (int64_t c = g * group; c < (g + 1) * group; c += 32) {
        // q_w + 128 -> q_w (signed) by flipping the top bit.
        const __m256i wv = _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_row + c)), offset);
        for (int64_t i = 0; i < rows; ++i) {
          const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.q + i * cols + c));
          const __m256i ax =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.abs_q + i * cols + c));
          const __m256i prod16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv, xq));
          acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(prod16, ones));
        }
      }
      for (int64_t i = 0; i < rows; ++i) {
        const __m256 s = _mm256_set1_ps(sw[g] * p.scale[i * groups + g]);
        accf[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i]), s, accf[i]);
      }
    }
    for (int64_t i = 0; i < rows; ++i) y[i * ldy + n] = hsum(accf[i]) + (bias ? bias[n] : 0.0f);
  }
}

}  // namespace tessera::kernels::cpu::linear_detail
