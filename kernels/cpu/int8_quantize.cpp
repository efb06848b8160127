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

void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int64_t group, int8_t* q,
                        float* scales) {
  const int64_t groups = cols / group;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* src = w + n * cols + g * group;
      const float scale = int8_abs_max(src, group) / static_cast<float>(kInt8MaxQ);
      int8_t* dst = q + n * cols + g * group;
      if (scale == 0.0f) {  // all zeros: q 0, and a positive scale (files refuse zero scales)
        scales[n * groups + g] = 1.0f;
        std::fill(dst, dst + group, int8_t{0});
        continue;
      }
      scales[n * groups + g] = scale;
      const float inv = 1.0f / scale;
      for (int64_t k = 0; k < group; ++k) {
        const long v = std::lround(src[k] * inv);
        dst[k] = static_cast<int8_t>(std::clamp<long>(v, -kInt8MaxQ, kInt8MaxQ));
      }
    }
  }
}

int64_t int8_find_out_of_range(const int8_t* q, int64_t n) {
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    int bad = 0;
    for (int64_t i = b; i < e; ++i) bad |= q[i] < -kInt8MaxQ;
    if (bad) {
      for (int64_t i = b; i < e; ++i) {
        if (q[i] < -kInt8MaxQ) return i;
      }
    }
  }
  return -1;
}

}  // namespace tessera::kernels
