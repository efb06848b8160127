// The AVX-512 VNNI pieces of the int8 GEMM with 8-bit activations (gemm_i8.h); compiled with
// -mavx512vnni, called only when gemm_i8::available().
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized flags
// and -Wuninitialized (as in gemm_bf16_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_i8.h"

namespace tessera::kernels::cpu::gemm_i8::vnni {

namespace {

constexpr int kNr = 32;  // columns per panel: two zmm of int32 accumulators per row
constexpr int kMr = 12;  // rows per micro-kernel: 24 accumulators + 2 B vectors + 1 broadcast

// vpdpbusd acc, a (u8), b (s8) as inline assembly: with the intrinsic GCC 12 copied the 24
// accumulators between registers and stored them to the stack on every step of the k loop (the
// tied operand), half the speed of the bf16 GEMM instead of twice it.
inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// MR rows x 32 columns over all kq quads of k, then the epilogue. The accumulators are a fixed-size
// array indexed by compile-time constants after unrolling, so GCC keeps them in registers.
template <int MR>
void micro(const uint8_t* a, int64_t lda, const float* sx, const int8_t* panel, int64_t kq,
           __mmask16 mask0, __mmask16 mask1, const float* sw, const int32_t* offset,
           const float* bias, float* c, int64_t ldc) {
  __m512i acc0[MR];
  __m512i acc1[MR];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    acc0[r] = _mm512_setzero_si512();
    acc1[r] = _mm512_setzero_si512();
  }
  for (int64_t p = 0; p < kq; ++p) {
    const __m512i b0 = _mm512_loadu_si512(panel + p * kNr * 4);
    const __m512i b1 = _mm512_loadu_si512(panel + p * kNr * 4 + 64);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      int32_t quad;
      std::memcpy(&quad, a + r * lda + p * 4, 4);
      const __m512i av = _mm512_set1_epi32(quad);
      acc0[r] = dpbusd(acc0[r], av, b0);
      acc1[r] = dpbusd(acc1[r], av, b1);
    }
  }
  const __m512i off0 = _mm512_maskz_loadu_epi32(mask0, offset);
  const __m512i off1 = _mm512_maskz_loadu_epi32(mask1, offset + 16);
  const __m512 sw0 = _mm512_maskz_loadu_ps(mask0, sw);
  const __m512 sw1 = _mm512_maskz_loadu_ps(mask1, sw + 16);
  const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(mask0, bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias ? _mm512_maskz_loadu_ps(mask1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    const __m512 s = _mm512_set1_ps(sx[r]);
    const __m512 d0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc0[r], off0));
    const __m512 d1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc1[r], off1));
    // fma(float(D), s_x * s_w, bias): the reference's operations (gemm_i8.cpp), so the same bits.
    const __m512 v0 = _mm512_fmadd_ps(d0, _mm512_mul_ps(s, sw0), bias0);
    const __m512 v1 = _mm512_fmadd_ps(d1, _mm512_mul_ps(s, sw1), bias1);
    _mm512_mask_storeu_ps(c + r * ldc, mask0, v0);
    _mm512_mask_storeu_ps(c + r * ldc + 16, mask1, v1);
  }
}

using MicroFn = void (*)(const uint8_t*, int64_t, const float*, const int8_t*, int64_t, __mmask16,
                         __mmask16, const float*, const int32_t*, const float*, float*, int64_t);
constexpr MicroFn kMicro[kMr + 1] = {nullptr,   micro<1>,  micro<2>, micro<3>, micro<4>,
                                     micro<5>,  micro<6>,  micro<7>, micro<8>, micro<9>,
                                     micro<10>, micro<11>, micro<12>};

}  // namespace

void quantize_rows(const float* a, int64_t lda, int64_t rows, int64_t k, int64_t kpad, uint8_t* dst,
                   float* scale) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i bias = _mm512_set1_epi32(128);
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = a + r * lda;
    __m512 amax = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= k; c += 16)
      amax = _mm512_max_ps(amax, _mm512_and_ps(_mm512_loadu_ps(src + c), abs_mask));
    if (c < k) {
      const __mmask16 tail = static_cast<__mmask16>((1u << (k - c)) - 1u);
      amax = _mm512_max_ps(amax, _mm512_and_ps(_mm512_maskz_loadu_ps(tail, src + c), abs_mask));
    }
    // The same float operations as quantize_rows_reference: max, / 127, 1 / s, x * inv, round to
    // nearest even (vcvtps2dq under the default rounding mode = nearbyint), clamp.
    const float s = _mm512_reduce_max_ps(amax) / 127.0f;
    const float inv = s >= std::numeric_limits<float>::min() ? 1.0f / s : 0.0f;
    const __m512 vinv = _mm512_set1_ps(inv);
    uint8_t* out = dst + r * kpad;
    for (c = 0; c + 16 <= k; c += 16) {
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(src + c), vinv));
      q = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo), hi), bias);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c), _mm512_cvtepi32_epi8(q));
    }
    if (c < k) {
      const __mmask16 tail = static_cast<__mmask16>((1u << (k - c)) - 1u);
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail, src + c), vinv));
      q = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo), hi), bias);
      _mm_mask_storeu_epi8(out + c, tail, _mm512_cvtepi32_epi8(q));
    }
    for (c = k; c < kpad; ++c) out[c] = 128;
    scale[r] = s;
  }
}

void panel_rows(const uint8_t* a, const float* sx, int64_t rows, int64_t kpad, const int8_t* panel,
                const float* sw, const int32_t* offset, const float* bias, int64_t cols, float* c,
                int64_t ldc) {
  const __mmask16 mask0 =
      cols >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << cols) - 1u);
  const __mmask16 mask1 = cols >= 32
                              ? static_cast<__mmask16>(0xffff)
                              : (cols <= 16 ? static_cast<__mmask16>(0)
                                            : static_cast<__mmask16>((1u << (cols - 16)) - 1u));
  const int64_t kq = kpad / 4;
  int64_t r = 0;
  for (; r + kMr <= rows; r += kMr) {
    micro<kMr>(a + r * kpad, kpad, sx + r, panel, kq, mask0, mask1, sw, offset, bias, c + r * ldc,
               ldc);
  }
  if (r < rows) {
    kMicro[rows - r](a + r * kpad, kpad, sx + r, panel, kq, mask0, mask1, sw, offset, bias,
                     c + r * ldc, ldc);
  }
}

}  // namespace tessera::kernels::cpu::gemm_i8::vnni
