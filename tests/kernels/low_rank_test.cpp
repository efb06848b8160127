// kernels::cpu::add_low_rank_product (the LoRA merge's products) against a double-precision loop,
// at awkward sizes: one row, fewer rows than a band, primes, rank 1, and the SD 1.5 shapes' kind.
#include "kernels/cpu/low_rank.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tessera::kernels::cpu {
namespace {

TEST(LowRankProduct, AddsUpTimesDownIntoTheWeight) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const auto& [rows, cols, rank] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 1}, {1, 37, 4}, {7, 3, 2}, {17, 61, 5}, {131, 97, 64}, {320, 2880, 8}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " rank " +
                 std::to_string(rank));
    std::vector<float> c(static_cast<size_t>(rows * cols)), up(static_cast<size_t>(rows * rank)),
        down_t(static_cast<size_t>(cols * rank));
    for (float& v : c) v = normal(rng);
    for (float& v : up) v = normal(rng);
    for (float& v : down_t) v = normal(rng);
    std::vector<double> want(c.begin(), c.end());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < rank; ++k) {
          acc += static_cast<double>(up[r * rank + k]) * down_t[j * rank + k];
        }
        want[r * cols + j] += acc;
      }
    }
    add_low_rank_product(c.data(), rows, cols, up.data(), down_t.data(), rank);
    double worst = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      worst = std::max(worst, std::abs(c[i] - want[i]) / (1.0 + std::abs(want[i])));
    }
    EXPECT_LT(worst, 1e-5);
  }
  // Nothing to add: the weight stays as it is.
  std::vector<float> c = {1.0f, 2.0f};
  add_low_rank_product(c.data(), 1, 2, nullptr, nullptr, 0);
  EXPECT_EQ(c, (std::vector<float>{1.0f, 2.0f}));
}

}  // namespace
}  // namespace tessera::kernels::cpu
