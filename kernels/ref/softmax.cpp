// Reference row softmax (tests only): max-subtracted, double accumulation.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/ops.h"

namespace tessera::kernels::ref {

// A row whose entries are all -inf (fully masked) has no defined softmax; it becomes all zeros
// (every backend agrees), so a masked row contributes nothing instead of spreading NaN.
void softmax(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < cols; ++c) mx = std::fmax(mx, xr[c]);
    if (mx == -std::numeric_limits<double>::infinity()) {
      for (int64_t c = 0; c < cols; ++c) yr[c] = 0.0f;
      continue;
    }
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
    for (int64_t c = 0; c < cols; ++c) yr[c] = static_cast<float>(std::exp(xr[c] - mx) / sum);
  }
}

}  // namespace tessera::kernels::ref
