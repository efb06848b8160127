// Reference GroupNorm(+SiLU) over NHWC activations: two passes in double (mean, then the sum of
// squared deviations), textbook formula (tests only).
#include <cassert>
#include <cmath>
#include <cstdint>

#include "kernels/diffusion_ops.h"

namespace tessera::kernels::ref {

void group_norm(const float* x, const float* gamma, const float* beta, float* y,
                const ImageShape& s, int64_t groups, float eps, bool silu) {
  assert(groups > 0 && s.channels % groups == 0);
  const int64_t hw = s.height * s.width;
  const int64_t c_all = s.channels;
  const int64_t cg = c_all / groups;
  const double count = static_cast<double>(hw * cg);
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* xn = x + n * hw * c_all;
    float* yn = y + n * hw * c_all;
    for (int64_t g = 0; g < groups; ++g) {
      double sum = 0.0;
      for (int64_t p = 0; p < hw; ++p) {
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) sum += xn[p * c_all + c];
      }
      const double mean = sum / count;
      double sq = 0.0;
      for (int64_t p = 0; p < hw; ++p) {
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          const double d = xn[p * c_all + c] - mean;
          sq += d * d;
        }
      }
      const double rstd = 1.0 / std::sqrt(sq / count + static_cast<double>(eps));
      for (int64_t p = 0; p < hw; ++p) {
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          double v = (xn[p * c_all + c] - mean) * rstd;
          if (gamma) v *= gamma[c];
          if (beta) v += beta[c];
          if (silu) v = v / (1.0 + std::exp(-v));
          yn[p * c_all + c] = static_cast<float>(v);
        }
      }
    }
  }
}

}  // namespace tessera::kernels::ref
