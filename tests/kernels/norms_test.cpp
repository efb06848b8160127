// cpu::layer_norm / cpu::rms_norm against the double-precision references, on every code path
// (AVX-512, AVX2, scalar) with 1 and 2 threads.
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

// Outputs are O(|weight| * 4) for these inputs; f32 statistics over up to 1000 elements keep the
// error near 1e-6 of the output scale (measured ~2e-7), so 1e-5 relative + 1e-5 absolute holds.
constexpr double kAtol = 1e-5, kRtol = 1e-5;

const int64_t kRows[] = {1, 7, 31};
const int64_t kDims[] = {1, 2, 7, 16, 31, 40, 257, 1000};

TEST(Norms, LayerNormMatchesReference) {
  for (int64_t rows : kRows) {
    for (int64_t dim : kDims) {
      // A common offset of 3 checks that the statistics do not lose the spread to the mean.
      const auto x =
          test::random_floats(size_t(rows * dim), uint64_t(rows * 1000 + dim), 2.0f, 4.0f);
      const auto w = test::random_floats(size_t(dim), 11, -2.0f, 2.0f);
      const auto b = test::random_floats(size_t(dim), 12, -1.0f, 1.0f);
      for (int affine = 0; affine < 4; ++affine) {
        const float* wp = (affine & 1) ? w.data() : nullptr;
        const float* bp = (affine & 2) ? b.data() : nullptr;
        std::vector<float> expected(x.size()), actual(x.size());
        ref::layer_norm(x.data(), wp, bp, expected.data(), rows, dim, 1e-5f);
        test::for_each_cpu_mode([&] {
          SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim) + " affine " +
                       std::to_string(affine));
          cpu::layer_norm(x.data(), wp, bp, actual.data(), rows, dim, 1e-5f);
          EXPECT_TRUE(test::all_close(actual.data(), expected.data(), x.size(), kAtol, kRtol));
        });
      }
    }
  }
}

TEST(Norms, RmsNormMatchesReference) {
  for (int64_t rows : kRows) {
    for (int64_t dim : kDims) {
      const auto x =
          test::random_floats(size_t(rows * dim), uint64_t(rows * 77 + dim), -3.0f, 3.0f);
      const auto w = test::random_floats(size_t(dim), 13, -2.0f, 2.0f);
      for (const float* wp : {static_cast<const float*>(nullptr), w.data()}) {
        std::vector<float> expected(x.size()), actual(x.size());
        ref::rms_norm(x.data(), wp, expected.data(), rows, dim, 1e-6f);
        test::for_each_cpu_mode([&] {
          SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim));
          cpu::rms_norm(x.data(), wp, actual.data(), rows, dim, 1e-6f);
          EXPECT_TRUE(test::all_close(actual.data(), expected.data(), x.size(), kAtol, kRtol));
        });
      }
    }
  }
}

TEST(Norms, InPlace) {
  const int64_t rows = 5, dim = 77;
  const auto x = test::random_floats(size_t(rows * dim), 21, -5.0f, 5.0f);
  const auto w = test::random_floats(size_t(dim), 22);
  const auto b = test::random_floats(size_t(dim), 23);
  std::vector<float> ln(x.size()), rms(x.size());
  ref::layer_norm(x.data(), w.data(), b.data(), ln.data(), rows, dim, 1e-5f);
  ref::rms_norm(x.data(), w.data(), rms.data(), rows, dim, 1e-5f);
  test::for_each_cpu_mode([&] {
    std::vector<float> y = x;
    cpu::layer_norm(y.data(), w.data(), b.data(), y.data(), rows, dim, 1e-5f);
    EXPECT_TRUE(test::all_close(y.data(), ln.data(), y.size(), kAtol, kRtol));
    y = x;
    cpu::rms_norm(y.data(), w.data(), y.data(), rows, dim, 1e-5f);
    EXPECT_TRUE(test::all_close(y.data(), rms.data(), y.size(), kAtol, kRtol));
  });
}

TEST(Norms, ConstantAndHugeRows) {
  const int64_t dim = 257;
  // Row 0 constant (variance 0: LayerNorm gives the bias, RMSNorm x / |x|), row 1 of zeros
  // (RMSNorm divides by sqrt(eps)), row 2 huge (squares near 1e36 must not overflow in f32).
  std::vector<float> x(static_cast<size_t>(3 * dim), 7.5f);
  for (int64_t i = 0; i < dim; ++i) x[size_t(dim + i)] = 0.0f;
  const auto big = test::random_floats(size_t(dim), 31, -1e17f, 1e17f);
  std::copy(big.begin(), big.end(), x.begin() + 2 * dim);
  const auto b = test::random_floats(size_t(dim), 32);
  std::vector<float> ln_ref(x.size()), rms_ref(x.size()), ln(x.size()), rms(x.size());
  ref::layer_norm(x.data(), nullptr, b.data(), ln_ref.data(), 3, dim, 1e-5f);
  ref::rms_norm(x.data(), nullptr, rms_ref.data(), 3, dim, 1e-5f);
  test::for_each_cpu_mode([&] {
    cpu::layer_norm(x.data(), nullptr, b.data(), ln.data(), 3, dim, 1e-5f);
    cpu::rms_norm(x.data(), nullptr, rms.data(), 3, dim, 1e-5f);
    EXPECT_TRUE(test::all_close(ln.data(), ln_ref.data(), ln.size(), kAtol, kRtol));
    EXPECT_TRUE(test::all_close(rms.data(), rms_ref.data(), rms.size(), kAtol, kRtol));
    for (int64_t i = 0; i < dim; ++i) ASSERT_FLOAT_EQ(ln[size_t(i)], b[size_t(i)]);
  });
}

}  // namespace
}  // namespace tessera
