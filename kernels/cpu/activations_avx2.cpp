// AVX2 + FMA bodies of the elementwise activations and the vectorised exp shared with softmax and
// attention: the fallback for CPUs without AVX-512. Compiled with AVX2 flags: call only after
// active_isa() returned kAvx2 (or better). Helpers have internal linkage so no AVX2 code
// can leak into portable objects through a shared inline symbol.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/simd_internal.h"

namespace tessera::kernels::cpu::detail::avx2 {

namespace {

// Lane mask for the first n (0..8) lanes, for maskload / maskstore.
inline __m256i tail_mask(int64_t n) {
  alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - n));
}

// exp(x), Cephes expf scheme (see activations_avx512.cpp); 2^n is built in the exponent field, so
// the input is clamped to [-87.34, 88.0] (n in [-126, 127]): inputs below -87.34 (and -inf) give
// exactly 0, inputs above 88 give e^88 ~ 1.65e38. Relative error <= 2 ulp inside. NaN propagates.
inline __m256 exp_ps(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3365447505531f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
  x = _mm256_max_ps(lo, x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(underflow, y);
}

// erf(x): same rational approximation as the AVX-512 file; absolute error <= 1.5e-7.
inline __m256 erf_ps(__m256 x) {
  const __m256 z = _mm256_max_ps(_mm256_set1_ps(-4.0f), _mm256_min_ps(_mm256_set1_ps(4.0f), x));
  const __m256 z2 = _mm256_mul_ps(z, z);
  __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-1.60960333262415e-02f));
  p = _mm256_mul_ps(p, z);
  __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(-1.42647390514189e-02f));
  return _mm256_div_ps(p, q);
}

// sigmoid(t) = 1 / (1 + e^-t) for t >= 0 and e^t / (1 + e^t) below, with e = exp(-|t|) <= 1:
// never overflows, so huge |t| give exactly 0 or 1 (no inf / inf).
inline __m256 sigmoid_ps(__m256 t) {
  const __m256 abs_t = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), t);
  const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), abs_t));
  const __m256 negative = _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 num = _mm256_blendv_ps(_mm256_set1_ps(1.0f), e, negative);
  return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

inline __m256 silu_ps(__m256 x) {
  return _mm256_mul_ps(x, sigmoid_ps(x));
}

inline __m256 gelu_erf_ps(__m256 x) {
  const __m256 e = erf_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                       _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// 0.5x(1 + tanh(u)) == x * sigmoid(2u): one exp, no cancellation for negative x.
inline __m256 gelu_tanh_ps(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x);
  return _mm256_mul_ps(x,
                       sigmoid_ps(_mm256_mul_ps(_mm256_set1_ps(2.0f * 0.79788456080286536f), u)));
}

template <class F>
inline void map1(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m, f(_mm256_maskload_ps(x + i, m)));
  }
}

template <class F>
inline void map2(const float* a, const float* b, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m, f(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m)));
  }
}

inline float reduce_add(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

void silu(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](__m256 v) { return silu_ps(v); });
}
void gelu_erf(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](__m256 v) { return gelu_erf_ps(v); });
}
void gelu_tanh(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](__m256 v) { return gelu_tanh_ps(v); });
}

void quick_gelu(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](__m256 v) {
    return _mm256_mul_ps(v, sigmoid_ps(_mm256_mul_ps(_mm256_set1_ps(1.702f), v)));
  });
}

void add(const float* a, const float* b, float* y, int64_t n) {
  map2(a, b, y, n, [](__m256 u, __m256 v) { return _mm256_add_ps(u, v); });
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  map2(gate, up, y, n, [](__m256 g, __m256 u) { return _mm256_mul_ps(silu_ps(g), u); });
}

void geglu_row(const float* value, const float* gate, float* y, int64_t n) {
  map2(value, gate, y, n, [](__m256 v, __m256 g) { return _mm256_mul_ps(v, gelu_erf_ps(g)); });
}

// y = exp(x - shift), returns the sum of y. y may alias x.
float exp_sub_sum(const float* x, float shift, float* y, int64_t n) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 e0 = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    const __m256 e1 = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), s));
    _mm256_storeu_ps(y + i, e0);
    _mm256_storeu_ps(y + i + 8, e1);
    acc0 = _mm256_add_ps(acc0, e0);
    acc1 = _mm256_add_ps(acc1, e1);
  }
  for (; i < n; i += 8) {
    const __m256i m = tail_mask(n - i >= 8 ? 8 : n - i);
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), s));
    _mm256_maskstore_ps(y + i, m, e);
    acc0 = _mm256_add_ps(acc0, _mm256_and_ps(e, _mm256_castsi256_ps(m)));
  }
  return reduce_add(_mm256_add_ps(acc0, acc1));
}

// y[i] = exp(x[i] - shift[i]). y may alias x.
void exp_sub_vec(const float* x, const float* shift, float* y, int64_t n) {
  map2(x, shift, y, n, [](__m256 a, __m256 b) { return exp_ps(_mm256_sub_ps(a, b)); });
}

}  // namespace tessera::kernels::cpu::detail::avx2
