// CPU row softmax: rows over the default thread pool; each row is max, exp(x - max) with its sum,
// then a scale by 1/sum. SIMD body in softmax_kernels.inc, compiled per ISA by
// softmax_avx512.cpp / softmax_avx2.cpp (its exp is the shared one of activations_kernels.inc),
// scalar loop when SIMD is off.
//
// Stable for any finite input (the max is subtracted first); -inf entries become exactly 0; a row
// of only -inf becomes all zeros, as in the reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_internal.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu {

namespace detail {
namespace avx512 {
void softmax_row(const float* x, float* y, int64_t n);
}  // namespace avx512
namespace avx2 {
void softmax_row(const float* x, float* y, int64_t n);
}  // namespace avx2
}  // namespace detail

namespace {

void softmax_row_scalar(const float* x, float* y, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill(y, y + n, 0.0f);
    return;
  }
  const float inv = 1.0f / detail::scalar::exp_sub_sum(x, mx, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}
}  // namespace

void softmax(const float* x, float* y, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  const Isa isa = active_isa();
  const int64_t grain = std::max<int64_t>(1, (16 * 1024) / cols);
  kernels::cpu::cpu_pool().parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      switch (isa) {
        case Isa::kAvx512:
          detail::avx512::softmax_row(x + r * cols, y + r * cols, cols);
          break;
        case Isa::kAvx2:
          detail::avx2::softmax_row(x + r * cols, y + r * cols, cols);
          break;
        case Isa::kScalar:
          softmax_row_scalar(x + r * cols, y + r * cols, cols);
          break;
      }
    }
  });
}

}  // namespace tessera::kernels::cpu
