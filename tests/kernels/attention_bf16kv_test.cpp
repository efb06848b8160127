// cpu::attention_decode_bf16kv (decode attention over a bf16 K/V cache) against
// ref::attention_decode_bf16kv, and against attention_decode on the widened cache: awkward key
// counts around the 64-key tiles, head dims that are not multiples of 16 (masked widening), strided
// caches with slack slots (the GPT's [batch][slots][heads * head_dim] layout), the split-key path
// (batch * heads < threads) and the per-head one, every CPU mode (AVX-512, AVX2, scalar) with 1 and
// 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "kernels/ops.h"
#include "tests/support/kernel_test_util.h"

namespace tessera {
namespace {

namespace ref = kernels::ref;
namespace cpu = kernels::cpu;
using kernels::AttentionShape;

struct Case {
  int64_t batch, heads, kv_len, head_dim, slack;  // slack: unused slots after kv_len per row
};

std::string describe(const Case& c) {
  return "batch " + std::to_string(c.batch) + " heads " + std::to_string(c.heads) + " kv_len " +
         std::to_string(c.kv_len) + " head_dim " + std::to_string(c.head_dim) + " slack " +
         std::to_string(c.slack);
}

TEST(AttentionDecodeBf16Kv, MatchesReferenceOnAwkwardSizes) {
  const Case cases[] = {{1, 1, 1, 64, 0},     {1, 1, 3, 40, 5},   {1, 1, 63, 80, 1},
                        {1, 1, 65, 128, 0},   {1, 2, 129, 7, 3},  {2, 3, 78, 128, 11},
                        {2, 12, 142, 128, 9}, {1, 1, 300, 33, 0}, {2, 1, 257, 200, 2},
                        {1, 1, 20, 9000, 0},  // head_dim past the stack tile: heap scratch
                        // the fused AVX-512 fold's head dims (32, 64, 128, 256), tails of its
                        // 32-key tiles, one key, and the split-key path
                        {1, 2, 70, 64, 1},    {1, 1, 33, 32, 0},  {2, 2, 100, 256, 0},
                        {1, 1, 1, 128, 0},    {1, 1, 1500, 128, 5}};
  uint64_t seed = 900;
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const int64_t hd = c.heads * c.head_dim, slots = c.kv_len + c.slack;
    AttentionShape s;
    s.batch = c.batch;
    s.heads = c.heads;
    s.q_len = 1;
    s.kv_len = c.kv_len;
    s.head_dim = c.head_dim;
    s.q_token_stride = s.o_token_stride = s.k_token_stride = s.v_token_stride = hd;
    s.q_batch_stride = s.o_batch_stride = hd;
    s.k_batch_stride = s.v_batch_stride = slots * hd;
    s.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const auto q = test::random_floats(static_cast<size_t>(c.batch * hd), seed++, -2.0f, 2.0f);
    const auto k = test::random_bf16(static_cast<size_t>(c.batch * slots * hd), seed++);
    const auto v = test::random_bf16(static_cast<size_t>(c.batch * slots * hd), seed++);
    std::vector<float> kf(k.size()), vf(v.size());
    convert_bf16_to_f32(k.data(), kf.data(), k.size());
    convert_bf16_to_f32(v.data(), vf.data(), v.size());
    std::vector<float> expected(q.size(), NAN), widened_ref(q.size(), NAN);
    ref::attention_decode_bf16kv(q.data(), k.data(), v.data(), expected.data(), s);
    // The reference itself is attention over the widened values.
    ref::attention_decode(q.data(), kf.data(), vf.data(), widened_ref.data(), s);
    ASSERT_TRUE(test::all_equal(expected.data(), widened_ref.data(), expected.size()));
    test::for_each_cpu_mode([&] {
      std::vector<float> actual(q.size(), NAN), f32_path(q.size(), NAN);
      cpu::attention_decode_bf16kv(q.data(), k.data(), v.data(), actual.data(), s);
      // Same tolerance as attention_decode's test (convex combinations of |v| <= 1).
      ASSERT_TRUE(test::all_close(actual.data(), expected.data(), actual.size(), 1e-5, 1e-5));
      // Widening is exact, so the f32 kernel on the widened cache agrees to rounding.
      cpu::attention_decode(q.data(), kf.data(), vf.data(), f32_path.data(), s);
      ASSERT_TRUE(test::all_close(actual.data(), f32_path.data(), actual.size(), 2e-6, 2e-6));
    });
  }
}

TEST(AttentionDecodeBf16Kv, LargeScoresStayFinite) {
  // Scores of order 1e3: the running max must be used across the widened tiles.
  const int64_t kv_len = 200, head_dim = 64;
  AttentionShape s = kernels::contiguous_attention(1, 1, 1, kv_len, head_dim, false, 1.0f);
  const auto q = test::random_floats(static_cast<size_t>(head_dim), 5, -60.0f, 60.0f);
  const auto k = test::random_bf16(static_cast<size_t>(kv_len * head_dim), 6);
  const auto v = test::random_bf16(static_cast<size_t>(kv_len * head_dim), 7);
  std::vector<float> expected(static_cast<size_t>(head_dim)), actual(expected.size(), NAN);
  ref::attention_decode_bf16kv(q.data(), k.data(), v.data(), expected.data(), s);
  test::for_each_cpu_mode([&] {
    cpu::attention_decode_bf16kv(q.data(), k.data(), v.data(), actual.data(), s);
    for (float x : actual) ASSERT_TRUE(std::isfinite(x));
    ASSERT_TRUE(test::all_close(actual.data(), expected.data(), actual.size(), 1e-4, 1e-4));
  });
}

}  // namespace
}  // namespace tessera
