// The bf16 x bf16 GEMV of cpu::linear (dot_rows_bf16x_avx512, linear_internal.h): vdpbf16ps,
// AVX-512 BF16 only (no AVX2 twin; other CPUs run the f32-x kernels of linear_kernels.inc).
// Called only with LinearConfig::bf16_gemm, i.e. where gemm_bf16::available().
//
// For bf16 weights with LinearConfig::bf16_gemm (AVX-512 BF16): x is rounded to bf16 once per call
// (as gemm_bf16 and PyTorch's bf16 matmul do) and each 512-bit load of 32 weights feeds one
// vdpbf16ps per row of x: 16 lanes x 2 pairs, f32 accumulation. A weight row of natural layout is
// already in vdpbf16ps's pair order (lane j holds w[2j], w[2j+1]), and so is x in bf16, so nothing
// is shuffled or widened. The f32-x even/odd kernel of linear_kernels.inc needs a shift, a mask
// and 2 FMAs per row of x per load (6 ops at M = 2 against 2 here): at M = 2 it was bound by those
// instructions, not by memory (bench/RESULTS.md, "Shape engine (CPU): notes").
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "kernels/cpu/linear_internal.h"
#include "kernels/cpu/simd_vec.h"

// This file calls AVX-512 intrinsics directly, so it meets GCC 12's false -W(maybe-)uninitialized
// on their pass-through operands (GCC PR 105593; simd_vec.h says more) in its own code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tessera::kernels::cpu::linear_detail {
namespace {

using simd::tail_mask;

constexpr int kLanes = 16;
constexpr int kPairLanes = 2 * kLanes;  // bf16 values per 512-bit load
// Rows longer than this are read four at a time (as linear_kernels.inc's kStreamMaxRowBytes).
constexpr int64_t kStreamMaxRowBytes = 8192;

// xb[i * kpad + c] = bf16(x[i * k + c]) for c < k, 0 up to kpad (a multiple of 32).
inline void convert_x_bf16(const float* x, int rows, int64_t k, int64_t kpad, uint16_t* xb) {
  for (int i = 0; i < rows; ++i) {
    const float* src = x + i * k;
    uint16_t* dst = xb + i * kpad;
    for (int64_t c = 0; c < kpad; c += kPairLanes) {
      const int64_t left = k - c;
      const __mmask16 lo_mask = tail_mask(left);
      const __mmask16 hi_mask = tail_mask(left - kLanes);
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
  return (__m512bh)v;  // GCC vector cast
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
  auto step = [&](int u, int64_t c, __m512i(&wv)[R]) {
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
void dot_prepared_bf16x(const uint16_t* xb, const Weight& weight, const float* bias, float* y,
                        int64_t ldy, int64_t n_begin, int64_t n_end) {
  const auto* w = static_cast<const uint16_t*>(weight.data);
  const int64_t k = weight.cols;
  const int64_t kpad = (k + kPairLanes - 1) / kPairLanes * kPairLanes;
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

int64_t bf16x_kpad(int64_t k) {
  return (k + kPairLanes - 1) / kPairLanes * kPairLanes;
}

void prepare_bf16x_avx512(const float* x, int64_t rows, int64_t k, uint16_t* xb) {
  convert_x_bf16(x, static_cast<int>(rows), k, bf16x_kpad(k), xb);
}

void dot_prepared_bf16x_avx512(const uint16_t* xb, int64_t rows, const Weight& w, const float* bias,
                               float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  switch (rows) {
    case 1:
      return dot_prepared_bf16x<1>(xb, w, bias, y, ldy, n_begin, n_end);
    case 2:
      return dot_prepared_bf16x<2>(xb, w, bias, y, ldy, n_begin, n_end);
    case 3:
      return dot_prepared_bf16x<3>(xb, w, bias, y, ldy, n_begin, n_end);
    default:
      return dot_prepared_bf16x<4>(xb, w, bias, y, ldy, n_begin, n_end);
  }
}

void dot_rows_bf16x_avx512(const float* x, int64_t rows, const Weight& w, const float* bias,
                           float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  if (w.dtype != DType::kBF16) return avx512::dot_rows(x, rows, w, bias, y, ldy, n_begin, n_end);
  const int64_t kpad = bf16x_kpad(w.cols);
  uint16_t* xb = bf16x_scratch(rows * kpad);
  if (!xb) {  // no scratch (out of memory): the f32-x kernels need at most a smaller one
    return avx512::dot_rows(x, rows, w, bias, y, ldy, n_begin, n_end);
  }
  prepare_bf16x_avx512(x, rows, w.cols, xb);
  dot_prepared_bf16x_avx512(xb, rows, w, bias, y, ldy, n_begin, n_end);
}

}  // namespace tessera::kernels::cpu::linear_detail
