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

// prepare_int8_rows with AVX-512 (group % 64 == 0): the same values (round to nearest even, as
// std::nearbyint in the default mode; |x / s| <= 127 so the saturating pack never clips).
Int8Rows prepare_int8_rows_avx512(const float* x, int64_t rows, const Weight& w) {
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> scale;
  thread_local std::vector<int32_t> sum;
  thread_local std::vector<int32_t> lanes;
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  q.resize(static_cast<size_t>(rows * cols));
  scale.resize(static_cast<size_t>(rows * groups));
  sum.resize(scale.size());
  lanes.resize(scale.size() * 16);
  const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* src = x + i * cols + g * group;
      __m512 amax = _mm512_setzero_ps();
      for (int64_t k = 0; k < group; k += 16) {
        amax = _mm512_max_ps(amax, _mm512_and_ps(_mm512_loadu_ps(src + k), sign_mask));
      }
      const float s = _mm512_reduce_max_ps(amax) / 127.0f;
      const __m512 inv = _mm512_set1_ps(s > 0.0f ? 1.0f / s : 0.0f);
      int8_t* dst = q.data() + i * cols + g * group;
      __m512i total = _mm512_setzero_si512();
      for (int64_t k = 0; k < group; k += 16) {
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(src + k), inv));
        v = _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
        total = _mm512_add_epi32(total, v);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k), _mm512_cvtsepi32_epi8(v));
      }
      scale[static_cast<size_t>(i * groups + g)] = s;
      sum[static_cast<size_t>(i * groups + g)] = _mm512_reduce_add_epi32(total);
      // Each accumulator lane's share of the weights' +128 offset: lane l sums bytes 4l..4l+3 of
      // every 64-byte chunk, so its share is -128 * (those x_q), itself a vpdpbusd of 0x80 bytes.
      // Starting each lane at its own share keeps every lane the exact partial dot product (no
      // large offset to cancel after the lanes are scaled in f32).
      __m512i share = _mm512_setzero_si512();
      for (int64_t k = 0; k < group; k += 64) {
        share = _mm512_dpbusd_epi32(share, _mm512_set1_epi8(static_cast<char>(0x80)),
                                    _mm512_loadu_si512(dst + k));
      }
      _mm512_storeu_si512(lanes.data() + (i * groups + g) * 16,
                          _mm512_sub_epi32(_mm512_setzero_si512(), share));
    }
  }
  Int8Rows r;
  r.rows = rows;
  r.cols = cols;
  r.group = group;
  r.q = q.data();
  r.scale = scale.data();
  r.sum = sum.data();
  r.lane_offset = lanes.data();
  return r;
}

}  // namespace

void dot_rows_i8_vnni(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                      int64_t ldy, int64_t n_begin, int64_t n_end) {
  const Int8Rows p = prepare_int8_rows_avx512(x, rows, w);
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
        // Each lane starts at its share of -128 * sum(x_q): the weights' +128 offset, taken out.
        acc[i] = _mm512_loadu_si512(p.lane_offset + (i * groups + g) * 16);
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
