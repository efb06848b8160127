// The ISA layer of the CPU kernels written once and compiled per ISA (the *_kernels.inc files):
// the vector type, its width and the few operations those bodies need, as thin inline wrappers
// over the intrinsics of the ISA this translation unit is compiled for (AVX-512 when __AVX512F__
// is defined, otherwise AVX2 + FMA). Include it only from files compiled with an ISA's flags
// (*_avx512.cpp, *_avx2.cpp; kernels/CMakeLists.txt); a portable file gets an #error.
//
// Arithmetic uses the vector types' own operators (a + b, a * b, ...): GCC and Clang define
// _mm512_add_ps and friends as exactly those operators, so a body written with them compiles to
// the same instructions. Everything here has internal linkage, so no AVX-512 instruction can
// reach an AVX2 or portable object through a shared inline symbol (ODR).
//
// Masks: Mask selects lanes, for tails (tail_mask) and comparisons. Masked loads give 0 in the
// lanes not selected; masked stores leave memory there untouched (and never fault on it).
#pragma once

#include <immintrin.h>

#include <cstdint>

#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12's avx512fintrin.h initialises the unused pass-through operand of unmasked intrinsics
// (_mm512_max_ps, _mm512_scalef_ps, ...) from itself, which -W(maybe-)uninitialized reports once
// inlined (GCC PR 105593, fixed in GCC 13). The code here is not affected. Scoped to this header
// (push here, pop at its end): the includer's own code keeps the warnings.
#define TESSERA_SIMD_GCC12_PRAGMAS 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tessera::kernels::cpu::simd {
namespace {

#if defined(__AVX512F__)
#define TESSERA_SIMD_MM(op) _mm512_##op

constexpr int kLanes = 16;    // floats per vector
constexpr int kVecRegs = 32;  // vector registers, for the bodies' register blocking
using Vf = __m512;
using Vi = __m512i;
using Mask = __mmask16;

// The first min(max(n, 0), kLanes) lanes.
inline Mask tail_mask(int64_t n) {
  return n >= kLanes ? static_cast<Mask>(0xffff)
         : n <= 0    ? static_cast<Mask>(0)
                     : static_cast<Mask>((1u << n) - 1u);
}

inline Vf load_tail(const float* p, Mask m) {
  return _mm512_maskz_loadu_ps(m, p);
}
// `fill` in the lanes not selected.
inline Vf load_tail_or(const float* p, Mask m, Vf fill) {
  return _mm512_mask_loadu_ps(fill, m, p);
}
inline void store_tail(float* p, Mask m, Vf v) {
  _mm512_mask_storeu_ps(p, m, v);
}

inline Vf vabs(Vf a) {
  return _mm512_abs_ps(a);
}
inline Vf round_nearest(Vf a) {
  return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Mask less_than(Vf a, Vf b) {
  return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ);
}
inline Mask equal(Vf a, Vf b) {
  return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ);
}
inline Vf select(Mask m, Vf if_true, Vf if_false) {
  return _mm512_mask_mov_ps(if_false, m, if_true);
}
// acc + v in the lanes of m, acc elsewhere.
inline Vf add_where(Vf acc, Mask m, Vf v) {
  return _mm512_mask_add_ps(acc, m, acc, v);
}
// a - b in the lanes of m, 0 elsewhere.
inline Vf sub_or_zero(Mask m, Vf a, Vf b) {
  return _mm512_maskz_sub_ps(m, a, b);
}
inline float reduce_add(Vf v) {
  return _mm512_reduce_add_ps(v);
}
inline float reduce_max(Vf v) {
  return _mm512_reduce_max_ps(v);
}
// Lane i = reduce_add(v[i]) for kLanes vectors, the same bits: the same pairwise tree per vector
// (upper 256 + lower 256, upper 128 + lower 128, then lanes 0+2 / 1+3, then those two), done for
// all of them at once with cross-vector shuffles (45 instructions for 16 sums against ~7 each
// alone).
inline Vf reduce_add_lanes(const Vf* v) {
  // Position p of the tree holds v[kOrder[p]], so that lane i ends with v[i]'s sum.
  static constexpr int kOrder[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
  __m512 l1[8], l2[4], l3[2];
  for (int i = 0; i < 8; ++i) {
    const __m512 a = v[kOrder[2 * i]], b = v[kOrder[2 * i + 1]];
    l1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512 a = l1[2 * i], b = l1[2 * i + 1];
    l2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int i = 0; i < 2; ++i) {
    const __m512 a = l2[2 * i], b = l2[2 * i + 1];
    l3[i] = _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// exp's last step (activations_kernels.inc): p * 2^n through scalef, which saturates to inf above
// ~88.72 and underflows to exactly 0 below ~-104 (denormals from -87.3 down). The argument is
// clamped to [kExpMin, kExpMax] before n is computed; x (unclamped) is not needed here.
constexpr float kExpMin = -110.0f;
constexpr float kExpMax = 88.72f;
inline Vf exp_scale(Vf p, Vf n, Vf /*x*/) {
  return _mm512_scalef_ps(p, n);
}

// bf16 (the high half of an f32): kLanes of them widened exactly to f32.
inline Vf widen_bf16(const uint16_t* p) {
  const __m512i wide =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline Vf widen_bf16_tail(const uint16_t* p, Mask m) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
// The raw bits of 2 * kLanes bf16 values: lane j holds value 2j in its low half and 2j + 1 in its
// high half; bf16_even / bf16_odd (below) turn them into f32 with one lane-local op each.
inline Vi load_bits(const uint16_t* p) {
  return _mm512_loadu_si512(p);
}
inline Vf as_float(Vi bits) {
  return _mm512_castsi512_ps(bits);
}
inline Vi and_bits(Vi a, Vi b) {
  return _mm512_and_si512(a, b);
}
// The 2 * kLanes floats a, b (a first) split into their even and odd elements, in order.
inline void deinterleave(Vf a, Vf b, Vf& even, Vf& odd) {
  const __m512i even_idx =
      _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd_idx =
      _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  even = _mm512_permutex2var_ps(a, even_idx, b);
  odd = _mm512_permutex2var_ps(a, odd_idx, b);
}

#elif defined(__AVX2__) && defined(__FMA__)

#define TESSERA_SIMD_MM(op) _mm256_##op

constexpr int kLanes = 8;
constexpr int kVecRegs = 16;
using Vf = __m256;
using Vi = __m256i;
using Mask = __m256i;  // all ones in a selected lane (maskload / maskstore / blendv)

inline Mask tail_mask(int64_t n) {
  alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  const int64_t k = n >= kLanes ? kLanes : (n <= 0 ? 0 : n);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + kLanes - k));
}

inline Vf load_tail(const float* p, Mask m) {
  return _mm256_maskload_ps(p, m);
}
inline Vf load_tail_or(const float* p, Mask m, Vf fill) {
  return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
inline void store_tail(float* p, Mask m, Vf v) {
  _mm256_maskstore_ps(p, m, v);
}

inline Vf vabs(Vf a) {
  return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a);
}
inline Vf round_nearest(Vf a) {
  return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Mask less_than(Vf a, Vf b) {
  return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
inline Mask equal(Vf a, Vf b) {
  return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_EQ_OQ));
}
inline Vf select(Mask m, Vf if_true, Vf if_false) {
  return _mm256_blendv_ps(if_false, if_true, _mm256_castsi256_ps(m));
}
inline Vf add_where(Vf acc, Mask m, Vf v) {
  return _mm256_add_ps(acc, _mm256_and_ps(v, _mm256_castsi256_ps(m)));
}
inline Vf sub_or_zero(Mask m, Vf a, Vf b) {
  return _mm256_and_ps(_mm256_sub_ps(a, b), _mm256_castsi256_ps(m));
}
inline float reduce_add(Vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float reduce_max(Vf v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// Lane i = reduce_add(v[i]) for kLanes vectors, the same bits (reduce_add's tree for each: upper
// 128 + lower 128, lanes 0+2 / 1+3, then those two), all at once with cross-vector shuffles.
inline Vf reduce_add_lanes(const Vf* v) {
  static constexpr int kOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // tree position -> vector
  __m256 l1[4], l2[2];
  for (int i = 0; i < 4; ++i) {
    const __m256 a = v[kOrder[2 * i]], b = v[kOrder[2 * i + 1]];
    l1[i] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  }
  for (int i = 0; i < 2; ++i) {
    const __m256 a = l1[2 * i], b = l1[2 * i + 1];
    l2[i] = _mm256_add_ps(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  return _mm256_add_ps(_mm256_shuffle_ps(l2[0], l2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm256_shuffle_ps(l2[0], l2[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// exp's last step without scalef: 2^n built in the exponent field, so the argument is clamped to
// [-87.34, 88.0] (n in [-126, 127]) and inputs below -87.34 (and -inf) give exactly 0 (x, the
// unclamped argument, decides that); above 88 the result is e^88 ~ 1.65e38.
constexpr float kExpMin = -87.3365447505531f;
constexpr float kExpMax = 88.0f;
inline Vf exp_scale(Vf p, Vf n, Vf x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(kExpMin), _CMP_LT_OQ);
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

inline Vf widen_bf16(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
// AVX2 has no 16-bit masked load: the selected values go through a zeroed copy (tails only).
inline Vf widen_bf16_tail(const uint16_t* p, Mask m) {
  alignas(16) uint16_t part[kLanes] = {};
  const int n =
      __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(m))));
  for (int i = 0; i < n; ++i) part[i] = p[i];
  return widen_bf16(part);
}
inline Vi load_bits(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline Vf as_float(Vi bits) {
  return _mm256_castsi256_ps(bits);
}
inline Vi and_bits(Vi a, Vi b) {
  return _mm256_and_si256(a, b);
}
inline void deinterleave(Vf a, Vf b, Vf& even, Vf& odd) {
  // shuffle_ps pairs within 128-bit halves ([a0 a2 b0 b2 | a4 a6 b4 b6]); permute4x64 orders the
  // 64-bit pieces 0, 2, 1, 3.
  even = _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
  odd = _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

#else
#error "simd_vec.h needs AVX2 + FMA or AVX-512 flags (*_avx2.cpp / *_avx512.cpp)"
#endif

// The operations that are one intrinsic of the same name at both widths.
inline Vf zero() {
  return TESSERA_SIMD_MM(setzero_ps)();
}
inline Vf set1(float v) {
  return TESSERA_SIMD_MM(set1_ps)(v);
}
inline Vf load(const float* p) {
  return TESSERA_SIMD_MM(loadu_ps)(p);
}
inline void store(float* p, Vf v) {
  TESSERA_SIMD_MM(storeu_ps)(p, v);
}
// a * b + c and c - a * b, one rounding.
inline Vf fmadd(Vf a, Vf b, Vf c) {
  return TESSERA_SIMD_MM(fmadd_ps)(a, b, c);
}
inline Vf fnmadd(Vf a, Vf b, Vf c) {
  return TESSERA_SIMD_MM(fnmadd_ps)(a, b, c);
}
// minps / maxps semantics: b when either is NaN.
inline Vf vmin(Vf a, Vf b) {
  return TESSERA_SIMD_MM(min_ps)(a, b);
}
inline Vf vmax(Vf a, Vf b) {
  return TESSERA_SIMD_MM(max_ps)(a, b);
}
// The f32 values of the even / odd bf16 values in load_bits' layout (exact).
inline Vf bf16_even(Vi bits) {
  return as_float(TESSERA_SIMD_MM(slli_epi32)(bits, 16));
}
inline Vf bf16_odd(Vi bits) {
  return as_float(and_bits(bits, TESSERA_SIMD_MM(set1_epi32)(static_cast<int>(0xffff0000u))));
}
#undef TESSERA_SIMD_MM

}  // namespace
}  // namespace tessera::kernels::cpu::simd

#if defined(TESSERA_SIMD_GCC12_PRAGMAS)
#pragma GCC diagnostic pop
#undef TESSERA_SIMD_GCC12_PRAGMAS
#endif
