#include <algorithm>
#include <cmath>

#include "kernels/int8.h"

namespace tessera::kernels {

int64_t int8_group_for(int64_t cols) {
  for (int64_t g : {128, 64, 32}) {
    if (cols % g == 0) return g;
  }
  return cols;
}

void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int64_t group, uint8_t* q,
                        float* scales) {
  const int64_t groups = cols / group;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* src = w + n * cols + g * group;
      float amax = 0.0f;
      for (int64_t k = 0; k < group; ++k) amax = std::max(amax, std::fabs(src[k]));
      const float scale = amax / 127.0f;
      scales[n * groups + g] = scale;
      uint8_t* dst = q + n * cols + g * group;
      if (scale == 0.0f) {
        std::fill(dst, dst + group, uint8_t{128});
        continue;
      }
      const float inv = 1.0f / scale;
      for (int64_t k = 0; k < group; ++k) {
        const long v = std::lround(src[k] * inv);
        dst[k] = static_cast<uint8_t>(std::clamp<long>(v, -127, 127) + 128);
      }
    }
  }
}

}  // namespace tessera::kernels
