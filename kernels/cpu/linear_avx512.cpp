// AVX-512 kernels of cpu::linear (compiled with -mavx512f/bw/vl; called only when cpu_features()
// reports avx512f + avx512bw + avx512vl, see linear.cpp).
//
// Two dot kernels, chosen by the length of a weight row (kStreamMaxRowBytes): one row at a time
// with 4 accumulators per row of x, or 4 weight rows x up to 4 rows of x (16 zmm accumulators). In
// both every weight vector loaded (and, for bf16, expanded) is used by all rows of x. bf16 weights
// are expanded exactly to f32 in registers (zero-extend to 32 bits, shift left by 16) and
// multiplied with the f32 x: no rounding of x to bf16 (vdpbf16ps would round x and lose ~3
// significant digits), and the expansion is nearly free next to the memory traffic.
#include <immintrin.h>

// GCC 12 reports -W(maybe-)uninitialized inside its own AVX-512 intrinsics once inlined (the
// _mm512_undefined_*() pass-through operands, GCC PR 105593, fixed in GCC 13); never read here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "kernels/cpu/linear_internal.h"

namespace tessera::kernels::cpu::linear_detail {
namespace {

constexpr int kLanes = 16;

inline __m512 load_weights(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 load_weights(const uint16_t* p) {
  const __m512i wide =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline __m512 load_weights_masked(const float* p, __mmask16 mask) {
  return _mm512_maskz_loadu_ps(mask, p);
}
inline __m512 load_weights_masked(const uint16_t* p, __mmask16 mask) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

// y[i][r] for R weight rows starting at w (row stride k) and M rows of x.
template <int R, int M, typename T>
inline void dot_block(const float* x, const T* w, int64_t k, const float* bias, float* y,
                      int64_t ldy) {
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) acc[r][i] = _mm512_setzero_ps();
  }
  int64_t c = 0;
  for (; c + kLanes <= k; c += kLanes) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_weights(w + r * k + c);
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * k + c);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  if (c < k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - c)) - 1u);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_weights_masked(w + r * k + c, mask);
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * k + c);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float b = bias ? bias[r] : 0.0f;
    for (int i = 0; i < M; ++i) y[i * ldy + r] = _mm512_reduce_add_ps(acc[r][i]) + b;
  }
}

// y[i] for one weight row and M rows of x, four accumulators per row of x (64 columns per step):
// one sequential stream through the weights.
template <int M, typename T>
inline void dot_row_stream(const float* x, const T* w, int64_t k, const float* bias, float* y,
                           int64_t ldy) {
  __m512 acc[4][M];
  for (int u = 0; u < 4; ++u) {
    for (int i = 0; i < M; ++i) acc[u][i] = _mm512_setzero_ps();
  }
  int64_t c = 0;
  for (; c + 4 * kLanes <= k; c += 4 * kLanes) {
    for (int u = 0; u < 4; ++u) {
      const __m512 wv = load_weights(w + c + u * kLanes);
      for (int i = 0; i < M; ++i) {
        acc[u][i] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i * k + c + u * kLanes), acc[u][i]);
      }
    }
  }
  for (; c < k; c += kLanes) {
    const __mmask16 mask = k - c >= kLanes ? static_cast<__mmask16>(0xffff)
                                           : static_cast<__mmask16>((1u << (k - c)) - 1u);
    const __m512 wv = load_weights_masked(w + c, mask);
    for (int i = 0; i < M; ++i) {
      acc[0][i] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mask, x + i * k + c), acc[0][i]);
    }
  }
  const float b = bias ? bias[0] : 0.0f;
  for (int i = 0; i < M; ++i) {
    const __m512 sum =
        _mm512_add_ps(_mm512_add_ps(acc[0][i], acc[1][i]), _mm512_add_ps(acc[2][i], acc[3][i]));
    y[i * ldy] = _mm512_reduce_add_ps(sum) + b;
  }
}

// For a single row of x (the decode GEMV), rows of at most this many bytes are read one at a time
// (dot_row_stream), longer ones four at a time (dot_block<4, 1>). Measured on Zen 4 with 2 threads
// (GEMV from DRAM): for short rows (K = 1536: 3 KB bf16, 6 KB f32) four interleaved 3-6 KB streams
// keep restarting the hardware prefetcher and one long sequential stream was ~1.3-1.6x faster; for
// K = 6144 (12-24 KB rows) the four streams were ~1.3x faster. With several rows of x the
// single-row kernel is bound by L1 loads (one x load per FMA), and dot_block<4, M>, which reuses
// each x vector for 4 weight rows, was faster from m = 3 on (bf16 1536->6144 from DRAM, m = 4: 8.5
// vs 5.8 GB/s) and equal at m = 2.
constexpr int64_t kStreamMaxRowBytes = 8192;

template <int M, typename T>
void dot_rows_m(const float* x, const T* w, int64_t k, const float* bias, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  if (M == 1 && k * static_cast<int64_t>(sizeof(T)) <= kStreamMaxRowBytes) {
    for (; n < n_end; ++n) {
      dot_row_stream<M>(x, w + n * k, k, bias ? bias + n : nullptr, y + n, ldy);
    }
    return;
  }
  for (; n + 4 <= n_end; n += 4) {
    dot_block<4, M>(x, w + n * k, k, bias ? bias + n : nullptr, y + n, ldy);
  }
  for (; n < n_end; ++n) dot_block<1, M>(x, w + n * k, k, bias ? bias + n : nullptr, y + n, ldy);
}

template <typename T>
void dot_rows_typed(const float* x, int64_t rows, const T* w, int64_t k, const float* bias,
                    float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  switch (rows) {
    case 1:
      return dot_rows_m<1>(x, w, k, bias, y, ldy, n_begin, n_end);
    case 2:
      return dot_rows_m<2>(x, w, k, bias, y, ldy, n_begin, n_end);
    case 3:
      return dot_rows_m<3>(x, w, k, bias, y, ldy, n_begin, n_end);
    default:
      return dot_rows_m<4>(x, w, k, bias, y, ldy, n_begin, n_end);
  }
}

}  // namespace

void dot_rows_avx512(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                     int64_t ldy, int64_t n_begin, int64_t n_end) {
  static_assert(kMaxRowsPerPass == 4, "dot_rows_typed handles 1..4 rows of x");
  if (w.dtype == DType::kBF16) {
    dot_rows_typed(x, rows, static_cast<const uint16_t*>(w.data), w.cols, bias, y, ldy, n_begin,
                   n_end);
  } else {
    dot_rows_typed(x, rows, static_cast<const float*>(w.data), w.cols, bias, y, ldy, n_begin,
                   n_end);
  }
}

void expand_bf16_avx512(const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                        int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * ld_src;
    float* d = dst + r * ld_dst;
    int64_t c = 0;
    for (; c + kLanes <= cols; c += kLanes) _mm512_storeu_ps(d + c, load_weights(s + c));
    if (c < cols) {
      const __mmask16 mask = static_cast<__mmask16>((1u << (cols - c)) - 1u);
      _mm512_mask_storeu_ps(d + c, mask, load_weights_masked(s + c, mask));
    }
  }
}

}  // namespace tessera::kernels::cpu::linear_detail
