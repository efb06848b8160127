// Reference LayerNorm and RMSNorm: textbook formulas with double accumulation (tests only).
#include <cmath>
#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels::ref {

// Biased variance (divide by dim), eps inside the square root, as torch.nn.LayerNorm.
void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(dim);
    double sq = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const double d = xr[i] - mean;
      sq += d * d;
    }
    const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      double v = (xr[i] - mean) * rstd;
      if (weight) v *= weight[i];
      if (bias) v += bias[i];
      yr[i] = static_cast<float>(v);
    }
  }
}

void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sq = 0.0;
    for (int64_t i = 0; i < dim; ++i) sq += static_cast<double>(xr[i]) * xr[i];
    const double rrms = 1.0 / std::sqrt(sq / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      double v = xr[i] * rrms;
      if (weight) v *= weight[i];
      yr[i] = static_cast<float>(v);
    }
  }
}

}  // namespace tessera::kernels::ref
