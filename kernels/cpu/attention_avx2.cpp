// AVX2 + FMA micro-kernels of CPU attention (contracts in attention.cpp), the fallback for CPUs
// without AVX-512. Call only after active_isa() returned kAvx2 or better. Helpers have
// internal linkage (no AVX2 code can leak into portable objects through a shared inline symbol).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/simd_internal.h"

namespace tessera::kernels::cpu::detail::avx2 {

namespace {

// Lane mask for the first min(max(left, 0), 8) lanes.
inline __m256i lanes(int64_t left) {
  alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  const int64_t n = left >= 8 ? 8 : (left <= 0 ? 0 : left);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - n));
}

inline float reduce_add(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 queries (two vectors) times KB keys.
template <int KB>
inline void qk_block(const float* qt, int64_t bq, const float* k, int64_t k_stride, int64_t dim,
                     float* st) {
  __m256 acc[KB][2];
  for (int kb = 0; kb < KB; ++kb) acc[kb][0] = acc[kb][1] = _mm256_setzero_ps();
  for (int64_t d = 0; d < dim; ++d) {
    const __m256 q0 = _mm256_loadu_ps(qt + d * bq), q1 = _mm256_loadu_ps(qt + d * bq + 8);
    for (int kb = 0; kb < KB; ++kb) {
      const __m256 kv = _mm256_broadcast_ss(k + kb * k_stride + d);
      acc[kb][0] = _mm256_fmadd_ps(q0, kv, acc[kb][0]);
      acc[kb][1] = _mm256_fmadd_ps(q1, kv, acc[kb][1]);
    }
  }
  for (int kb = 0; kb < KB; ++kb) {
    _mm256_storeu_ps(st + kb * bq, acc[kb][0]);
    _mm256_storeu_ps(st + kb * bq + 8, acc[kb][1]);
  }
}

// R rows of o times NV vectors (8 floats; the last one masked by `last`) of the head dim.
template <int R, int NV>
inline void pv_block(const float* pt, int64_t bq, const float* v, int64_t v_stride, int64_t nk,
                     const float* alpha, float* o, int64_t ldo, __m256i last) {
  const __m256i full = _mm256_set1_epi32(-1);
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r) {
    const __m256 a = _mm256_set1_ps(alpha[r]);
    for (int n = 0; n < NV; ++n)
      acc[r][n] =
          _mm256_mul_ps(_mm256_maskload_ps(o + r * ldo + 8 * n, n == NV - 1 ? last : full), a);
  }
  for (int64_t j = 0; j < nk; ++j) {
    __m256 vv[NV];
    for (int n = 0; n < NV; ++n)
      vv[n] = _mm256_maskload_ps(v + j * v_stride + 8 * n, n == NV - 1 ? last : full);
    for (int r = 0; r < R; ++r) {
      const __m256 p = _mm256_broadcast_ss(pt + j * bq + r);
      for (int n = 0; n < NV; ++n) acc[r][n] = _mm256_fmadd_ps(p, vv[n], acc[r][n]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n)
      _mm256_maskstore_ps(o + r * ldo + 8 * n, n == NV - 1 ? last : full, acc[r][n]);
}

template <int R>
inline void pv_rows(const float* pt, int64_t bq, const float* v, int64_t v_stride, int64_t nk,
                    int64_t dim, const float* alpha, float* o, int64_t ldo) {
  for (int64_t d0 = 0; d0 < dim; d0 += 16) {
    const int64_t left = dim - d0;
    if (left > 8) {
      pv_block<R, 2>(pt, bq, v + d0, v_stride, nk, alpha, o + d0, ldo, lanes(left - 8));
    } else {
      pv_block<R, 1>(pt, bq, v + d0, v_stride, nk, alpha, o + d0, ldo, lanes(left));
    }
  }
}

}  // namespace

void qk_tile(const float* qt, int64_t bq, const float* k, int64_t k_stride, int64_t nk, int64_t dim,
             float* st) {
  for (int64_t i0 = 0; i0 < bq; i0 += 16) {
    int64_t j = 0;
    for (; j + 4 <= nk; j += 4)
      qk_block<4>(qt + i0, bq, k + j * k_stride, k_stride, dim, st + j * bq + i0);
    for (; j < nk; ++j) qk_block<1>(qt + i0, bq, k + j * k_stride, k_stride, dim, st + j * bq + i0);
  }
}

void softmax_tile(float* st, int64_t nk, int64_t bq, float* m, float* l, float* alpha) {
  alignas(32) float m_safe[64] = {};
  const __m256 neg_inf = _mm256_set1_ps(-__builtin_inff());
  for (int64_t i = 0; i < bq; i += 8) {
    __m256 mx = _mm256_loadu_ps(m + i);
    for (int64_t j = 0; j < nk; ++j) mx = _mm256_max_ps(mx, _mm256_loadu_ps(st + j * bq + i));
    // A column with nothing visible yet keeps m = -inf; it is shifted by 0 so exp gives 0, not NaN.
    const __m256 empty = _mm256_cmp_ps(mx, neg_inf, _CMP_EQ_OQ);
    _mm256_storeu_ps(m_safe + i, _mm256_andnot_ps(empty, mx));
    _mm256_storeu_ps(alpha + i, _mm256_loadu_ps(m + i));  // m_old, exponentiated below
    _mm256_storeu_ps(m + i, mx);
  }
  exp_sub_vec(alpha, m_safe, alpha, bq);
  __m256 sums[8];
  for (auto& v : sums) v = _mm256_setzero_ps();
  for (int64_t j = 0; j < nk; ++j) {
    float* row = st + j * bq;
    exp_sub_vec(row, m_safe, row, bq);
    for (int64_t i = 0; i < bq; i += 8)
      sums[i / 8] = _mm256_add_ps(sums[i / 8], _mm256_loadu_ps(row + i));
  }
  for (int64_t i = 0; i < bq; i += 8) {
    const __m256 li =
        _mm256_fmadd_ps(_mm256_loadu_ps(l + i), _mm256_loadu_ps(alpha + i), sums[i / 8]);
    _mm256_storeu_ps(l + i, li);
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
  for (; j + 4 <= nk; j += 4) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    const float* k0 = k + j * k_stride;
    for (int64_t d = 0; d < dim; d += 8) {
      const __m256i m = lanes(dim - d);
      const __m256 qv = _mm256_maskload_ps(q + d, m);
      a0 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + d, m), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + k_stride + d, m), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + 2 * k_stride + d, m), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + 3 * k_stride + d, m), a3);
    }
    s[j] = reduce_add(a0) * scale;
    s[j + 1] = reduce_add(a1) * scale;
    s[j + 2] = reduce_add(a2) * scale;
    s[j + 3] = reduce_add(a3) * scale;
  }
  for (; j < nk; ++j) {
    __m256 a0 = _mm256_setzero_ps();
    for (int64_t d = 0; d < dim; d += 8) {
      const __m256i m = lanes(dim - d);
      a0 = _mm256_fmadd_ps(_mm256_maskload_ps(q + d, m),
                           _mm256_maskload_ps(k + j * k_stride + d, m), a0);
    }
    s[j] = reduce_add(a0) * scale;
  }
}

}  // namespace tessera::kernels::cpu::detail::avx2
