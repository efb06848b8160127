// AVX2 + FMA kernels of cpu::linear (compiled with -mavx2 -mfma; called only when cpu_features()
// reports avx2 + fma, see linear.cpp). Same scheme as linear_avx512.cpp with 8-lane vectors; with
// 16 ymm registers the block is 4 weight rows x 2 rows of x (8 accumulators), so a pass of 3-4 rows
// of x runs as two sub-passes over the same (L1-resident) weight rows.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/linear_internal.h"

namespace tessera::kernels::cpu::linear_detail {
namespace {

constexpr int kLanes = 8;

// Local copy of bf16_to_f32: an inline function from a shared header, instantiated in this file
// compiled with -mavx2, could be picked by the linker for callers on CPUs without AVX2 (ODR).
inline float bf16_scalar(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline __m256 load_weights(const float* p) {
  return _mm256_loadu_ps(p);
}
inline __m256 load_weights(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline float weight_scalar(const float* p) {
  return *p;
}
inline float weight_scalar(const uint16_t* p) {
  return bf16_scalar(*p);
}

inline float horizontal_sum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int R, int M, typename T>
inline void dot_block(const float* x, const T* w, int64_t k, const float* bias, float* y,
                      int64_t ldy) {
  __m256 acc[R][M];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) acc[r][i] = _mm256_setzero_ps();
  }
  int64_t c = 0;
  for (; c + kLanes <= k; c += kLanes) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_weights(w + r * k + c);
    for (int i = 0; i < M; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * k + c);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm256_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float b = bias ? bias[r] : 0.0f;
    for (int i = 0; i < M; ++i) {
      float tail = 0.0f;  // fewer than 8 columns left: scalar
      for (int64_t t = c; t < k; ++t) tail += weight_scalar(w + r * k + t) * x[i * k + t];
      y[i * ldy + r] = horizontal_sum(acc[r][i]) + tail + b;
    }
  }
}

template <int M, typename T>
void dot_rows_m(const float* x, const T* w, int64_t k, const float* bias, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  for (; n + 4 <= n_end; n += 4) {
    dot_block<4, M>(x, w + n * k, k, bias ? bias + n : nullptr, y + n, ldy);
  }
  for (; n < n_end; ++n) dot_block<1, M>(x, w + n * k, k, bias ? bias + n : nullptr, y + n, ldy);
}

template <typename T>
void dot_rows_typed(const float* x, int64_t rows, const T* w, int64_t k, const float* bias,
                    float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  for (int64_t i = 0; i < rows; i += 2) {
    if (rows - i >= 2) {
      dot_rows_m<2>(x + i * k, w, k, bias, y + i * ldy, ldy, n_begin, n_end);
    } else {
      dot_rows_m<1>(x + i * k, w, k, bias, y + i * ldy, ldy, n_begin, n_end);
    }
  }
}

}  // namespace

void dot_rows_avx2(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                   int64_t ldy, int64_t n_begin, int64_t n_end) {
  if (w.dtype == DType::kBF16) {
    dot_rows_typed(x, rows, static_cast<const uint16_t*>(w.data), w.cols, bias, y, ldy, n_begin,
                   n_end);
  } else {
    dot_rows_typed(x, rows, static_cast<const float*>(w.data), w.cols, bias, y, ldy, n_begin,
                   n_end);
  }
}

void expand_bf16_avx2(const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                      int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * ld_src;
    float* d = dst + r * ld_dst;
    int64_t c = 0;
    for (; c + kLanes <= cols; c += kLanes) _mm256_storeu_ps(d + c, load_weights(s + c));
    for (; c < cols; ++c) d[c] = bf16_scalar(s[c]);
  }
}

}  // namespace tessera::kernels::cpu::linear_detail
