// AVX-512 row bodies of LayerNorm / RMSNorm (algorithm and accuracy notes in norms.cpp). Compiled
// with AVX-512 flags: call only after active_isa() returned kAvx512.
#include <immintrin.h>

#include <cstdint>

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
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}
}  // namespace

// y may alias x: every pass reads element i before the last pass writes it.
void layer_norm_row(const float* x, const float* weight, const float* bias, float* y, int64_t dim,
                    float eps) {
  const float n = static_cast<float>(dim);  // divisions, not * (1/n): exact for constant rows
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    acc0 = _mm512_add_ps(acc0, _mm512_loadu_ps(x + i));
    acc1 = _mm512_add_ps(acc1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i < dim; i += 16) acc0 = _mm512_add_ps(acc0, _mm512_maskz_loadu_ps(lanes(dim - i), x + i));
  const float mean0 = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) / n;

  const __m512 m0 = _mm512_set1_ps(mean0);
  __m512 s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps();
  for (i = 0; i < dim; i += 16) {
    const __mmask16 m = lanes(dim - i);
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), m0);
    s1 = _mm512_add_ps(s1, d);
    s2 = _mm512_fmadd_ps(d, d, s2);
  }
  const float shift = _mm512_reduce_add_ps(s1) / n;
  float var = _mm512_reduce_add_ps(s2) / n - shift * shift;
  var = var > 0.0f ? var : 0.0f;
  const __m512 mean = _mm512_set1_ps(mean0 + shift);
  const __m512 rstd = _mm512_set1_ps(1.0f / __builtin_sqrtf(var + eps));
  for (i = 0; i < dim; i += 16) {
    const __mmask16 m = lanes(dim - i);
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mean), rstd);
    if (weight) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, weight + i));
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

void rms_norm_row(const float* x, const float* weight, float* y, int64_t dim, float eps) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    acc0 = _mm512_fmadd_ps(a, a, acc0);
    acc1 = _mm512_fmadd_ps(b, b, acc1);
  }
  for (; i < dim; i += 16) {
    const __m512 a = _mm512_maskz_loadu_ps(lanes(dim - i), x + i);
    acc0 = _mm512_fmadd_ps(a, a, acc0);
  }
  const float sq = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  const __m512 rrms = _mm512_set1_ps(1.0f / __builtin_sqrtf(sq / static_cast<float>(dim) + eps));
  for (i = 0; i < dim; i += 16) {
    const __mmask16 m = lanes(dim - i);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), rrms);
    if (weight) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, weight + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

}  // namespace tessera::kernels::cpu::detail::avx512
