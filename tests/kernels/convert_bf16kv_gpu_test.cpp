// cuda::convert_f32_to_bf16 / convert_bf16_to_f32 against core/dtype.h's conversions (bit
// for bit: the CPU and CUDA bf16 K/V caches must hold the same bits), and
// cuda::attention_decode_bf16kv against ref::attention_decode_bf16kv on random inputs: head_dim
// buckets, split boundaries, a partly filled cache, batch > 1 with guidance-style strides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/kernel_test_util.h"

#if TESSERA_HAVE_CUDA
namespace tessera::kernels {
namespace {

// The decode kernel scores and accumulates in f32; the reference in double over the same widened
// K/V. Outputs are convex combinations of values in [-1, 1].
constexpr double kAtol = 2e-5;
constexpr double kRtol = 1e-4;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Random values plus the cases rounding must get right: ties to even (both directions), values
// that round up into the next binade or to infinity, denormals, signed zeros, inf, NaNs.
std::vector<float> conversion_inputs(size_t n, uint64_t seed) {
  std::vector<float> v = test::random_floats(n, seed, -1e3f, 1e3f);
  const std::vector<float> special = {
      0.f,
      -0.f,
      1.f,
      from_bits(0x3f808000u),  // tie, even below: rounds down
      from_bits(0x3f818000u),  // tie, odd below: rounds up
      from_bits(0x3f80ffffu),
      from_bits(0x7f7fffffu),  // max float: rounds to inf
      from_bits(0x00000001u),  // smallest denormal
      from_bits(0x807fffffu),
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      from_bits(0x7f800001u),  // signalling NaN: must stay a NaN
      from_bits(0xffc12345u),
  };
  for (size_t i = 0; i < special.size() && i < v.size(); ++i) v[i * 7 % v.size()] = special[i];
  return v;
}

class CudaConvert : public test::GpuTest {
 protected:
  // Converts src[offset, offset + n) both ways on the device (offsets > 0 take the unaligned
  // scalar path) and compares with the host conversions bit for bit.
  void check(size_t n, size_t offset, uint64_t seed) {
    SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset));
    const std::vector<float> src = conversion_inputs(n + offset + 1, seed);
    std::vector<uint16_t> want16(n);
    convert_f32_to_bf16(src.data() + offset, want16.data(), n);
    std::vector<float> want32(n);
    convert_bf16_to_f32(want16.data(), want32.data(), n);

    cuda::DeviceBuffer d_src = upload(src);
    cuda::DeviceBuffer d16 = alloc<uint16_t>(n + offset + 1);
    cuda::DeviceBuffer d32 = alloc<float>(n + offset + 1);
    TESSERA_ASSERT_OK(cuda::convert_f32_to_bf16(
        d16.as<uint16_t>() + offset, d_src.as<float>() + offset, static_cast<int64_t>(n), stream_));
    TESSERA_ASSERT_OK(cuda::convert_bf16_to_f32(
        d32.as<float>() + offset, d16.as<uint16_t>() + offset, static_cast<int64_t>(n), stream_));
    ASSERT_TRUE(sync());
    const std::vector<uint16_t> got16 = download<uint16_t>(d16, n + offset + 1);
    const std::vector<float> got32 = download<float>(d32, n + offset + 1);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got16[offset + i], want16[i]) << "element " << i << " (" << src[offset + i] << ")";
    }
    EXPECT_TRUE(test::all_equal(got32.data() + offset, want32.data(), n));
    // Nothing past the end is written (alloc() filled the buffers with 0xff bytes).
    EXPECT_EQ(got16[offset + n], 0xffffu);
    uint32_t past = 0;
    std::memcpy(&past, &got32[offset + n], 4);
    EXPECT_EQ(past, 0xffffffffu);
  }
};

TEST_F(CudaConvert, MatchesHostConversionBitForBit) {
  uint64_t seed = 1;
  for (size_t n : {1, 3, 4, 5, 64, 67, 1000, 4099}) {
    check(n, 0, seed++);  // aligned: vector path plus tail
    check(n, 1, seed++);  // unaligned: scalar path
  }
  check(1 << 20, 0, 99);  // several grid-stride iterations
}

TEST_F(CudaConvert, ZeroCountIsANoOp) {
  TESSERA_EXPECT_OK(cuda::convert_f32_to_bf16(nullptr, nullptr, 0, stream_));
  TESSERA_EXPECT_OK(cuda::convert_bf16_to_f32(nullptr, nullptr, -3, stream_));
  EXPECT_TRUE(sync());
}

// Argument checks happen before any CUDA call: these run (and must pass) without a device.
TEST(CudaConvertArgs, NullPointersAreRejected) {
  float f = 0;
  Status st = cuda::convert_f32_to_bf16(nullptr, &f, 4, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("convert_f32_to_bf16"), std::string::npos) << st.message();
  st = cuda::convert_bf16_to_f32(&f, nullptr, 4, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("convert_bf16_to_f32"), std::string::npos) << st.message();
}

class CudaDecodeBf16Kv : public test::GpuTest {
 protected:
  // Random q (f32) and bf16 K/V in a cache of `max_len` slots per row (kv_len filled), against
  // the reference; the whole o buffer is compared (padding included).
  void check(int64_t batch, int64_t heads, int64_t kv_len, int64_t head_dim, int64_t max_len,
             uint64_t seed) {
    SCOPED_TRACE("batch=" + std::to_string(batch) + " heads=" + std::to_string(heads) +
                 " kv_len=" + std::to_string(kv_len) + " head_dim=" + std::to_string(head_dim) +
                 " max_len=" + std::to_string(max_len));
    const int64_t row = heads * head_dim;
    AttentionShape s = contiguous_attention(batch, heads, 1, kv_len, head_dim, false,
                                            1.f / std::sqrt(static_cast<float>(head_dim)));
    s.k_batch_stride = s.v_batch_stride = max_len * row;
    const size_t q_n = static_cast<size_t>(batch * row);
    const size_t kv_n = static_cast<size_t>(batch * max_len * row);
    const std::vector<float> q = test::random_floats(q_n, seed);
    const std::vector<uint16_t> k = test::random_bf16(kv_n, seed + 1);
    const std::vector<uint16_t> v = test::random_bf16(kv_n, seed + 2);
    std::vector<float> expected(q_n, 0.f);
    ref::attention_decode_bf16kv(q.data(), k.data(), v.data(), expected.data(), s);

    cuda::DeviceBuffer dq = upload(q), dk = upload(k), dv = upload(v);
    cuda::DeviceBuffer d_o = alloc<float>(q_n);
    const size_t ws_bytes = cuda::attention_decode_workspace_bytes(s);
    cuda::DeviceBuffer ws = alloc_zeroed<float>(ws_bytes / sizeof(float));
    TESSERA_ASSERT_OK(cuda::attention_decode_bf16kv(dq.as<float>(), dk.as<uint16_t>(),
                                                    dv.as<uint16_t>(), d_o.as<float>(), s,
                                                    ws.data(), ws.bytes(), stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(d_o, q_n);
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), q_n, kAtol, kRtol));

    // Same as the f32 decode kernel over the widened cache with q rounded to bf16 (both f32 on
    // the device; only the element loads differ, so the results are identical).
    std::vector<float> k32(kv_n), v32(kv_n), q_rounded(q_n);
    convert_bf16_to_f32(k.data(), k32.data(), kv_n);
    convert_bf16_to_f32(v.data(), v32.data(), kv_n);
    for (size_t i = 0; i < q_n; ++i) q_rounded[i] = bf16_to_f32(f32_to_bf16(q[i]));
    cuda::DeviceBuffer dk32 = upload(k32), dv32 = upload(v32), dqr = upload(q_rounded);
    cuda::DeviceBuffer d_o32 = alloc<float>(q_n);
    TESSERA_ASSERT_OK(cuda::attention_decode(dqr.as<float>(), dk32.as<float>(), dv32.as<float>(),
                                             d_o32.as<float>(), s, ws.data(), ws.bytes(), stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual32 = download<float>(d_o32, q_n);
    EXPECT_TRUE(test::all_equal(actual.data(), actual32.data(), q_n));
  }
};

TEST_F(CudaDecodeBf16Kv, SmallShapesAndHeadDimBuckets) {
  uint64_t seed = 10;
  check(1, 1, 1, 64, 1, seed++);
  check(2, 3, 31, 64, 31, seed++);
  for (int64_t head_dim : {1, 17, 32, 33, 64, 100, 128, 200, 256}) {
    check(1, 2, 45, head_dim, 45, seed++);
  }
}

TEST_F(CudaDecodeBf16Kv, ManySplitsAndPartlyFilledCache) {
  check(2, 4, 1000, 128, 1000, 100);   // guidance batch, many splits
  check(1, 4, 4096, 64, 4096, 101);    // exactly 64 splits of 64
  check(2, 3, 77, 64, 300, 102);       // cache of 300 slots, 77 filled
  check(2, 12, 1102, 128, 1102, 103);  // full-size v0.5 geometry (78 + 1024 positions)
}

TEST(CudaDecodeBf16KvArgs, RejectsSeveralQueriesAndSmallWorkspace) {
  float dummy[4] = {};
  uint16_t kv[4] = {};
  AttentionShape s = contiguous_attention(1, 2, 2, 10, 64, false, 0.125f);
  Status st = cuda::attention_decode_bf16kv(dummy, kv, kv, dummy, s, dummy, 1 << 20, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("attention_decode_bf16kv"), std::string::npos) << st.message();
  s.q_len = 1;
  const size_t needed = cuda::attention_decode_workspace_bytes(s);
  st = cuda::attention_decode_bf16kv(dummy, kv, kv, dummy, s, dummy, needed - 1, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaConvert)
#endif
