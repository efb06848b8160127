#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace tessera {
namespace {

// Reference: round-to-nearest-even via double arithmetic on the exact representable neighbours.
TEST(DType, Bf16RoundTripExactValues) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 65504.0f, 1e-30f}) {
    const float back = bf16_to_f32(f32_to_bf16(v));
    EXPECT_NEAR(back, v, std::fabs(v) * (1.0f / 256.0f)) << v;
  }
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity()))));
}

TEST(DType, Bf16TiesToEven) {
  // 1 + 2^-8 lies exactly halfway between bf16 1.0 and 1 + 2^-7: ties to even -> 1.0.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 lies halfway between 1+2^-7 (odd mantissa) and 1+2^-6 (even): -> 1+2^-6.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

TEST(DType, F16AllValuesRoundTrip) {
  // Every finite f16 converts to f32 and back to itself.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = f16_to_f32(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), bits) << "h=" << h << " f=" << f;
  }
}

TEST(DType, F16RoundingOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float v = dist(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 30);
    const uint16_t h = f32_to_f16(v);
    const float r = f16_to_f32(h);
    if (std::fabs(v) >= 65520.0f) {
      EXPECT_TRUE(std::isinf(r));
      continue;
    }
    // r must be a nearest f16: no neighbour is strictly closer.
    const uint16_t up = static_cast<uint16_t>(h + 1), down = static_cast<uint16_t>(h - 1);
    const double err = std::fabs(static_cast<double>(r) - v);
    for (uint16_t n : {up, down}) {
      const float nf = f16_to_f32(n);
      if (std::isnan(nf) || std::isinf(nf) || (n & 0x7fff) == 0x7fff) continue;
      if ((n ^ h) & 0x8000) continue;  // crossed the sign bit
      EXPECT_LE(err, std::fabs(static_cast<double>(nf) - v) + 1e-12) << v;
    }
  }
}

TEST(DType, Names) {
  EXPECT_EQ(dtype_from_name("BF16"), DType::kBF16);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_FALSE(dtype_from_name("F8_E4M3").has_value());
  EXPECT_STREQ(dtype_name(DType::kI32), "I32");
}

}  // namespace
}  // namespace tessera
