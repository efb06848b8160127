// AVX-512 kernels of cpu::linear (compiled with -mavx512f/bw/vl; called only when cpu_features()
// reports avx512f + avx512bw + avx512vl, see linear.cpp).
//
// Dot kernels, chosen by the weight dtype, the rows of x in the pass and the length of a weight
// row (kStreamMaxRowBytes): one weight row at a time (the rows of a task then form one sequential
// stream), or 4 weight rows x up to 4 rows of x (16 zmm accumulators). In all of them every weight
// vector loaded (and, for bf16, expanded) is used by all rows of x. bf16 weights are expanded
// exactly to f32 in registers and multiplied with the f32 x: no rounding of x to bf16 (vdpbf16ps
// would round x and lose ~3 significant digits). For the bf16 GEMV with 2 rows of x (the decode
// step with guidance: [cond ; uncond]) and for long rows, the expansion uses the even/odd split
// (dot_block_pairs), which needs no shuffle per weight vector. With LinearConfig::bf16_gemm the
// bf16 GEMV instead rounds x to bf16 and uses vdpbf16ps (dot_rows_bf16x_avx512, at the end).
#include <immintrin.h>

#include <cstdlib>
#include <memory>
#include <type_traits>

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

// y[i] for one weight row and M rows of x, U accumulators per row of x (U * 16 columns per step):
// one sequential stream through the weights, each weight vector loaded (and expanded) once and
// used by all M rows of x, which stay in L1/L2 (M * K * 4 bytes: 24 KB at M = 4, K = 1536).
// Consecutive weight rows are contiguous, so a task's whole range of rows is a single stream.
template <int M, int U, typename T>
inline void dot_row_stream(const float* x, const T* w, int64_t k, const float* bias, float* y,
                           int64_t ldy) {
  __m512 acc[U][M];
  for (int u = 0; u < U; ++u) {
    for (int i = 0; i < M; ++i) acc[u][i] = _mm512_setzero_ps();
  }
  int64_t c = 0;
  for (; c + U * kLanes <= k; c += U * kLanes) {
    for (int u = 0; u < U; ++u) {
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
    __m512 sum = acc[0][i];
    for (int u = 1; u < U; ++u) sum = _mm512_add_ps(sum, acc[u][i]);
    y[i * ldy] = _mm512_reduce_add_ps(sum) + b;
  }
}

// bf16 weights without the widening shuffle. A 512-bit load holds 32 bf16 weights; 32-bit lane j
// holds weight 2j in its low half and 2j+1 in its high half, so a shift left by 16 gives the even
// weights as f32 and a mask of the high half the odd ones: two cheap lane-local ops per 32 weights
// instead of two cross-lane vpmovzxwd + two shifts. x must then be split the same way, which
// deinterleave_x does once per call into scratch (M * K floats, negligible next to N * K
// weights). Measured on Zen 4, one thread, weights in L2 (1536 x 128): m = 1 41.6 vs 24.5 GB/s,
// m = 2 29.3 vs 16.1 GB/s of weights: the m = 2 decode GEMV was bound by these instructions, not
// by memory. From DRAM (2 threads, shared machine, same-process A/B against the widening
// kernels, bf16): m = 2 1.25-1.6x faster on 1536->3072 / 1536->6144 / 6144->1536; m = 1 1.2x on
// 6144->1536 and 0.86-0.97x on the short rows, which therefore keep the widening stream kernel.
constexpr int kPairLanes = 2 * kLanes;  // bf16 weights per 512-bit load

// xp[i * k32 + b * 32 + (0..15)] = x[i * k + b * 32 + 2 * (0..15)], then the 16 odd ones, for
// the k32 = k - k % 32 columns covered by whole 32-weight loads.
inline void deinterleave_x(const float* x, int rows, int64_t k, int64_t k32, float* xp) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < k32; c += kPairLanes) {
      const __m512 a = _mm512_loadu_ps(x + i * k + c);
      const __m512 b = _mm512_loadu_ps(x + i * k + c + kLanes);
      _mm512_storeu_ps(xp + i * k32 + c, _mm512_permutex2var_ps(a, even, b));
      _mm512_storeu_ps(xp + i * k32 + c + kLanes, _mm512_permutex2var_ps(a, odd, b));
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

// y[i][r] for R bf16 weight rows starting at w (row stride k) and M rows of x (x: natural layout
// for the tail, xp: deinterleaved for the first k32 columns). Separate even/odd accumulators, U
// column blocks per step: U * R * M * 2 independent FMA chains (at most 16 registers).
template <int R, int M, int U>
inline void dot_block_pairs(const float* x, const float* xp, const uint16_t* w, int64_t k,
                            int64_t k32, const float* bias, float* y, int64_t ldy) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  __m512 acc[U][R][M][2];
  for (int u = 0; u < U; ++u) {
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < M; ++i) acc[u][r][i][0] = acc[u][r][i][1] = _mm512_setzero_ps();
    }
  }
  auto step = [&](int u, int64_t c) {
    __m512 w_even[R], w_odd[R];
    for (int r = 0; r < R; ++r) {
      const __m512i raw = _mm512_loadu_si512(w + r * k + c);
      w_even[r] = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
      w_odd[r] = _mm512_castsi512_ps(_mm512_and_si512(raw, high));
    }
    for (int i = 0; i < M; ++i) {
      const __m512 x_even = _mm512_loadu_ps(xp + i * k32 + c);
      const __m512 x_odd = _mm512_loadu_ps(xp + i * k32 + c + kLanes);
      for (int r = 0; r < R; ++r) {
        acc[u][r][i][0] = _mm512_fmadd_ps(w_even[r], x_even, acc[u][r][i][0]);
        acc[u][r][i][1] = _mm512_fmadd_ps(w_odd[r], x_odd, acc[u][r][i][1]);
      }
    }
  };
  int64_t c = 0;
  for (; c + U * kPairLanes <= k32; c += U * kPairLanes) {
    for (int u = 0; u < U; ++u) step(u, c + u * kPairLanes);
  }
  for (; c < k32; c += kPairLanes) step(0, c);
  for (; c < k; c += kLanes) {  // < 32 columns left: natural order, masked
    const __mmask16 mask = k - c >= kLanes ? static_cast<__mmask16>(0xffff)
                                           : static_cast<__mmask16>((1u << (k - c)) - 1u);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = load_weights_masked(w + r * k + c, mask);
      for (int i = 0; i < M; ++i) {
        acc[0][r][i][0] =
            _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mask, x + i * k + c), acc[0][r][i][0]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const float b = bias ? bias[r] : 0.0f;
    for (int i = 0; i < M; ++i) {
      __m512 sum = _mm512_add_ps(acc[0][r][i][0], acc[0][r][i][1]);
      for (int u = 1; u < U; ++u) {
        sum = _mm512_add_ps(sum, _mm512_add_ps(acc[u][r][i][0], acc[u][r][i][1]));
      }
      y[i * ldy + r] = _mm512_reduce_add_ps(sum) + b;
    }
  }
}

// Rows of at most this many bytes are read one at a time (dot_row_stream), longer ones four at a
// time (dot_block<4, M>). Measured on Zen 4 with 2 threads (GEMV from DRAM): for short rows (K =
// 1536: 3 KB bf16, 6 KB f32) four interleaved 3-6 KB streams keep restarting the hardware
// prefetcher and one long sequential stream was ~1.3-1.6x faster at m = 1; for K = 6144 (12-24 KB
// rows) the four streams were ~1.3x faster. The same held for the bf16 even/odd kernels at m = 2:
// one row at a time 1.58-1.69x faster than the widening dot_block<4, 2> on 1536->3072/6144, two
// rows at a time only 1.0-1.15x.
constexpr int64_t kStreamMaxRowBytes = 8192;

template <int M, typename T>
void dot_rows_m(const float* x, const T* w, int64_t k, const float* bias, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  // Up to two rows of x (the memory-bound GEMV of a decode step: one row, or [cond ; uncond] with
  // guidance) the stream kernel. From three rows on, the row-block path also serves compute-bound
  // prefill GEMMs (m up to kBlockedMaxRowsBf16, in passes of 4 over cached weight blocks), where
  // dot_block<4, M> reuses each x vector for 4 weight rows; one load per FMA would bind it to L1.
  if (M <= 2 && k * static_cast<int64_t>(sizeof(T)) <= kStreamMaxRowBytes) {
    for (; n < n_end; ++n) {
      dot_row_stream<M, 4>(x, w + n * k, k, bias ? bias + n : nullptr, y + n, ldy);
    }
    return;
  }
  for (; n + 4 <= n_end; n += 4) {
    dot_block<4, M>(x, w + n * k, k, bias ? bias + n : nullptr, y + n, ldy);
  }
  for (; n < n_end; ++n) dot_block<1, M>(x, w + n * k, k, bias ? bias + n : nullptr, y + n, ldy);
}

// The memory-bound bf16 GEMV with M <= 2 rows of x. Short rows: one weight row at a time, so the
// task's rows are one sequential stream (x stays in L1). Long rows (over kStreamMaxRowBytes): four
// at a time, as dot_rows_m does: x, which no longer fits in L1 (M * K * 4 bytes: 48 KB at M = 2,
// K = 6144), is then read from L2 once per four weight rows instead of once per row (the one-row
// kernel ran mlp_down 6144->1536 at half the speed).
template <int M>
void dot_rows_pairs(const float* x, const uint16_t* w, int64_t k, const float* bias, float* y,
                    int64_t ldy, int64_t n_begin, int64_t n_end) {
  const int64_t k32 = k - k % kPairLanes;
  float* xp = pair_scratch(M * k32);
  if (!xp && k32 > 0) {  // no scratch (out of memory): the widening kernel needs none
    return dot_rows_m<M>(x, w, k, bias, y, ldy, n_begin, n_end);
  }
  deinterleave_x(x, M, k, k32, xp);
  int64_t n = n_begin;
  if (k * 2 > kStreamMaxRowBytes) {
    for (; n + 4 <= n_end; n += 4) {
      dot_block_pairs<4, M, 1>(x, xp, w + n * k, k, k32, bias ? bias + n : nullptr, y + n, ldy);
    }
  }
  // One row at a time; two column blocks per step at M = 1 (4 FMA chains), one at M = 2 (measured
  // faster than two: fewer live registers).
  for (; n < n_end; ++n) {
    dot_block_pairs<1, M, M == 1 ? 2 : 1>(x, xp, w + n * k, k, k32, bias ? bias + n : nullptr,
                                          y + n, ldy);
  }
}

template <typename T>
void dot_rows_typed(const float* x, int64_t rows, const T* w, int64_t k, const float* bias,
                    float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    // bf16 GEMV: the even/odd kernels, except one row of x over short weight rows, where the
    // widening stream kernel stayed ahead (0.86-0.97x for the even/odd one, same-process A/B).
    if (rows == 2) return dot_rows_pairs<2>(x, w, k, bias, y, ldy, n_begin, n_end);
    if (rows == 1 && k * 2 > kStreamMaxRowBytes) {
      return dot_rows_pairs<1>(x, w, k, bias, y, ldy, n_begin, n_end);
    }
  }
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

// ---- bf16 x bf16 GEMV (vdpbf16ps) ------------------------------------------------------------
// For bf16 weights with LinearConfig::bf16_gemm (AVX-512 BF16): x is rounded to bf16 once per call
// (as gemm_bf16 and PyTorch's bf16 matmul do) and each 512-bit load of 32 weights feeds one
// vdpbf16ps per row of x: 16 lanes x 2 pairs, f32 accumulation. A weight row of natural layout is
// already in vdpbf16ps's pair order (lane j holds w[2j], w[2j+1]), and so is x in bf16, so nothing
// is shuffled or widened. The f32-x even/odd kernel above needs a shift, a mask and 2 FMAs per row
// of x per load (6 ops at M = 2 against 2 here): at M = 2 it was bound by those instructions, not
// by memory (bench/RESULTS.md, "Shape engine (CPU): notes").

// xb[i * kpad + c] = bf16(x[i * k + c]) for c < k, 0 up to kpad (a multiple of 32).
inline void convert_x_bf16(const float* x, int rows, int64_t k, int64_t kpad, uint16_t* xb) {
  for (int i = 0; i < rows; ++i) {
    const float* src = x + i * k;
    uint16_t* dst = xb + i * kpad;
    for (int64_t c = 0; c < kpad; c += kPairLanes) {
      const int64_t left = k - c;
      const __mmask16 lo_mask = left >= kLanes ? static_cast<__mmask16>(0xffff)
                                : left > 0 ? static_cast<__mmask16>((1u << left) - 1u)
                                           : static_cast<__mmask16>(0);
      const int64_t left_hi = left - kLanes;
      const __mmask16 hi_mask = left_hi >= kLanes ? static_cast<__mmask16>(0xffff)
                                : left_hi > 0 ? static_cast<__mmask16>((1u << left_hi) - 1u)
                                              : static_cast<__mmask16>(0);
      const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, src + c);
      const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, src + c + kLanes);
      // cvtne2ps_pbh(a, b): b's 16 values in the low half, a's in the high half.
      _mm512_storeu_si512(dst + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

uint16_t* bf16x_scratch(int64_t elements) {
  thread_local std::unique_ptr<uint16_t[], decltype(&std::free)> buffer(nullptr, &std::free);
  thread_local int64_t capacity = 0;
  if (elements > capacity) {
    const size_t bytes = (static_cast<size_t>(elements) * sizeof(uint16_t) + 63) / 64 * 64;
    buffer.reset(static_cast<uint16_t*>(std::aligned_alloc(64, bytes)));
    capacity = buffer ? elements : 0;
  }
  return buffer.get();
}

inline __m512bh as_bh(__m512i v) {
  return (__m512bh)v;  // NOLINT(google-readability-casting): GCC vector cast
}

// y[i][r] for R weight rows starting at w (row stride k) and M rows of bf16 x (row stride kpad,
// zero past k), U column blocks of 32 per step: U * R * M accumulators.
template <int R, int M, int U>
inline void dot_block_bf16x(const uint16_t* xb, int64_t kpad, const uint16_t* w, int64_t k,
                            const float* bias, float* y, int64_t ldy) {
  __m512 acc[U][R][M];
  for (int u = 0; u < U; ++u) {
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < M; ++i) acc[u][r][i] = _mm512_setzero_ps();
    }
  }
  const int64_t k32 = k - k % kPairLanes;
  auto step = [&](int u, int64_t c, __m512i (&wv)[R]) {
    for (int i = 0; i < M; ++i) {
      const __m512bh xv = as_bh(_mm512_load_si512(xb + i * kpad + c));
      for (int r = 0; r < R; ++r) acc[u][r][i] = _mm512_dpbf16_ps(acc[u][r][i], as_bh(wv[r]), xv);
    }
  };
  int64_t c = 0;
  for (; c + U * kPairLanes <= k32; c += U * kPairLanes) {
    for (int u = 0; u < U; ++u) {
      __m512i wv[R];
      for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_si512(w + r * k + c + u * kPairLanes);
      step(u, c + u * kPairLanes, wv);
    }
  }
  for (; c < k32; c += kPairLanes) {
    __m512i wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_si512(w + r * k + c);
    step(0, c, wv);
  }
  if (c < k) {  // < 32 weights left: masked load, zeros past the row (x is zero there too)
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (k - c)) - 1u);
    __m512i wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_epi16(mask, w + r * k + c);
    step(0, c, wv);
  }
  for (int r = 0; r < R; ++r) {
    const float b = bias ? bias[r] : 0.0f;
    for (int i = 0; i < M; ++i) {
      __m512 sum = acc[0][r][i];
      for (int u = 1; u < U; ++u) sum = _mm512_add_ps(sum, acc[u][r][i]);
      y[i * ldy + r] = _mm512_reduce_add_ps(sum) + b;
    }
  }
}

// Rows as dot_rows_pairs reads them: short rows one at a time (one sequential stream), long rows
// (over kStreamMaxRowBytes) four at a time so that x is read from L2 once per four rows.
template <int M>
void dot_rows_bf16x(const float* x, const uint16_t* w, int64_t k, const float* bias, float* y,
                    int64_t ldy, int64_t n_begin, int64_t n_end) {
  const int64_t kpad = (k + kPairLanes - 1) / kPairLanes * kPairLanes;
  uint16_t* xb = bf16x_scratch(M * kpad);
  if (!xb) {  // no scratch (out of memory): the f32-x kernels need at most a smaller one
    return dot_rows_m<M>(x, w, k, bias, y, ldy, n_begin, n_end);
  }
  convert_x_bf16(x, M, k, kpad, xb);
  int64_t n = n_begin;
  if (k * 2 > kStreamMaxRowBytes) {
    for (; n + 4 <= n_end; n += 4) {
      dot_block_bf16x<4, M, 1>(xb, kpad, w + n * k, k, bias ? bias + n : nullptr, y + n, ldy);
    }
  }
  for (; n < n_end; ++n) {
    dot_block_bf16x<1, M, 2>(xb, kpad, w + n * k, k, bias ? bias + n : nullptr, y + n, ldy);
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


void dot_rows_bf16x_avx512(const float* x, int64_t rows, const Weight& w, const float* bias,
                           float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  if (w.dtype != DType::kBF16) return dot_rows_avx512(x, rows, w, bias, y, ldy, n_begin, n_end);
  const auto* wb = static_cast<const uint16_t*>(w.data);
  switch (rows) {
    case 1:
      return dot_rows_bf16x<1>(x, wb, w.cols, bias, y, ldy, n_begin, n_end);
    case 2:
      return dot_rows_bf16x<2>(x, wb, w.cols, bias, y, ldy, n_begin, n_end);
    case 3:
      return dot_rows_bf16x<3>(x, wb, w.cols, bias, y, ldy, n_begin, n_end);
    default:
      return dot_rows_bf16x<4>(x, wb, w.cols, bias, y, ldy, n_begin, n_end);
  }
}

}  // namespace tessera::kernels::cpu::linear_detail
