// The diffusion ops' bf16 compute path (Precision::kBf16, kernels/diffusion_ops.h) against the
// double references on random inputs: 3x3 convolutions (stride 1 and 2, fused upsample, odd
// in_c, several pixel blocks' worth), 1x1 convolutions, linear layers (f32 and bf16 weights) and
// attention with allow_bf16. Tolerance: max |y - y_ref| <= 1e-2 x max |y_ref| for convolutions
// and linear layers (bf16 keeps 8 significant bits, a relative 2^-9 per operand; random-sign sums
// average it down: measured 1.4e-3 to 3.1e-3), 2e-2 for attention (q, k, v and the probabilities
// rounded: measured 4.7e-3 to 7.1e-3). Skipped on CPUs without AVX-512 BF16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/diffusion_bf16.h"
#include "kernels/diffusion_ops.h"
#include "kernels/ops.h"

namespace tessera::kernels {
namespace {

constexpr double kTol = 1e-2;
constexpr double kAttentionTol = 2e-2;

class DiffusionBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::bf16_compute_available()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
    set_default_threads(2);
  }
  void TearDown() override { set_default_threads(0); }
};

std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// max |got - want| <= tol * max |want|, and the result is not the exact f32 one (the bf16 path
// ran).
::testing::AssertionResult close_bf16(const std::vector<float>& got, const std::vector<float>& want,
                                      double tol = kTol) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  if (err > tol * scale) {
    return ::testing::AssertionFailure() << "max error " << err << " > " << tol << " x " << scale;
  }
  if (err < 1e-6 * scale) {
    return ::testing::AssertionFailure() << "max error " << err << ": no bf16 rounding seen";
  }
  return ::testing::AssertionSuccess() << "max error " << err / scale << " of max |y|";
}

void check_conv(const Conv2dShape& s, std::mt19937& rng) {
  const int64_t k = s.kernel;
  // SD-like ranges: post-SiLU activations, PyTorch-init weights.
  const float bound = 1.0f / std::sqrt(static_cast<float>(s.in_c * k * k));
  const auto x = random_vec(static_cast<size_t>(s.batch * s.in_h * s.in_w * s.in_c), rng, -0.3f, 3);
  const auto w = random_vec(static_cast<size_t>(s.out_c * s.in_c * k * k), rng, -bound, bound);
  const auto bias = random_vec(static_cast<size_t>(s.out_c), rng, -0.5f, 0.5f);
  const size_t ny = static_cast<size_t>(s.batch * s.out_h() * s.out_w() * s.out_c);
  std::vector<float> want(ny), got(ny, -7.0f);
  ref::conv2d(x.data(), w.data(), bias.data(), want.data(), s);
  const cpu::gemm_bf16::PackedB packed = cpu::conv2d_pack_weights_bf16(w.data(), s);
  cpu::conv2d_bf16(x.data(), packed, bias.data(), got.data(), s);
  EXPECT_TRUE(close_bf16(got, want)) << "conv " << s.in_c << "->" << s.out_c << " k" << k << " s"
                                     << s.stride << (s.upsample2x ? " up" : "");
}

TEST_F(DiffusionBf16Test, Conv2dMatchesDoubleReference) {
  std::mt19937 rng(21);
  auto shape = [](int64_t b, int64_t h, int64_t w, int64_t ci, int64_t co, int64_t k,
                  int64_t stride, bool up) {
    Conv2dShape s;
    s.batch = b;
    s.in_h = h;
    s.in_w = w;
    s.in_c = ci;
    s.out_c = co;
    s.kernel = k;
    s.stride = stride;
    s.upsample2x = up;
    return s;
  };
  check_conv(shape(2, 9, 7, 64, 40, 3, 1, false), rng);       // batch, odd sizes, n tail
  check_conv(shape(1, 10, 10, 33, 17, 3, 2, false), rng);     // stride 2, odd in_c (odd k)
  Conv2dShape end_pad = shape(1, 9, 8, 32, 24, 3, 2, false);  // the encoder's Downsample
  end_pad.pad_end_only = true;
  check_conv(end_pad, rng);
  check_conv(shape(1, 6, 5, 32, 48, 3, 1, true), rng);   // fused nearest x2 upsample
  check_conv(shape(1, 8, 8, 4, 64, 3, 1, false), rng);   // the latent input layer
  check_conv(shape(2, 6, 6, 96, 70, 1, 1, false), rng);  // 1x1
  // k = 9 * 320 = 2880 (SD's first level): several k blocks of the packed GEMM.
  check_conv(shape(1, 6, 6, 320, 64, 3, 1, false), rng);
}

TEST_F(DiffusionBf16Test, LinearMatchesDoubleReference) {
  std::mt19937 rng(22);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t m = 75, in = 190, out = 130;
    const auto x = random_vec(static_cast<size_t>(m * in), rng, -2, 2);
    auto w = random_vec(static_cast<size_t>(out * in), rng, -0.1f, 0.1f);
    const auto bias = random_vec(static_cast<size_t>(out), rng, -1, 1);
    std::vector<uint16_t> w16(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w16[i] = f32_to_bf16(w[i]);
      if (dt == DType::kBF16) w[i] = bf16_to_f32(w16[i]);  // the reference sees the stored values
    }
    std::vector<float> want(static_cast<size_t>(m * out)), got(want.size());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t o = 0; o < out; ++o) {
        double acc = bias[o];
        for (int64_t c = 0; c < in; ++c) acc += static_cast<double>(x[i * in + c]) * w[o * in + c];
        want[i * out + o] = static_cast<float>(acc);
      }
    }
    const Weight wt{dt == DType::kBF16 ? static_cast<const void*>(w16.data()) : w.data(), dt, out,
                    in};
    const cpu::gemm_bf16::PackedB packed = cpu::linear_pack_bf16(wt);
    cpu::linear_bf16(x.data(), m, packed, bias.data(), got.data());
    EXPECT_TRUE(close_bf16(got, want)) << (dt == DType::kBF16 ? "bf16 weights" : "f32 weights");
  }
}

TEST_F(DiffusionBf16Test, AttentionAllowBf16MatchesReference) {
  std::mt19937 rng(23);
  // UNet self-attention (8 heads of 40) and cross-attention over 77 tokens, the VAE's one head.
  struct Case {
    int64_t batch, heads, q_len, kv_len, head_dim;
  };
  for (const Case& c : {Case{2, 8, 96, 96, 40}, Case{2, 8, 100, 77, 40}, Case{1, 1, 64, 64, 128}}) {
    AttentionShape s = contiguous_attention(c.batch, c.heads, c.q_len, c.kv_len, c.head_dim, false,
                                            1.0f / std::sqrt(static_cast<float>(c.head_dim)));
    const int64_t width = c.heads * c.head_dim;
    const auto q = random_vec(static_cast<size_t>(c.batch * c.q_len * width), rng, -2, 2);
    const auto k = random_vec(static_cast<size_t>(c.batch * c.kv_len * width), rng, -2, 2);
    const auto v = random_vec(static_cast<size_t>(c.batch * c.kv_len * width), rng, -1, 1);
    std::vector<float> want(q.size()), got(q.size());
    ref::attention(q.data(), k.data(), v.data(), want.data(), s);
    s.allow_bf16 = true;
    cpu::diffusion_attention(q.data(), k.data(), v.data(), got.data(), s, AttentionAlgo::kAuto,
                             nullptr);
    EXPECT_TRUE(close_bf16(got, want, kAttentionTol))
        << c.q_len << "x" << c.kv_len << " d" << c.head_dim;
  }
}

}  // namespace
}  // namespace tessera::kernels
