// AVX-512 VNNI int8 dot kernel (linear_int8.h); compiled with -mavx512vnni, called only on CPUs
// that have it.
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized flags
// (as in gemm_bf16_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <vector>

#include "kernels/cpu/linear_int8.h"

namespace tessera::kernels::cpu::linear_detail {

namespace {

// prepare_int8_rows with AVX-512 (the same values: round to nearest even, clamp to +-32767).
Int8Rows prepare_int8_rows_avx512(const float* x, int64_t rows, const Weight& w) {
  thread_local std::vector<int16_t> q;
  thread_local std::vector<float> scale;
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  q.resize(static_cast<size_t>(rows * cols));
  scale.resize(static_cast<size_t>(rows * groups));
  const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* src = x + i * cols + g * group;
      __m512 amax = _mm512_setzero_ps();
      for (int64_t k = 0; k < group; k += 16) {
        amax = _mm512_max_ps(amax, _mm512_and_ps(_mm512_loadu_ps(src + k), sign_mask));
      }
      const float s = _mm512_reduce_max_ps(amax) / 32767.0f;
      const __m512 inv = _mm512_set1_ps(s > 0.0f ? 1.0f / s : 0.0f);
      int16_t* dst = q.data() + i * cols + g * group;
      for (int64_t k = 0; k < group; k += 16) {
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(src + k), inv));
        v = _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(32767)),
                             _mm512_set1_epi32(-32767));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), _mm512_cvtepi32_epi16(v));
      }
      scale[static_cast<size_t>(i * groups + g)] = s;
    }
  }
  Int8Rows r;
  r.rows = rows;
  r.cols = cols;
  r.group = group;
  r.q = q.data();
  r.scale = scale.data();
  return r;
}

}  // namespace

namespace {

// R rows of x (a compile-time count: the accumulators stay in registers) against weight rows
// [n_begin, n_end).
template <int R>
void vnni_rows(const Int8Rows& p, const Weight& w, const float* bias, float* y, int64_t ldy,
               int64_t n_begin, int64_t n_end) {
  const auto* wq = static_cast<const int8_t*>(w.data);
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  for (int64_t n = n_begin; n < n_end; ++n) {
    const int8_t* w_row = wq + n * cols;
    const float* sw = w.scales + n * groups;
    __m512 accf[R];
    for (int i = 0; i < R; ++i) accf[i] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m512i acc[R];
      for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_si512();
      for (int64_t c = g * group; c < (g + 1) * group; c += 32) {
        const __m512i wv = _mm512_cvtepi8_epi16(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_row + c)));
        for (int i = 0; i < R; ++i) {
          acc[i] = _mm512_dpwssd_epi32(acc[i], wv, _mm512_loadu_si512(p.q + i * cols + c));
        }
      }
      for (int i = 0; i < R; ++i) {
        const __m512 s = _mm512_set1_ps(sw[g] * p.scale[i * groups + g]);
        accf[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i]), s, accf[i]);
      }
    }
    for (int i = 0; i < R; ++i) {
      y[i * ldy + n] = _mm512_reduce_add_ps(accf[i]) + (bias ? bias[n] : 0.0f);
    }
  }
}

}  // namespace

void dot_rows_i8_vnni(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                      int64_t ldy, int64_t n_begin, int64_t n_end) {
  const Int8Rows p = prepare_int8_rows_avx512(x, rows, w);
  switch (rows) {
    case 1: return vnni_rows<1>(p, w, bias, y, ldy, n_begin, n_end);
    case 2: return vnni_rows<2>(p, w, bias, y, ldy, n_begin, n_end);
    case 3: return vnni_rows<3>(p, w, bias, y, ldy, n_begin, n_end);
    default: return vnni_rows<4>(p, w, bias, y, ldy, n_begin, n_end);
  }
}

}  // namespace tessera::kernels::cpu::linear_detail
