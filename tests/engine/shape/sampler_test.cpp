#include "engine/shape/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace tessera::shape {
namespace {

TEST(SamplerTest, SplitMix64KnownValues) {
  // Reference outputs of splitmix64 seeded with 0 (Vigna's splitmix64.c).
  uint64_t state = 0;
  EXPECT_EQ(splitmix64(&state), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(&state), 0x6E789E6AA1B965F4ull);
}

TEST(SamplerTest, XoshiroIsDeterministicAndUniformInRange) {
  Xoshiro256 a(42), b(42), c(43);
  bool differs = false;
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    differs = differs || x != c.next();
  }
  EXPECT_TRUE(differs);
  for (int i = 0; i < 10000; ++i) {
    const double u = a.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(SamplerTest, GreedyIsArgmaxLowestIndexOnTies) {
  Sampler s(SamplingSettings{}, 8);
  const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -std::numeric_limits<float>::infinity()};
  EXPECT_EQ(s.next(logits, 6).value(), 1);
  EXPECT_EQ(argmax(logits, 6), 1);
  const float one[1] = {-3.0f};
  EXPECT_EQ(s.next(one, 1).value(), 0);
}

TEST(SamplerTest, NonFiniteLogitsAreErrors) {
  Sampler s(SamplingSettings{}, 4);
  const float nan_logits[3] = {0.0f, std::nanf(""), 1.0f};
  auto r = s.next(nan_logits, 3);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("logit 1 is NaN"), std::string::npos) << r.status().message();
  const float inf = std::numeric_limits<float>::infinity();
  const float all_neg[2] = {-inf, -inf};
  EXPECT_FALSE(s.next(all_neg, 2).ok());
  const float pos[2] = {0.0f, inf};
  EXPECT_FALSE(s.next(pos, 2).ok());
  EXPECT_FALSE(s.next(pos, 5).ok());  // more than the vocab
}

// Frequencies of `draws` samples of the distribution (0.5, 0.3, 0.2) under the given filters.
std::vector<double> frequencies(SamplingSettings o, int draws = 20000) {
  o.sample = true;
  Sampler s(o, 3);
  const float logits[3] = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  std::vector<double> f(3, 0.0);
  for (int i = 0; i < draws; ++i) f[static_cast<size_t>(s.next(logits, 3).value())] += 1.0 / draws;
  return f;
}

TEST(SamplerTest, SamplesTheSoftmax) {
  SamplingSettings o;
  o.seed = 7;
  auto f = frequencies(o);
  EXPECT_NEAR(f[0], 0.5, 0.015);
  EXPECT_NEAR(f[1], 0.3, 0.015);
  EXPECT_NEAR(f[2], 0.2, 0.015);
  // Temperature 0.5 squares the probabilities: (25, 9, 4) / 38.
  o.temperature = 0.5f;
  f = frequencies(o);
  EXPECT_NEAR(f[0], 25.0 / 38, 0.015);
  EXPECT_NEAR(f[2], 4.0 / 38, 0.015);
}

TEST(SamplerTest, TopKAndTopPFilters) {
  SamplingSettings o;
  o.seed = 3;
  o.top_k = 2;  // (0.5, 0.3) renormalized
  auto f = frequencies(o);
  EXPECT_NEAR(f[0], 0.625, 0.015);
  EXPECT_EQ(f[2], 0.0);
  o.top_k = 1;
  EXPECT_NEAR(frequencies(o)[0], 1.0, 1e-9);
  o.top_k = 0;
  o.top_p = 0.85f;  // cumulative 0.5, 0.8 stay; 1.0 > 0.85 drops the last
  f = frequencies(o);
  EXPECT_NEAR(f[0], 0.625, 0.015);
  EXPECT_EQ(f[2], 0.0);
  o.top_p = 0.6f;  // 0.8 > 0.6 drops the second: only the top token is left
  EXPECT_NEAR(frequencies(o)[0], 1.0, 1e-9);
  o.top_p = 0.01f;  // the top token always stays
  EXPECT_NEAR(frequencies(o, 100)[0], 1.0, 1e-9);
}

TEST(SamplerTest, SameSeedSameSequence) {
  SamplingSettings o;
  o.sample = true;
  o.seed = 11;
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  Sampler a(o, 100), b(o, 100);
  o.seed = 12;
  Sampler c(o, 100);
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    const int32_t x = a.next(logits.data(), 100).value();
    EXPECT_EQ(x, b.next(logits.data(), 100).value());
    differ += x != c.next(logits.data(), 100).value();
  }
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace tessera::shape
