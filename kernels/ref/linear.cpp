// Reference linear layer: the plain triple loop every fast version is tested against. Accumulates
// in double, so its own rounding error is negligible next to the f32 kernels it checks.
#include <cassert>

#include "core/dtype.h"
#include "kernels/int8.h"
#include "kernels/ops.h"

namespace tessera::kernels::ref {

void linear(const float* x, int64_t m, const Weight& w, const float* bias, float* y) {
  assert(w.dtype == DType::kF32 || w.dtype == DType::kBF16 || w.dtype == DType::kI8);
  const int64_t n_out = w.rows;
  const int64_t k_dim = w.cols;
  const auto* w_f32 = static_cast<const float*>(w.data);
  const auto* w_bf16 = static_cast<const uint16_t*>(w.data);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < n_out; ++n) {
      double sum = bias ? static_cast<double>(bias[n]) : 0.0;
      for (int64_t k = 0; k < k_dim; ++k) {
        // int8: the dequantized weight (x exact: the reference for the weight error alone).
        const float wk = w.dtype == DType::kF32    ? w_f32[n * k_dim + k]
                         : w.dtype == DType::kBF16 ? bf16_to_f32(w_bf16[n * k_dim + k])
                                                   : int8_weight_at(w, n, k);
        // bf16 weights: x rounded to bf16 first (ops.h).
        const float xk =
            w.dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(x[i * k_dim + k])) : x[i * k_dim + k];
        sum += static_cast<double>(xk) * static_cast<double>(wk);
      }
      y[i * n_out + n] = static_cast<float>(sum);
    }
  }
}

void linear_multi(const float* x, int64_t m, const LinearPart* parts, int64_t n_parts) {
  for (int64_t p = 0; p < n_parts; ++p) linear(x, m, parts[p].w, parts[p].bias, parts[p].y);
}

}  // namespace tessera::kernels::ref
