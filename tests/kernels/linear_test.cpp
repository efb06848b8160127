// cpu::linear against ref::linear: every variant (scalar, AVX2, AVX-512; row-block and sgemm paths;
// 1 and 2 threads; the public entry with SIMD on and off) on random inputs of awkward sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_internal.h"
#include "kernels/ops.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::kernels {
namespace {

using cpu::Isa;
using cpu::linear_detail::LinearConfig;

// Restores the default pool size and the SIMD switch however a test ends.
class LinearTest : public ::testing::Test {
 protected:
  void TearDown() override {
    set_simd_enabled(true);
    set_default_threads(0);
  }
};

// Every configuration this CPU can run: all-scalar, and sgemm for large m with each ISA's kernels.
std::vector<LinearConfig> supported_configs() {
  std::vector<LinearConfig> configs = {{Isa::kScalar, false}, {Isa::kScalar, true}};
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (cpu::isa_supported(isa)) configs.push_back({isa, true});
  }
  return configs;
}

std::string describe(const LinearConfig& c, int threads, int64_t m, int64_t n, int64_t k,
                     DType dtype, bool bias) {
  return std::string(cpu::isa_name(c.isa)) + (c.use_blas ? "+blas" : "") +
         " threads=" + std::to_string(threads) + " m=" + std::to_string(m) +
         " n=" + std::to_string(n) + " k=" + std::to_string(k) + " " + dtype_name(dtype) +
         (bias ? " bias" : "");
}

// One problem: inputs, reference output and per-element error bounds.
struct Problem {
  int64_t m, n, k;
  DType dtype;
  std::vector<float> x, w_f32, bias, expected;
  std::vector<uint16_t> w_bf16;
  std::vector<double> bound;

  Weight weight() const {
    return {dtype == DType::kF32 ? static_cast<const void*>(w_f32.data())
                                 : static_cast<const void*>(w_bf16.data()),
            dtype, n, k};
  }
  const float* bias_ptr() const { return bias.empty() ? nullptr : bias.data(); }
};

// Error bound, per output element. Any f32 evaluation of a K-term dot product plus bias, in any
// order and with or without FMA (the kernels differ in order: 16-lane partial sums, sgemm blocking,
// K panels), satisfies |computed - exact| <= gamma(K + 1) * (sum_k |x_k w_k| + |bias|) with
// gamma(j) = j*u / (1 - j*u), u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms,
// 2nd ed., eq. 3.5). The reference accumulates in double and rounds once: at most u * |y| more.
// bf16 weights are expanded exactly, so the same bound holds with the bf16 values. The bound is
// rigorous (a correct kernel cannot fail it) yet tight enough to catch a dropped or misplaced term:
// for K = 1000 and inputs in [-1, 1] it is ~0.015 while such a bug moves outputs by O(0.3).
Problem make_problem(int64_t m, int64_t n, int64_t k, DType dtype, bool with_bias, uint64_t seed,
                     bool bf16_x = false) {
  Problem p{m, n, k, dtype, {}, {}, {}, {}, {}, {}};
  p.x = test::random_floats(static_cast<size_t>(m * k), seed);
  if (bf16_x) {
    for (float& v : p.x) v = bf16_to_f32(f32_to_bf16(v));
  }
  if (dtype == DType::kF32) {
    p.w_f32 = test::random_floats(static_cast<size_t>(n * k), seed + 1);
  } else {
    p.w_bf16 = test::random_bf16(static_cast<size_t>(n * k), seed + 1);
  }
  if (with_bias) p.bias = test::random_floats(static_cast<size_t>(n), seed + 2, -2.0f, 2.0f);
  p.expected.resize(static_cast<size_t>(m * n));
  ref::linear(p.x.data(), m, p.weight(), p.bias_ptr(), p.expected.data());

  const double u = std::ldexp(1.0, -24);
  const double terms = static_cast<double>(k + 1);
  const double gamma = terms * u / (1.0 - terms * u);
  p.bound.resize(p.expected.size());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double abs_sum = with_bias ? std::fabs(p.bias[j]) : 0.0;
      for (int64_t c = 0; c < k; ++c) {
        const double wv =
            dtype == DType::kF32 ? p.w_f32[j * k + c] : bf16_to_f32(p.w_bf16[j * k + c]);
        abs_sum += std::fabs(p.x[i * k + c] * wv);
      }
      const size_t idx = static_cast<size_t>(i * n + j);
      p.bound[idx] = (gamma + u) * abs_sum + std::fabs(p.expected[idx]) * u + 1e-30;
    }
  }
  return p;
}

// Runs `config` on p with y pre-filled with NaN (every element must be written) and a guard zone
// after it (nothing past m*n may be written).
void check_config(const LinearConfig& config, const Problem& p, int threads) {
  constexpr size_t kGuard = 37;
  constexpr float kGuardValue = -12345.5f;
  const size_t size = p.expected.size();
  std::vector<float> y(size + kGuard, std::numeric_limits<float>::quiet_NaN());
  for (size_t i = size; i < y.size(); ++i) y[i] = kGuardValue;
  cpu::linear_detail::linear_with_config(config, p.x.data(), p.m, p.weight(), p.bias_ptr(),
                                         y.data());
  const std::string what = describe(config, threads, p.m, p.n, p.k, p.dtype, !p.bias.empty());
  ASSERT_TRUE(test::all_within(y.data(), p.expected.data(), p.bound.data(), size)) << what;
  for (size_t i = size; i < y.size(); ++i) ASSERT_EQ(y[i], kGuardValue) << what << " wrote past y";
}

TEST_F(LinearTest, MatchesReferenceOnAwkwardSizes) {
  const int64_t ms[] = {1, 2, 3, 5, 8, 17, 64, 129};
  const int64_t dims[] = {1, 7, 31, 64, 100, 257, 1000};
  // The full cross product would take the double-precision reference ~10 s; problems above this
  // many multiply-adds are covered by the explicit list below instead.
  constexpr int64_t kMaxMacs = 300'000;
  struct Size {
    int64_t m, n, k;
  };
  std::vector<Size> sizes;
  for (int64_t m : ms) {
    for (int64_t n : dims) {
      for (int64_t k : dims) {
        if (m * n * k <= kMaxMacs) sizes.push_back({m, n, k});
      }
    }
  }
  // Large ones: several sgemm column blocks and bf16 panels (kPanelRows = 256), K beyond one panel
  // (kPanelCols = 1024) and not a multiple of any vector width, m just past the GEMV limit, and
  // rows longer than 8 KB (K = 4500), which the AVX-512 kernel reads four rows at a time. m = 2
  // (the decode step with guidance) has its own bf16 kernels: short and long rows, K with a tail
  // past the last whole 32-column load, N not a multiple of the row blocks.
  for (Size s : {Size{1, 1000, 1000}, Size{3, 1000, 257}, Size{8, 257, 1000}, Size{9, 300, 1100},
                 Size{17, 1000, 100}, Size{64, 257, 257}, Size{129, 513, 1031}, Size{1, 37, 4500},
                 Size{5, 37, 4500}, Size{2, 37, 4500}, Size{2, 257, 1031}, Size{2, 131, 1536}}) {
    sizes.push_back(s);
  }
  const std::vector<LinearConfig> configs = supported_configs();
  uint64_t seed = 1000;
  for (const Size& s : sizes) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool bias : {false, true}) {
        const Problem p = make_problem(s.m, s.n, s.k, dtype, bias, seed += 10);
        // The bf16 paths (vdpbf16ps GEMV for m <= kMaxRowsPerPass, gemm_bf16 for m >
        // kBf16GemmMinRows) round x to bf16: given x that is bf16 already, every product is exact
        // and the same f32 summation bound holds.
        const bool with_bf16 = dtype == DType::kBF16 && cpu::gemm_bf16::available();
        const Problem pb =
            with_bf16 ? make_problem(s.m, s.n, s.k, dtype, bias, seed, true) : Problem{};
        for (int threads : {1, 2}) {
          set_default_threads(threads);
          for (const LinearConfig& config : configs) {
            check_config(config, p, threads);
            if (HasFatalFailure()) return;
          }
          if (with_bf16) {
            check_config({Isa::kAvx512, true, true}, pb, threads);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// Batch invariance of the GEMV path (m <= kMaxGemvRows): each row of y is the same bit for bit
// whatever the number of rows computed with it, for every configuration, thread count, dtype and
// row length (short rows streamed, long rows read four at a time, tails), through linear and
// linear_multi. This is what makes a variation's tokens independent of the batch it was decoded
// in (ShapeGenerator::generate_candidates).
TEST_F(LinearTest, GemvIsBatchInvariant) {
  std::vector<LinearConfig> configs = supported_configs();
  if (cpu::gemm_bf16::available()) configs.push_back({Isa::kAvx512, true, true});
  struct Size {
    int64_t n, k;
  };
  const int64_t max_m = cpu::linear_detail::kMaxGemvRows;
  uint64_t seed = 7000;
  for (Size s : {Size{37, 100}, Size{131, 1536}, Size{40, 4500}, Size{300, 1031}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const Problem p = make_problem(max_m, s.n, s.k, dtype, true, seed += 10);
      for (int threads : {1, 2}) {
        set_default_threads(threads);
        for (const LinearConfig& config : configs) {
          const std::string what = describe(config, threads, max_m, s.n, s.k, dtype, true);
          // Row i alone.
          std::vector<float> alone(static_cast<size_t>(max_m * s.n));
          for (int64_t i = 0; i < max_m; ++i) {
            cpu::linear_detail::linear_with_config(config, p.x.data() + i * s.k, 1, p.weight(),
                                                   p.bias_ptr(), alone.data() + i * s.n);
          }
          ASSERT_TRUE(
              test::all_within(alone.data(), p.expected.data(), p.bound.data(), alone.size()) ||
              config.bf16_gemm)
              << what;
          for (int64_t m = 2; m <= max_m; ++m) {
            std::vector<float> y(static_cast<size_t>(m * s.n));
            cpu::linear_detail::linear_with_config(config, p.x.data(), m, p.weight(), p.bias_ptr(),
                                                   y.data());
            std::vector<float> y2(y.size()), y3(y.size());
            const LinearPart parts[2] = {{p.weight(), p.bias_ptr(), y2.data()},
                                         {p.weight(), nullptr, y3.data()}};
            cpu::linear_detail::linear_multi_with_config(config, p.x.data(), m, parts, 2);
            for (size_t e = 0; e < y.size(); ++e) {
              ASSERT_EQ(std::memcmp(&y[e], &alone[e], 4), 0)
                  << what << " linear, m=" << m << " row " << e / static_cast<size_t>(s.n) << ": "
                  << y[e] << " alone " << alone[e];
              ASSERT_EQ(std::memcmp(&y2[e], &alone[e], 4), 0) << what << " linear_multi, m=" << m;
            }
          }
        }
      }
    }
  }
}

// The bf16 GEMV kernel really rounds x (it is not the f32-x kernel under another name), to nearest
// even: x of 1 + 3 * 2^-9 (0.75 of a bf16 ulp above 1) must become 1 + 2^-7, the ties 1 + 2^-8 and
// 1 + 3 * 2^-8 must go to the even neighbours 1 and 1 + 2^-6. With weights of 1 every partial sum
// is exact in f32, so the result is checked exactly, for short rows, long rows (read four at a
// time), a tail past the last whole 32-weight load and each row count of the GEMV.
TEST_F(LinearTest, Bf16GemvRoundsXToNearestEven) {
  if (!cpu::gemm_bf16::available()) GTEST_SKIP() << "no AVX-512 BF16";
  set_default_threads(2);
  const float in[3] = {1.0f + 3.0f / 512.0f, 1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 256.0f};
  const double out[3] = {1.0 + 1.0 / 128.0, 1.0, 1.0 + 1.0 / 64.0};
  for (int64_t m : {1, 2, 3, 4}) {
    for (int64_t k : {5, 64, 1537, 6150}) {
      const int64_t n = 9;
      std::vector<float> x(static_cast<size_t>(m * k));
      std::vector<double> expected(static_cast<size_t>(m), 0.0);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t c = 0; c < k; ++c) {
          const int64_t kind = (c + i) % 3;
          x[static_cast<size_t>(i * k + c)] = in[kind];
          expected[static_cast<size_t>(i)] += out[kind];
        }
      }
      const std::vector<uint16_t> w(static_cast<size_t>(n * k), f32_to_bf16(1.0f));
      const Weight weight{w.data(), DType::kBF16, n, k};
      std::vector<float> y(static_cast<size_t>(m * n));
      cpu::linear_detail::linear_with_config({Isa::kAvx512, true, true}, x.data(), m, weight,
                                             nullptr, y.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(static_cast<double>(y[static_cast<size_t>(i * n + j)]),
                    expected[static_cast<size_t>(i)])
              << "m=" << m << " k=" << k << " row " << i << " col " << j;
        }
      }
    }
  }
}

// With small integers every product and partial sum is exact in f32, so every summation order
// gives the same result: the kernels must match the reference bit for bit. This catches indexing
// mistakes that a tolerance could hide on a few elements.
TEST_F(LinearTest, IntegerInputsAreExact) {
  set_default_threads(2);
  uint64_t seed = 77;
  for (int64_t m : {1, 4, 5, 8, 9, 33}) {
    for (int64_t n : {1, 19, 260}) {
      for (int64_t k : {1, 15, 17, 1030, 4111}) {
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          const auto x = test::random_small_ints(static_cast<size_t>(m * k), ++seed, -8, 8);
          const auto wf = test::random_small_ints(static_cast<size_t>(n * k), ++seed, -8, 8);
          const auto bias = test::random_small_ints(static_cast<size_t>(n), ++seed, -100, 100);
          std::vector<uint16_t> wb(wf.size());
          convert_f32_to_bf16(wf.data(), wb.data(), wf.size());  // exact for small integers
          const Weight w{dtype == DType::kF32 ? static_cast<const void*>(wf.data())
                                              : static_cast<const void*>(wb.data()),
                         dtype, n, k};
          std::vector<float> expected(static_cast<size_t>(m * n));
          ref::linear(x.data(), m, w, bias.data(), expected.data());
          for (const LinearConfig& config : supported_configs()) {
            std::vector<float> y(expected.size(), std::numeric_limits<float>::quiet_NaN());
            cpu::linear_detail::linear_with_config(config, x.data(), m, w, bias.data(), y.data());
            ASSERT_TRUE(test::all_equal(y.data(), expected.data(), y.size()))
                << describe(config, 2, m, n, k, dtype, true);
          }
        }
      }
    }
  }
}

// The public entry point follows the SIMD switch: with SIMD off it must take the all-scalar path,
// whose results are reproducible bit for bit against linear_with_config({kScalar, false}).
TEST_F(LinearTest, PublicEntryFollowsSimdSwitch) {
  set_default_threads(2);
  for (bool simd : {true, false}) {
    set_simd_enabled(simd);
    const LinearConfig config = cpu::linear_detail::default_linear_config();
    if (!simd) {
      EXPECT_EQ(config.isa, Isa::kScalar);
      EXPECT_FALSE(config.use_blas);
    } else if (cpu_features_detected().avx512f && cpu_features_detected().avx512bw &&
               cpu_features_detected().avx512vl) {
      EXPECT_EQ(config.isa, Isa::kAvx512);
    }
    for (int64_t m : {1, 6, 40}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        // The bf16 GEMM rounds x to bf16 (linear_internal.h): give it x that is bf16 already, so
        // the f32 reference and its bound still apply exactly.
        const bool rounds_x = cpu::linear_detail::rounds_x_to_bf16(config, dtype, m);
        const Problem p =
            make_problem(m, 131, 300, dtype, true, 4242 + static_cast<uint64_t>(m), rounds_x);
        std::vector<float> y(p.expected.size()), y_config(p.expected.size());
        cpu::linear(p.x.data(), m, p.weight(), p.bias_ptr(), y.data());
        cpu::linear_detail::linear_with_config(config, p.x.data(), m, p.weight(), p.bias_ptr(),
                                               y_config.data());
        EXPECT_TRUE(test::all_within(y.data(), p.expected.data(), p.bound.data(), y.size()))
            << "simd=" << simd << " m=" << m;
        if (!simd) {
          EXPECT_TRUE(test::all_equal(y.data(), y_config.data(), y.size()));
        }
      }
    }
  }
}

TEST_F(LinearTest, EmptyInnerDimensionGivesBias) {
  const std::vector<float> bias = {1.5f, -2.0f, 0.25f};
  const Weight w{nullptr, DType::kF32, 3, 0};
  for (int64_t m : {1, 20}) {
    std::vector<float> y(static_cast<size_t>(m * 3), std::numeric_limits<float>::quiet_NaN());
    cpu::linear(nullptr, m, w, bias.data(), y.data());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t n = 0; n < 3; ++n) EXPECT_EQ(y[static_cast<size_t>(i * 3 + n)], bias[n]);
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
