// cpu::gemm_bf16 (AVX-512 BF16) against a double-precision reference on the bf16-rounded inputs:
// awkward sizes (tails of the 12-row micro-kernel and of the 32-column panels, odd k), every B
// layout, bias, accumulate, 1 and 2 threads. Skipped on CPUs without AVX-512 BF16.
#include "kernels/cpu/gemm_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu {
namespace {

float rb(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

class GemmBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gemm_bf16::available()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  }
  void TearDown() override { set_default_threads(0); }
};

// How check() calls the GEMM: gemm(), or B packed once (pack) then gemm_packed with f32 A or
// gemm_packed_bf16a with A converted to bf16 by the caller.
enum class Entry { kGemm, kPacked, kPackedBf16A };

void check(int64_t m, int64_t n, int64_t k, gemm_bf16::BLayout layout, bool with_bias,
           bool accumulate, std::mt19937& rng, Entry entry = Entry::kGemm) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t lda = k + 3, ldc = n + 5;
  std::vector<float> a(static_cast<size_t>(m * lda));
  for (float& v : a) v = dist(rng);
  std::vector<float> bias(static_cast<size_t>(n));
  for (float& v : bias) v = dist(rng);
  // B(kk, j) as doubles of the bf16-rounded values, and the stored form.
  std::vector<double> bref(static_cast<size_t>(k * n));
  std::vector<float> b32;
  std::vector<uint16_t> b16;
  gemm_bf16::BMatrix bm;
  bm.layout = layout;
  if (layout == gemm_bf16::BLayout::kF32KN) {
    bm.ld = n + 2;
    b32.resize(static_cast<size_t>(k * bm.ld));
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t j = 0; j < n; ++j) {
        const float v = dist(rng);
        b32[kk * bm.ld + j] = v;
        bref[kk * n + j] = rb(v);
      }
    }
    bm.data = b32.data();
  } else {
    bm.ld = k + 1;
    b32.resize(static_cast<size_t>(n * bm.ld));
    b16.resize(b32.size());
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t kk = 0; kk < k; ++kk) {
        const float v = dist(rng);
        b32[j * bm.ld + kk] = v;
        b16[j * bm.ld + kk] = f32_to_bf16(v);
        bref[kk * n + j] = rb(v);
      }
    }
    bm.data = layout == gemm_bf16::BLayout::kBf16NK ? static_cast<const void*>(b16.data())
                                                    : static_cast<const void*>(b32.data());
  }
  std::vector<int8_t> b8;
  std::vector<float> scales;
  if (layout == gemm_bf16::BLayout::kI8NK) {
    // int8 weights with a scale per group of 32 (k padded to whole groups in ld): the packer's
    // bf16(q * scale), in the reference too.
    bm.ld = (k + 31) / 32 * 32 + 32;
    bm.group = 32;
    b8.assign(static_cast<size_t>(n * bm.ld), 0);
    scales.resize(static_cast<size_t>(n * (bm.ld / 32)));
    std::uniform_int_distribution<int> q(-127, 127);
    for (float& v : scales) v = 0.01f + 0.02f * std::fabs(dist(rng));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t kk = 0; kk < k; ++kk) {
        const int8_t v = static_cast<int8_t>(q(rng));
        b8[j * bm.ld + kk] = v;
        bref[kk * n + j] = rb(static_cast<float>(v) * scales[j * (bm.ld / 32) + kk / 32]);
      }
    }
    bm.data = b8.data();
    bm.scales = scales.data();
  }
  std::vector<float> c(static_cast<size_t>(m * ldc));
  for (float& v : c) v = dist(rng);
  const std::vector<float> c0 = c;
  const float* bias_p = with_bias ? bias.data() : nullptr;
  if (entry == Entry::kGemm) {
    gemm_bf16::gemm(m, n, k, a.data(), lda, bm, bias_p, c.data(), ldc, accumulate);
  } else {
    const gemm_bf16::PackedB packed = gemm_bf16::pack(bm, n, k);
    if (entry == Entry::kPacked) {
      gemm_bf16::gemm_packed(m, a.data(), lda, packed, bias_p, c.data(), ldc, accumulate);
    } else {
      // bf16 rows with stride kpad + 2 and the odd-k pad column zero, as the contract says.
      const int64_t lda16 = packed.kpad() + 2;
      std::vector<uint16_t> a16(static_cast<size_t>(m * lda16), 0xffff);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t kk = 0; kk < packed.kpad(); ++kk)
          a16[i * lda16 + kk] = kk < k ? f32_to_bf16(a[i * lda + kk]) : 0;
      }
      gemm_bf16::gemm_packed_bf16a(m, a16.data(), lda16, packed, bias_p, c.data(), ldc, accumulate);
    }
  }
  const std::string what = "m=" + std::to_string(m) + " n=" + std::to_string(n) +
                           " k=" + std::to_string(k) +
                           " layout=" + std::to_string(static_cast<int>(layout)) +
                           (with_bias ? " bias" : "") + (accumulate ? " acc" : "");
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[i * ldc + j];
      if (j >= n) {  // padding columns untouched
        ASSERT_EQ(got, c0[i * ldc + j]) << what << " wrote past n at " << i << "," << j;
        continue;
      }
      double s = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(rb(a[i * lda + kk])) * bref[kk * n + j];
        s += p;
        mag += std::fabs(p);
      }
      if (with_bias) s += bias[j], mag += std::fabs(bias[j]);
      if (accumulate) s += c0[i * ldc + j], mag += std::fabs(c0[i * ldc + j]);
      // f32 accumulation of exact bf16 products: a few ulps of the magnitude per term.
      const double tol = 1e-6 + 2e-7 * static_cast<double>(k + 2) * mag / std::sqrt(k + 2.0);
      ASSERT_NEAR(got, s, tol) << what << " at " << i << "," << j;
    }
  }
}

TEST_F(GemmBf16Test, MatchesReferenceOnAwkwardSizes) {
  std::mt19937 rng(7);
  for (int threads : {1, 2}) {
    set_default_threads(threads);
    for (int64_t m : {1, 11, 12, 13, 50, 151}) {
      for (int64_t n : {1, 31, 32, 33, 97}) {
        for (int64_t k : {1, 2, 7, 64, 129}) {
          check(m, n, k, gemm_bf16::BLayout::kBf16NK, (m + n) % 2 == 0, false, rng);
        }
      }
    }
  }
}

TEST_F(GemmBf16Test, EveryLayoutBiasAndAccumulate) {
  std::mt19937 rng(11);
  set_default_threads(2);
  for (auto layout : {gemm_bf16::BLayout::kBf16NK, gemm_bf16::BLayout::kF32NK,
                      gemm_bf16::BLayout::kF32KN, gemm_bf16::BLayout::kI8NK}) {
    for (bool bias : {false, true}) {
      for (bool acc : {false, true}) {
        check(37, 70, 45, layout, bias, acc, rng);
        check(300, 260, 300, layout, bias, acc, rng);  // several tasks, row and column split
      }
    }
  }
}

// B packed once: the same results as gemm() for every layout, with k long enough for several k
// blocks (the packed path accumulates C across blocks of 256 k), odd k, row and column task splits.
TEST_F(GemmBf16Test, PackedBMatchesReference) {
  std::mt19937 rng(13);
  for (int threads : {1, 2}) {
    set_default_threads(threads);
    for (Entry entry : {Entry::kPacked, Entry::kPackedBf16A}) {
      check(13, 33, 7, gemm_bf16::BLayout::kF32NK, true, false, rng, entry);
      check(1, 97, 129, gemm_bf16::BLayout::kBf16NK, false, true, rng, entry);
      check(151, 70, 601, gemm_bf16::BLayout::kF32KN, true, true, rng, entry);
      check(200, 64, 1031, gemm_bf16::BLayout::kF32NK, true, false, rng, entry);
      check(40, 300, 300, gemm_bf16::BLayout::kBf16NK, false, false, rng, entry);
      check(33, 41, 129, gemm_bf16::BLayout::kI8NK, true, false, rng, entry);
    }
  }
}

TEST_F(GemmBf16Test, EmptyKGivesBiasOrKeepsC) {
  std::vector<float> c = {1, 2, 3, 4};
  const float bias[2] = {10, 20};
  gemm_bf16::BMatrix bm{nullptr, gemm_bf16::BLayout::kBf16NK, 0};
  gemm_bf16::gemm(2, 2, 0, nullptr, 0, bm, bias, c.data(), 2, true);
  EXPECT_EQ(c, (std::vector<float>{11, 22, 13, 24}));
  gemm_bf16::gemm(2, 2, 0, nullptr, 0, bm, nullptr, c.data(), 2, false);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

TEST_F(GemmBf16Test, RoundsLikeTheScalarConversion) {
  // Ties and NaN through convert_a: the vector and scalar tails must agree with f32_to_bf16.
  std::vector<float> src(40);
  for (size_t i = 0; i < src.size(); ++i) {
    src[i] = f32_from_bits(0x3f808000u + static_cast<uint32_t>(i) * 0x8000u);  // exact ties
  }
  src[3] = std::nanf("");
  std::vector<uint16_t> out(40);
  gemm_bf16::avx512bf16::convert_a(src.data(), 40, 1, 40, out.data(), 40);
  for (size_t i = 0; i < src.size(); ++i) {
    if (i == 3) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(out[i])));
      continue;
    }
    EXPECT_EQ(out[i], f32_to_bf16(src[i])) << i;
  }
}

}  // namespace
}  // namespace tessera::kernels::cpu
