// The AVX-512 BF16 pieces of the bf16 GEMM (gemm_bf16.h). Compiled with -mavx512bf16 (every
// *_avx512.cpp is); called only when gemm_bf16::available().
// GCC 12's AVX-512 intrinsics (_mm512_max_ps, ...) pass an undefined vector as the merge source,
// which -W(maybe-)uninitialized reports once inlined here (as in simd_vec.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/simd_internal.h"

namespace tessera::kernels::cpu::gemm_bf16::avx512bf16 {

namespace {

constexpr int kNr = 32;  // columns per panel: two zmm of f32 accumulators per row
constexpr int kMr = 12;  // rows per micro-kernel: 24 accumulators + 2 B vectors + 1 broadcast

inline uint16_t round_bf16(float f) {
  // Round to nearest even; NaN stays NaN (quiet bit set) as vcvtne2ps2bf16 does.
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float b_at(const BMatrix& b, int64_t kk, int64_t j) {
  if (b.layout == BLayout::kF32NK) return static_cast<const float*>(b.data)[j * b.ld + kk];
  return static_cast<const float*>(b.data)[kk * b.ld + j];
}

// MR rows x 32 columns over all kp pairs. The accumulators are a fixed-size array indexed by
// compile-time constants after unrolling, so GCC keeps them in registers.
template <int MR>
void micro(const uint16_t* a, int64_t lda, const uint32_t* panel, int64_t kp, __mmask16 mask0,
           __mmask16 mask1, const float* bias, float* c, int64_t ldc, bool accumulate) {
  __m512 acc0[MR];
  __m512 acc1[MR];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    acc0[r] = _mm512_setzero_ps();
    acc1[r] = _mm512_setzero_ps();
  }
  const int32_t* a32 = reinterpret_cast<const int32_t*>(a);
  const int64_t lda32 = lda / 2;
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(panel + p * kNr);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(panel + p * kNr + 16);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(a32[r * lda32 + p]);
      acc0[r] = _mm512_dpbf16_ps(acc0[r], av, b0);
      acc1[r] = _mm512_dpbf16_ps(acc1[r], av, b1);
    }
  }
  const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(mask0, bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias ? _mm512_maskz_loadu_ps(mask1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    __m512 v0 = _mm512_add_ps(acc0[r], bias0);
    __m512 v1 = _mm512_add_ps(acc1[r], bias1);
    if (accumulate) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(mask0, cr));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(mask1, cr + 16));
    }
    _mm512_mask_storeu_ps(cr, mask0, v0);
    _mm512_mask_storeu_ps(cr + 16, mask1, v1);
  }
}

using MicroFn = void (*)(const uint16_t*, int64_t, const uint32_t*, int64_t, __mmask16, __mmask16,
                         const float*, float*, int64_t, bool);
constexpr MicroFn kMicro[kMr + 1] = {nullptr,   micro<1>,  micro<2>, micro<3>, micro<4>,
                                     micro<5>,  micro<6>,  micro<7>, micro<8>, micro<9>,
                                     micro<10>, micro<11>, micro<12>};

}  // namespace

void convert_a(const float* a, int64_t lda, int64_t rows, int64_t k, uint16_t* dst, int64_t kpad) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = a + r * lda;
    uint16_t* out = dst + r * kpad;
    int64_t c = 0;
    for (; c + 32 <= k; c += 32) {
      const __m512 lo = _mm512_loadu_ps(src + c);
      const __m512 hi = _mm512_loadu_ps(src + c + 16);
      _mm512_storeu_si512(out + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    for (; c < k; ++c) out[c] = round_bf16(src[c]);
    for (; c < kpad; ++c) out[c] = 0;
  }
}

void pack_b(const BMatrix& b, int64_t j0, int64_t n, int64_t k, int64_t kpad, uint32_t* panel) {
  const int64_t kp = kpad / 2;
  const int64_t cols = n - j0 < kNr ? n - j0 : kNr;
  const int64_t full_pairs = k / 2;
  for (int64_t j = 0; j < kNr; ++j) {
    if (j >= cols) {
      for (int64_t p = 0; p < kp; ++p) panel[p * kNr + j] = 0;
      continue;
    }
    const int64_t col = j0 + j;
    if (b.layout == BLayout::kBf16NK || b.layout == BLayout::kI8NK) {
      const uint16_t* row = nullptr;
      if (b.layout == BLayout::kBf16NK) {
        row = static_cast<const uint16_t*>(b.data) + col * b.ld;
      } else {  // kI8NK: the row dequantized into bf16 scratch first
        thread_local std::vector<uint16_t> deq;
        if (static_cast<int64_t>(deq.size()) < k + 32) deq.resize(static_cast<size_t>(k + 32));
        const int8_t* q = static_cast<const int8_t*>(b.data) + col * b.ld;
        const float* sc = b.scales + col * (b.ld / b.group);
        int64_t c = 0;
        if (b.group % 32 == 0) {
          for (; c + 32 <= k; c += 32) {
            const __m512 s = _mm512_set1_ps(sc[c / b.group]);
            const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + c));
            const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + c + 16));
            const __m512 lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), s);
            const __m512 hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), s);
            _mm512_storeu_si512(deq.data() + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
          }
        }
        for (; c < k; ++c) {
          deq[static_cast<size_t>(c)] = round_bf16(static_cast<float>(q[c]) * sc[c / b.group]);
        }
        row = deq.data();
      }
      for (int64_t p = 0; p < full_pairs; ++p) {
        uint32_t word;
        std::memcpy(&word, row + 2 * p, 4);
        panel[p * kNr + j] = word;
      }
      if (k & 1) panel[full_pairs * kNr + j] = row[k - 1];
    } else {
      for (int64_t p = 0; p < full_pairs; ++p) {
        const uint32_t lo = round_bf16(b_at(b, 2 * p, col));
        const uint32_t hi = round_bf16(b_at(b, 2 * p + 1, col));
        panel[p * kNr + j] = lo | (hi << 16);
      }
      if (k & 1) panel[full_pairs * kNr + j] = round_bf16(b_at(b, k - 1, col));
    }
    for (int64_t p = (k + 1) / 2; p < kp; ++p) panel[p * kNr + j] = 0;
  }
}

void panel_rows(const uint16_t* a, int64_t rows, int64_t kpad, const uint32_t* panel, int64_t cols,
                const float* bias, float* c, int64_t ldc, bool accumulate) {
  panel_rows_k(a, kpad, rows, kpad / 2, panel, cols, bias, c, ldc, accumulate);
}

void panel_rows_k(const uint16_t* a, int64_t lda, int64_t rows, int64_t kp, const uint32_t* panel,
                  int64_t cols, const float* bias, float* c, int64_t ldc, bool accumulate) {
  const __mmask16 mask0 =
      cols >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << cols) - 1u);
  const __mmask16 mask1 = cols >= 32
                              ? static_cast<__mmask16>(0xffff)
                              : (cols <= 16 ? static_cast<__mmask16>(0)
                                            : static_cast<__mmask16>((1u << (cols - 16)) - 1u));
  int64_t r = 0;
  for (; r + kMr <= rows; r += kMr) {
    micro<kMr>(a + r * lda, lda, panel, kp, mask0, mask1, bias, c + r * ldc, ldc, accumulate);
  }
  if (r < rows) {
    kMicro[rows - r](a + r * lda, lda, panel, kp, mask0, mask1, bias, c + r * ldc, ldc, accumulate);
  }
}

void softmax_rows(float* s, int64_t lds, int64_t rows, int64_t n, float scale, float* l) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * lds;
    __m512 vmax = _mm512_set1_ps(-__builtin_inff());
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(row + j), vscale);
      _mm512_storeu_ps(row + j, v);
      vmax = _mm512_max_ps(vmax, v);
    }
    if (j < n) {
      const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1u);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + j), vscale);
      _mm512_mask_storeu_ps(row + j, tail, v);
      vmax = _mm512_mask_max_ps(vmax, tail, vmax, v);
    }
    const float m = _mm512_reduce_max_ps(vmax);
    l[r] = detail::avx512::exp_sub_sum(row, m, row, n);
  }
}

}  // namespace tessera::kernels::cpu::gemm_bf16::avx512bf16
