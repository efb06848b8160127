// cpu::attention (flash-style tiles, online softmax) and cpu::attention_decode (split keys) against
// the reference that materialises every score row: awkward lengths around the 64-key / 16..64-query
// tiles, causal with q_len < kv_len (and > kv_len), head dims of Cube (64, 128) and SD (40, 80,
// 160), packed QKV strides, every code path with 1 and 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/isa.h"
#include "kernels/ops.h"
#include "tests/support/kernel_test_util.h"

namespace tessera {
namespace {

namespace ref = kernels::ref;
namespace cpu = kernels::cpu;
using kernels::AttentionShape;

// Outputs are convex combinations of v rows (|o| <= max|v| = 1 here). f32 dot products over
// head_dim <= 160 and the 2-ulp exp keep the error near 2e-7; 1e-5 absolute (+1e-5 relative) is the
// stated tolerance, while a wrong mask, tile edge or rescale is off by O(0.1).
constexpr double kAtol = 1e-5, kRtol = 1e-5;

struct Buffers {
  std::vector<float> q, k, v;
};

// Packed QKV layout [batch][token][3][heads][head_dim] for q_len == kv_len, else separate
// contiguous tensors; the output row may have padding (o_pad floats after each token's heads).
struct Problem {
  AttentionShape shape;
  std::vector<float> qkv, q, k, v;  // qkv used when packed
  const float* qp = nullptr;
  const float* kp = nullptr;
  const float* vp = nullptr;
  int64_t o_pad = 0;
  size_t o_size = 0;
};

Problem make_problem(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len, int64_t head_dim,
                     bool causal, bool packed, uint64_t seed, float q_range = 1.0f) {
  Problem p;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.shape = kernels::contiguous_attention(batch, heads, q_len, kv_len, head_dim, causal, scale);
  const int64_t hd = heads * head_dim;
  if (packed) {
    p.qkv = test::random_floats(size_t(batch * kv_len * 3 * hd), seed);
    for (size_t i = 0; i < p.qkv.size(); i += 3 * size_t(hd))  // scale the q slices only
      for (int64_t j = 0; j < hd; ++j) p.qkv[i + size_t(j)] *= q_range;
    p.qp = p.qkv.data();
    p.kp = p.qkv.data() + hd;
    p.vp = p.qkv.data() + 2 * hd;
    auto& s = p.shape;
    s.q_token_stride = s.k_token_stride = s.v_token_stride = 3 * hd;
    s.q_batch_stride = s.k_batch_stride = s.v_batch_stride = kv_len * 3 * hd;
  } else {
    p.q = test::random_floats(size_t(batch * q_len * hd), seed, -q_range, q_range);
    p.k = test::random_floats(size_t(batch * kv_len * hd), seed + 1);
    p.v = test::random_floats(size_t(batch * kv_len * hd), seed + 2);
    p.qp = p.q.data();
    p.kp = p.k.data();
    p.vp = p.v.data();
  }
  p.o_pad = packed ? 5 : 0;
  p.shape.o_token_stride = hd + p.o_pad;
  p.shape.o_batch_stride = q_len * p.shape.o_token_stride;
  p.o_size = size_t(batch * p.shape.o_batch_stride);
  return p;
}

std::string describe(const AttentionShape& s) {
  return "batch " + std::to_string(s.batch) + " heads " + std::to_string(s.heads) + " q_len " +
         std::to_string(s.q_len) + " kv_len " + std::to_string(s.kv_len) + " head_dim " +
         std::to_string(s.head_dim) + (s.causal ? " causal" : " full");
}

// Runs cpu::attention (or attention_decode) in every mode and compares with ref::attention. The
// output starts as NaN everywhere: padding must stay NaN (untouched), everything else must match.
void check_against_reference(const Problem& p, bool decode) {
  std::vector<float> expected(p.o_size, NAN);
  ref::attention(p.qp, p.kp, p.vp, expected.data(), p.shape);
  test::for_each_cpu_mode([&] {
    SCOPED_TRACE(describe(p.shape) + (decode ? " decode" : ""));
    std::vector<float> actual(p.o_size, NAN);
    if (decode) {
      cpu::attention_decode(p.qp, p.kp, p.vp, actual.data(), p.shape);
    } else {
      cpu::attention(p.qp, p.kp, p.vp, actual.data(), p.shape);
    }
    const int64_t row = p.shape.o_token_stride, used = row - p.o_pad;
    for (size_t i = 0; i < p.o_size; ++i) {
      if (int64_t(i) % row >= used) {
        ASSERT_TRUE(std::isnan(actual[i])) << "padding written at " << i;
      }
    }
    // Compare the used parts (NaN padding compares as equal only bitwise, so skip it).
    for (size_t start = 0; start < p.o_size; start += size_t(row)) {
      ASSERT_TRUE(test::all_close(actual.data() + start, expected.data() + start, size_t(used),
                                  kAtol, kRtol))
          << "output row " << start / size_t(row);
    }
  });
}

TEST(Attention, MatchesReference) {
  struct Case {
    int64_t batch, heads, q_len, kv_len, head_dim;
    bool causal, packed;
  };
  const Case cases[] = {
      {1, 1, 3, 3, 1, true, false},      {1, 2, 3, 17, 40, true, false},
      {2, 3, 17, 17, 64, true, true},    {1, 2, 77, 77, 80, false, true},
      {1, 1, 78, 130, 128, true, false}, {2, 2, 130, 300, 160, true, false},
      {1, 2, 300, 300, 64, true, true},  {1, 1, 17, 77, 1, false, false},
      {1, 1, 65, 65, 33, true, false},   {1, 2, 129, 129, 128, false, false},
      {2, 1, 40, 300, 48, true, false},  {1, 1, 2, 130, 16, false, false},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    check_against_reference(
        make_problem(c.batch, c.heads, c.q_len, c.kv_len, c.head_dim, c.causal, c.packed, seed++),
        false);
  }
}

TEST(Attention, CausalWithMoreQueriesThanKeys) {
  // Query i sees keys j <= i + (kv_len - q_len): the first q_len - kv_len queries see nothing and
  // get zeros (the reference's convention), the rest a growing prefix.
  const Problem p = make_problem(1, 2, 20, 7, 24, true, false, 99);
  check_against_reference(p, false);
  std::vector<float> out(p.o_size, NAN);
  cpu::attention(p.qp, p.kp, p.vp, out.data(), p.shape);
  for (int64_t i = 0; i < 13 * 2 * 24; ++i) ASSERT_EQ(out[size_t(i)], 0.0f);
}

TEST(Attention, HugeHeadDimUsesRowPath) {
  // head_dim beyond the tile scratch: each query row streams over the keys on its own.
  check_against_reference(make_problem(1, 2, 9, 70, 1300, true, false, 7), false);
}

TEST(Attention, LargeScoresStayFinite) {
  // Scores of order 1e3..1e4: exp(s - max) must use the running max, or everything overflows.
  for (bool causal : {false, true}) {
    const Problem p = make_problem(1, 2, 70, 70, 64, causal, false, 123, 3000.0f);
    check_against_reference(p, false);
  }
}

TEST(AttentionDecode, MatchesReference) {
  struct Case {
    int64_t batch, heads, kv_len, head_dim;
  };
  // batch * heads < threads exercises the split-key path (2 threads), >= threads the per-head one.
  const Case cases[] = {{1, 1, 1, 64},    {1, 1, 3, 40},     {1, 1, 17, 80},  {1, 1, 77, 128},
                        {1, 1, 130, 160}, {1, 1, 300, 64},   {2, 3, 78, 128}, {1, 12, 1024, 128},
                        {1, 1, 1024, 7},  {2, 1, 257, 2000}, {2, 5, 600, 64}, {1, 2, 256, 33}};
  uint64_t seed = 500;
  for (const Case& c : cases) {
    for (bool causal : {false, true}) {  // causal is a no-op for one query: it sees every key
      check_against_reference(
          make_problem(c.batch, c.heads, 1, c.kv_len, c.head_dim, causal, false, seed++), true);
    }
  }
}

// Every key's score must be the same bits whichever loop of the decode's dot product computes it
// (blocks of kLanes keys reduced together, then 4 keys, then 1): with identical keys and one-hot
// values, output j is key j's softmax weight, so all of them must be equal, bit for bit.
TEST(AttentionDecode, EveryKeyScoredAlikeWhateverItsBlock) {
  struct Case {
    int64_t kv_len, head_dim;
  };
  for (const Case c : {Case{37, 40}, Case{53, 64}, Case{21, 32}, Case{70, 96}}) {
    std::vector<float> q(static_cast<size_t>(c.head_dim));
    std::vector<float> key(static_cast<size_t>(c.head_dim));
    uint32_t state = static_cast<uint32_t>(c.kv_len * 977 + c.head_dim);
    auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / 16777216.0f * 2.0f - 1.0f;
    };
    // Scores in the tens: a score one rounding step off (~2e-6 there) moves its exp(s - max) off
    // 1.0f, so any difference in a key's bits shows in its output.
    for (float& x : q) x = 8.0f * next();
    for (float& x : key) x = 8.0f * next();
    std::vector<float> k, v(static_cast<size_t>(c.kv_len * c.head_dim), 0.0f);
    for (int64_t j = 0; j < c.kv_len; ++j) {
      k.insert(k.end(), key.begin(), key.end());
      v[static_cast<size_t>(j * c.head_dim + j)] = 1.0f;
    }
    const AttentionShape s = kernels::contiguous_attention(1, 1, 1, c.kv_len, c.head_dim, false,
                                                           1.0f / std::sqrt(float(c.head_dim)));
    std::vector<float> o(static_cast<size_t>(c.head_dim));
    test::for_each_cpu_mode([&] {
      SCOPED_TRACE("kv_len " + std::to_string(c.kv_len) + ", head_dim " +
                   std::to_string(c.head_dim));
      cpu::attention_decode(q.data(), k.data(), v.data(), o.data(), s);
      EXPECT_GT(o[0], 0.0f);
      for (int64_t j = 1; j < c.kv_len; ++j)
        ASSERT_EQ(o[static_cast<size_t>(j)], o[0]) << "key " << j;
    });
  }
}

TEST(AttentionDecode, EqualsLastRowOfFullAttention) {
  for (int64_t len : {1, 17, 130, 300}) {
    const int64_t heads = 3, head_dim = 80;
    const Problem full = make_problem(2, heads, len, len, head_dim, true, true, uint64_t(len));
    std::vector<float> o_full(full.o_size);
    // Decode reads the last query token of the packed buffer and writes a [batch][1][heads] output.
    AttentionShape last = full.shape;
    last.q_len = 1;
    last.o_token_stride = heads * head_dim;
    last.o_batch_stride = heads * head_dim;
    const float* q_last = full.qp + (len - 1) * full.shape.q_token_stride;
    std::vector<float> o_dec(static_cast<size_t>(2 * heads * head_dim));
    test::for_each_cpu_mode([&] {
      SCOPED_TRACE("len " + std::to_string(len));
      cpu::attention(full.qp, full.kp, full.vp, o_full.data(), full.shape);
      cpu::attention_decode(q_last, full.kp, full.vp, o_dec.data(), last);
      for (int64_t b = 0; b < 2; ++b) {
        const float* row =
            o_full.data() + b * full.shape.o_batch_stride + (len - 1) * full.shape.o_token_stride;
        EXPECT_TRUE(test::all_close(o_dec.data() + b * heads * head_dim, row,
                                    size_t(heads * head_dim), 2e-6, 2e-6));
      }
    });
  }
}

TEST(Attention, EqualKeysAverageValues) {
  // Identical keys give uniform weights: every output is the mean of the visible values.
  const int64_t kv_len = 77, head_dim = 40;
  auto p = make_problem(1, 1, 77, kv_len, head_dim, true, false, 3);
  for (int64_t j = 1; j < kv_len; ++j)
    for (int64_t d = 0; d < head_dim; ++d) p.k[size_t(j * head_dim + d)] = p.k[size_t(d)];
  test::for_each_cpu_mode([&] {
    std::vector<float> out(p.o_size);
    cpu::attention(p.qp, p.kp, p.vp, out.data(), p.shape);
    for (int64_t i : {int64_t{0}, int64_t{40}, kv_len - 1}) {
      for (int64_t d = 0; d < head_dim; ++d) {
        double mean = 0.0;
        for (int64_t j = 0; j <= i; ++j) mean += p.v[size_t(j * head_dim + d)];
        mean /= double(i + 1);
        ASSERT_NEAR(out[size_t(i * head_dim + d)], mean, 2e-6) << "query " << i << " dim " << d;
      }
    }
  });
}

// allow_bf16: on AVX-512 BF16 CPUs long non-causal shapes go through attention_bf16.cpp (q, k, v
// and the probabilities rounded to bf16). Against the f32 reference on the same inputs the error
// is the bf16 rounding's (~2^-9 relative per operand, averaged over the keys): 1e-2 absolute on
// outputs bounded by 1 is the stated tolerance (a wrong panel edge or normalisation is O(0.1) or
// more). Elsewhere (other CPUs, causal or short shapes) the flag must change nothing.
TEST(Attention, AllowBf16StaysCloseAndLeavesPaddingAlone) {
  struct Case {
    int64_t batch, heads, q_len, kv_len, head_dim;
    bool packed;
  };
  const Case cases[] = {{1, 12, 200, 1024, 64, false},
                        {2, 3, 97, 97, 40, true},
                        {1, 2, 64, 300, 80, false},
                        {1, 1, 130, 77, 31, false},
                        {1, 2, 20, 100, 64, false}};  // the last: too few queries, f32 path
  uint64_t seed = 100;
  for (const Case& c : cases) {
    Problem p = make_problem(c.batch, c.heads, c.q_len, c.kv_len, c.head_dim, false, c.packed,
                             seed++, 2.0f);
    std::vector<float> expected(p.o_size, NAN);
    ref::attention(p.qp, p.kp, p.vp, expected.data(), p.shape);
    // The flag must select the path: outputs differ from the f32 path's where the bf16 path
    // applies (its rounding is visible) and are bit-identical where it does not.
    std::vector<float> f32_path(p.o_size, NAN);
    cpu::attention(p.qp, p.kp, p.vp, f32_path.data(), p.shape);
    const bool bf16_path = cpu::gemm_bf16::available() && c.q_len >= 64 && c.kv_len >= 32;
    p.shape.allow_bf16 = true;
    for (int threads : {1, 2}) {
      set_default_threads(threads);
      SCOPED_TRACE(describe(p.shape) + " threads " + std::to_string(threads));
      std::vector<float> actual(p.o_size, NAN);
      cpu::attention(p.qp, p.kp, p.vp, actual.data(), p.shape);
      const int64_t row = p.shape.o_token_stride, used = row - p.o_pad;
      double worst = 0;
      for (size_t i = 0; i < p.o_size; ++i) {
        if (int64_t(i) % row >= used) {
          ASSERT_TRUE(std::isnan(actual[i])) << "padding written at " << i;
          continue;
        }
        ASSERT_TRUE(std::isfinite(actual[i])) << i;
        worst = std::max(worst, std::fabs(double(actual[i]) - expected[i]));
      }
      EXPECT_LT(worst, 1e-2);
      bool identical = true;
      for (size_t i = 0; i < p.o_size; ++i) {
        if (!std::isnan(actual[i]) && actual[i] != f32_path[i]) identical = false;
      }
      EXPECT_EQ(identical, !bf16_path);
    }
  }
  set_default_threads(0);
}

}  // namespace
}  // namespace tessera
