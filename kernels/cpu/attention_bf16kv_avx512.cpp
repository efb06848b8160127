// attention_decode_bf16kv's AVX-512 fold (detail::avx512::decode_fold_bf16, declared in
// attention.cpp): scores and P.V straight from the bf16 K/V rows for head_dim 32..256, with
// vdpbf16ps for the scores where the CPU has AVX-512 BF16. AVX-512 only (it has no AVX2 twin:
// other CPUs widen tiles and run the f32 micro-kernels of attention_kernels.inc). Call only after
// active_isa() returned kAvx512.
#include <cstdint>

#include "kernels/cpu/simd_internal.h"
#include "kernels/cpu/simd_vec.h"

// This file calls AVX-512 intrinsics directly, so it meets GCC 12's false -W(maybe-)uninitialized
// on their pass-through operands (GCC PR 105593; simd_vec.h says more) in its own code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tessera::kernels::cpu::detail::avx512 {

using simd::tail_mask;

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
  const __m512 x0 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 x1 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x88), _mm512_shuffle_f32x4(x0, x1, 0xDD));
}

inline __m512bh as_bh(__m512i v) {
  return (__m512bh)v;  // GCC vector cast
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
  const __m512i even_idx =
      _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
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
        const __mmask16 valid = tail_mask(count);
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

// decode_fold_bf16_d for head_dim == 32 * D, D in 1, 2, 4, 8; false for other head dims.
template <bool DotBf16, int D = 1>
bool decode_fold_bf16_dim(const float* q, const uint16_t* k, int64_t k_stride, const uint16_t* v,
                          int64_t v_stride, int64_t j_begin, int64_t j_end, int64_t dim,
                          float scale, float* m, float* l, float* acc) {
  if (dim == 32 * D) {
    decode_fold_bf16_d<D, DotBf16>(q, k, k_stride, v, v_stride, j_begin, j_end, scale, m, l, acc);
    return true;
  }
  if constexpr (D < 8) {
    return decode_fold_bf16_dim<DotBf16, 2 * D>(q, k, k_stride, v, v_stride, j_begin, j_end, dim,
                                                scale, m, l, acc);
  }
  return false;
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
