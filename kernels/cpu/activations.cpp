// CPU elementwise activations: threads over contiguous chunks, AVX-512 / AVX2 bodies picked at run
// time (activations_kernels.inc, compiled per ISA by activations_avx512.cpp and
// activations_avx2.cpp), plain scalar loops when SIMD is off.
//
// This file also defines the scalar exp helper that softmax and attention share with the SIMD
// files (simd_internal.h).
//
// Accuracy of the SIMD paths (measured against double references in activations_test):
//   exp: Cephes polynomial, <= 2 ulp relative on [-87, 88]; exactly 0 for -inf and below -87.3
//   (AVX2) / -104 (AVX-512). erf: rational approximation (Eigen / XLA), <= 1.5e-7 absolute on all
//   of R. silu = x * sigmoid(x), quick_gelu = x * sigmoid(1.702x); gelu_tanh = x * sigmoid(2u) ==
//   0.5x(1 + tanh(u)) (exact identity), with sigmoid evaluated from exp(-|t|) so it never
//   overflows.
#include <cmath>
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_internal.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu {

namespace detail {
namespace scalar {
float exp_sub_sum(const float* x, float shift, float* y, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - shift);
    sum += y[i];
  }
  return sum;
}
}  // namespace scalar

#define TESSERA_ACTIVATION_ISA_DECLS                                    \
  void silu(const float* x, float* y, int64_t n);                       \
  void gelu_erf(const float* x, float* y, int64_t n);                   \
  void gelu_tanh(const float* x, float* y, int64_t n);                  \
  void quick_gelu(const float* x, float* y, int64_t n);                 \
  void add(const float* a, const float* b, float* y, int64_t n);        \
  void swiglu(const float* gate, const float* up, float* y, int64_t n); \
  void geglu_row(const float* value, const float* gate, float* y, int64_t n);
namespace avx512 {
TESSERA_ACTIVATION_ISA_DECLS
}  // namespace avx512
namespace avx2 {
TESSERA_ACTIVATION_ISA_DECLS
}  // namespace avx2
#undef TESSERA_ACTIVATION_ISA_DECLS
}  // namespace detail

namespace {

// Elementwise ops are memory bound: a chunk of 32K floats (128 KiB in + out) amortises a task
// hand-off; smaller arrays (a decode step's activations) run on the calling thread.
constexpr int64_t kGrain = 32 * 1024;

float silu_scalar(float x) {
  return x / (1.0f + std::exp(-x));
}
float gelu_erf_scalar(float x) {
  return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
}
float gelu_tanh_scalar(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}

float quick_gelu_scalar(float x) {
  return x / (1.0f + std::exp(-1.702f * x));
}

template <class Avx512Fn, class Avx2Fn, class ScalarFn>
void elementwise(int64_t n, Avx512Fn avx512_fn, Avx2Fn avx2_fn, ScalarFn scalar_fn) {
  const Isa isa = active_isa();
  kernels::cpu::cpu_pool().parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    switch (isa) {
      case Isa::kAvx512:
        avx512_fn(begin, end);
        break;
      case Isa::kAvx2:
        avx2_fn(begin, end);
        break;
      case Isa::kScalar:
        scalar_fn(begin, end);
        break;
    }
  });
}
}  // namespace

void silu(const float* x, float* y, int64_t n) {
  elementwise(
      n, [&](int64_t b, int64_t e) { detail::avx512::silu(x + b, y + b, e - b); },
      [&](int64_t b, int64_t e) { detail::avx2::silu(x + b, y + b, e - b); },
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = silu_scalar(x[i]);
      });
}

void gelu_erf(const float* x, float* y, int64_t n) {
  elementwise(
      n, [&](int64_t b, int64_t e) { detail::avx512::gelu_erf(x + b, y + b, e - b); },
      [&](int64_t b, int64_t e) { detail::avx2::gelu_erf(x + b, y + b, e - b); },
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = gelu_erf_scalar(x[i]);
      });
}

void gelu_tanh(const float* x, float* y, int64_t n) {
  elementwise(
      n, [&](int64_t b, int64_t e) { detail::avx512::gelu_tanh(x + b, y + b, e - b); },
      [&](int64_t b, int64_t e) { detail::avx2::gelu_tanh(x + b, y + b, e - b); },
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = gelu_tanh_scalar(x[i]);
      });
}

void quick_gelu(const float* x, float* y, int64_t n) {
  elementwise(
      n, [&](int64_t b, int64_t e) { detail::avx512::quick_gelu(x + b, y + b, e - b); },
      [&](int64_t b, int64_t e) { detail::avx2::quick_gelu(x + b, y + b, e - b); },
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = quick_gelu_scalar(x[i]);
      });
}

// Residual adds run once per sub-layer on [tokens, width] activations: same chunking as the
// activations (memory bound, one pass over three arrays).
void add(const float* a, const float* b, float* y, int64_t n) {
  elementwise(
      n, [&](int64_t s, int64_t e) { detail::avx512::add(a + s, b + s, y + s, e - s); },
      [&](int64_t s, int64_t e) { detail::avx2::add(a + s, b + s, y + s, e - s); },
      [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) y[i] = a[i] + b[i];
      });
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  elementwise(
      n, [&](int64_t b, int64_t e) { detail::avx512::swiglu(gate + b, up + b, y + b, e - b); },
      [&](int64_t b, int64_t e) { detail::avx2::swiglu(gate + b, up + b, y + b, e - b); },
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = silu_scalar(gate[i]) * up[i];
      });
}

void geglu(const float* x, float* y, int64_t rows, int64_t hidden) {
  if (rows <= 0 || hidden <= 0) return;
  const Isa isa = active_isa();
  const int64_t grain = hidden >= kGrain ? 1 : kGrain / hidden;
  kernels::cpu::cpu_pool().parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* value = x + r * 2 * hidden;
      const float* gate = value + hidden;
      float* yr = y + r * hidden;
      switch (isa) {
        case Isa::kAvx512:
          detail::avx512::geglu_row(value, gate, yr, hidden);
          break;
        case Isa::kAvx2:
          detail::avx2::geglu_row(value, gate, yr, hidden);
          break;
        case Isa::kScalar:
          for (int64_t i = 0; i < hidden; ++i) yr[i] = value[i] * gelu_erf_scalar(gate[i]);
          break;
      }
    }
  });
}

}  // namespace tessera::kernels::cpu
