// cpu::linear_multi (several layers over the same x: q/k/v, gate/up) against per-layer
// cpu::linear with the same configuration (bit for bit: each output row is computed by the same
// kernel over the same task split) and against ref::linear_multi, on awkward sizes: m around the
// GEMV limit (kMaxRowsPerPass = 4), parts of different row counts and dtypes (one task and many
// tasks of kGemvTaskBytes), K with tails and long rows, every ISA, 1 and 2 threads. Every element
// of each y must be written and nothing past it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_internal.h"
#include "kernels/ops.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::kernels {
namespace {

using cpu::Isa;
using cpu::linear_detail::LinearConfig;

class LinearMultiTest : public ::testing::Test {
 protected:
  void TearDown() override { set_default_threads(0); }
};

struct PartData {
  std::vector<float> w_f32, bias;
  std::vector<uint16_t> w_bf16;
  Weight w;
};

TEST_F(LinearMultiTest, MatchesPerLayerLinearAndReference) {
  constexpr size_t kGuard = 13;
  constexpr float kGuardValue = -777.25f;
  std::vector<LinearConfig> configs = {{Isa::kScalar, false}};
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (cpu::isa_supported(isa)) configs.push_back({isa, true});
  }
  struct Case {
    int64_t k;
    std::vector<int64_t> rows;
  };
  // Rows x K x dtype chosen so that some parts fit one task and others span many (1536 x 300
  // bf16 = 0.9 MB), K = 4500 takes the long-row kernels, K = 1536 the bf16 even/odd ones.
  const Case cases[] = {{7, {1, 5, 3}}, {257, {37, 300}}, {1536, {300, 64, 129}}, {4500, {9, 40}}};
  uint64_t seed = 3000;
  for (const Case& c : cases) {
    for (int64_t m : {1, 2, 3, 4, 5}) {
      std::vector<PartData> data(c.rows.size());
      std::vector<LinearPart> parts(c.rows.size());
      for (size_t p = 0; p < c.rows.size(); ++p) {
        const int64_t n = c.rows[p];
        const DType dtype = (p + static_cast<size_t>(m)) % 2 ? DType::kBF16 : DType::kF32;
        PartData& d = data[p];
        if (dtype == DType::kF32) {
          d.w_f32 = test::random_floats(static_cast<size_t>(n * c.k), ++seed);
          d.w = {d.w_f32.data(), dtype, n, c.k};
        } else {
          d.w_bf16 = test::random_bf16(static_cast<size_t>(n * c.k), ++seed);
          d.w = {d.w_bf16.data(), dtype, n, c.k};
        }
        if (p != 1) d.bias = test::random_floats(static_cast<size_t>(n), ++seed);
        parts[p].w = d.w;
        parts[p].bias = d.bias.empty() ? nullptr : d.bias.data();
      }
      const std::vector<float> x = test::random_floats(static_cast<size_t>(m * c.k), ++seed);
      std::vector<std::vector<float>> want(parts.size());
      for (size_t p = 0; p < parts.size(); ++p) {
        want[p].resize(static_cast<size_t>(m * parts[p].w.rows));
        ref::linear(x.data(), m, parts[p].w, parts[p].bias, want[p].data());
      }
      for (int threads : {1, 2}) {
        set_default_threads(threads);
        for (const LinearConfig& config : configs) {
          const std::string what = std::string(cpu::isa_name(config.isa)) +
                                   " threads=" + std::to_string(threads) +
                                   " m=" + std::to_string(m) + " k=" + std::to_string(c.k);
          std::vector<std::vector<float>> got(parts.size()), single(parts.size());
          for (size_t p = 0; p < parts.size(); ++p) {
            const size_t size = static_cast<size_t>(m * parts[p].w.rows);
            got[p].assign(size + kGuard, std::numeric_limits<float>::quiet_NaN());
            for (size_t i = size; i < got[p].size(); ++i) got[p][i] = kGuardValue;
            parts[p].y = got[p].data();
            single[p].resize(size);
            cpu::linear_detail::linear_with_config(config, x.data(), m, parts[p].w, parts[p].bias,
                                                   single[p].data());
          }
          cpu::linear_detail::linear_multi_with_config(config, x.data(), m, parts.data(),
                                                       static_cast<int64_t>(parts.size()));
          for (size_t p = 0; p < parts.size(); ++p) {
            const size_t size = single[p].size();
            ASSERT_TRUE(test::all_equal(got[p].data(), single[p].data(), size))
                << what << " part " << p;
            // Loose check against the double-precision reference (the tight bound is
            // linear_test's): catches a part computed with another part's weights or x.
            ASSERT_TRUE(test::all_close(got[p].data(), want[p].data(), size, 1e-3, 1e-3))
                << what << " part " << p;
            for (size_t i = size; i < got[p].size(); ++i) {
              ASSERT_EQ(got[p][i], kGuardValue) << what << " part " << p << " wrote past y";
            }
          }
        }
      }
    }
  }
}

TEST_F(LinearMultiTest, ReferenceRunsEachPart) {
  const std::vector<float> x = {1, 2, 3};
  const std::vector<float> w1 = {1, 0, 0, 0, 1, 0}, w2 = {0, 0, 1};
  const float bias2[1] = {0.5f};
  std::vector<float> y1(2), y2(1);
  const LinearPart parts[2] = {{{w1.data(), DType::kF32, 2, 3}, nullptr, y1.data()},
                               {{w2.data(), DType::kF32, 1, 3}, bias2, y2.data()}};
  ref::linear_multi(x.data(), 1, parts, 2);
  EXPECT_EQ(y1, (std::vector<float>{1, 2}));
  EXPECT_EQ(y2, (std::vector<float>{3.5f}));
  cpu::linear_multi(x.data(), 1, parts, 2);
  EXPECT_EQ(y1, (std::vector<float>{1, 2}));
  EXPECT_EQ(y2, (std::vector<float>{3.5f}));
}

}  // namespace
}  // namespace tessera::kernels
