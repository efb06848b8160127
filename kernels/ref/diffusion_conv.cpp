// Reference convolution (direct, double accumulation) and nearest x2 upsampling over NHWC
// activations (tests only). Follows Conv2dShape exactly: kernel 3 pads by 1 (pad_end_only: by 0
// before, 1 after), kernel 1 by 0, the optional nearest x2 upsampling is applied to x before the
// convolution.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/diffusion_ops.h"

namespace tessera::kernels::ref {

void conv2d(const float* x, const float* w, const float* bias, float* y, const Conv2dShape& s) {
  assert(s.kernel == 1 || s.kernel == 3);
  assert(s.stride == 1 || (s.stride == 2 && s.kernel == 3));
  assert(!s.upsample2x || (s.kernel == 3 && s.stride == 1));
  assert(!s.pad_end_only || (s.kernel == 3 && s.stride == 2));
  const int64_t k = s.kernel, pad = s.pad_begin(), up = s.upsample2x ? 1 : 0;
  const int64_t ih = s.conv_in_h(), iw = s.conv_in_w(), oh = s.out_h(), ow = s.out_w();
  std::vector<double> acc(static_cast<size_t>(s.out_c));
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        for (int64_t co = 0; co < s.out_c; ++co) acc[size_t(co)] = bias ? bias[co] : 0.0;
        for (int64_t ky = 0; ky < k; ++ky) {
          const int64_t iy = oy * s.stride + ky - pad;
          if (iy < 0 || iy >= ih) continue;
          for (int64_t kx = 0; kx < k; ++kx) {
            const int64_t ix = ox * s.stride + kx - pad;
            if (ix < 0 || ix >= iw) continue;
            const float* xp = x + ((n * s.in_h + (iy >> up)) * s.in_w + (ix >> up)) * s.in_c;
            for (int64_t co = 0; co < s.out_c; ++co) {
              const float* wc = w + co * s.in_c * k * k + ky * k + kx;
              double sum = 0.0;
              for (int64_t ci = 0; ci < s.in_c; ++ci) {
                sum += static_cast<double>(wc[ci * k * k]) * xp[ci];
              }
              acc[size_t(co)] += sum;
            }
          }
        }
        float* yp = y + ((n * oh + oy) * ow + ox) * s.out_c;
        for (int64_t co = 0; co < s.out_c; ++co) yp[co] = static_cast<float>(acc[size_t(co)]);
      }
    }
  }
}

void upsample_nearest2x(const float* x, float* y, const ImageShape& s) {
  const int64_t c = s.channels, w2 = 2 * s.width;
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t i = 0; i < 2 * s.height; ++i) {
      for (int64_t j = 0; j < w2; ++j) {
        const float* src = x + ((n * s.height + i / 2) * s.width + j / 2) * c;
        float* dst = y + ((n * 2 * s.height + i) * w2 + j) * c;
        for (int64_t ch = 0; ch < c; ++ch) dst[ch] = src[ch];
      }
    }
  }
}

void pointwise(const float* x, float* y, int64_t n, const Pointwise& f) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    double r = 0.0;
    switch (f.kind) {
      case Pointwise::Kind::kRelu:
        r = std::max(v, 0.0);
        break;
      case Pointwise::Kind::kScaledTanh:
        r = f.a * std::tanh(v / f.a);
        break;
      case Pointwise::Kind::kAffine:
        r = static_cast<double>(f.a) * v + f.b;
        break;
    }
    y[i] = static_cast<float>(r);
  }
}

}  // namespace tessera::kernels::ref
