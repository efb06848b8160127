#include "kernels/cpu/linear_int8.h"

#include <algorithm>
#include <limits>
#include <cmath>

#include "core/cpu_features.h"
#include "kernels/cpu/isa.h"
#include "kernels/int8.h"

namespace tessera::kernels::cpu::linear_detail {

void prepare_int8_rows_into(const float* x, int64_t rows, const Weight& w, int16_t* q,
                            float* scale) {
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* src = x + i * cols + g * group;
      const float s = int8_abs_max(src, group) / 32767.0f;
      const float inv = s >= std::numeric_limits<float>::min() ? 1.0f / s : 0.0f;
      int16_t* dst = q + i * cols + g * group;
      for (int64_t k = 0; k < group; ++k) {
        // |src * inv| <= 32767 up to rounding; the clamp guards the last ulp.
        const float v = std::nearbyint(src[k] * inv);
        dst[k] = static_cast<int16_t>(std::clamp(v, -32767.0f, 32767.0f));
      }
      scale[i * groups + g] = s;
    }
  }
}

void dot_prepared_i8_scalar(const Int8Rows& p, const Weight& w, const float* bias, float* y,
                            int64_t ldy, int64_t n_begin, int64_t n_end) {
  const auto* wq = static_cast<const int8_t*>(w.data);
  const int64_t cols = w.cols, group = w.group, groups = cols / group;
  for (int64_t n = n_begin; n < n_end; ++n) {
    const int8_t* w_row = wq + n * cols;
    const float* sw = w.scales + n * groups;
    for (int64_t i = 0; i < p.rows; ++i) {
      const int16_t* xq = p.q + i * cols;
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t d = 0;
        for (int64_t k = g * group; k < (g + 1) * group; ++k) {
          d += static_cast<int32_t>(w_row[k]) * static_cast<int32_t>(xq[k]);
        }
        acc += sw[g] * p.scale[i * groups + g] * static_cast<float>(d);
      }
      y[i * ldy + n] = acc + (bias ? bias[n] : 0.0f);
    }
  }
}

Int8Kernel int8_kernel_for(int isa_level, const Weight& w) {
  const auto isa = static_cast<Isa>(isa_level);
  if (w.group % 32 != 0 || w.group > 512) return {prepare_int8_rows_into, dot_prepared_i8_scalar};
  // Where AVX-512 runs as two 256-bit halves (Zen 4) the AVX2 kernel is the faster one at the
  // decode's 1-2 rows of x (bench kernels --quick, --isa avx2 against avx512 alternated three
  // times: 1.0-1.6x, e.g. mlp_up 1536->6144 at m = 2 343 against 478 us), though slower at 8 rows
  // (4 candidates: mlp_down 1040 against 862 us); one kernel serves every m (the GEMV is
  // batch-invariant per kernel), and one candidate is the common case.
  if (isa == Isa::kAvx512 && cpu_features().avx512vnni && !cpu_features().avx512_half_width) {
    return {prepare_int8_rows_into_avx512, dot_prepared_i8_vnni};
  }
  if (isa >= Isa::kAvx2) return {prepare_int8_rows_into_avx2, dot_prepared_i8_avx2};
  return {prepare_int8_rows_into, dot_prepared_i8_scalar};
}

}  // namespace tessera::kernels::cpu::linear_detail
