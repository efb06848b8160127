// cpu::diffusion_attention (flash, partially fused softmax, naive unfused, auto) against the
// reference that materialises each score row in double: SD's head dims (40, 80, 160), cross-
// attention with 77 keys, key counts around the 256-key exp tile and a kv_len large enough that
// the partially fused path's query block shrinks below 64 (and does not divide q_len), packed QKV
// strides with a padded output, every code path with 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/diffusion_ops.h"
#include "kernels/ops.h"
#include "tests/support/diffusion_cases.h"
#include "tests/support/kernel_test_util.h"

namespace tessera {
namespace {

namespace ref = kernels::ref;
namespace cpu = kernels::cpu;
using kernels::AttentionAlgo;
using kernels::AttentionShape;

// Outputs are convex combinations of v rows (|o| <= 1). f32 dot products over head_dim <= 160,
// the 2-ulp exp and f32 sums over <= 4099 keys keep the error ~1e-6; stated tolerance 1e-5
// absolute + 1e-5 relative. A wrong max, sum or tile edge is off by O(0.01) or more.
constexpr double kAtol = 1e-5, kRtol = 1e-5;

TEST(DiffusionAttention, EveryAlgorithmMatchesReference) {
  uint64_t seed = 100;
  for (const test::AttentionCase& c : test::kAttentionCases) {
    if (!test::runs_on_cpu(c.runs_on)) continue;
    const test::AttentionInputs in = test::attention_inputs(c, seed);
    const AttentionShape& s = in.shape;
    const float* qp = in.q.data();
    const float* kp = in.k_in(qp, in.k.data());
    const float* vp = in.v_in(qp, in.v.data());
    const size_t o_size = in.out_floats();
    std::vector<float> expected(o_size, 0.0f), actual(o_size);
    ref::attention(qp, kp, vp, expected.data(), s);
    for (AttentionAlgo algo : {AttentionAlgo::kAuto, AttentionAlgo::kFlash,
                               AttentionAlgo::kPartialFused, AttentionAlgo::kNaive}) {
      std::vector<float> scratch(size_t(cpu::attention_scratch_floats(s, algo)));
      test::for_each_cpu_mode([&] {
        SCOPED_TRACE(test::describe(c, algo));
        std::fill(actual.begin(), actual.end(), 0.0f);  // the padding stays 0, as in expected
        cpu::diffusion_attention(qp, kp, vp, actual.data(), s, algo, scratch.data());
        EXPECT_TRUE(test::all_close(actual.data(), expected.data(), o_size, kAtol, kRtol));
      });
    }
  }
}

TEST(DiffusionAttention, ChooserAndScratch) {
  const float scale = 1.0f / std::sqrt(40.0f);
  const auto self = kernels::contiguous_attention(2, 8, 4096, 4096, 40, false, scale);
  const auto cross = kernels::contiguous_attention(2, 8, 4096, 77, 40, false, scale);
  const auto causal = kernels::contiguous_attention(1, 12, 77, 77, 64, true, scale);
  // kAuto never resolves to itself, and causal shapes go to the only path that masks.
  EXPECT_NE(cpu::choose_attention_algo(self), AttentionAlgo::kAuto);
  EXPECT_NE(cpu::choose_attention_algo(cross), AttentionAlgo::kAuto);
  EXPECT_EQ(cpu::choose_attention_algo(causal), AttentionAlgo::kFlash);
  EXPECT_EQ(cpu::attention_scratch_floats(self, AttentionAlgo::kNaive), 4096 * 4096);
  EXPECT_EQ(cpu::attention_scratch_floats(self, AttentionAlgo::kPartialFused), 0);
  EXPECT_EQ(cpu::attention_scratch_floats(self, AttentionAlgo::kFlash), 0);
}

TEST(DiffusionAttention, AutoMasksCausalShapes) {
  // kAuto must route causal attention to a path that masks (a text encoder's shapes).
  const auto s = kernels::contiguous_attention(1, 2, 19, 23, 24, true, 0.2f);
  const auto q = test::random_floats(size_t(19 * 48), 500),
             k = test::random_floats(size_t(23 * 48), 501);
  const auto v = test::random_floats(size_t(23 * 48), 502);
  std::vector<float> expected(q.size()), actual(q.size());
  ref::attention(q.data(), k.data(), v.data(), expected.data(), s);
  test::for_each_cpu_mode([&] {
    cpu::diffusion_attention(q.data(), k.data(), v.data(), actual.data(), s, AttentionAlgo::kAuto,
                             nullptr);
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), q.size(), kAtol, kRtol));
  });
}

}  // namespace
}  // namespace tessera
