// AVX2 + FMA row bodies of LayerNorm / RMSNorm (algorithm and accuracy notes in norms.cpp).
// Compiled with AVX2 flags: call only after active_isa() returned kAvx2 or better.
#include <immintrin.h>

#include <cstdint>

namespace tessera::kernels::cpu::detail::avx2 {

namespace {
// Lane mask for the first min(left, 8) lanes.
inline __m256i lanes(int64_t left) {
  alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - (left >= 8 ? 8 : left)));
}

inline float reduce_add(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
}  // namespace

// y may alias x: every pass reads element i before the last pass writes it.
void layer_norm_row(const float* x, const float* weight, const float* bias, float* y, int64_t dim,
                    float eps) {
  const float n = static_cast<float>(dim);  // divisions, not * (1/n): exact for constant rows
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    acc0 = _mm256_add_ps(acc0, _mm256_loadu_ps(x + i));
    acc1 = _mm256_add_ps(acc1, _mm256_loadu_ps(x + i + 8));
  }
  for (; i < dim; i += 8) acc0 = _mm256_add_ps(acc0, _mm256_maskload_ps(x + i, lanes(dim - i)));
  const float mean0 = reduce_add(_mm256_add_ps(acc0, acc1)) / n;

  const __m256 m0 = _mm256_set1_ps(mean0);
  __m256 s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps();
  for (i = 0; i < dim; i += 8) {
    const __m256i m = lanes(dim - i);
    const __m256 d =
        _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), m0), _mm256_castsi256_ps(m));
    s1 = _mm256_add_ps(s1, d);
    s2 = _mm256_fmadd_ps(d, d, s2);
  }
  const float shift = reduce_add(s1) / n;
  float var = reduce_add(s2) / n - shift * shift;
  var = var > 0.0f ? var : 0.0f;
  const __m256 mean = _mm256_set1_ps(mean0 + shift);
  const __m256 rstd = _mm256_set1_ps(1.0f / __builtin_sqrtf(var + eps));
  for (i = 0; i < dim; i += 8) {
    const __m256i m = lanes(dim - i);
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mean), rstd);
    if (weight) v = _mm256_mul_ps(v, _mm256_maskload_ps(weight + i, m));
    if (bias) v = _mm256_add_ps(v, _mm256_maskload_ps(bias + i, m));
    _mm256_maskstore_ps(y + i, m, v);
  }
}

void rms_norm_row(const float* x, const float* weight, float* y, int64_t dim, float eps) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
    acc1 = _mm256_fmadd_ps(b, b, acc1);
  }
  for (; i < dim; i += 8) {
    const __m256 a = _mm256_maskload_ps(x + i, lanes(dim - i));
    acc0 = _mm256_fmadd_ps(a, a, acc0);
  }
  const float sq = reduce_add(_mm256_add_ps(acc0, acc1));
  const __m256 rrms = _mm256_set1_ps(1.0f / __builtin_sqrtf(sq / static_cast<float>(dim) + eps));
  for (i = 0; i < dim; i += 8) {
    const __m256i m = lanes(dim - i);
    __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + i, m), rrms);
    if (weight) v = _mm256_mul_ps(v, _mm256_maskload_ps(weight + i, m));
    _mm256_maskstore_ps(y + i, m, v);
  }
}

}  // namespace tessera::kernels::cpu::detail::avx2
