// The CUDA ops a graph-captured decode step is built from, which read their position from device
// memory when they run: attention_decode(_bf16kv)_device_len against the reference at the length
// held on the device (one launch configuration, the length changed between runs, as on graph
// replay; 0 and beyond-capacity lengths), store_kv_rows (f32 copy and bf16 rounding bit-identical
// to the host's, at the slot read from the device, nothing else touched) and set_positions. The
// argument checks run without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/kernel_test_util.h"

#if TESSERA_HAVE_CUDA
namespace tessera::kernels {
namespace {

constexpr double kAtol = 2e-5;
constexpr double kRtol = 1e-4;

class CudaDeviceStep : public test::GpuTest {
 protected:
  // A cache of `capacity` keys per row; the device step takes each value of `lengths` minus the
  // offset in turn, with the same shape, workspace and pointers. Expected: the reference over the
  // first min(len, capacity) keys (a zero output for len <= 0).
  void check_decode(bool bf16, int64_t batch, int64_t heads, int64_t head_dim, int64_t capacity,
                    const std::vector<int64_t>& lengths, uint64_t seed) {
    SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " batch " + std::to_string(batch) +
                 " heads " + std::to_string(heads) + " head_dim " + std::to_string(head_dim) +
                 " capacity " + std::to_string(capacity));
    const int64_t row = heads * head_dim;
    AttentionShape s = contiguous_attention(batch, heads, 1, capacity, head_dim, false,
                                            1.f / std::sqrt(static_cast<float>(head_dim)));
    const size_t q_n = size_t(batch * row), kv_n = size_t(batch * capacity * row);
    const std::vector<float> q = test::random_floats(q_n, seed);
    const std::vector<uint16_t> k16 = test::random_bf16(kv_n, seed + 1);
    const std::vector<uint16_t> v16 = test::random_bf16(kv_n, seed + 2);
    std::vector<float> k32(kv_n), v32(kv_n);
    convert_bf16_to_f32(k16.data(), k32.data(), kv_n);
    convert_bf16_to_f32(v16.data(), v32.data(), kv_n);
    cuda::DeviceBuffer dq = upload(q), d_o = alloc<float>(q_n);
    cuda::DeviceBuffer dk = bf16 ? upload(k16) : upload(k32);
    cuda::DeviceBuffer dv = bf16 ? upload(v16) : upload(v32);
    const size_t ws_bytes = cuda::attention_decode_workspace_bytes(s);
    cuda::DeviceBuffer ws = alloc_zeroed<float>(ws_bytes / sizeof(float));
    cuda::DeviceBuffer d_len = alloc<int64_t>(1);
    const int64_t offset = 7;  // keys in use = *step + offset
    for (int64_t len : lengths) {
      SCOPED_TRACE("device length " + std::to_string(len));
      const std::vector<int64_t> host_len = {len - offset};
      ASSERT_TRUE(d_len.upload(host_len.data(), sizeof(int64_t)).ok());
      if (bf16) {
        TESSERA_ASSERT_OK(cuda::attention_decode_bf16kv_device_len(
            dq.as<float>(), dk.as<uint16_t>(), dv.as<uint16_t>(), d_o.as<float>(), s,
            d_len.as<int64_t>(), offset, ws.data(), ws.bytes(), stream_));
      } else {
        TESSERA_ASSERT_OK(cuda::attention_decode_device_len(
            dq.as<float>(), dk.as<float>(), dv.as<float>(), d_o.as<float>(), s, d_len.as<int64_t>(),
            offset, ws.data(), ws.bytes(), stream_));
      }
      ASSERT_TRUE(sync());
      std::vector<float> expected(q_n, 0.f);
      const int64_t used = len < 0 ? 0 : (len > capacity ? capacity : len);
      if (used > 0) {
        AttentionShape r = s;
        r.kv_len = used;  // same strides: the first `used` slots of each row
        if (bf16) {
          ref::attention_decode_bf16kv(q.data(), k16.data(), v16.data(), expected.data(), r);
        } else {
          ref::attention_decode(q.data(), k32.data(), v32.data(), expected.data(), r);
        }
      }
      const std::vector<float> actual = download<float>(d_o, q_n);
      EXPECT_TRUE(test::all_close(actual.data(), expected.data(), q_n, kAtol, kRtol));
    }
  }
};

TEST_F(CudaDeviceStep, DecodeAttentionFollowsTheDeviceLength) {
  // Lengths across split boundaries (64-key splits, up to 64 splits), one key, empty, and past
  // the capacity (clamped).
  const std::vector<int64_t> lengths = {1, 2, 63, 64, 65, 300, 1024, 1100, 0, 5000, -3, 17};
  for (bool bf16 : {false, true}) {
    check_decode(bf16, 2, 12, 128, 1100, lengths, 40);
    check_decode(bf16, 1, 3, 40, 130, {1, 65, 129, 130, 131, 0}, 60);
  }
}

TEST_F(CudaDeviceStep, StoreKvRowsWritesTheSlotReadFromTheDevice) {
  const int64_t batch = 2, row = 3 * 40 + 1, slots = 9, offset = 2;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const size_t elem = dtype_size(dtype);
    const size_t cache_bytes = size_t(batch * slots * row) * elem;
    std::vector<uint8_t> cache(cache_bytes, 0x5a);  // marks every byte that must stay unchanged
    cuda::DeviceBuffer d_cache = upload(cache);
    cuda::DeviceBuffer d_slot = alloc<int64_t>(1);
    for (int64_t slot : {0, 3, 6}) {
      const std::vector<float> rows = test::random_floats(size_t(batch * row), 70 + uint64_t(slot));
      cuda::DeviceBuffer d_rows = upload(rows);
      const std::vector<int64_t> host_slot = {slot};
      ASSERT_TRUE(d_slot.upload(host_slot.data(), sizeof(int64_t)).ok());
      TESSERA_ASSERT_OK(cuda::store_kv_rows(d_cache.data(), dtype, d_rows.as<float>(), batch, row,
                                            slots * row, offset, d_slot.as<int64_t>(), stream_));
      ASSERT_TRUE(sync());
      for (int64_t b = 0; b < batch; ++b) {
        uint8_t* dst = cache.data() + size_t((b * slots + offset + slot) * row) * elem;
        if (dtype == DType::kBF16) {
          std::vector<uint16_t> bits(static_cast<size_t>(row));
          convert_f32_to_bf16(rows.data() + b * row, bits.data(), bits.size());
          std::memcpy(dst, bits.data(), bits.size() * 2);
        } else {
          std::memcpy(dst, rows.data() + b * row, size_t(row) * 4);
        }
      }
      const std::vector<uint8_t> actual = download<uint8_t>(d_cache, cache_bytes);
      ASSERT_EQ(actual, cache) << "slot " << slot;
    }
  }
}

// store_kv_pair writes K and V in one launch, each exactly as store_kv_rows would.
TEST_F(CudaDeviceStep, StoreKvPairIsTwoStoreKvRows) {
  const int64_t batch = 2, row = 3 * 40 + 1, slots = 9, offset = 2;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const size_t cache_bytes = size_t(batch * slots * row) * dtype_size(dtype);
    const std::vector<uint8_t> fill(cache_bytes, 0x5a);
    cuda::DeviceBuffer pk = upload(fill), pv = upload(fill), sk = upload(fill), sv = upload(fill);
    const std::vector<float> k = test::random_floats(size_t(batch * row), 80);
    const std::vector<float> v = test::random_floats(size_t(batch * row), 81);
    cuda::DeviceBuffer d_k = upload(k), d_v = upload(v);
    const std::vector<int64_t> host_slot = {4};
    cuda::DeviceBuffer d_slot = upload(host_slot);
    TESSERA_ASSERT_OK(cuda::store_kv_pair(pk.data(), pv.data(), dtype, d_k.as<float>(),
                                          d_v.as<float>(), batch, row, slots * row, offset,
                                          d_slot.as<int64_t>(), stream_));
    TESSERA_ASSERT_OK(cuda::store_kv_rows(sk.data(), dtype, d_k.as<float>(), batch, row,
                                          slots * row, offset, d_slot.as<int64_t>(), stream_));
    TESSERA_ASSERT_OK(cuda::store_kv_rows(sv.data(), dtype, d_v.as<float>(), batch, row,
                                          slots * row, offset, d_slot.as<int64_t>(), stream_));
    ASSERT_TRUE(sync());
    EXPECT_EQ(download<uint8_t>(pk, cache_bytes), download<uint8_t>(sk, cache_bytes));
    EXPECT_EQ(download<uint8_t>(pv, cache_bytes), download<uint8_t>(sv, cache_bytes));
    EXPECT_NE(download<uint8_t>(pv, cache_bytes), fill);
  }
}

TEST_F(CudaDeviceStep, SetPositionsCountsFromTheDeviceStep) {
  const int64_t rows = 2, len = 3;
  cuda::DeviceBuffer d_pos = alloc<int32_t>(size_t(rows * len));
  cuda::DeviceBuffer d_step = alloc<int64_t>(1);
  for (int64_t step : {0, 7, 1023}) {
    const std::vector<int64_t> host_step = {step};
    ASSERT_TRUE(d_step.upload(host_step.data(), sizeof(int64_t)).ok());
    TESSERA_ASSERT_OK(
        cuda::set_positions(d_pos.as<int32_t>(), rows, len, d_step.as<int64_t>(), 77, stream_));
    ASSERT_TRUE(sync());
    const std::vector<int32_t> pos = download<int32_t>(d_pos, size_t(rows * len));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < len; ++t) EXPECT_EQ(pos[size_t(r * len + t)], step + 77 + t);
    }
  }
}

TEST(CudaDeviceStepArgs, RejectedBeforeAnyDeviceCall) {
  float f[4] = {};
  int32_t f_positions[4] = {};
  int64_t len = 1;
  AttentionShape s = contiguous_attention(1, 1, 1, 4, 32, false, 1.0f);
  Status st = cuda::attention_decode_device_len(f, f, f, f, s, nullptr, 1, f, 1 << 20, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("step"), std::string::npos) << st.message();
  s.q_len = 2;
  st = cuda::attention_decode_device_len(f, f, f, f, s, &len, 1, f, 1 << 20, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  st = cuda::store_kv_rows(f, DType::kF16, f, 1, 4, 4, 0, &len, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("F16"), std::string::npos) << st.message();
  st = cuda::store_kv_rows(f, DType::kF32, f, 1, 4, 4, 0, nullptr, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  st = cuda::set_positions(nullptr, 1, 3, &len, 0, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  st = cuda::set_positions(f_positions, -1, 3, &len, 0, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaDeviceStep)
#endif
