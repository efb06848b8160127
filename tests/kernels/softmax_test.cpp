// cpu::softmax against the double-precision reference on every code path, plus the properties a
// caller relies on: rows sum to 1, stability for large inputs, -inf masks without NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
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

// The vector exp is within 2 ulp; sums of up to 1000 terms in f32 add ~1e-7 relative.
constexpr double kAtol = 1e-7, kRtol = 2e-6;
constexpr float kInf = std::numeric_limits<float>::infinity();

void expect_rows_sum_to_one(const std::vector<float>& y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = y[size_t(r * cols + c)];
      ASSERT_TRUE(std::isfinite(v) && v >= 0.0f) << "row " << r << " col " << c << ": " << v;
      sum += v;
    }
    EXPECT_NEAR(sum, 1.0, 2e-6) << "row " << r;
  }
}

TEST(Softmax, MatchesReference) {
  for (int64_t rows : {1, 7, 31}) {
    for (int64_t cols : {1, 2, 7, 15, 16, 17, 31, 77, 257, 1000}) {
      for (float range : {1.0f, 30.0f, 1e4f}) {
        const auto x =
            test::random_floats(size_t(rows * cols), uint64_t(rows * 7919 + cols), -range, range);
        std::vector<float> expected(x.size()), actual(x.size());
        ref::softmax(x.data(), expected.data(), rows, cols);
        test::for_each_cpu_mode([&] {
          SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols) +
                       " range " + std::to_string(range));
          cpu::softmax(x.data(), actual.data(), rows, cols);
          EXPECT_TRUE(test::all_close(actual.data(), expected.data(), x.size(), kAtol, kRtol));
          expect_rows_sum_to_one(actual, rows, cols);
        });
      }
    }
  }
}

TEST(Softmax, ExtremeRows) {
  const int64_t cols = 37;
  std::vector<float> x(static_cast<size_t>(5 * cols));
  for (int64_t c = 0; c < cols; ++c) {
    x[size_t(c)] = 3.25f;                                   // all equal: uniform
    x[size_t(cols + c)] = c % 3 ? -kInf : float(c) * 1e4f;  // masked, huge
    x[size_t(2 * cols + c)] = -kInf;                        // fully masked: zeros
    x[size_t(3 * cols + c)] = c == 5 ? 3e38f : -3e38f;      // near FLT_MAX: one-hot
    x[size_t(4 * cols + c)] = -1e30f;                       // all equal, hugely negative
  }
  std::vector<float> expected(x.size()), actual(x.size());
  ref::softmax(x.data(), expected.data(), 5, cols);
  test::for_each_cpu_mode([&] {
    cpu::softmax(x.data(), actual.data(), 5, cols);
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), x.size(), kAtol, kRtol));
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_NEAR(actual[size_t(c)], 1.0 / cols, 1e-7);
      if (c % 3) {
        EXPECT_EQ(actual[size_t(cols + c)], 0.0f);
      }
      EXPECT_EQ(actual[size_t(2 * cols + c)], 0.0f);
      EXPECT_EQ(actual[size_t(3 * cols + c)], c == 5 ? 1.0f : 0.0f);
      EXPECT_NEAR(actual[size_t(4 * cols + c)], 1.0 / cols, 1e-7);
    }
    expect_rows_sum_to_one(actual, 2, cols);
  });
}

TEST(Softmax, InPlace) {
  const int64_t rows = 9, cols = 100;
  const auto x = test::random_floats(size_t(rows * cols), 5, -20.0f, 20.0f);
  std::vector<float> expected(x.size());
  ref::softmax(x.data(), expected.data(), rows, cols);
  test::for_each_cpu_mode([&] {
    std::vector<float> y = x;
    cpu::softmax(y.data(), y.data(), rows, cols);
    EXPECT_TRUE(test::all_close(y.data(), expected.data(), y.size(), kAtol, kRtol));
  });
}

}  // namespace
}  // namespace tessera
