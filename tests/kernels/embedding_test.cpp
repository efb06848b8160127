// cpu::embedding_gather against ref::embedding_gather: a gather is a copy (f32) or an exact
// widening (bf16 -> f32), so results must match bit for bit, SIMD on and off, 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::kernels {
namespace {

class EmbeddingTest : public ::testing::Test {
 protected:
  void TearDown() override {
    set_simd_enabled(true);
    set_default_threads(0);
  }
};

TEST_F(EmbeddingTest, GatherMatchesReferenceExactly) {
  uint64_t seed = 9;
  for (int64_t rows : {1, 5, 1000}) {
    for (int64_t dim : {1, 7, 16, 33, 1536}) {
      const auto table_f32 = test::random_floats(static_cast<size_t>(rows * dim), ++seed, -3, 3);
      std::vector<uint16_t> table_bf16 = test::random_bf16(table_f32.size(), ++seed, -3, 3);
      // Specials must survive the widening unchanged.
      table_bf16[0] = 0x7fc1;                      // NaN with payload
      table_bf16[table_bf16.size() - 1] = 0xff80;  // -inf
      for (int64_t n : {1, 3, 200}) {
        // Every row once (first and last included), then random ones, repeats allowed.
        std::vector<int32_t> ids =
            test::random_ids(static_cast<size_t>(n), ++seed, static_cast<int32_t>(rows));
        ids[0] = static_cast<int32_t>(rows - 1);
        if (n > 1) ids[1] = 0;
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          const Weight table{dtype == DType::kF32 ? static_cast<const void*>(table_f32.data())
                                                  : static_cast<const void*>(table_bf16.data()),
                             dtype, rows, dim};
          std::vector<float> expected(static_cast<size_t>(n * dim));
          ref::embedding_gather(table, ids.data(), n, expected.data());
          for (int threads : {1, 2}) {
            set_default_threads(threads);
            for (bool simd : {true, false}) {
              set_simd_enabled(simd);
              // NaN fill plus a guard element: every output written, nothing past the end.
              std::vector<float> out(expected.size() + 1, std::numeric_limits<float>::quiet_NaN());
              out.back() = 42.0f;
              cpu::embedding_gather(table, ids.data(), n, out.data());
              ASSERT_TRUE(test::all_equal(out.data(), expected.data(), expected.size()))
                  << dtype_name(dtype) << " rows=" << rows << " dim=" << dim << " n=" << n
                  << " threads=" << threads << " simd=" << simd;
              ASSERT_EQ(out.back(), 42.0f);
            }
          }
        }
      }
    }
  }
}

TEST_F(EmbeddingTest, ReferenceWidensBf16Exactly) {
  const std::vector<uint16_t> table = {0x3f80, 0xc020, 0x0001, 0x8000};  // 1, -2.5, denormal, -0
  const Weight w{table.data(), DType::kBF16, 2, 2};
  const std::vector<int32_t> ids = {1, 0};
  std::vector<float> out(4);
  ref::embedding_gather(w, ids.data(), 2, out.data());
  EXPECT_EQ(out[0], bf16_to_f32(0x0001));
  EXPECT_TRUE(std::signbit(out[1]) && out[1] == 0.0f);
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[3], -2.5f);
}

}  // namespace
}  // namespace tessera::kernels
