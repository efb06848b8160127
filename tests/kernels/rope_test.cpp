// cpu::rope_interleaved against the double-precision reference on every code path, including
// strided (packed QKV) rows, odd head dims and large positions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/ops.h"
#include "tests/support/kernel_test_util.h"

namespace tessera {
namespace {

namespace ref = kernels::ref;
namespace cpu = kernels::cpu;

// Angles are computed in double on both sides; the f32 rotation adds a few ulp of |x| (inputs are
// in [-1, 1]), so 2e-6 absolute is ample while a wrong angle or pairing is off by O(1).
constexpr double kAtol = 2e-6;

TEST(Rope, MatchesReference) {
  struct Case {
    int64_t tokens, heads, head_dim, token_stride;
  };
  const Case cases[] = {{1, 1, 2, 2},           {3, 2, 8, 16},     {17, 3, 40, 120},
                        {7, 2, 64, 3 * 2 * 64},  // packed QKV
                        {5, 1, 128, 128},       {17, 2, 160, 400}, {4, 3, 7, 21},
                        {2, 2, 1, 2},           {31, 1, 300, 300}};
  for (const Case& c : cases) {
    for (float theta : {10000.0f, 500000.0f}) {
      const size_t n = size_t(c.tokens * c.token_stride);
      const auto x = test::random_floats(n, uint64_t(c.tokens * 31 + c.head_dim));
      std::vector<int32_t> positions(static_cast<size_t>(c.tokens));
      for (int64_t t = 0; t < c.tokens; ++t) positions[size_t(t)] = int32_t((t * 977 + 13) % 5000);
      std::vector<float> expected = x;
      ref::rope_interleaved(expected.data(), c.tokens, c.heads, c.head_dim, c.token_stride,
                            positions.data(), theta);
      test::for_each_cpu_mode([&] {
        SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " heads " + std::to_string(c.heads) +
                     " head_dim " + std::to_string(c.head_dim) + " theta " + std::to_string(theta));
        std::vector<float> actual = x;
        cpu::rope_interleaved(actual.data(), c.tokens, c.heads, c.head_dim, c.token_stride,
                              positions.data(), theta);
        // Elements outside the heads (the rest of a packed row) must be untouched: all_close over
        // the whole buffer checks them against the reference, which leaves them as they were.
        EXPECT_TRUE(test::all_close(actual.data(), expected.data(), n, kAtol, 0.0));
      });
    }
  }
}

TEST(Rope, KnownRotation) {
  // head_dim 4, theta 100: pair 0 rotates by pos, pair 1 by pos / 10. Position 0 is the identity.
  std::vector<float> x = {1, 0, 0, 1, 1, 2, 3, 4};
  const int32_t positions[] = {2, 0};
  cpu::rope_interleaved(x.data(), 2, 1, 4, 4, positions, 100.0f);
  EXPECT_NEAR(x[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(2.0), 1e-6);
  EXPECT_NEAR(x[2], -std::sin(0.2), 1e-6);
  EXPECT_NEAR(x[3], std::cos(0.2), 1e-6);
  EXPECT_EQ(x[4], 1.0f);
  EXPECT_EQ(x[5], 2.0f);
  EXPECT_EQ(x[6], 3.0f);
  EXPECT_EQ(x[7], 4.0f);
}

}  // namespace
}  // namespace tessera
