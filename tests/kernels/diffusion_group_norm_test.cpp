// cpu::group_norm (NHWC GroupNorm, fused and unfused SiLU) against the double-precision reference
// on every code path (AVX-512, AVX2, scalar) with 1 and 2 threads: channel counts that are not
// multiples of the vector width, groups of 1..40 channels, images from 1 pixel to several
// statistics chunks, a common offset that would cancel a naive E[x^2] - E[x]^2, in place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/diffusion_ops.h"
#include "tests/support/diffusion_cases.h"
#include "tests/support/kernel_test_util.h"

namespace tessera {
namespace {

namespace ref = kernels::ref;
namespace cpu = kernels::cpu;
using kernels::Fusion;
using kernels::ImageShape;

// Outputs are O(|gamma| * 4) (values normalised to unit variance, gamma in [-2, 2], beta in
// [-1, 1]). The statistics are f32 over 64-pixel blocks, double beyond, and the normalisation is
// one f32 FMA: measured error ~5e-7 of the output scale. 2e-5 absolute + 2e-5 relative is the
// stated tolerance; a wrong group, channel or chunk merge is off by O(0.1).
constexpr double kAtol = 2e-5, kRtol = 2e-5;

// Inputs in GroupNormCase's default range [2, 4]: offset 3 +- 1, a variance 1/9 of the squared
// mean.
const test::GroupNormCase kCases[] = {
    {1, 1, 1, 4, 2},     {2, 3, 5, 6, 3},    {1, 7, 11, 40, 8},     {1, 17, 13, 96, 32},
    {2, 31, 37, 64, 32}, {1, 1, 1, 320, 32}, {1, 23, 19, 1280, 32}, {2, 9, 8, 33, 1},
};

TEST(DiffusionGroupNorm, MatchesReferenceFusedAndUnfused) {
  uint64_t seed = 1;
  for (const test::GroupNormCase& c : kCases) {
    const ImageShape s = c.image();
    const size_t n = size_t(s.elements());
    const auto x = test::random_floats(n, seed++, c.lo, c.hi);
    const auto gamma = test::random_floats(size_t(c.channels), seed++, -2.0f, 2.0f);
    const auto beta = test::random_floats(size_t(c.channels), seed++, -1.0f, 1.0f);
    for (int affine = 0; affine < 2; ++affine) {
      const float* g = affine ? gamma.data() : nullptr;
      const float* b = affine ? beta.data() : nullptr;
      for (bool silu : {false, true}) {
        std::vector<float> expected(n), actual(n);
        ref::group_norm(x.data(), g, b, expected.data(), s, c.groups, 1e-5f, silu);
        for (Fusion fusion : {Fusion::kOn, Fusion::kOff}) {
          test::for_each_cpu_mode([&] {
            SCOPED_TRACE(test::describe(c) + (affine ? " affine" : "") + (silu ? " silu" : "") +
                         (fusion == Fusion::kOn ? " fused" : " unfused"));
            std::fill(actual.begin(), actual.end(), NAN);
            cpu::group_norm(x.data(), g, b, actual.data(), s, c.groups, 1e-5f, silu, fusion);
            EXPECT_TRUE(test::all_close(actual.data(), expected.data(), n, kAtol, kRtol));
          });
        }
      }
    }
  }
}

TEST(DiffusionGroupNorm, InPlaceAndEpsilon) {
  // Constant channels: variance 0, so the output is beta + (x - mean) * gamma / sqrt(eps) = beta
  // exactly, for any eps; a second image with real spread checks in-place operation.
  const ImageShape s{2, 6, 7, 24};
  const size_t n = size_t(s.elements());
  std::vector<float> x(n);
  const auto spread = test::random_floats(n / 2, 5, -3.0f, 3.0f);
  for (size_t i = 0; i < n / 2; ++i) x[i] = 1.5f;
  for (size_t i = 0; i < n / 2; ++i) x[n / 2 + i] = spread[i];
  const auto gamma = test::random_floats(24, 6, 0.5f, 2.0f);
  const auto beta = test::random_floats(24, 7, -1.0f, 1.0f);
  std::vector<float> expected(n);
  ref::group_norm(x.data(), gamma.data(), beta.data(), expected.data(), s, 4, 1e-6f, true);
  for (size_t i = 0; i < 24; ++i) {
    EXPECT_NEAR(expected[i], beta[i] / (1.0 + std::exp(-beta[i])), 1e-6);
  }
  test::for_each_cpu_mode([&] {
    for (Fusion fusion : {Fusion::kOn, Fusion::kOff}) {
      std::vector<float> y = x;
      cpu::group_norm(y.data(), gamma.data(), beta.data(), y.data(), s, 4, 1e-6f, true, fusion);
      EXPECT_TRUE(test::all_close(y.data(), expected.data(), n, kAtol, kRtol));
    }
  });
}

}  // namespace
}  // namespace tessera
