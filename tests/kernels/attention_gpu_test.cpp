// cuda::attention and cuda::attention_decode against ref::attention / ref::attention_decode:
// head_dim 1..256 (each template bucket, non-multiples of 32), causal with kv_len > q_len and
// kv_len < q_len, packed QKV and padded output layouts, key counts around the tile and split
// boundaries; plus the decode workspace contract and argument checks without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/kernel_test_util.h"

#if TESSERA_HAVE_CUDA
namespace tessera::kernels {
namespace {

// f32 scores and accumulation against a double reference; outputs are convex combinations of
// values in [-1, 1]. A wrong mask, scale or tile bookkeeping moves outputs by ~0.01 or more.
constexpr double kAtol = 2e-5;
constexpr double kRtol = 1e-4;

// Buffer extents implied by a shape's strides (elements), for q/k/v/o.
struct Extents {
  size_t q, k, v, o;
};
Extents extents_of(const AttentionShape& s) {
  auto extent = [&](int64_t batch_stride, int64_t token_stride, int64_t len) -> size_t {
    if (s.batch == 0 || len == 0) return 1;
    return static_cast<size_t>((s.batch - 1) * batch_stride + (len - 1) * token_stride +
                               s.heads * s.head_dim);
  };
  return {extent(s.q_batch_stride, s.q_token_stride, s.q_len),
          extent(s.k_batch_stride, s.k_token_stride, s.kv_len),
          extent(s.v_batch_stride, s.v_token_stride, s.kv_len),
          extent(s.o_batch_stride, s.o_token_stride, s.q_len)};
}

std::string describe(const AttentionShape& s) {
  return "batch=" + std::to_string(s.batch) + " heads=" + std::to_string(s.heads) +
         " q_len=" + std::to_string(s.q_len) + " kv_len=" + std::to_string(s.kv_len) +
         " head_dim=" + std::to_string(s.head_dim) + (s.causal ? " causal" : "");
}

// q, k, v as slices of one packed [batch][token][3][heads][head_dim] buffer (q_len == kv_len), and
// an output with 5 floats of padding after each token.
AttentionShape packed_qkv(int64_t batch, int64_t heads, int64_t len, int64_t head_dim,
                          bool causal) {
  AttentionShape s = contiguous_attention(batch, heads, len, len, head_dim, causal,
                                          1.f / std::sqrt(static_cast<float>(head_dim)));
  const int64_t token = 3 * heads * head_dim;
  s.q_token_stride = s.k_token_stride = s.v_token_stride = token;
  s.q_batch_stride = s.k_batch_stride = s.v_batch_stride = len * token;
  s.o_token_stride = heads * head_dim + 5;
  s.o_batch_stride = len * s.o_token_stride;
  return s;
}

class CudaAttention : public test::GpuTest {
 protected:
  // Runs attention (or attention_decode) on random inputs and compares every element of o's buffer
  // (padding included: the kernel must not write it) with the reference. `packed` means q, k and v
  // are views into one buffer at offsets 0, heads*head_dim and 2*heads*head_dim.
  void check(const AttentionShape& s, bool decode, bool packed, uint64_t seed) {
    SCOPED_TRACE(describe(s) + (decode ? " decode" : "") + (packed ? " packed" : ""));
    const Extents e = extents_of(s);
    const size_t hd = static_cast<size_t>(s.heads * s.head_dim);
    std::vector<float> qkv;
    std::vector<float> q, k, v;
    const float *hq, *hk, *hv;
    if (packed) {
      qkv = test::random_floats(e.q + 2 * hd, seed);
      hq = qkv.data();
      hk = qkv.data() + hd;
      hv = qkv.data() + 2 * hd;
    } else {
      q = test::random_floats(e.q, seed);
      k = test::random_floats(e.k, seed + 1);
      v = test::random_floats(e.v, seed + 2);
      hq = q.data();
      hk = k.data();
      hv = v.data();
    }
    // The output buffer starts as a known pattern; the reference writes the same elements.
    std::vector<float> expected = test::random_floats(e.o, seed + 3);
    const std::vector<float> o_initial = expected;
    if (decode) {
      ref::attention_decode(hq, hk, hv, expected.data(), s);
    } else {
      ref::attention(hq, hk, hv, expected.data(), s);
    }

    cuda::DeviceBuffer d_qkv, d_q, d_k, d_v;
    const float *dq, *dk, *dv;
    if (packed) {
      d_qkv = upload(qkv);
      dq = d_qkv.as<float>();
      dk = dq + hd;
      dv = dq + 2 * hd;
    } else {
      d_q = upload(q);
      d_k = upload(k);
      d_v = upload(v);
      dq = d_q.as<float>();
      dk = d_k.as<float>();
      dv = d_v.as<float>();
    }
    cuda::DeviceBuffer d_o = upload(o_initial);
    if (decode) {
      const size_t ws_bytes = cuda::attention_decode_workspace_bytes(s);
      cuda::DeviceBuffer d_ws = alloc_zeroed<float>(ws_bytes / sizeof(float));
      TESSERA_ASSERT_OK(cuda::attention_decode(dq, dk, dv, d_o.as<float>(), s, d_ws.data(),
                                               d_ws.bytes(), stream_));
      ASSERT_TRUE(sync());
    } else {
      TESSERA_ASSERT_OK(cuda::attention(dq, dk, dv, d_o.as<float>(), s, stream_));
      ASSERT_TRUE(sync());
    }
    const std::vector<float> actual = download<float>(d_o, e.o);
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), e.o, kAtol, kRtol));
  }

  static AttentionShape shape(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len,
                              int64_t head_dim, bool causal) {
    return contiguous_attention(batch, heads, q_len, kv_len, head_dim, causal,
                                1.f / std::sqrt(static_cast<float>(head_dim)));
  }
};

TEST_F(CudaAttention, SmallPrefill) {
  check(shape(1, 1, 1, 1, 1, false), false, false, 10);
  check(shape(2, 3, 5, 5, 64, true), false, false, 20);
  check(shape(1, 2, 3, 70, 40, true), false, false, 30);   // kv_len > q_len: causal offset
  check(shape(1, 3, 17, 50, 17, true), false, false, 40);  // odd head_dim
  check(shape(1, 1, 20, 9, 32, true), false, false, 50);   // kv_len < q_len: first rows see nothing
  check(shape(1, 2, 9, 33, 8, false), false, false, 60);
}

TEST_F(CudaAttention, EveryHeadDimBucket) {
  uint64_t seed = 100;
  for (int64_t head_dim : {31, 32, 33, 64, 65, 100, 128, 129, 200, 256}) {
    check(shape(1, 2, 11, 45, head_dim, true), false, false, seed++);
  }
}

TEST_F(CudaAttention, LongerSequences) {
  check(shape(2, 1, 33, 33, 128, true), false, false, 200);
  check(shape(1, 2, 37, 37, 256, false), false, false, 210);
  check(shape(1, 4, 130, 130, 64, true), false, false, 220);
  check(shape(1, 2, 64, 300, 96, true), false, false, 230);
}

TEST_F(CudaAttention, PackedQkvAndPaddedOutput) {
  check(packed_qkv(2, 4, 19, 64, true), false, true, 300);
  check(packed_qkv(1, 3, 40, 48, false), false, true, 310);
}

TEST_F(CudaAttention, NoKeysGivesZeros) {
  check(shape(1, 1, 3, 0, 8, false), false, false, 350);
  check(shape(1, 2, 1, 0, 16, false), true, false, 360);
}

TEST_F(CudaAttention, SmallDecode) {
  check(shape(1, 1, 1, 1, 64, true), true, false, 400);
  check(shape(2, 3, 1, 31, 64, false), true, false, 410);
  check(shape(1, 2, 1, 64, 100, true), true, false, 420);
  check(shape(1, 2, 1, 65, 128, false), true, false, 430);
  check(shape(1, 1, 1, 7, 1, false), true, false, 440);
}

TEST_F(CudaAttention, DecodeManySplits) {
  check(shape(2, 2, 1, 1000, 256, true), true, false, 500);
  check(shape(1, 4, 1, 4096, 64, false), true, false, 510);  // exactly 64 splits of 64
  check(shape(1, 3, 1, 5000, 80, false), true, false, 520);  // longer splits
}

// A KV cache allocated for max_len tokens of which kv_len are filled: batch stride > kv_len * row.
TEST_F(CudaAttention, DecodeFromPartlyFilledCache) {
  const int64_t heads = 3, head_dim = 64, max_len = 300, kv_len = 77;
  AttentionShape s = shape(2, heads, 1, kv_len, head_dim, false);
  s.k_batch_stride = s.v_batch_stride = max_len * heads * head_dim;
  check(s, true, false, 600);
  check(s, false, false, 610);  // the general kernel on the same layout
}

// The vector split kernel (head_dim 32, 64, 128 with aligned rows) over a bf16 cache, at the decode
// shapes of the models (batch 2 for guidance, 12 heads) and at lengths that leave partial key
// groups, one key, and several splits; against the reference of the bf16 contract. Odd strides
// fall back to the tile kernel and must agree too.
TEST_F(CudaAttention, DecodeVectorKernelOverABf16Cache) {
  uint64_t seed = 700;
  for (int64_t head_dim : {32, 64, 128}) {
    for (int64_t kv_len : {1, 33, 200, 1027}) {
      for (bool padded : {false, true}) {
        AttentionShape s = shape(2, 12, 1, kv_len, head_dim, false);
        if (padded) {  // a token stride that is not a multiple of 8 elements: the tile kernel
          s.k_token_stride = s.v_token_stride = s.heads * head_dim + 3;
          s.k_batch_stride = s.v_batch_stride = kv_len * s.k_token_stride;
        }
        SCOPED_TRACE(describe(s) + (padded ? " padded" : ""));
        const Extents e = extents_of(s);
        const std::vector<float> q = test::random_floats(e.q, seed++);
        const std::vector<float> k32 = test::random_floats(e.k, seed++);
        const std::vector<float> v32 = test::random_floats(e.v, seed++);
        std::vector<uint16_t> k(k32.size()), v(v32.size());
        convert_f32_to_bf16(k32.data(), k.data(), k.size());
        convert_f32_to_bf16(v32.data(), v.data(), v.size());
        std::vector<float> expected = test::random_floats(e.o, seed++);
        const std::vector<float> o_initial = expected;
        ref::attention_decode_bf16kv(q.data(), k.data(), v.data(), expected.data(), s);
        cuda::DeviceBuffer d_q = upload(q), d_k = upload(k), d_v = upload(v),
                           d_o = upload(o_initial);
        cuda::DeviceBuffer d_ws =
            alloc_zeroed<float>(cuda::attention_decode_workspace_bytes(s) / 4);
        TESSERA_ASSERT_OK(cuda::attention_decode_bf16kv(d_q.as<float>(), d_k.as<uint16_t>(),
                                                        d_v.as<uint16_t>(), d_o.as<float>(), s,
                                                        d_ws.data(), d_ws.bytes(), stream_));
        ASSERT_TRUE(sync());
        const std::vector<float> actual = download<float>(d_o, e.o);
        EXPECT_TRUE(test::all_close(actual.data(), expected.data(), e.o, kAtol, kRtol));
      }
    }
  }
}

// One workspace for decode calls of different shapes, in any order, repeated (a graph replays the
// same call): every result matches the reference, and the fused combine's arrival counters (the
// workspace's first 16 KiB) are zero again after each call. 6 x 12 (batch, head) slices then 2 x 12
// then 6 x 12 again: the smaller shape's partials lie where the larger one's do; then 4097 heads,
// past the counters (the combine kernel), and a fused call after it.
TEST_F(CudaAttention, DecodeWorkspaceServesEveryShapeAndLeavesItsCountersAtZero) {
  const AttentionShape big = shape(6, 12, 1, 700, 128, false);
  const AttentionShape small = shape(2, 12, 1, 90, 64, false);
  // More (batch, head) slices than the fused combine's counters: the split kernel, then the
  // combine kernel.
  const AttentionShape wide_shape = shape(1, 4097, 1, 100, 64, false);
  const size_t bytes = std::max({cuda::attention_decode_workspace_bytes(big),
                                 cuda::attention_decode_workspace_bytes(small),
                                 cuda::attention_decode_workspace_bytes(wide_shape)});
  cuda::DeviceBuffer d_ws = alloc_zeroed<uint8_t>(bytes);
  uint64_t seed = 800;
  for (const AttentionShape* s : {&big, &small, &big, &big, &small, &wide_shape, &small}) {
    SCOPED_TRACE(describe(*s));
    const Extents e = extents_of(*s);
    const std::vector<float> q = test::random_floats(e.q, seed++);
    const std::vector<float> k = test::random_floats(e.k, seed++);
    const std::vector<float> v = test::random_floats(e.v, seed++);
    std::vector<float> expected(e.o, 0.f);
    ref::attention_decode(q.data(), k.data(), v.data(), expected.data(), *s);
    cuda::DeviceBuffer d_q = upload(q), d_k = upload(k), d_v = upload(v);
    cuda::DeviceBuffer d_o = alloc<float>(e.o);
    TESSERA_ASSERT_OK(cuda::attention_decode(d_q.as<float>(), d_k.as<float>(), d_v.as<float>(),
                                             d_o.as<float>(), *s, d_ws.data(), bytes, stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(d_o, e.o);
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), e.o, kAtol, kRtol));
    const std::vector<uint32_t> counters = download<uint32_t>(d_ws, 4096);
    for (size_t i = 0; i < counters.size(); ++i) {
      ASSERT_EQ(counters[i], 0u) << "arrival counter " << i << " left at " << counters[i];
    }
  }
}

TEST(CudaAttentionArgs, WorkspaceSizeDoesNotDependOnKvLen) {
  AttentionShape s = contiguous_attention(2, 3, 1, 1, 64, false, 0.125f);
  const size_t bytes = cuda::attention_decode_workspace_bytes(s);
  EXPECT_GT(bytes, 0u);
  for (int64_t kv_len : {0, 31, 64, 4096, 4097, 100000}) {
    s.kv_len = kv_len;
    EXPECT_EQ(cuda::attention_decode_workspace_bytes(s), bytes) << "kv_len " << kv_len;
  }
  AttentionShape bigger = s;
  bigger.head_dim = 128;
  EXPECT_GT(cuda::attention_decode_workspace_bytes(bigger), bytes);
}

// Argument checks happen before any CUDA call, so these run (and must pass) without a device.
TEST(CudaAttentionArgs, DecodeRejectsMissingOrSmallWorkspace) {
  const AttentionShape s = contiguous_attention(1, 2, 1, 10, 64, false, 0.125f);
  float dummy[4] = {};
  const size_t needed = cuda::attention_decode_workspace_bytes(s);
  Status st = cuda::attention_decode(dummy, dummy, dummy, dummy, s, nullptr, needed, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.message();
  st = cuda::attention_decode(dummy, dummy, dummy, dummy, s, dummy, needed - 1, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find(std::to_string(needed)), std::string::npos) << st.message();
}

TEST(CudaAttentionArgs, DecodeRejectsSeveralQueries) {
  const AttentionShape s = contiguous_attention(1, 2, 2, 10, 64, false, 0.125f);
  float dummy[4] = {};
  const Status st = cuda::attention_decode(dummy, dummy, dummy, dummy, s, dummy, 1 << 20, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("q_len"), std::string::npos) << st.message();
}

TEST(CudaAttentionArgs, RejectsUnsupportedHeadDim) {
  float dummy[4] = {};
  for (int64_t head_dim : {0, 257, 512}) {
    const AttentionShape s = contiguous_attention(1, 1, 4, 4, head_dim, true, 0.1f);
    const Status st = cuda::attention(dummy, dummy, dummy, dummy, s, nullptr);
    EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << head_dim;
    EXPECT_NE(st.message().find("head_dim"), std::string::npos) << st.message();
  }
}

TEST(CudaAttentionArgs, EmptyBatchIsANoOp) {
  const AttentionShape s = contiguous_attention(0, 4, 3, 3, 64, true, 0.125f);
  TESSERA_EXPECT_OK(cuda::attention(nullptr, nullptr, nullptr, nullptr, s, nullptr));
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaAttention)
#endif
