// int8 weights (kernels/int8.h, kernels/cpu/linear_int8*.cpp; issue 25): quantization against its
// definition; every ISA's int8 dot kernel (scalar, AVX2, AVX-512 VNNI where the CPU has them)
// through cpu::linear at decode (m <= 16) and prefill sizes against ref::linear on the dequantized
// weights, within the bound the activation's own 16-bit rounding allows (computed per output);
// batch invariance (a row's result is the same bits whatever m); and the kernels agree with each
// other on the exact integer part (same results to float rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_config.h"
#include "kernels/cpu/linear_int8.h"
#include "kernels/int8.h"
#include "kernels/ops.h"

namespace tessera::kernels {
namespace {

using cpu::Isa;
using cpu::linear_detail::LinearConfig;

struct Int8Weight {
  std::vector<int8_t> q;
  std::vector<float> scales;
  Weight w;
};

Int8Weight make_weight(int64_t rows, int64_t cols, int64_t group, uint32_t seed,
                       std::vector<float>* f32 = nullptr) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = normal(rng);
  if (rows > 1) {
    for (int64_t k = 0; k < cols; ++k) w[static_cast<size_t>(cols + k)] = 0.0f;  // a zero row
  }
  Int8Weight out;
  out.q.resize(w.size());
  out.scales.resize(static_cast<size_t>(rows * (cols / group)));
  quantize_int8_rows(w.data(), rows, cols, group, out.q.data(), out.scales.data());
  out.w.data = out.q.data();
  out.w.dtype = DType::kI8;
  out.w.rows = rows;
  out.w.cols = cols;
  out.w.scales = out.scales.data();
  out.w.group = group;
  if (f32) *f32 = std::move(w);
  return out;
}

std::vector<float> random_x(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = normal(rng);
  x[0] = 25.0f;  // an outlier in the first group of row 0
  return x;
}

std::vector<LinearConfig> configs() {
  std::vector<LinearConfig> c = {{Isa::kScalar, false}};
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (cpu::isa_supported(isa)) c.push_back({isa, true});
  }
  return c;
}

TEST(Int8Quantize, GroupsScalesAndRounding) {
  EXPECT_EQ(int8_group_for(1536), 128);
  EXPECT_EQ(int8_group_for(96), 32);
  EXPECT_EQ(int8_group_for(64 * 3), 64);
  EXPECT_EQ(int8_group_for(30), 30);
  std::vector<float> f32;
  const Int8Weight q = make_weight(5, 256, 128, 3, &f32);
  for (int64_t n = 0; n < 5; ++n) {
    for (int64_t k = 0; k < 256; ++k) {
      const float scale = q.scales[static_cast<size_t>(n * 2 + k / 128)];
      EXPECT_LE(std::fabs(int8_weight_at(q.w, n, k) - f32[static_cast<size_t>(n * 256 + k)]),
                0.5f * scale + 1e-9f);
    }
  }
  EXPECT_EQ(q.scales[2], 1.0f);  // the zero row: q 0 with a positive scale (files refuse zero)
  EXPECT_EQ(q.scales[3], 1.0f);
  EXPECT_EQ(q.q[256], 0);
  // The largest weight of each group maps to +-127: 4 non-zero rows x 2 groups.
  int seen = 0;
  for (int8_t b : q.q) seen += (b == -127 || b == 127);
  EXPECT_GE(seen, 8);
}

TEST(Int8Quantize, Minus128IsFound) {
  std::vector<int8_t> s(10000);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<int8_t>(static_cast<int>(i % 255) - 127);
  EXPECT_EQ(int8_find_out_of_range(s.data(), static_cast<int64_t>(s.size())), -1);
  s[7777] = -128;
  s[9000] = -128;
  EXPECT_EQ(int8_find_out_of_range(s.data(), static_cast<int64_t>(s.size())), 7777);
  s[3] = -128;
  EXPECT_EQ(int8_find_out_of_range(s.data(), 4), 3);
  EXPECT_TRUE(int8_quantizable(1536));
  EXPECT_TRUE(int8_quantizable(32));
  EXPECT_FALSE(int8_quantizable(3));
  EXPECT_FALSE(int8_quantizable(48));
}

TEST(Int8Linear, EveryIsaMatchesTheReferenceWithinTheActivationRounding) {
  for (const int64_t group : {128, 64, 32}) {
    const int64_t n_out = 70, k_dim = 384;
    const Int8Weight q = make_weight(n_out, k_dim, group, 11);
    std::vector<float> bias(n_out);
    for (int64_t n = 0; n < n_out; ++n)
      bias[static_cast<size_t>(n)] = 0.01f * static_cast<float>(n);
    for (const int64_t m : {1, 2, 3, 4, 5, 8, 16, 33}) {
      const std::vector<float> x = random_x(m, k_dim, static_cast<uint32_t>(m));
      std::vector<float> want(static_cast<size_t>(m * n_out));
      ref::linear(x.data(), m, q.w, bias.data(), want.data());
      for (const LinearConfig& config : configs()) {
        SCOPED_TRACE(std::string(cpu::isa_name(config.isa)) + " group " + std::to_string(group) +
                     " m " + std::to_string(m));
        std::vector<float> got(want.size());
        cpu::linear_detail::linear_with_config(config, x.data(), m, q.w, bias.data(), got.data());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t n = 0; n < n_out; ++n) {
            // x is rounded to int16 per group: |error| <= sum_g s_x/2 * sum_k |w| (+ f32
            // rounding of the products and sums).
            double bound = 0.0;
            for (int64_t g = 0; g < k_dim / group; ++g) {
              float amax = 0.0f;
              double wsum = 0.0;
              for (int64_t k = g * group; k < (g + 1) * group; ++k) {
                amax = std::max(amax, std::fabs(x[static_cast<size_t>(i * k_dim + k)]));
                wsum += std::fabs(int8_weight_at(q.w, n, k));
              }
              bound += 0.5 * (amax / 32767.0) * wsum;
            }
            if (config.bf16_gemm && m > 32) {
              // m > 32 with AVX-512 BF16: the bf16 GEMM on bf16(q * scale) weights and bf16 x
              // (linear.cpp): each product carries up to two bf16 roundings (2^-8 each).
              double abs_sum = 0.0;
              for (int64_t k = 0; k < k_dim; ++k) {
                abs_sum +=
                    std::fabs(x[static_cast<size_t>(i * k_dim + k)] * int8_weight_at(q.w, n, k));
              }
              bound = abs_sum * 2.0 * std::ldexp(1.0, -8);
            }
            const size_t at = static_cast<size_t>(i * n_out + n);
            ASSERT_NEAR(got[at], want[at], bound * 1.001 + 2e-6 * (1.0 + std::fabs(want[at])))
                << "row " << i << " out " << n;
          }
        }
      }
    }
  }
}

TEST(Int8Linear, KernelsAgreeAndAreBatchInvariant) {
  const int64_t n_out = 300, k_dim = 1536;
  const Int8Weight q = make_weight(n_out, k_dim, 128, 5);
  const std::vector<float> x = random_x(16, k_dim, 9);
  std::vector<float> scalar(static_cast<size_t>(16 * n_out));
  cpu::linear_detail::linear_with_config({Isa::kScalar, false}, x.data(), 16, q.w, nullptr,
                                         scalar.data());
  for (const LinearConfig& config : configs()) {
    SCOPED_TRACE(cpu::isa_name(config.isa));
    std::vector<float> all(scalar.size());
    cpu::linear_detail::linear_with_config(config, x.data(), 16, q.w, nullptr, all.data());
    for (size_t i = 0; i < all.size(); ++i) {
      // The integer dots are exact in every kernel; only the float sums' order differs.
      ASSERT_NEAR(all[i], scalar[i], 1e-5f * (1.0f + std::fabs(scalar[i]))) << i;
    }
    for (const int64_t m : {1, 2, 7}) {
      std::vector<float> part(static_cast<size_t>(m * n_out));
      cpu::linear_detail::linear_with_config(config, x.data(), m, q.w, nullptr, part.data());
      for (size_t i = 0; i < part.size(); ++i)
        ASSERT_EQ(part[i], all[i]) << "m " << m << " at " << i;
    }
  }
}

// The SIMD preparations of x give the scalar one's int16 values and scales exactly: groups with an
// outlier, a group of zeros (scale 0), a negative maximum, values on the rounding ties, a group so
// small that 1 / scale would overflow (zeros).
TEST(Int8Linear, PreparationsOfXAgreeExactly) {
  const int64_t m = 3, k_dim = 1536, group = 128;
  const Int8Weight q = make_weight(4, k_dim, group, 3);
  std::vector<float> x = random_x(m, k_dim, 11);
  for (int64_t c = 128; c < 256; ++c) x[static_cast<size_t>(c)] = 0.0f;  // group 1 of row 0
  x[static_cast<size_t>(k_dim + 300)] = -40.0f;                          // row 1: negative max
  for (int64_t c = 0; c < group; ++c) {  // row 2, group 0: max 32767 -> scale 1, halves between
    x[static_cast<size_t>(2 * k_dim + c)] = c == 0 ? 32767.0f : static_cast<float>(c) + 0.5f;
  }
  for (int64_t c = group; c < 2 * group; ++c) {  // row 2, group 1: 1 / scale would overflow
    x[static_cast<size_t>(2 * k_dim + c)] = (c % 2 ? 1e-36f : -3e-37f);
  }
  const int64_t n = m * k_dim, groups = m * (k_dim / group);
  std::vector<int16_t> want_q(static_cast<size_t>(n)), got_q(static_cast<size_t>(n));
  std::vector<float> want_s(static_cast<size_t>(groups)), got_s(static_cast<size_t>(groups));
  cpu::linear_detail::prepare_int8_rows_into(x.data(), m, q.w, want_q.data(), want_s.data());
  EXPECT_EQ(want_s[1], 0.0f);
  EXPECT_EQ(want_q[2 * k_dim + 1], 2);  // 1.5 rounds to even
  EXPECT_EQ(want_q[2 * k_dim + 2], 2);  // 2.5 too
  for (int64_t c = group; c < 2 * group; ++c) EXPECT_EQ(want_q[2 * k_dim + c], 0);
  if (cpu::isa_supported(Isa::kAvx2)) {
    std::fill(got_q.begin(), got_q.end(), int16_t{-1});
    std::fill(got_s.begin(), got_s.end(), -1.0f);
    cpu::linear_detail::prepare_int8_rows_into_avx2(x.data(), m, q.w, got_q.data(), got_s.data());
    EXPECT_EQ(got_q, want_q);
    EXPECT_EQ(got_s, want_s);
  }
  if (cpu::isa_supported(Isa::kAvx512)) {
    std::fill(got_q.begin(), got_q.end(), int16_t{-1});
    std::fill(got_s.begin(), got_s.end(), -1.0f);
    cpu::linear_detail::prepare_int8_rows_into_avx512(x.data(), m, q.w, got_q.data(), got_s.data());
    EXPECT_EQ(got_q, want_q);
    EXPECT_EQ(got_s, want_s);
  }
}

// Every dot kernel the CPU can run, called directly (int8_kernel_for picks one per CPU: on Zen 4,
// whose AVX-512 runs in 256-bit halves, the AVX2 one even at --isa avx512, so VNNI is tested here
// and not only through linear): 1-4 rows of x, long and short rows, a bias, against the scalar
// kernel (the integer dots exact, the float sums within rounding).
TEST(Int8Linear, EveryDotKernelMatchesTheScalarOne) {
  using cpu::linear_detail::Int8Rows;
  for (const int64_t k_dim : {int64_t{1536}, int64_t{6144}}) {
    const int64_t n_out = 37;
    const Int8Weight q = make_weight(n_out, k_dim, 128, 21);
    const std::vector<float> x = random_x(4, k_dim, 23);
    std::vector<float> bias(static_cast<size_t>(n_out));
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.01f * static_cast<float>(i);
    std::vector<int16_t> xq(static_cast<size_t>(4 * k_dim));
    std::vector<float> xs(static_cast<size_t>(4 * (k_dim / 128)));
    cpu::linear_detail::prepare_int8_rows_into(x.data(), 4, q.w, xq.data(), xs.data());
    for (int64_t rows = 1; rows <= 4; ++rows) {
      SCOPED_TRACE("K " + std::to_string(k_dim) + ", rows " + std::to_string(rows));
      const Int8Rows p{rows, k_dim, 128, xq.data(), xs.data()};
      std::vector<float> want(static_cast<size_t>(rows * n_out)), got(want.size());
      cpu::linear_detail::dot_prepared_i8_scalar(p, q.w, bias.data(), want.data(), n_out, 0, n_out);
      auto check = [&](const char* name) {
        SCOPED_TRACE(name);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << i;
      };
      if (cpu_features().avx2) {
        std::fill(got.begin(), got.end(), -1e30f);
        cpu::linear_detail::dot_prepared_i8_avx2(p, q.w, bias.data(), got.data(), n_out, 0, n_out);
        check("avx2");
      }
      if (cpu_features().avx512vnni && cpu_features().avx512bw) {
        std::fill(got.begin(), got.end(), -1e30f);
        cpu::linear_detail::dot_prepared_i8_vnni(p, q.w, bias.data(), got.data(), n_out, 0, n_out);
        check("vnni");
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
