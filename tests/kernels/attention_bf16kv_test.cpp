// cpu::attention_decode_bf16kv (decode attention over a bf16 K/V cache) against
// ref::attention_decode_bf16kv, and against attention_decode on the widened cache: awkward key
// counts around the 64-key tiles, head dims that are not multiples of 16 (masked widening), strided
// caches with slack slots (the GPT's [batch][slots][heads * head_dim] layout), the split-key path
// (batch * heads < threads) and the per-head one, every CPU mode (AVX-512 with and without the
// vdpbf16ps scores, AVX2, scalar) with 1 and 2 threads; q is rounded to bf16 on every path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/gemm_bf16.h"
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
  const Case cases[] = {{1, 1, 1, 64, 0},
                        {1, 1, 3, 40, 5},
                        {1, 1, 63, 80, 1},
                        {1, 1, 65, 128, 0},
                        {1, 2, 129, 7, 3},
                        {2, 3, 78, 128, 11},
                        {2, 12, 142, 128, 9},
                        {1, 1, 300, 33, 0},
                        {2, 1, 257, 200, 2},
                        {1, 1, 20, 9000, 0},  // head_dim past the stack tile: heap scratch
                        // the fused AVX-512 fold's head dims (32, 64, 128, 256), tails of its
                        // 32-key tiles, one key, and the split-key path
                        {1, 2, 70, 64, 1},
                        {1, 1, 33, 32, 0},
                        {2, 2, 100, 256, 0},
                        {1, 1, 1, 128, 0},
                        {1, 1, 1500, 128, 5},
                        // the row-major walk (all heads per key tile, from 256 keys): v0.5's
                        // shape, chunk and tile tails, one batch row, dims without a fused fold
                        {2, 12, 1100, 128, 7},
                        {1, 3, 256, 64, 0},
                        {1, 2, 301, 256, 1},
                        {2, 4, 700, 32, 0},
                        {1, 5, 333, 40, 3}};
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
    std::vector<float> qr(q.size());  // q rounded to bf16 (nearest even), as the contract says
    for (size_t i = 0; i < q.size(); ++i) qr[i] = bf16_to_f32(f32_to_bf16(q[i]));
    std::vector<float> expected(q.size(), NAN), widened_ref(q.size(), NAN);
    ref::attention_decode_bf16kv(q.data(), k.data(), v.data(), expected.data(), s);
    // The reference itself is attention of the rounded q over the widened values.
    ref::attention_decode(qr.data(), kf.data(), vf.data(), widened_ref.data(), s);
    ASSERT_TRUE(test::all_equal(expected.data(), widened_ref.data(), expected.size()));
    // Each mode twice: with the AVX-512 BF16 scores (where the CPU has them) and without.
    for (const bool bf16_dot : {true, false}) {
      SCOPED_TRACE(bf16_dot ? "vdpbf16ps scores allowed" : "vdpbf16ps scores off");
      kernels::cpu::gemm_bf16::set_enabled(bf16_dot);
      test::for_each_cpu_mode([&] {
        std::vector<float> actual(q.size(), NAN), f32_path(q.size(), NAN);
        cpu::attention_decode_bf16kv(q.data(), k.data(), v.data(), actual.data(), s);
        // Same tolerance as attention_decode's test (convex combinations of |v| <= 1).
        ASSERT_TRUE(test::all_close(actual.data(), expected.data(), actual.size(), 1e-5, 1e-5));
        // Widening is exact, so the f32 kernel on the widened cache agrees to rounding.
        cpu::attention_decode(qr.data(), kf.data(), vf.data(), f32_path.data(), s);
        ASSERT_TRUE(test::all_close(actual.data(), f32_path.data(), actual.size(), 2e-6, 2e-6));
      });
    }
    kernels::cpu::gemm_bf16::set_enabled(true);
  }
}

TEST(AttentionDecodeBf16Kv, RoundsTheQueryToBf16OnEveryPath) {
  // q = 1 + 2^-9 in every dim rounds to 1 in bf16 (8 significant bits). Key 0 is all ones, key 1
  // all zeros; values 1 and 0; scale 1/32: the score of key 0 is exactly 1 with the rounded q
  // (1.00195 without), so every output is sigmoid(1) = 0.731059 (0.731443 without rounding).
  const int64_t head_dim = 32;
  AttentionShape s = kernels::contiguous_attention(1, 1, 1, 2, head_dim, false, 1.0f / 32.0f);
  const std::vector<float> q(static_cast<size_t>(head_dim), 1.0f + 1.0f / 512.0f);
  std::vector<uint16_t> k(static_cast<size_t>(2 * head_dim), f32_to_bf16(0.0f)), v = k;
  for (int64_t d = 0; d < head_dim; ++d) {
    k[static_cast<size_t>(d)] = f32_to_bf16(1.0f);
    v[static_cast<size_t>(d)] = f32_to_bf16(1.0f);
  }
  const float want = 1.0f / (1.0f + std::exp(-1.0f));
  const float unrounded = 1.0f / (1.0f + std::exp(-(1.0f + 1.0f / 512.0f)));
  ASSERT_GT(unrounded - want, 3e-4f);  // the check below can tell the two apart
  std::vector<float> actual(static_cast<size_t>(head_dim), NAN);
  ref::attention_decode_bf16kv(q.data(), k.data(), v.data(), actual.data(), s);
  for (float x : actual) ASSERT_NEAR(x, want, 2e-6f);
  test::for_each_cpu_mode([&] {
    std::fill(actual.begin(), actual.end(), NAN);
    cpu::attention_decode_bf16kv(q.data(), k.data(), v.data(), actual.data(), s);
    for (float x : actual) ASSERT_NEAR(x, want, 2e-6f);
  });
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
