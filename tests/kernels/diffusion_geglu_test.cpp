// cpu::geglu_ff (fused = ops.h's cpu::geglu, unfused = gelu pass + multiply pass) against the
// reference, and the split order against diffusers' GEGLU written out independently here:
// `hidden_states, gate = proj(x).chunk(2, dim=-1); return hidden_states * gelu(gate)`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/diffusion_ops.h"
#include "kernels/ops.h"
#include "tests/support/kernel_test_util.h"

namespace tessera {
namespace {

namespace ref = kernels::ref;
namespace cpu = kernels::cpu;
using kernels::Fusion;

// |y| <= |value| * |gate| <= 16 here; the SIMD erf is within 1.5e-7 absolute, so 1e-5 relative +
// 2e-6 absolute holds with margin; swapping value and gate is off by O(1).
constexpr double kAtol = 2e-6, kRtol = 1e-5;

TEST(DiffusionGeglu, ReferenceUsesDiffusersSplitOrder) {
  const int64_t rows = 3, hidden = 5;
  const auto x = test::random_floats(size_t(rows * 2 * hidden), 21, -4.0f, 4.0f);
  std::vector<float> expected(size_t(rows * hidden)), actual(expected.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hidden; ++i) {
      const double value = x[size_t(r * 2 * hidden + i)];          // first chunk
      const double gate = x[size_t(r * 2 * hidden + hidden + i)];  // second chunk
      expected[size_t(r * hidden + i)] =
          static_cast<float>(value * 0.5 * gate * (1.0 + std::erf(gate / std::sqrt(2.0))));
    }
  }
  ref::geglu(x.data(), actual.data(), rows, hidden);
  EXPECT_TRUE(test::all_close(actual.data(), expected.data(), expected.size(), 1e-6, 1e-6));
}

TEST(DiffusionGeglu, FusedAndUnfusedMatchReference) {
  uint64_t seed = 30;
  for (int64_t rows : {1, 7, 33}) {
    for (int64_t hidden : {1, 5, 16, 40, 257, 1280}) {
      const auto x = test::random_floats(size_t(rows * 2 * hidden), seed++, -4.0f, 4.0f);
      std::vector<float> expected(size_t(rows * hidden)), actual(expected.size());
      ref::geglu(x.data(), expected.data(), rows, hidden);
      for (Fusion fusion : {Fusion::kOn, Fusion::kOff}) {
        test::for_each_cpu_mode([&] {
          SCOPED_TRACE("rows " + std::to_string(rows) + " hidden " + std::to_string(hidden) +
                       (fusion == Fusion::kOn ? " fused" : " unfused"));
          std::fill(actual.begin(), actual.end(), NAN);
          cpu::geglu_ff(x.data(), actual.data(), rows, hidden, fusion);
          EXPECT_TRUE(test::all_close(actual.data(), expected.data(), actual.size(), kAtol, kRtol));
        });
      }
    }
  }
}

}  // namespace
}  // namespace tessera
