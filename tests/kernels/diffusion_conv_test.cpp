// cpu::conv2d (1x1 GEMM, 3x3 im2col + GEMM, 3x3 Winograd F(4x4,3x3); stride 2; nearest x2
// upsampling fused into the input indexing) and cpu::upsample_nearest2x against the direct
// double-precision reference on every code path with 1 and 2 threads: sizes of 1 pixel, primes,
// images that are not multiples of the 4x4 Winograd tile, channel counts that are not multiples
// of the 16-lane transforms, batches. Plus Winograd's error on SD-like values, measured and
// bounded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/diffusion_ops.h"
#include "tests/support/diffusion_cases.h"
#include "tests/support/kernel_test_util.h"

namespace tessera {
namespace {

namespace ref = kernels::ref;
namespace cpu = kernels::cpu;
using kernels::Conv2dShape;
using kernels::ConvAlgo;
using kernels::ImageShape;

// Tolerances relative to the output's scale max|y| (elementwise relative error is meaningless
// where a sum of mixed-sign terms cancels to ~0). GEMM: f32 sums over 9 * in_c <= 2880 products,
// measured <= 3e-7 of scale; stated 5e-6. Winograd F(4x4,3x3): the transforms' constants (4, 5,
// 8 and 1/24) amplify f32 rounding; measured 7.7e-6 of scale on a 320->320 layer with SD-like
// values (WinogradErrorOnSdLikeValues prints it), <= 2e-6 on the small cases; stated 2e-5. A wrong
// tap, tile edge or padding is off by O(0.1).
constexpr double kGemmTol = 5e-6, kWinogradTol = 2e-5;

// Success when max |actual - expected| <= tol * max(1e-3, max |expected|).
::testing::AssertionResult close_to_scale(const std::vector<float>& actual,
                                          const std::vector<float>& expected, double tol) {
  const test::ErrorStats e = test::compare(actual.data(), expected.data(), actual.size());
  const double scale = std::max(1e-3, e.max_abs_expected);
  if (e.nonfinite == 0 && e.max_abs <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "max |error| " << e.max_abs << " at " << e.worst_index << " (" << e.max_abs / scale
         << " of scale " << scale << ", tolerance " << tol << "), non-finite " << e.nonfinite;
}

TEST(DiffusionConv, EveryAlgorithmMatchesReference) {
  uint64_t seed = 200;
  for (const test::ConvCase& c : test::kConvCases) {
    const Conv2dShape s = test::conv_shape(c);
    const int64_t k2 = c.kernel * c.kernel;
    const auto x = test::random_floats(size_t(c.batch * c.in_h * c.in_w * c.in_c), seed++, -2, 2);
    const float bound = 1.0f / std::sqrt(float(c.in_c * k2));  // PyTorch's default init range
    const auto w = test::random_floats(size_t(c.out_c * c.in_c * k2), seed++, -bound, bound);
    const auto bias = test::random_floats(size_t(c.out_c), seed++, -bound, bound);
    const size_t out_n = size_t(c.batch * s.out_h() * s.out_w() * c.out_c);
    for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
      std::vector<float> expected(out_n), actual(out_n);
      ref::conv2d(x.data(), w.data(), b, expected.data(), s);
      for (ConvAlgo algo : {ConvAlgo::kGemm, ConvAlgo::kWinograd}) {
        if (algo == ConvAlgo::kWinograd && !cpu::winograd_applies(s)) continue;
        std::vector<float> packed(size_t(cpu::conv2d_packed_floats(s, algo)));
        cpu::conv2d_pack_weights(w.data(), s, algo, packed.data());
        test::for_each_cpu_mode([&] {
          SCOPED_TRACE(test::describe(s, algo) + (b ? " bias" : ""));
          std::fill(actual.begin(), actual.end(), NAN);
          cpu::conv2d(x.data(), packed.data(), b, actual.data(), s, algo);
          EXPECT_TRUE(close_to_scale(actual, expected,
                                     algo == ConvAlgo::kWinograd ? kWinogradTol : kGemmTol));
        });
      }
    }
  }
}

TEST(DiffusionConv, FusedUpsampleEqualsSeparateUpsample) {
  // Fusion off switch: upsampling into memory and then convolving reads exactly the same values
  // in the same order, so the results are bitwise equal.
  const ImageShape in{2, 5, 6, 24};
  const auto x = test::random_floats(size_t(in.elements()), 300, -2, 2);
  std::vector<float> up(size_t(in.elements() * 4)), up_ref(up.size());
  ref::upsample_nearest2x(x.data(), up_ref.data(), in);
  Conv2dShape fused;
  fused.batch = 2;
  fused.in_h = 5;
  fused.in_w = 6;
  fused.in_c = 24;
  fused.out_c = 19;
  fused.upsample2x = true;
  Conv2dShape separate = fused;
  separate.upsample2x = false;
  separate.in_h = 10;
  separate.in_w = 12;
  const auto w = test::random_floats(size_t(19 * 24 * 9), 301, -0.1f, 0.1f);
  const size_t out_n = size_t(2 * 10 * 12 * 19);
  for (ConvAlgo algo : {ConvAlgo::kGemm, ConvAlgo::kWinograd}) {
    std::vector<float> packed(size_t(cpu::conv2d_packed_floats(fused, algo)));
    cpu::conv2d_pack_weights(w.data(), fused, algo, packed.data());
    test::for_each_cpu_mode([&] {
      cpu::upsample_nearest2x(x.data(), up.data(), in);
      EXPECT_TRUE(test::all_equal(up.data(), up_ref.data(), up.size()));
      std::vector<float> a(out_n), b(out_n);
      cpu::conv2d(x.data(), packed.data(), nullptr, a.data(), fused, algo);
      cpu::conv2d(up.data(), packed.data(), nullptr, b.data(), separate, algo);
      EXPECT_TRUE(test::all_equal(a.data(), b.data(), out_n));
    });
  }
}

TEST(DiffusionConv, WinogradErrorOnSdLikeValues) {
  // A mid-UNet 3x3 conv (320 -> 320) on a 12x12 crop: inputs like a GroupNorm+SiLU output
  // (mostly in [-0.3, 3]), weights in PyTorch's init range. Reports both paths' error and checks
  // the stated tolerances; the default code path only (the others are covered above).
  Conv2dShape s;
  s.in_h = s.in_w = 12;
  s.in_c = s.out_c = 320;
  const auto x = test::random_floats(size_t(12 * 12 * 320), 400, -0.3f, 3.0f);
  const float bound = 1.0f / std::sqrt(320.0f * 9.0f);
  const auto w = test::random_floats(size_t(320 * 320 * 9), 401, -bound, bound);
  const auto bias = test::random_floats(320, 402, -bound, bound);
  std::vector<float> expected(size_t(12 * 12 * 320));
  ref::conv2d(x.data(), w.data(), bias.data(), expected.data(), s);
  for (ConvAlgo algo : {ConvAlgo::kGemm, ConvAlgo::kWinograd}) {
    std::vector<float> packed(size_t(cpu::conv2d_packed_floats(s, algo))), y(expected.size());
    cpu::conv2d_pack_weights(w.data(), s, algo, packed.data());
    cpu::conv2d(x.data(), packed.data(), bias.data(), y.data(), s, algo);
    const test::ErrorStats e = test::compare(y.data(), expected.data(), y.size());
    std::printf("[ conv 320->320 12x12 %s: max |error| %.3g = %.3g of max |y| %.3g ]\n",
                algo == ConvAlgo::kWinograd ? "winograd" : "gemm", e.max_abs,
                e.max_abs / e.max_abs_expected, e.max_abs_expected);
    EXPECT_TRUE(close_to_scale(y, expected, algo == ConvAlgo::kWinograd ? kWinogradTol : kGemmTol));
  }
}

// The reference's end-only padding (the VAE encoder's Downsample) worked out by hand: a 4x4 image
// of ones and a 3x3 kernel of ones count the taps that land inside the image. Output (0, 0) reads
// rows and columns 0..2 (9 taps); (0, 1) columns 2..4, 4 being padding (6); (1, 1) 4 taps. With
// the symmetric padding (0, 0) would read row and column -1 (4 taps).
TEST(DiffusionConv, ReferenceEndOnlyPaddingByHand) {
  Conv2dShape s;
  s.in_h = s.in_w = 4;
  s.in_c = s.out_c = 1;
  s.stride = 2;
  s.pad_end_only = true;
  ASSERT_EQ(s.out_h(), 2);
  ASSERT_EQ(s.out_w(), 2);
  const std::vector<float> x(16, 1.0f), w(9, 1.0f);
  std::vector<float> y(4);
  ref::conv2d(x.data(), w.data(), nullptr, y.data(), s);
  EXPECT_EQ(y, (std::vector<float>{9, 6, 6, 4}));
  s.pad_end_only = false;
  ref::conv2d(x.data(), w.data(), nullptr, y.data(), s);
  EXPECT_EQ(y, (std::vector<float>{4, 6, 6, 9}));
  // Odd sides: torch gives floor((5 + 1 - 3) / 2) + 1 = 2 outputs, the symmetric padding 3.
  s.in_h = s.in_w = 5;
  EXPECT_EQ(s.out_h(), 3);
  s.pad_end_only = true;
  EXPECT_EQ(s.out_h(), 2);
}

TEST(DiffusionConv, ChooserRespectsApplicability) {
  Conv2dShape s;
  s.in_h = s.in_w = 64;
  s.in_c = s.out_c = 320;
  EXPECT_EQ(cpu::choose_conv_algo(s), ConvAlgo::kWinograd);
  s.stride = 2;
  EXPECT_EQ(cpu::choose_conv_algo(s), ConvAlgo::kGemm);
  s.stride = 1;
  s.kernel = 1;
  EXPECT_EQ(cpu::choose_conv_algo(s), ConvAlgo::kGemm);
  s.kernel = 3;
  s.in_c = 4;  // conv_in of the latent
  EXPECT_EQ(cpu::choose_conv_algo(s), ConvAlgo::kGemm);
}

}  // namespace
}  // namespace tessera
