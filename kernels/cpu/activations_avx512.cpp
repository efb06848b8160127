// AVX-512 bodies of the elementwise activations and the vectorised exp shared with softmax and
// attention. Compiled with AVX-512 flags: call only after active_isa() returned kAvx512.
// Everything but the exported functions has internal linkage, so no AVX-512 code can leak into the
// portable objects through a shared inline symbol.
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

inline __mmask16 tail_mask(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

// exp(x), Cephes expf scheme: x = n*ln2 + r with |r| <= ln2/2, e^r from a degree-6 polynomial,
// then scalef(y, n) = y * 2^n, which saturates to inf above ~88.72 and underflows to exactly 0
// below
// ~-104 (denormals from -87.3 down). Relative error <= 2 ulp. NaN propagates (the clamps keep NaN).
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.72f), x);
  x = _mm512_max_ps(_mm512_set1_ps(-110.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// erf(x) as an odd/even rational function on [-4, 4] (coefficients of Eigen's and XLA's float erf);
// |erf| rounds to 1 outside. Absolute error <= 1.5e-7.
inline __m512 erf_ps(__m512 x) {
  const __m512 z = _mm512_max_ps(_mm512_set1_ps(-4.0f), _mm512_min_ps(_mm512_set1_ps(4.0f), x));
  const __m512 z2 = _mm512_mul_ps(z, z);
  __m512 p = _mm512_set1_ps(-2.72614225801306e-10f);
  p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(2.77068142495902e-08f));
  p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(-2.10102402082508e-06f));
  p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(-5.69250639462346e-05f));
  p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(-7.34990630326855e-04f));
  p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(-2.95459980854025e-03f));
  p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(-1.60960333262415e-02f));
  p = _mm512_mul_ps(p, z);
  __m512 q = _mm512_set1_ps(-1.45660718464996e-05f);
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(-2.13374055278905e-04f));
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(-1.68282697438203e-03f));
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(-7.37332916720468e-03f));
  q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(-1.42647390514189e-02f));
  return _mm512_div_ps(p, q);
}

// sigmoid(t) = 1 / (1 + e^-t) for t >= 0 and e^t / (1 + e^t) below, with e = exp(-|t|) <= 1:
// never overflows, so huge |t| give exactly 0 or 1 (no inf / inf).
inline __m512 sigmoid_ps(__m512 t) {
  const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(t)));
  const __mmask16 negative = _mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 num = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), negative, e);
  return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

inline __m512 silu_ps(__m512 x) {
  return _mm512_mul_ps(x, sigmoid_ps(x));
}

inline __m512 gelu_erf_ps(__m512 x) {
  const __m512 e = erf_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f)));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x),
                       _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// 0.5x(1 + tanh(u)) == x * sigmoid(2u): one exp, no cancellation for negative x.
inline __m512 gelu_tanh_ps(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 u = _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x);
  return _mm512_mul_ps(x,
                       sigmoid_ps(_mm512_mul_ps(_mm512_set1_ps(2.0f * 0.79788456080286536f), u)));
}

template <class F>
inline void map1(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

template <class F>
inline void map2(const float* a, const float* b, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m,
                          f(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

}  // namespace

void silu(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](__m512 v) { return silu_ps(v); });
}
void gelu_erf(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](__m512 v) { return gelu_erf_ps(v); });
}
void gelu_tanh(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](__m512 v) { return gelu_tanh_ps(v); });
}

void quick_gelu(const float* x, float* y, int64_t n) {
  map1(x, y, n, [](__m512 v) {
    return _mm512_mul_ps(v, sigmoid_ps(_mm512_mul_ps(_mm512_set1_ps(1.702f), v)));
  });
}

void add(const float* a, const float* b, float* y, int64_t n) {
  map2(a, b, y, n, [](__m512 u, __m512 v) { return _mm512_add_ps(u, v); });
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  map2(gate, up, y, n, [](__m512 g, __m512 u) { return _mm512_mul_ps(silu_ps(g), u); });
}

void geglu_row(const float* value, const float* gate, float* y, int64_t n) {
  map2(value, gate, y, n, [](__m512 v, __m512 g) { return _mm512_mul_ps(v, gelu_erf_ps(g)); });
}

// y = exp(x - shift), returns the sum of y (f32 lanes, reduced at the end). y may alias x.
float exp_sub_sum(const float* x, float shift, float* y, int64_t n) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    const __m512 e1 = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), s));
    _mm512_storeu_ps(y + i, e0);
    _mm512_storeu_ps(y + i + 16, e1);
    acc0 = _mm512_add_ps(acc0, e0);
    acc1 = _mm512_add_ps(acc1, e1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s));
    _mm512_mask_storeu_ps(y + i, m, e);
    acc0 = _mm512_mask_add_ps(acc0, m, acc0, e);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// y[i] = exp(x[i] - shift[i]). y may alias x.
void exp_sub_vec(const float* x, const float* shift, float* y, int64_t n) {
  map2(x, shift, y, n, [](__m512 a, __m512 b) { return exp_ps(_mm512_sub_ps(a, b)); });
}

}  // namespace tessera::kernels::cpu::detail::avx512
