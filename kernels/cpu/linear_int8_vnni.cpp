// AVX-512 VNNI int8 dot kernel (linear_int8.h); compiled with -mavx512vnni, called only on CPUs
// that have it.
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized flags
// and -Wuninitialized (as in gemm_bf16_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <limits>

#include "kernels/cpu/linear_int8.h"

namespace tessera::kernels::cpu::linear_detail {

// prepare_int8_rows_into with AVX-512 (the same values: round to nearest even, clamp to +-32767).
void prepare_int8_rows_into_avx512(const float* x, int64_t rows, const Weight& w, int16_t* q,
                                   float* scale) {
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* src = x + i * cols + g * group;
      __m512 amax = _mm512_setzero_ps();
      for (int64_t k = 0; k < group; k += 16) {
        amax = _mm512_max_ps(amax, _mm512_and_ps(_mm512_loadu_ps(src + k), sign_mask));
      }
      const float s = _mm512_reduce_max_ps(amax) / 32767.0f;
      const __m512 inv = _mm512_set1_ps(s >= std::numeric_limits<float>::min() ? 1.0f / s : 0.0f);
      int16_t* dst = q + i * cols + g * group;
      for (int64_t k = 0; k < group; k += 16) {
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(src + k), inv));
        v = _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(32767)),
                             _mm512_set1_epi32(-32767));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), _mm512_cvtepi32_epi16(v));
      }
      scale[i * groups + g] = s;
    }
  }
}

namespace {

// Weights are prefetched this far ahead of the loads, one line per 64 bytes: an int8 GEMV does ~3x
// the instructions per byte of the bf16 one, so the out-of-order window alone reaches only ~2 KB
// ahead, about one memory latency's worth at 20 GB/s per core (a 6144 x 1536 GEMV, 2 threads from
// memory, one run of each: 42-49 GB/s without, 52-59 GB/s at 4 KB; 1 KB was no better).
constexpr int64_t kPrefetchBytes = 4096;
inline void prefetch_ahead(const int8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes), _MM_HINT_T0);
}

// prod[i][gg] = sw[gg] * s_x[i, g0 + gg] for the groups in `mask` (at most 16 from g0): one vmulps
// per row of x, the same IEEE products as a scalar multiply per group.
template <int R>
inline void scale_products(const Int8Rows& p, const float* sw, int64_t groups, int64_t g0,
                           __mmask16 mask, float (*prod)[16]) {
  const __m512 swv = _mm512_maskz_loadu_ps(mask, sw);
  for (int i = 0; i < R; ++i) {
    const __m512 sx = _mm512_maskz_loadu_ps(mask, p.scale + i * groups + g0);
    _mm512_store_ps(prod[i], _mm512_mul_ps(swv, sx));
  }
}

// One weight row n against R rows of x, the rows read one after the other: one sequential stream,
// which this machine's prefetchers follow best (four interleaved 1.5 KB row streams, tried first,
// ran the whole GEMV ~1.3x slower from memory though 2x faster from L2; as linear_kernels.inc found
// for bf16). The ILP comes from within the row instead: with C 32-weight steps per group known at
// compile time (C = group / 32: 1, 2 or 4, the groups the quantizer writes), each step of a group
// has its own accumulator per row of x (C * R independent vpdpwssd chains), summed in int32 at the
// group's end (exact: the same D whatever the grouping). C = 0: any other group that is a multiple
// of 32, one accumulator per row of x (a runtime loop of dependent vpdpwssd). Every output's float
// operations are the same for every R and C (one fma per group with the product s_w * s_x, one
// reduce_add), so results do not depend on the batch or on the task split.
template <int R, int C>
inline void vnni_row(const Int8Rows& p, const int8_t* w_row, const float* sw, int64_t cols,
                     int64_t group_rt, const float* bias, float* y, int64_t ldy, int64_t n) {
  constexpr int A = C > 0 ? C : 1;  // accumulators per row of x
  const int64_t group = C > 0 ? 32 * C : group_rt;
  const int64_t groups = cols / group;
  __m512 accf[R];
  for (int i = 0; i < R; ++i) accf[i] = _mm512_setzero_ps();
  alignas(64) float prod[R][16];  // scale_products, read back as fma broadcasts
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int64_t gn = groups - g0 < 16 ? groups - g0 : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << gn) - 1u);
    scale_products<R>(p, sw + g0, groups, g0, mask, prod);
    for (int64_t gg = 0; gg < gn; ++gg) {
      const int64_t c0 = (g0 + gg) * group;
      __m512i acc[A][R];
      for (int a = 0; a < A; ++a) {
        for (int i = 0; i < R; ++i) acc[a][i] = _mm512_setzero_si512();
      }
      if constexpr (C > 0) {
        for (int a = 0; a < C; ++a) {
          const int64_t c = c0 + 32 * a;
          if (a % 2 == 0) prefetch_ahead(w_row + c);
          const __m512i wv =
              _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_row + c)));
          for (int i = 0; i < R; ++i) {
            acc[a][i] = _mm512_dpwssd_epi32(acc[a][i], wv, _mm512_loadu_si512(p.q + i * cols + c));
          }
        }
        for (int i = 0; i < R; ++i) {
          if constexpr (C == 4) {
            acc[0][i] = _mm512_add_epi32(_mm512_add_epi32(acc[0][i], acc[1][i]),
                                         _mm512_add_epi32(acc[2][i], acc[3][i]));
          } else if constexpr (C == 2) {
            acc[0][i] = _mm512_add_epi32(acc[0][i], acc[1][i]);
          }
        }
      } else {
        for (int64_t c = c0; c < c0 + group; c += 32) {
          const __m512i wv =
              _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_row + c)));
          for (int i = 0; i < R; ++i) {
            acc[0][i] = _mm512_dpwssd_epi32(acc[0][i], wv, _mm512_loadu_si512(p.q + i * cols + c));
          }
        }
      }
      for (int i = 0; i < R; ++i) {
        accf[i] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[0][i]), _mm512_set1_ps(prod[i][gg]), accf[i]);
      }
    }
  }
  const float b = bias ? bias[n] : 0.0f;
  for (int i = 0; i < R; ++i) y[i * ldy + n] = _mm512_reduce_add_ps(accf[i]) + b;
}

// NR weight rows [n, n + NR) at a time against R rows of x (C > 0 only), for long rows: every
// 64-byte load of x then feeds NR vpdpwssd instead of one. Measured with one thread from memory on
// 1536 x 6144 (one run each): at m = 8 (two passes of 4 rows) 15.5 GB/s against 8.6 GB/s one row at
// a time; at m = 2 the same (17-19 GB/s). NR rows of >= 4 KB are long enough streams for the
// prefetchers. The float operations per output are those of vnni_row.
template <int R, int NR, int C>
inline void vnni_block(const Int8Rows& p, const int8_t* wq, const float* scales, int64_t cols,
                       const float* bias, float* y, int64_t ldy, int64_t n) {
  constexpr int64_t group = 32 * C;
  const int64_t groups = cols / group;
  __m512 accf[NR][R];
  for (int j = 0; j < NR; ++j) {
    for (int i = 0; i < R; ++i) accf[j][i] = _mm512_setzero_ps();
  }
  alignas(64) float prod[NR][R][16];
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int64_t gn = groups - g0 < 16 ? groups - g0 : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << gn) - 1u);
    for (int j = 0; j < NR; ++j) {
      scale_products<R>(p, scales + (n + j) * groups + g0, groups, g0, mask, prod[j]);
    }
    for (int64_t gg = 0; gg < gn; ++gg) {
      const int64_t c0 = (g0 + gg) * group;
      __m512i acc[NR][R];
      for (int j = 0; j < NR; ++j) {
        for (int i = 0; i < R; ++i) acc[j][i] = _mm512_setzero_si512();
      }
      for (int a = 0; a < C; ++a) {
        const int64_t c = c0 + 32 * a;
        __m512i xv[R];
        for (int i = 0; i < R; ++i) xv[i] = _mm512_loadu_si512(p.q + i * cols + c);
        for (int j = 0; j < NR; ++j) {
          if (a % 2 == 0) prefetch_ahead(wq + (n + j) * cols + c);
          const __m512i wv = _mm512_cvtepi8_epi16(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + (n + j) * cols + c)));
          for (int i = 0; i < R; ++i) acc[j][i] = _mm512_dpwssd_epi32(acc[j][i], wv, xv[i]);
        }
      }
      for (int j = 0; j < NR; ++j) {
        for (int i = 0; i < R; ++i) {
          accf[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[j][i]),
                                       _mm512_set1_ps(prod[j][i][gg]), accf[j][i]);
        }
      }
    }
  }
  for (int j = 0; j < NR; ++j) {
    const float b = bias ? bias[n + j] : 0.0f;
    for (int i = 0; i < R; ++i) y[i * ldy + n + j] = _mm512_reduce_add_ps(accf[j][i]) + b;
  }
}

// For 3-4 rows of x, rows of at least this many weights are read kBlockRows at a time
// (vnni_block), shorter ones one at a time (vnni_row). For 1-2 rows of x (one candidate, with or
// without guidance) every row is read alone: there the NR interleaved streams per thread cost more
// than the shared loads of x save (the 6144 -> 1536 GEMV at m = 2, 2 threads from memory,
// alternated in one run: 265-286 us one row at a time against 343-404 us in blocks of 4, i.e. 66-78
// % of the read bandwidth against 91-103 %).
constexpr int64_t kBlockMinCols = 4096;
// Weight rows per vnni_block (3-4 rows of x): kBlockRows * R accumulator chains and as many float
// sums within the 32 registers.
constexpr int kBlockRows = 2;

template <int R, int C>
void vnni_rows_c(const Int8Rows& p, const Weight& w, const float* bias, float* y, int64_t ldy,
                 int64_t n_begin, int64_t n_end) {
  const auto* wq = static_cast<const int8_t*>(w.data);
  const int64_t groups = w.cols / w.group;
  int64_t n = n_begin;
  if constexpr (C > 0) {
    if (R > 2 && w.cols >= kBlockMinCols) {
      for (; n + kBlockRows <= n_end; n += kBlockRows) {
        vnni_block<R, kBlockRows, C>(p, wq, w.scales, w.cols, bias, y, ldy, n);
      }
    }
  }
  for (; n < n_end; ++n) {
    vnni_row<R, C>(p, wq + n * w.cols, w.scales + n * groups, w.cols, w.group, bias, y, ldy, n);
  }
}

template <int R>
void vnni_rows(const Int8Rows& p, const Weight& w, const float* bias, float* y, int64_t ldy,
               int64_t n_begin, int64_t n_end) {
  switch (w.group) {
    case 128:
      return vnni_rows_c<R, 4>(p, w, bias, y, ldy, n_begin, n_end);
    case 64:
      return vnni_rows_c<R, 2>(p, w, bias, y, ldy, n_begin, n_end);
    case 32:
      return vnni_rows_c<R, 1>(p, w, bias, y, ldy, n_begin, n_end);
    default:
      return vnni_rows_c<R, 0>(p, w, bias, y, ldy, n_begin, n_end);
  }
}

}  // namespace

void dot_prepared_i8_vnni(const Int8Rows& p, const Weight& w, const float* bias, float* y,
                          int64_t ldy, int64_t n_begin, int64_t n_end) {
  switch (p.rows) {
    case 1:
      return vnni_rows<1>(p, w, bias, y, ldy, n_begin, n_end);
    case 2:
      return vnni_rows<2>(p, w, bias, y, ldy, n_begin, n_end);
    case 3:
      return vnni_rows<3>(p, w, bias, y, ldy, n_begin, n_end);
    default:
      return vnni_rows<4>(p, w, bias, y, ldy, n_begin, n_end);
  }
}

}  // namespace tessera::kernels::cpu::linear_detail
