// cpu::gemm_i8 (8-bit activations x 8-bit weights, AVX-512 VNNI) against its scalar reference (the
// same integers and float operations: equal bits) and the reference against an exact
// double-precision product of the dequantized operands; the packing and the activation
// quantization against their definitions (gemm_i8.h); and the error against the f32 product, the
// figure the 8-bit activations cost. Awkward sizes (tails of the 12-row micro-kernel and of the
// 32-column panels, k not a multiple of 4), f32 and bf16 weights, bias, zero rows, 1 and 2
// threads, rows computed alone or in a batch. The SIMD cases skip on CPUs without AVX-512 VNNI.
#include "kernels/cpu/gemm_i8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu {
namespace {

struct Problem {
  int64_t m = 0, n = 0, k = 0, lda = 0, ldc = 0;
  std::vector<float> a, bias;
  std::vector<float> w32;
  std::vector<uint16_t> w16;
  Weight w;
};

Problem make(int64_t m, int64_t n, int64_t k, bool bf16, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Problem p;
  p.m = m, p.n = n, p.k = k, p.lda = k + 3, p.ldc = n + 5;
  p.a.resize(static_cast<size_t>(m * p.lda));
  for (float& v : p.a) v = dist(rng);
  p.bias.resize(static_cast<size_t>(n));
  for (float& v : p.bias) v = dist(rng);
  p.w.rows = n;
  p.w.cols = k;
  if (bf16) {
    p.w16.resize(static_cast<size_t>(n * k));
    for (auto& v : p.w16) v = f32_to_bf16(dist(rng) * 0.05f);
    p.w.data = p.w16.data();
    p.w.dtype = DType::kBF16;
  } else {
    p.w32.resize(static_cast<size_t>(n * k));
    for (float& v : p.w32) v = dist(rng) * 0.05f;
    p.w.data = p.w32.data();
    p.w.dtype = DType::kF32;
  }
  return p;
}

float weight(const Problem& p, int64_t j, int64_t kk) {
  return p.w.dtype == DType::kBF16 ? bf16_to_f32(p.w16[static_cast<size_t>(j * p.k + kk)])
                                   : p.w32[static_cast<size_t>(j * p.k + kk)];
}

TEST(GemmI8Test, PackingIsPerChannelSymmetricInt8) {
  std::mt19937 rng(1);
  for (bool bf16 : {false, true}) {
    Problem p = make(1, 37, 771, bf16, rng);
    // a zero row packs to q 0, scale 0
    for (int64_t kk = 0; kk < p.k; ++kk) {
      if (bf16)
        p.w16[static_cast<size_t>(5 * p.k + kk)] = 0;
      else
        p.w32[static_cast<size_t>(5 * p.k + kk)] = 0.0f;
    }
    const gemm_i8::PackedI8 b = gemm_i8::pack(p.w);
    ASSERT_EQ(b.n, 37);
    ASSERT_EQ(b.k, 771);
    ASSERT_EQ(b.kpad(), 772);
    ASSERT_EQ(b.scales.size(), 64u);
    for (int64_t j = 0; j < p.n; ++j) {
      float amax = 0.0f;
      for (int64_t kk = 0; kk < p.k; ++kk) amax = std::max(amax, std::fabs(weight(p, j, kk)));
      const float s = amax / 127.0f;
      ASSERT_EQ(b.scales[static_cast<size_t>(j)], s) << "column " << j;
      int32_t sum = 0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const float deq = gemm_i8::packed_weight_at(b, j, kk);
        // within half a step of the weight, and the largest one exact
        ASSERT_LE(std::fabs(deq - weight(p, j, kk)), 0.5f * s * 1.0001f + 1e-12f);
        sum += s > 0.0f ? static_cast<int32_t>(std::lround(deq / s)) : 0;
      }
      ASSERT_EQ(b.offset[static_cast<size_t>(j)], 128 * sum) << "column " << j;
    }
    EXPECT_EQ(b.scales[5], 0.0f);
    for (size_t j = 37; j < 64; ++j) {
      EXPECT_EQ(b.scales[j], 0.0f);
      EXPECT_EQ(b.offset[j], 0);
    }
  }
}

TEST(GemmI8Test, ActivationQuantizationMatchesItsDefinition) {
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  const int64_t rows = 5, k = 37, kpad = 40, lda = 41;
  std::vector<float> a(static_cast<size_t>(rows * lda));
  for (float& v : a) v = dist(rng);
  for (int64_t c = 0; c < k; ++c) a[static_cast<size_t>(2 * lda + c)] = 0.0f;  // a zero row
  std::vector<uint8_t> q(static_cast<size_t>(rows * kpad));
  std::vector<float> s(rows);
  gemm_i8::quantize_rows_reference(a.data(), lda, rows, k, kpad, q.data(), s.data());
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < k; ++c)
      amax = std::max(amax, std::fabs(a[static_cast<size_t>(r * lda + c)]));
    ASSERT_EQ(s[static_cast<size_t>(r)], amax / 127.0f);
    for (int64_t c = 0; c < k; ++c) {
      const int q8 = static_cast<int>(q[static_cast<size_t>(r * kpad + c)]) - 128;
      ASSERT_GE(q8, -127);
      ASSERT_LE(q8, 127);
      if (amax > 0.0f) {
        ASSERT_LE(std::fabs(q8 * s[static_cast<size_t>(r)] - a[static_cast<size_t>(r * lda + c)]),
                  0.5f * s[static_cast<size_t>(r)] * 1.0001f);
      } else {
        ASSERT_EQ(q8, 0);
      }
    }
    for (int64_t c = k; c < kpad; ++c) ASSERT_EQ(q[static_cast<size_t>(r * kpad + c)], 128);
  }
  if (!gemm_i8::available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::vector<uint8_t> q2(q.size(), 0);
  std::vector<float> s2(rows);
  gemm_i8::vnni::quantize_rows(a.data(), lda, rows, k, kpad, q2.data(), s2.data());
  EXPECT_EQ(q, q2);
  EXPECT_EQ(s, s2);
}

// The reference against the exact product of what it multiplies (dequantized rows and weights):
// the integer products and the epilogue lose nothing but the final f32 rounding.
TEST(GemmI8Test, ReferenceIsTheExactProductOfTheQuantizedOperands) {
  std::mt19937 rng(3);
  Problem p = make(7, 45, 130, false, rng);
  const gemm_i8::PackedI8 b = gemm_i8::pack(p.w);
  std::vector<float> c(static_cast<size_t>(p.m * p.ldc), -7.0f);
  gemm_i8::gemm_reference(p.m, p.a.data(), p.lda, b, p.bias.data(), c.data(), p.ldc);
  std::vector<uint8_t> q(static_cast<size_t>(p.m * b.kpad()));
  std::vector<float> s(static_cast<size_t>(p.m));
  gemm_i8::quantize_rows_reference(p.a.data(), p.lda, p.m, p.k, b.kpad(), q.data(), s.data());
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double ref = 0.0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double x = (static_cast<int>(q[static_cast<size_t>(i * b.kpad() + kk)]) - 128) *
                         static_cast<double>(s[static_cast<size_t>(i)]);
        ref += x * gemm_i8::packed_weight_at(b, j, kk);
      }
      ref += p.bias[static_cast<size_t>(j)];
      ASSERT_NEAR(c[static_cast<size_t>(i * p.ldc + j)], ref, 1e-5 * (1.0 + std::fabs(ref)))
          << i << "," << j;
    }
    // ldc padding untouched
    for (int64_t j = p.n; j < p.ldc; ++j) ASSERT_EQ(c[static_cast<size_t>(i * p.ldc + j)], -7.0f);
  }
}

// What 8-bit activations and weights cost against the f32 product: a few per cent of the outputs'
// spread on Gaussian data (the figure the occupancy queries' mesh measurement rests on).
TEST(GemmI8Test, ErrorAgainstF32IsSmall) {
  std::mt19937 rng(4);
  Problem p = make(64, 96, 768, false, rng);
  const gemm_i8::PackedI8 b = gemm_i8::pack(p.w);
  std::vector<float> c(static_cast<size_t>(p.m * p.ldc));
  gemm_i8::gemm_reference(p.m, p.a.data(), p.lda, b, nullptr, c.data(), p.ldc);
  double err2 = 0.0, ref2 = 0.0;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double ref = 0.0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        ref += static_cast<double>(p.a[static_cast<size_t>(i * p.lda + kk)]) * weight(p, j, kk);
      }
      const double e = c[static_cast<size_t>(i * p.ldc + j)] - ref;
      err2 += e * e;
      ref2 += ref * ref;
    }
  }
  const double rel = std::sqrt(err2 / ref2);
  EXPECT_LT(rel, 0.02) << "relative RMS error " << rel;
  EXPECT_GT(rel, 1e-4) << "suspiciously exact: are the operands quantized?";
}

class GemmI8SimdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gemm_i8::available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  }
  void TearDown() override { set_default_threads(0); }
};

TEST_F(GemmI8SimdTest, SameBitsAsTheReference) {
  std::mt19937 rng(5);
  struct Size {
    int64_t m, n, k;
  };
  const Size sizes[] = {{1, 1, 1},     {1, 32, 4},    {12, 32, 64},   {13, 33, 771}, {5, 17, 3},
                        {25, 65, 130}, {96, 64, 256}, {97, 100, 768}, {200, 48, 96}, {300, 31, 5}};
  for (int threads : {1, 2}) {
    set_default_threads(threads);
    for (const Size& z : sizes) {
      for (bool bf16 : {false, true}) {
        for (bool with_bias : {false, true}) {
          Problem p = make(z.m, z.n, z.k, bf16, rng);
          if (z.m > 2) {  // a zero row of A
            for (int64_t c = 0; c < z.k; ++c) p.a[static_cast<size_t>(1 * p.lda + c)] = 0.0f;
          }
          const gemm_i8::PackedI8 b = gemm_i8::pack(p.w);
          const float* bias = with_bias ? p.bias.data() : nullptr;
          std::vector<float> want(static_cast<size_t>(z.m * p.ldc), -3.0f), got = want;
          gemm_i8::gemm_reference(z.m, p.a.data(), p.lda, b, bias, want.data(), p.ldc);
          gemm_i8::gemm(z.m, p.a.data(), p.lda, b, bias, got.data(), p.ldc);
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
              << "m " << z.m << " n " << z.n << " k " << z.k << " bf16 " << bf16 << " bias "
              << with_bias << " threads " << threads;
        }
      }
    }
  }
}

// A row's outputs do not depend on the rows computed with it (batch invariance): each row alone
// gives the bits it gets in a batch of 150.
TEST_F(GemmI8SimdTest, RowsAreBatchInvariant) {
  std::mt19937 rng(6);
  Problem p = make(150, 70, 300, true, rng);
  const gemm_i8::PackedI8 b = gemm_i8::pack(p.w);
  set_default_threads(2);
  std::vector<float> batch(static_cast<size_t>(p.m * p.ldc));
  gemm_i8::gemm(p.m, p.a.data(), p.lda, b, p.bias.data(), batch.data(), p.ldc);
  for (int64_t i : {0, 11, 12, 95, 96, 149}) {
    std::vector<float> one(static_cast<size_t>(p.ldc));
    gemm_i8::gemm(1, p.a.data() + i * p.lda, p.lda, b, p.bias.data(), one.data(), p.ldc);
    ASSERT_EQ(0, std::memcmp(one.data(), batch.data() + i * p.ldc, static_cast<size_t>(p.n) * 4))
        << "row " << i;
  }
}

}  // namespace
}  // namespace tessera::kernels::cpu
