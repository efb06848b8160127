// The one range check of the sampling settings (core/sampling.h): one message per bad field, each
// naming the field, its value and the allowed range; the product's defaults (engine/runtime/
// defaults.h) differ from the reference's only where they say so.
#include "core/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/runtime/defaults.h"

namespace tessera {
namespace {

using Errors = std::vector<std::string>;

TEST(SamplingSettingsTest, TheDefaultsAreValid) {
  EXPECT_TRUE(sampling_errors(SamplingSettings{}).empty());
  EXPECT_TRUE(check_sampling(runtime::kDefaultSampling).ok());
  // The reference's: greedy, temperature 1, no filters, guidance 3.
  const SamplingSettings reference;
  EXPECT_FALSE(reference.sample);
  EXPECT_EQ(reference.seed, 0u);
  EXPECT_EQ(reference.temperature, 1.0f);
  EXPECT_EQ(reference.top_k, 0);
  EXPECT_EQ(reference.top_p, 1.0f);
  EXPECT_EQ(reference.guidance, 3.0f);
  // The product's: the reference's but for nucleus 0.9.
  SamplingSettings product = reference;
  product.top_p = 0.9f;
  EXPECT_EQ(runtime::kDefaultSampling, product);
}

TEST(SamplingSettingsTest, OneMessagePerBadFieldNamingFieldAndRange) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    SamplingSettings s;
    std::string message;
  };
  auto with = [](auto set) {
    SamplingSettings s;
    set(s);
    return s;
  };
  const std::vector<Case> cases = {
      {with([](SamplingSettings& s) { s.temperature = 0.0f; }),
       "temperature: 0 is outside (0, inf)"},
      {with([](SamplingSettings& s) { s.temperature = -0.5f; }),
       "temperature: -0.5 is outside (0, inf)"},
      {with([&](SamplingSettings& s) { s.temperature = inf; }),
       "temperature: inf is outside (0, inf)"},
      {with([&](SamplingSettings& s) { s.temperature = nan; }),
       "temperature: nan is outside (0, inf)"},
      {with([](SamplingSettings& s) { s.top_k = -1; }), "top_k: -1 is outside [0, inf)"},
      {with([](SamplingSettings& s) { s.top_p = 1.5f; }), "top_p: 1.5 is outside (0, 1]"},
      {with([](SamplingSettings& s) { s.top_p = 0.0f; }), "top_p: 0 is outside (0, 1]"},
      {with([&](SamplingSettings& s) { s.top_p = nan; }), "top_p: nan is outside (0, 1]"},
      {with([](SamplingSettings& s) { s.guidance = -1.0f; }), "guidance: -1 is outside [0, inf)"},
      {with([&](SamplingSettings& s) { s.guidance = inf; }), "guidance: inf is outside [0, inf)"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(sampling_errors(c.s), Errors{c.message});
    const Status st = check_sampling(c.s);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << c.message;
    EXPECT_EQ(st.message(), c.message);
  }
}

TEST(SamplingSettingsTest, EveryBadFieldIsReportedInOrder) {
  SamplingSettings s;
  s.temperature = 0.0f;
  s.top_k = -2;
  s.top_p = 1.25f;
  s.guidance = -3.0f;
  const Errors errors = sampling_errors(s);
  EXPECT_EQ(errors, (Errors{"temperature: 0 is outside (0, inf)", "top_k: -2 is outside [0, inf)",
                            "top_p: 1.25 is outside (0, 1]", "guidance: -3 is outside [0, inf)"}));
  EXPECT_EQ(check_sampling(s).message(),
            "temperature: 0 is outside (0, inf); top_k: -2 is outside [0, inf); top_p: 1.25 is "
            "outside (0, 1]; guidance: -3 is outside [0, inf)");
}

TEST(SamplingSettingsTest, GreedySettingsAreCheckedToo) {
  SamplingSettings s;
  ASSERT_FALSE(s.sample);
  s.top_p = 2.0f;
  EXPECT_EQ(check_sampling(s).message(), "top_p: 2 is outside (0, 1]");
}

TEST(SamplingSettingsTest, TheEdgesOfTheRangesAreValid) {
  SamplingSettings s;
  s.sample = true;
  s.seed = std::numeric_limits<uint64_t>::max();
  s.temperature = std::numeric_limits<float>::denorm_min();
  s.top_k = std::numeric_limits<int64_t>::max();
  s.top_p = 1.0f;
  s.guidance = 0.0f;
  EXPECT_TRUE(check_sampling(s).ok()) << check_sampling(s).message();
  s.top_p = std::numeric_limits<float>::denorm_min();
  s.temperature = std::numeric_limits<float>::max();
  EXPECT_TRUE(check_sampling(s).ok()) << check_sampling(s).message();
}

// Values print as the decimal that reads back as the float, not its binary expansion.
TEST(SamplingSettingsTest, ValuesPrintShortest) {
  SamplingSettings s;
  s.top_p = 1.1f;
  EXPECT_EQ(check_sampling(s).message(), "top_p: 1.1 is outside (0, 1]");
}

}  // namespace
}  // namespace tessera
