// AVX2 int8 dot kernel (linear_int8.h), for CPUs without VNNI: 16 int8 weights widened to int16
// (vpmovsxbw) and multiplied in pairs with the int16 x_q by vpmaddwd into int32 sums (exact within
// a group: linear_int8.h), one group at a time, then scaled into f32; and the AVX2 preparation of
// x (the scalar one's values). Compiled with AVX2 flags.
#include <immintrin.h>

#include <limits>

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

void prepare_int8_rows_into_avx2(const float* x, int64_t rows, const Weight& w, int16_t* q,
                                 float* scale) {
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i hi = _mm256_set1_epi32(32767), lo = _mm256_set1_epi32(-32767);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* src = x + i * cols + g * group;
      __m256 amax = _mm256_setzero_ps();
      for (int64_t k = 0; k < group; k += 8) {
        amax = _mm256_max_ps(amax, _mm256_and_ps(_mm256_loadu_ps(src + k), sign_mask));
      }
      __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      m = _mm_max_ps(m, _mm_movehl_ps(m, m));
      m = _mm_max_ss(m, _mm_movehdup_ps(m));
      const float s = _mm_cvtss_f32(m) / 32767.0f;
      const __m256 inv = _mm256_set1_ps(s >= std::numeric_limits<float>::min() ? 1.0f / s : 0.0f);
      int16_t* dst = q + i * cols + g * group;
      for (int64_t k = 0; k < group; k += 16) {
        // Rounded to nearest even (the default MXCSR mode: std::nearbyint's), clamped, then packed
        // (packs works within 128-bit lanes: the permute puts the 16 values back in order).
        __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(src + k), inv));
        __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(src + k + 8), inv));
        a = _mm256_max_epi32(_mm256_min_epi32(a, hi), lo);
        b = _mm256_max_epi32(_mm256_min_epi32(b, hi), lo);
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), packed);
      }
      scale[i * groups + g] = s;
    }
  }
}

namespace {

// Weights are prefetched this far ahead (as the VNNI kernel does, linear_int8_vnni.cpp): the
// int8 GEMV issues several instructions per weight byte, so the out-of-order window alone does
// not reach a memory latency ahead.
constexpr int64_t kPrefetchBytes = 4096;

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
        if ((c & 63) == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(w_row + c + kPrefetchBytes), _MM_HINT_T0);
        }
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
