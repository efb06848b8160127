// AVX-512 micro-kernels of CPU attention (contracts in attention.cpp). Call only after
// active_isa() returned kAvx512. Helpers have internal linkage (no AVX-512 code can leak
// into portable objects through a shared inline symbol).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/simd_internal.h"

// GCC 12's avx512fintrin.h initialises the unused pass-through operand of unmasked intrinsics
// (_mm512_max_ps, _mm512_scalef_ps, ...) from itself, which -W(maybe-)uninitialized reports once
// inlined (GCC PR 105593, fixed in GCC 13). The code here is not affected.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tessera::kernels::cpu::detail::avx512 {

namespace {

inline __mmask16 lanes(int64_t left) {
  return left >= 16  ? static_cast<__mmask16>(0xffff)
         : left <= 0 ? static_cast<__mmask16>(0)
                     : static_cast<__mmask16>((1u << left) - 1u);
}

// NQ vectors of 16 queries times KB keys: NQ*KB accumulators, one broadcast of k per key and d.
template <int NQ, int KB>
inline void qk_block(const float* qt, int64_t bq, const float* k, int64_t k_stride, int64_t dim,
                     float* st) {
  __m512 acc[KB][NQ];
  for (int kb = 0; kb < KB; ++kb)
    for (int n = 0; n < NQ; ++n) acc[kb][n] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dim; ++d) {
    __m512 qv[NQ];
    for (int n = 0; n < NQ; ++n) qv[n] = _mm512_loadu_ps(qt + d * bq + 16 * n);
    for (int kb = 0; kb < KB; ++kb) {
      const __m512 kv = _mm512_set1_ps(k[kb * k_stride + d]);
      for (int n = 0; n < NQ; ++n) acc[kb][n] = _mm512_fmadd_ps(qv[n], kv, acc[kb][n]);
    }
  }
  for (int kb = 0; kb < KB; ++kb)
    for (int n = 0; n < NQ; ++n) _mm512_storeu_ps(st + kb * bq + 16 * n, acc[kb][n]);
}

template <int NQ>
inline void qk_columns(const float* qt, int64_t bq, const float* k, int64_t k_stride, int64_t nk,
                       int64_t dim, float* st) {
  // Enough independent accumulators (>= 8) to hide the FMA latency.
  constexpr int KB = NQ >= 3 ? 4 : (NQ == 2 ? 6 : 8);
  int64_t j = 0;
  for (; j + KB <= nk; j += KB)
    qk_block<NQ, KB>(qt, bq, k + j * k_stride, k_stride, dim, st + j * bq);
  for (; j < nk; ++j) qk_block<NQ, 1>(qt, bq, k + j * k_stride, k_stride, dim, st + j * bq);
}

// R rows of o, NV vectors (16 floats each, the last one masked by `last`) of the head dim.
template <int R, int NV>
inline void pv_block(const float* pt, int64_t bq, const float* v, int64_t v_stride, int64_t nk,
                     const float* alpha, float* o, int64_t ldo, __mmask16 last) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
    for (int n = 0; n < NV; ++n) {
      const __mmask16 m = n == NV - 1 ? last : static_cast<__mmask16>(0xffff);
      acc[r][n] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, o + r * ldo + 16 * n), a);
    }
  }
  for (int64_t j = 0; j < nk; ++j) {
    __m512 vv[NV];
    for (int n = 0; n < NV; ++n) {
      const __mmask16 m = n == NV - 1 ? last : static_cast<__mmask16>(0xffff);
      vv[n] = _mm512_maskz_loadu_ps(m, v + j * v_stride + 16 * n);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 p = _mm512_set1_ps(pt[j * bq + r]);
      for (int n = 0; n < NV; ++n) acc[r][n] = _mm512_fmadd_ps(p, vv[n], acc[r][n]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int n = 0; n < NV; ++n) {
      const __mmask16 m = n == NV - 1 ? last : static_cast<__mmask16>(0xffff);
      _mm512_mask_storeu_ps(o + r * ldo + 16 * n, m, acc[r][n]);
    }
  }
}

template <int R>
inline void pv_rows(const float* pt, int64_t bq, const float* v, int64_t v_stride, int64_t nk,
                    int64_t dim, const float* alpha, float* o, int64_t ldo) {
  for (int64_t d0 = 0; d0 < dim; d0 += 64) {
    const int64_t left = dim - d0;
    const int nv = left >= 64 ? 4 : static_cast<int>((left + 15) / 16);
    const __mmask16 last = lanes(left - 16 * (nv - 1));
    switch (nv) {
      case 4:
        pv_block<R, 4>(pt, bq, v + d0, v_stride, nk, alpha, o + d0, ldo, last);
        break;
      case 3:
        pv_block<R, 3>(pt, bq, v + d0, v_stride, nk, alpha, o + d0, ldo, last);
        break;
      case 2:
        pv_block<R, 2>(pt, bq, v + d0, v_stride, nk, alpha, o + d0, ldo, last);
        break;
      default:
        pv_block<R, 1>(pt, bq, v + d0, v_stride, nk, alpha, o + d0, ldo, last);
        break;
    }
  }
}

}  // namespace

void qk_tile(const float* qt, int64_t bq, const float* k, int64_t k_stride, int64_t nk, int64_t dim,
             float* st) {
  for (int64_t i0 = 0; i0 < bq; i0 += 64) {
    switch ((bq - i0) >= 64 ? 4 : (bq - i0) / 16) {
      case 4:
        qk_columns<4>(qt + i0, bq, k, k_stride, nk, dim, st + i0);
        break;
      case 3:
        qk_columns<3>(qt + i0, bq, k, k_stride, nk, dim, st + i0);
        break;
      case 2:
        qk_columns<2>(qt + i0, bq, k, k_stride, nk, dim, st + i0);
        break;
      default:
        qk_columns<1>(qt + i0, bq, k, k_stride, nk, dim, st + i0);
        break;
    }
  }
}

void softmax_tile(float* st, int64_t nk, int64_t bq, float* m, float* l, float* alpha) {
  alignas(64) float m_safe[64] = {};
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  for (int64_t i = 0; i < bq; i += 16) {
    __m512 mx = _mm512_loadu_ps(m + i);
    for (int64_t j = 0; j < nk; ++j) mx = _mm512_max_ps(mx, _mm512_loadu_ps(st + j * bq + i));
    // A column with nothing visible yet keeps m = -inf; it is shifted by 0 so exp gives 0, not NaN.
    const __mmask16 empty = _mm512_cmp_ps_mask(mx, neg_inf, _CMP_EQ_OQ);
    _mm512_storeu_ps(m_safe + i, _mm512_mask_mov_ps(mx, empty, _mm512_setzero_ps()));
    _mm512_storeu_ps(alpha + i, _mm512_loadu_ps(m + i));  // m_old, exponentiated below
    _mm512_storeu_ps(m + i, mx);
  }
  exp_sub_vec(alpha, m_safe, alpha, bq);
  __m512 sums[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                    _mm512_setzero_ps()};
  for (int64_t j = 0; j < nk; ++j) {
    float* row = st + j * bq;
    exp_sub_vec(row, m_safe, row, bq);
    for (int64_t i = 0; i < bq; i += 16)
      sums[i / 16] = _mm512_add_ps(sums[i / 16], _mm512_loadu_ps(row + i));
  }
  for (int64_t i = 0; i < bq; i += 16) {
    const __m512 li =
        _mm512_fmadd_ps(_mm512_loadu_ps(l + i), _mm512_loadu_ps(alpha + i), sums[i / 16]);
    _mm512_storeu_ps(l + i, li);
  }
}

void pv_tile(const float* pt, int64_t bq, int64_t rows, const float* v, int64_t v_stride,
             int64_t nk, int64_t dim, const float* alpha, float* o, int64_t ldo) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    pv_rows<4>(pt + r, bq, v, v_stride, nk, dim, alpha + r, o + r * ldo, ldo);
  switch (rows - r) {
    case 3:
      pv_rows<3>(pt + r, bq, v, v_stride, nk, dim, alpha + r, o + r * ldo, ldo);
      break;
    case 2:
      pv_rows<2>(pt + r, bq, v, v_stride, nk, dim, alpha + r, o + r * ldo, ldo);
      break;
    case 1:
      pv_rows<1>(pt + r, bq, v, v_stride, nk, dim, alpha + r, o + r * ldo, ldo);
      break;
    default:
      break;
  }
}

void dot_scores(const float* q, const float* k, int64_t k_stride, int64_t nk, int64_t dim,
                float scale, float* s) {
  int64_t j = 0;
  // Four keys at a time: four independent FMA chains share each load of q.
  for (; j + 4 <= nk; j += 4) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    const float* k0 = k + j * k_stride;
    for (int64_t d = 0; d < dim; d += 16) {
      const __mmask16 m = lanes(dim - d);
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
      a0 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k0 + d), a0);
      a1 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k0 + k_stride + d), a1);
      a2 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k0 + 2 * k_stride + d), a2);
      a3 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k0 + 3 * k_stride + d), a3);
    }
    s[j] = _mm512_reduce_add_ps(a0) * scale;
    s[j + 1] = _mm512_reduce_add_ps(a1) * scale;
    s[j + 2] = _mm512_reduce_add_ps(a2) * scale;
    s[j + 3] = _mm512_reduce_add_ps(a3) * scale;
  }
  for (; j < nk; ++j) {
    __m512 a0 = _mm512_setzero_ps();
    for (int64_t d = 0; d < dim; d += 16) {
      const __mmask16 m = lanes(dim - d);
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d),
                           _mm512_maskz_loadu_ps(m, k + j * k_stride + d), a0);
    }
    s[j] = _mm512_reduce_add_ps(a0) * scale;
  }
}

namespace {

// D = head_dim / 32. The output is held as 2 * D f32 vectors: even[c] lane i = dim 32c + 2i,
// odd[c] lane i = dim 32c + 2i + 1 (the order a 512-bit load of 32 bf16 splits into with one shift
// and one mask), restored to natural order at the end.
// Lane i of the result = the sum of the 16 lanes of v[i] (a transpose-and-add tree: 45
// instructions for 16 sums instead of ~8 per _mm512_reduce_add_ps).
inline __m512 sums16(const __m512 (&v)[16]) {
  __m512 t[8], u[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // block b of t[i]: pair sums of v[2i] and v[2i+1] in block b
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // block b of u[i]: block-b sums of v[4i] .. v[4i + 3]
    u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
  }
  const __m512 x0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88),
                                  _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 x1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88),
                                  _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x88), _mm512_shuffle_f32x4(x0, x1, 0xDD));
}

inline __m512bh as_bh(__m512i v) {
  return (__m512bh)v;  // NOLINT(google-readability-casting): GCC vector cast
}

// DotBf16 (AVX-512 BF16): the scores through vdpbf16ps on q in bf16 (the caller passes q already
// rounded to bf16, so the conversion here is exact) and the natural-order K row, 16 keys at a time
// with one sums16 for their horizontal sums: D loads + D vdpbf16ps + ~3 per key, against D loads,
// 2D shifts/masks, 2D FMAs and a full reduction (~8) without it.
template <int D, bool DotBf16>
void decode_fold_bf16_d(const float* q, const uint16_t* k, int64_t k_stride, const uint16_t* v,
                        int64_t v_stride, int64_t j_begin, int64_t j_end, float scale, float* m,
                        float* l, float* acc) {
  constexpr int kTile = 32;
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  // q (scaled) and acc deinterleaved into even/odd dims.
  __m512 qe[D], qo[D], ae[D], ao[D];
  __m512bh qb[D];
  const __m512i even_idx = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                            2, 0);
  const __m512i odd_idx = _mm512_add_epi32(even_idx, _mm512_set1_epi32(1));
  const __m512 vscale = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int c = 0; c < D; ++c) {
    const __m512 q0 = _mm512_loadu_ps(q + 32 * c), q1 = _mm512_loadu_ps(q + 32 * c + 16);
    if constexpr (DotBf16) {
      qb[c] = _mm512_cvtne2ps_pbh(q1, q0);  // low half dims 32c .. 32c + 15, as in a K row
    } else {
      qe[c] = _mm512_mul_ps(_mm512_permutex2var_ps(q0, even_idx, q1), vscale);
      qo[c] = _mm512_mul_ps(_mm512_permutex2var_ps(q0, odd_idx, q1), vscale);
    }
    const __m512 a0 = _mm512_loadu_ps(acc + 32 * c), a1 = _mm512_loadu_ps(acc + 32 * c + 16);
    ae[c] = _mm512_permutex2var_ps(a0, even_idx, a1);
    ao[c] = _mm512_permutex2var_ps(a0, odd_idx, a1);
  }
  float mm = *m, ll = *l;
  alignas(64) float sc[kTile];
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kTile) {
    const int nk = static_cast<int>(j_end - j0 < kTile ? j_end - j0 : kTile);
    float tile_max = -__builtin_inff();
    if constexpr (DotBf16) {
      for (int g = 0; g < nk; g += 16) {
        const int count = nk - g < 16 ? nk - g : 16;
        __m512 dots[16];
#pragma GCC unroll 16
        for (int t = 0; t < 16; ++t) {
          dots[t] = _mm512_setzero_ps();
          if (t < count) {
            const uint16_t* kr = k + (j0 + g + t) * k_stride;
#pragma GCC unroll 8
            for (int c = 0; c < D; ++c) {
              dots[t] = _mm512_dpbf16_ps(dots[t], qb[c], as_bh(_mm512_loadu_si512(kr + 32 * c)));
            }
          }
        }
        const __m512 r = _mm512_mul_ps(sums16(dots), vscale);
        const __mmask16 valid = lanes(count);
        _mm512_mask_storeu_ps(sc + g, valid, r);
        const float group_max = _mm512_mask_reduce_max_ps(valid, r);
        tile_max = group_max > tile_max ? group_max : tile_max;
      }
    }
    for (int jj = 0; !DotBf16 && jj < nk; ++jj) {
      const uint16_t* kr = k + (j0 + jj) * k_stride;
      __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
#pragma GCC unroll 8
      for (int c = 0; c < D; ++c) {
        const __m512i w = _mm512_loadu_si512(kr + 32 * c);
        s0 = _mm512_fmadd_ps(qe[c], _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), s0);
        s1 = _mm512_fmadd_ps(qo[c], _mm512_castsi512_ps(_mm512_and_si512(w, hi_mask)), s1);
      }
      const float sj = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
      sc[jj] = sj;
      tile_max = sj > tile_max ? sj : tile_max;
    }
    const float m_new = tile_max > mm ? tile_max : mm;
    const float m_safe = m_new == -__builtin_inff() ? 0.0f : m_new;
    const float alpha = mm == -__builtin_inff() ? 0.0f : __builtin_expf(mm - m_safe);
    const float sum = exp_sub_sum(sc, m_safe, sc, nk);
    ll = ll * alpha + sum;
    mm = m_new;
    const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
    for (int c = 0; c < D; ++c) {
      ae[c] = _mm512_mul_ps(ae[c], va);
      ao[c] = _mm512_mul_ps(ao[c], va);
    }
    for (int jj = 0; jj < nk; ++jj) {
      const uint16_t* vr = v + (j0 + jj) * v_stride;
      const __m512 p = _mm512_set1_ps(sc[jj]);
#pragma GCC unroll 8
      for (int c = 0; c < D; ++c) {
        const __m512i w = _mm512_loadu_si512(vr + 32 * c);
        ae[c] = _mm512_fmadd_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), ae[c]);
        ao[c] = _mm512_fmadd_ps(p, _mm512_castsi512_ps(_mm512_and_si512(w, hi_mask)), ao[c]);
      }
    }
  }
  // Back to natural order: lo = dims 32c .. 32c + 15, hi = 32c + 16 .. 32c + 31.
  const __m512i lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi_idx =
      _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
#pragma GCC unroll 8
  for (int c = 0; c < D; ++c) {
    _mm512_storeu_ps(acc + 32 * c, _mm512_permutex2var_ps(ae[c], lo_idx, ao[c]));
    _mm512_storeu_ps(acc + 32 * c + 16, _mm512_permutex2var_ps(ae[c], hi_idx, ao[c]));
  }
  *m = mm;
  *l = ll;
}

template <bool DotBf16>
bool decode_fold_bf16_dim(const float* q, const uint16_t* k, int64_t k_stride, const uint16_t* v,
                          int64_t v_stride, int64_t j_begin, int64_t j_end, int64_t dim,
                          float scale, float* m, float* l, float* acc) {
  switch (dim) {
    case 32:
      decode_fold_bf16_d<1, DotBf16>(q, k, k_stride, v, v_stride, j_begin, j_end, scale, m, l, acc);
      return true;
    case 64:
      decode_fold_bf16_d<2, DotBf16>(q, k, k_stride, v, v_stride, j_begin, j_end, scale, m, l, acc);
      return true;
    case 128:
      decode_fold_bf16_d<4, DotBf16>(q, k, k_stride, v, v_stride, j_begin, j_end, scale, m, l, acc);
      return true;
    case 256:
      decode_fold_bf16_d<8, DotBf16>(q, k, k_stride, v, v_stride, j_begin, j_end, scale, m, l, acc);
      return true;
    default:
      return false;
  }
}

}  // namespace

bool decode_fold_bf16(const float* q, const uint16_t* k, int64_t k_stride, const uint16_t* v,
                      int64_t v_stride, int64_t j_begin, int64_t j_end, int64_t dim, float scale,
                      bool dot_bf16, float* m, float* l, float* acc) {
  return dot_bf16 ? decode_fold_bf16_dim<true>(q, k, k_stride, v, v_stride, j_begin, j_end, dim,
                                               scale, m, l, acc)
                  : decode_fold_bf16_dim<false>(q, k, k_stride, v, v_stride, j_begin, j_end, dim,
                                                scale, m, l, acc);
}

}  // namespace tessera::kernels::cpu::detail::avx512
