// The elementwise ops (silu, gelu_erf, gelu_tanh, quick_gelu, add, swiglu, geglu) against
// double-precision references on every code path, over ordinary and extreme inputs, in place and
// aliased.
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

// Error budget: the SIMD exp is within 2 ulp and erf within 1.5e-7 absolute, so the outputs are
// within ~1e-6 relative of |y| plus ~1e-7 * |x| absolute (gelu_erf's erf error times x/2; f32
// cancellation near the zeros). Bound per element: 1e-6 * |x| + 2e-6 * |y| + 1e-30.
::testing::AssertionResult close_to(const std::vector<float>& actual,
                                    const std::vector<float>& expected,
                                    const std::vector<float>& x) {
  std::vector<double> bound(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    bound[i] = 1e-6 * std::fabs(x[i]) + 2e-6 * std::fabs(expected[i]) + 1e-30;
  return test::all_within(actual.data(), expected.data(), bound.data(), x.size());
}

using UnaryOp = void (*)(const float*, float*, int64_t);
struct Unary {
  const char* name;
  UnaryOp ref_op;
  UnaryOp cpu_op;
};
const Unary kUnary[] = {{"silu", ref::silu, cpu::silu},
                        {"gelu_erf", ref::gelu_erf, cpu::gelu_erf},
                        {"gelu_tanh", ref::gelu_tanh, cpu::gelu_tanh},
                        {"quick_gelu", ref::quick_gelu, cpu::quick_gelu}};

// Sizes around the vector widths, a prime, and 70001 (> two 32K chunks: three tasks).
const int64_t kSizes[] = {1, 7, 8, 15, 16, 17, 31, 257, 70001};

std::vector<float> inputs(int64_t n, uint64_t seed) {
  auto x = test::random_floats(size_t(n), seed, -8.0f, 8.0f);
  // Every 5th element from a much wider range: exp saturation, erf at +-1, the x^3 term of
  // gelu_tanh.
  const auto wide = test::random_floats(size_t(n), seed + 1, -120.0f, 120.0f);
  for (size_t i = 0; i < x.size(); i += 5) x[i] = wide[i];
  return x;
}

TEST(Activations, UnaryMatchReference) {
  for (const Unary& op : kUnary) {
    for (int64_t n : kSizes) {
      const auto x = inputs(n, uint64_t(n));
      std::vector<float> expected(x.size()), actual(x.size());
      op.ref_op(x.data(), expected.data(), n);
      test::for_each_cpu_mode([&] {
        SCOPED_TRACE(std::string(op.name) + " n " + std::to_string(n));
        op.cpu_op(x.data(), actual.data(), n);
        EXPECT_TRUE(close_to(actual, expected, x));
        std::vector<float> in_place = x;
        op.cpu_op(in_place.data(), in_place.data(), n);
        EXPECT_TRUE(test::all_equal(in_place.data(), actual.data(), x.size()));
      });
    }
  }
}

TEST(Activations, ExtremeInputs) {
  const std::vector<float> x = {0.0f,   -0.0f,   1e-30f, -1e-30f, 1e-3f, -1e-3f, 88.5f, -88.5f,
                                100.0f, -100.0f, 1e10f,  -1e10f,  1e30f, -1e30f, 3e38f, -3e38f};
  for (const Unary& op : kUnary) {
    std::vector<float> expected(x.size()), actual(x.size());
    op.ref_op(x.data(), expected.data(), int64_t(x.size()));
    test::for_each_cpu_mode([&] {
      SCOPED_TRACE(op.name);
      op.cpu_op(x.data(), actual.data(), int64_t(x.size()));
      for (float v : actual) ASSERT_FALSE(std::isnan(v));
      EXPECT_TRUE(close_to(actual, expected, x));
    });
  }
}

TEST(Activations, GeluVariantsAgreeWithKnownValues) {
  // gelu_erf(1) = 0.5 * (1 + erf(1/sqrt2)) = 0.8413447; gelu_tanh(1) = 0.8411920.
  const float one = 1.0f;
  float y = 0.0f;
  test::for_each_cpu_mode([&] {
    cpu::gelu_erf(&one, &y, 1);
    EXPECT_NEAR(y, 0.8413447460685429, 1e-6);
    cpu::gelu_tanh(&one, &y, 1);
    EXPECT_NEAR(y, 0.8411919906082768, 1e-6);
    cpu::silu(&one, &y, 1);
    EXPECT_NEAR(y, 0.7310585786300049, 1e-6);
    // quick_gelu(1) = sigmoid(1.702) = 1 / (1 + e^-1.702) (CLIP's activation).
    cpu::quick_gelu(&one, &y, 1);
    EXPECT_NEAR(y, 0.8457957659328212, 1e-6);
  });
}

TEST(Activations, SwigluMatchesReferenceAndAliases) {
  for (int64_t n : kSizes) {
    const auto gate = inputs(n, uint64_t(n) + 100);
    const auto up = test::random_floats(size_t(n), uint64_t(n) + 200, -3.0f, 3.0f);
    std::vector<float> expected(static_cast<size_t>(n)), actual(static_cast<size_t>(n));
    ref::swiglu(gate.data(), up.data(), expected.data(), n);
    // Bound scale: |gate * up| stands in for |x| in the error budget.
    std::vector<float> scale(static_cast<size_t>(n));
    for (size_t i = 0; i < scale.size(); ++i) scale[i] = gate[i] * up[i];
    test::for_each_cpu_mode([&] {
      SCOPED_TRACE("n " + std::to_string(n));
      cpu::swiglu(gate.data(), up.data(), actual.data(), n);
      EXPECT_TRUE(close_to(actual, expected, scale));
      std::vector<float> g = gate, u = up;
      cpu::swiglu(g.data(), u.data(), g.data(), n);  // y aliases gate
      EXPECT_TRUE(test::all_equal(g.data(), actual.data(), actual.size()));
      g = gate;
      cpu::swiglu(g.data(), u.data(), u.data(), n);  // y aliases up
      EXPECT_TRUE(test::all_equal(u.data(), actual.data(), actual.size()));
    });
  }
}

TEST(Activations, AddIsExactAndAliases) {
  for (int64_t n : kSizes) {
    const auto a = inputs(n, uint64_t(n) + 300);
    const auto b = inputs(n, uint64_t(n) + 400);
    std::vector<float> expected(static_cast<size_t>(n)), actual(static_cast<size_t>(n));
    ref::add(a.data(), b.data(), expected.data(), n);
    test::for_each_cpu_mode([&] {
      SCOPED_TRACE("n " + std::to_string(n));
      actual.assign(actual.size(), -1.0f);
      cpu::add(a.data(), b.data(), actual.data(), n);
      // A single f32 addition is correctly rounded in every ISA: results are bit-identical.
      EXPECT_TRUE(test::all_equal(actual.data(), expected.data(), actual.size()));
      std::vector<float> x = a, y = b;
      cpu::add(x.data(), y.data(), x.data(), n);  // y aliases a
      EXPECT_TRUE(test::all_equal(x.data(), expected.data(), expected.size()));
      x = a;
      cpu::add(x.data(), y.data(), y.data(), n);  // y aliases b
      EXPECT_TRUE(test::all_equal(y.data(), expected.data(), expected.size()));
      y = a;
      cpu::add(y.data(), y.data(), y.data(), n);  // x + x in place
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], a[i] * 2.0f) << "element " << i;
    });
  }
}

TEST(Activations, GegluMatchesReference) {
  for (int64_t rows : {1, 3, 7}) {
    for (int64_t hidden : {1, 7, 16, 40, 257, 1280}) {
      const auto x = inputs(rows * 2 * hidden, uint64_t(rows * 1000 + hidden));
      std::vector<float> expected(static_cast<size_t>(rows * hidden)),
          actual(static_cast<size_t>(rows * hidden));
      ref::geglu(x.data(), expected.data(), rows, hidden);
      std::vector<float> scale(expected.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < hidden; ++i)
          scale[size_t(r * hidden + i)] =
              x[size_t(r * 2 * hidden + i)] * x[size_t(r * 2 * hidden + hidden + i)];
      test::for_each_cpu_mode([&] {
        SCOPED_TRACE("rows " + std::to_string(rows) + " hidden " + std::to_string(hidden));
        cpu::geglu(x.data(), actual.data(), rows, hidden);
        EXPECT_TRUE(close_to(actual, expected, scale));
      });
    }
  }
}

}  // namespace
}  // namespace tessera
