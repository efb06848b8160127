// AVX2 + FMA kernels of cpu::linear (compiled with -mavx2 -mfma; called only when cpu_features()
// reports avx2 + fma, see linear.cpp). Same scheme as linear_avx512.cpp with 8-lane vectors; with
// 16 ymm registers the block is 4 weight rows x 2 rows of x (8 accumulators), so a pass of 3-4 rows
// of x runs as two sub-passes over the same (L1-resident) weight rows.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

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

// bf16 GEMV with one or two rows of x without the widening shuffle (as in linear_avx512.cpp): a
// 256-bit load holds 16 bf16 weights, 32-bit lane j holds weight 2j (low half) and 2j+1 (high
// half); a shift left by 16 gives the even weights as f32, a mask of the high half the odd ones.
// x is split the same way once per call (deinterleave_x, into per-thread scratch).
constexpr int kPairLanes = 2 * kLanes;  // bf16 weights per 256-bit load

// xp[i * k16 + b * 16 + (0..7)] = x[i * k + b * 16 + 2 * (0..7)], then the 8 odd ones, for the
// k16 = k - k % 16 columns covered by whole 16-weight loads.
inline void deinterleave_x(const float* x, int rows, int64_t k, int64_t k16, float* xp) {
  for (int i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < k16; c += kPairLanes) {
      for (int j = 0; j < kLanes; ++j) {
        xp[i * k16 + c + j] = x[i * k + c + 2 * j];
        xp[i * k16 + c + kLanes + j] = x[i * k + c + 2 * j + 1];
      }
    }
  }
}

// Per-thread scratch for deinterleave_x; grows on a thread's first call with a larger M * K and is
// kept (steady-state decode steps allocate nothing). 64-byte aligned: the x loads then never
// straddle two cache lines (measured: unaligned scratch cost the AVX-512 m = 2 kernel ~25 %).
struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
float* pair_scratch(int64_t floats) {
  thread_local std::unique_ptr<float[], FreeDeleter> buffer;
  thread_local int64_t capacity = 0;
  if (floats > capacity) {
    const size_t bytes = (static_cast<size_t>(floats) * sizeof(float) + 63) / 64 * 64;
    buffer.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    capacity = buffer ? floats : 0;
  }
  return buffer.get();
}

// y[i][r] for R bf16 weight rows at w (row stride k) and M rows of x; even/odd accumulators
// (R * M * 2 <= 8, next to 2 R weight and 2 x vectors: within the 16 ymm registers).
template <int R, int M>
inline void dot_block_pairs(const float* x, const float* xp, const uint16_t* w, int64_t k,
                            int64_t k16, const float* bias, float* y, int64_t ldy) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  __m256 acc[R][M][2];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) acc[r][i][0] = acc[r][i][1] = _mm256_setzero_ps();
  }
  for (int64_t c = 0; c < k16; c += kPairLanes) {
    __m256 w_even[R], w_odd[R];
    for (int r = 0; r < R; ++r) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * k + c));
      w_even[r] = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
      w_odd[r] = _mm256_castsi256_ps(_mm256_and_si256(raw, high));
    }
    for (int i = 0; i < M; ++i) {
      const __m256 x_even = _mm256_loadu_ps(xp + i * k16 + c);
      const __m256 x_odd = _mm256_loadu_ps(xp + i * k16 + c + kLanes);
      for (int r = 0; r < R; ++r) {
        acc[r][i][0] = _mm256_fmadd_ps(w_even[r], x_even, acc[r][i][0]);
        acc[r][i][1] = _mm256_fmadd_ps(w_odd[r], x_odd, acc[r][i][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const float b = bias ? bias[r] : 0.0f;
    for (int i = 0; i < M; ++i) {
      float tail = 0.0f;  // fewer than 16 columns left: scalar, natural order
      for (int64_t t = k16; t < k; ++t) tail += weight_scalar(w + r * k + t) * x[i * k + t];
      y[i * ldy + r] = horizontal_sum(_mm256_add_ps(acc[r][i][0], acc[r][i][1])) + tail + b;
    }
  }
}

// Rows longer than this are read two at a time (x, M * K * 4 bytes, then no longer fits in L1
// and is re-read from L2 once per two weight rows; four would not fit the registers); shorter
// ones one at a time (one sequential stream through the task's rows), as in linear_avx512.cpp.
constexpr int64_t kStreamMaxRowBytes = 8192;

template <int M>
void dot_rows_pairs(const float* x, const uint16_t* w, int64_t k, const float* bias, float* y,
                    int64_t ldy, int64_t n_begin, int64_t n_end) {
  const int64_t k16 = k - k % kPairLanes;
  float* xp = pair_scratch(M * k16);
  if (!xp && k16 > 0) {  // no scratch (out of memory): the widening kernel needs none
    return dot_rows_m<M>(x, w, k, bias, y, ldy, n_begin, n_end);
  }
  deinterleave_x(x, M, k, k16, xp);
  int64_t n = n_begin;
  if (k * 2 > kStreamMaxRowBytes) {
    for (; n + 2 <= n_end; n += 2) {
      dot_block_pairs<2, M>(x, xp, w + n * k, k, k16, bias ? bias + n : nullptr, y + n, ldy);
    }
  }
  for (; n < n_end; ++n) {
    dot_block_pairs<1, M>(x, xp, w + n * k, k, k16, bias ? bias + n : nullptr, y + n, ldy);
  }
}

template <typename T>
void dot_rows_typed(const float* x, int64_t rows, const T* w, int64_t k, const float* bias,
                    float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (rows == 1) return dot_rows_pairs<1>(x, w, k, bias, y, ldy, n_begin, n_end);
    if (rows == 2) return dot_rows_pairs<2>(x, w, k, bias, y, ldy, n_begin, n_end);
  }
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
