// Reference rotary position embedding, interleaved (GPT-J / LLaMA-reference) pairing (tests only).
#include <cmath>
#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels::ref {

// Pair i = (x[2i], x[2i+1]) of every head rotates by angle pos * theta^(-2i/head_dim), computed in
// double. An odd head_dim leaves its last element unchanged (it has no partner).
void rope_interleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                      int64_t token_stride, const int32_t* positions, float theta) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      float* xh = x + t * token_stride + h * head_dim;
      for (int64_t i = 0; i < head_dim / 2; ++i) {
        const double inv_freq =
            std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
        const double angle = static_cast<double>(positions[t]) * inv_freq;
        const double c = std::cos(angle), s = std::sin(angle);
        const double a = xh[2 * i], b = xh[2 * i + 1];
        xh[2 * i] = static_cast<float>(a * c - b * s);
        xh[2 * i + 1] = static_cast<float>(a * s + b * c);
      }
    }
  }
}

}  // namespace tessera::kernels::ref
