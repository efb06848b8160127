// CPU rotary embedding, interleaved pairs (GPT-J / LLaMA-reference style): pair i = (x[2i],
// x[2i+1]) of every head rotates by pos * theta^(-2i/head_dim). An odd head_dim leaves its last
// element as is.
//
// Angles are computed in double (pos * inv_freq loses ~1e-4 rad in f32 at positions in the
// thousands) once per (token, pair) and shared by all heads of the token, so the trigonometry is
// amortised over `heads`; the rotation itself is a portable loop the compiler vectorises. Tokens
// are spread over the default thread pool. There is no ISA-specific body: the op is memory bound.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {
// Pairs handled per pass, bounding the on-stack angle tables for any head_dim.
constexpr int64_t kPairChunk = 128;
}  // namespace

void rope_interleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                      int64_t token_stride, const int32_t* positions, float theta) {
  const int64_t pairs = head_dim / 2;
  if (tokens <= 0 || heads <= 0 || pairs <= 0) return;
  const int64_t grain = std::max<int64_t>(1, 4096 / (heads * head_dim));
  kernels::cpu::cpu_pool().parallel_for(tokens, grain, [&](int64_t begin, int64_t end) {
    double inv_freq[kPairChunk];
    float cos_t[kPairChunk], sin_t[kPairChunk];
    for (int64_t p0 = 0; p0 < pairs; p0 += kPairChunk) {
      const int64_t np = std::min(kPairChunk, pairs - p0);
      for (int64_t i = 0; i < np; ++i) {
        inv_freq[i] = std::pow(static_cast<double>(theta),
                               -2.0 * static_cast<double>(p0 + i) / static_cast<double>(head_dim));
      }
      for (int64_t t = begin; t < end; ++t) {
        const double pos = positions[t];
        for (int64_t i = 0; i < np; ++i) {
          const double angle = pos * inv_freq[i];
          cos_t[i] = static_cast<float>(std::cos(angle));
          sin_t[i] = static_cast<float>(std::sin(angle));
        }
        for (int64_t h = 0; h < heads; ++h) {
          float* xp = x + t * token_stride + h * head_dim + 2 * p0;
          for (int64_t i = 0; i < np; ++i) {
            const float a = xp[2 * i], b = xp[2 * i + 1];
            xp[2 * i] = a * cos_t[i] - b * sin_t[i];
            xp[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
          }
        }
      }
    }
  });
}

}  // namespace tessera::kernels::cpu
