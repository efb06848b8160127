// The CUDA kernels::Backend (kernels/cuda/cuda_backend.cu) through the Backend interface, against
// the CPU backend: memory (allocate, upload, download, copy incl. overlapping ranges, fill_zero),
// out-of-memory as a Status, weights (f32, bf16, int8), the ops the models use, the decode
// workspace growing across shapes, the bf16 K/V cache methods, and launch errors as Status naming
// the op. Skips (make_cuda_backend's reason) without a usable device or in a build without CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/int8.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::kernels {
namespace {

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
    be_ = test::shared_cuda_backend();
    cpu_ = make_cpu_backend();
  }

  // A device copy of `host` (buffer kept alive by the test).
  template <typename T>
  T* put(const std::vector<T>& host) {
    Expected<DeviceBuffer> b = be_->allocate(host.size() * sizeof(T));
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return nullptr;
    TESSERA_EXPECT_OK(be_->upload(b->data(), host.data(), host.size() * sizeof(T)));
    buffers_.push_back(std::move(b).value());
    return buffers_.back().as<T>();
  }
  template <typename T>
  T* make(size_t count) {
    Expected<DeviceBuffer> b = be_->allocate(count * sizeof(T));
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return nullptr;
    buffers_.push_back(std::move(b).value());
    if constexpr (std::is_same_v<T, float>) {
      // NaN, so that an output a kernel forgets to write fails every comparison.
      const std::vector<float> nan(count, std::numeric_limits<float>::quiet_NaN());
      TESSERA_EXPECT_OK(be_->upload(buffers_.back().data(), nan.data(), count * sizeof(float)));
    }
    return buffers_.back().as<T>();
  }
  template <typename T>
  std::vector<T> get(const T* device, size_t count) {
    std::vector<T> host(count);
    TESSERA_EXPECT_OK(be_->download(host.data(), device, count * sizeof(T)));
    return host;
  }

  Backend* be_ = nullptr;
  std::unique_ptr<Backend> cpu_;
  std::vector<DeviceBuffer> buffers_;
};

TEST_F(CudaBackendTest, DescribesItself) {
  EXPECT_EQ(be_->device(), Device::kCuda);
  EXPECT_EQ(be_->name().rfind("cuda (", 0), 0u) << be_->name();
}

TEST_F(CudaBackendTest, MemoryRoundTripAndCopies) {
  const size_t n = 1000;
  std::vector<float> host = test::random_floats(n, 1);
  float* a = put(host);
  float* b = make<float>(n);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  TESSERA_ASSERT_OK(be_->copy(b, a, n * 4));
  EXPECT_TRUE(test::all_equal(get(b, n).data(), host.data(), n));
  // Overlapping copies have memmove semantics, as on the CPU backend (both directions).
  std::vector<float> want = host;
  std::memmove(want.data() + 10, want.data(), 500 * 4);
  std::memmove(want.data() + 600, want.data() + 620, 300 * 4);
  TESSERA_ASSERT_OK(be_->copy(a + 10, a, 500 * 4));
  TESSERA_ASSERT_OK(be_->copy(a + 600, a + 620, 300 * 4));
  EXPECT_TRUE(test::all_equal(get(a, n).data(), want.data(), n));
  TESSERA_ASSERT_OK(be_->fill_zero(a + 100, 50 * 4));
  std::fill(want.begin() + 100, want.begin() + 150, 0.f);
  EXPECT_TRUE(test::all_equal(get(a, n).data(), want.data(), n));
  // The host buffer may be reused as soon as upload returns.
  std::vector<float> reused(n, 1.f);
  TESSERA_ASSERT_OK(be_->upload(b, reused.data(), n * 4));
  std::fill(reused.begin(), reused.end(), 2.f);
  const std::vector<float> got = get(b, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 1.f) << i;
  TESSERA_EXPECT_OK(be_->synchronize());
  // Zero-byte allocations give a unique, freeable buffer.
  Expected<DeviceBuffer> empty = be_->allocate(0);
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_NE(empty->data(), nullptr);
  EXPECT_EQ(empty->bytes(), 0u);
}

TEST_F(CudaBackendTest, OutOfMemoryIsAStatusNamingTheSize) {
  const size_t huge = size_t{1} << 50;  // 1 PiB
  Expected<DeviceBuffer> b = be_->allocate(huge);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kOutOfMemory) << b.status().to_string();
  EXPECT_NE(b.status().message().find(std::to_string(huge)), std::string::npos)
      << b.status().message();
  // Not sticky: the backend keeps working.
  Expected<DeviceBuffer> small = be_->allocate(1024);
  EXPECT_TRUE(small.ok()) << small.status().to_string();
  TESSERA_EXPECT_OK(be_->synchronize());
}

TEST_F(CudaBackendTest, WeightsAndOpsMatchTheCpuBackend) {
  const int64_t k = 96, n = 80;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> w32 = test::random_floats(static_cast<size_t>(n * k), 2);
    std::vector<uint16_t> w16(w32.size());
    convert_f32_to_bf16(w32.data(), w16.data(), w16.size());
    const Weight host{dtype == DType::kF32 ? static_cast<const void*>(w32.data()) : w16.data(),
                      dtype, n, k};
    const std::vector<float> bias = test::random_floats(static_cast<size_t>(n), 3);
    DeviceBuffer w_storage, b_storage;
    Expected<Weight> w = be_->upload_weight(host, &w_storage);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_NE(w->data, host.data);
    Expected<const float*> b = be_->upload_f32(bias.data(), n, &b_storage);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    for (int64_t m : {1, 2, 8, 9, 40}) {  // GEMV and GEMM paths
      SCOPED_TRACE("m=" + std::to_string(m));
      const std::vector<float> x = test::random_floats(static_cast<size_t>(m * k), 4 + m);
      std::vector<float> want(static_cast<size_t>(m * n));
      TESSERA_ASSERT_OK(cpu_->linear(x.data(), m, host, bias.data(), want.data()));
      float* dx = put(x);
      float* dy = make<float>(want.size());
      TESSERA_ASSERT_OK(be_->linear(dx, m, *w, *b, dy));
      EXPECT_TRUE(
          test::all_close(get(dy, want.size()).data(), want.data(), want.size(), 1e-4, 1e-4));
      // linear_multi: two parts over the same x, into fresh (NaN-filled) outputs.
      dy = make<float>(want.size());
      float* dy2 = make<float>(want.size());
      const LinearPart parts[2] = {{*w, *b, dy}, {*w, nullptr, dy2}};
      TESSERA_ASSERT_OK(be_->linear_multi(dx, m, parts, 2));
      std::vector<float> want2(want.size());
      TESSERA_ASSERT_OK(cpu_->linear(x.data(), m, host, nullptr, want2.data()));
      EXPECT_TRUE(
          test::all_close(get(dy, want.size()).data(), want.data(), want.size(), 1e-4, 1e-4));
      EXPECT_TRUE(
          test::all_close(get(dy2, want2.size()).data(), want2.data(), want2.size(), 1e-4, 1e-4));
    }
  }
  // Norms, activations, embedding.
  const int64_t rows = 7, dim = 64;
  const std::vector<float> x = test::random_floats(static_cast<size_t>(rows * dim), 20);
  const std::vector<float> g = test::random_floats(static_cast<size_t>(dim), 21);
  float* dx = put(x);
  float* dg = put(g);
  float* dy = make<float>(x.size());
  std::vector<float> want(x.size());
  TESSERA_ASSERT_OK(cpu_->layer_norm(x.data(), g.data(), nullptr, want.data(), rows, dim, 1e-6f));
  TESSERA_ASSERT_OK(be_->layer_norm(dx, dg, nullptr, dy, rows, dim, 1e-6f));
  EXPECT_TRUE(test::all_close(get(dy, x.size()).data(), want.data(), x.size(), 1e-5, 1e-5));
  TESSERA_ASSERT_OK(cpu_->rms_norm(x.data(), g.data(), want.data(), rows, dim, 1e-5f));
  TESSERA_ASSERT_OK(be_->rms_norm(dx, dg, dy, rows, dim, 1e-5f));
  EXPECT_TRUE(test::all_close(get(dy, x.size()).data(), want.data(), x.size(), 1e-5, 1e-5));
  TESSERA_ASSERT_OK(cpu_->swiglu(x.data(), x.data(), want.data(), rows * dim));
  TESSERA_ASSERT_OK(be_->swiglu(dx, dx, dy, rows * dim));
  EXPECT_TRUE(test::all_close(get(dy, x.size()).data(), want.data(), x.size(), 1e-6, 1e-5));
  TESSERA_ASSERT_OK(cpu_->add(x.data(), x.data(), want.data(), rows * dim));
  TESSERA_ASSERT_OK(be_->add(dx, dx, dy, rows * dim));
  EXPECT_TRUE(test::all_equal(get(dy, x.size()).data(), want.data(), x.size()));
  const std::vector<int32_t> ids = {3, 0, 6, 6, 1};
  const Weight table_host{x.data(), DType::kF32, rows, dim};
  DeviceBuffer table_storage;
  Expected<Weight> table = be_->upload_weight(table_host, &table_storage);
  ASSERT_TRUE(table.ok());
  int32_t* dids = put(ids);
  TESSERA_ASSERT_OK(be_->embedding_gather(*table, dids, 5, dy));
  const std::vector<float> gathered = get(dy, static_cast<size_t>(5 * dim));
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_TRUE(test::all_equal(gathered.data() + i * dim, x.data() + ids[i] * dim, dim)) << i;
  }
}

// int8 weights (kernels/int8.h) on the device: the GEMV (up to kGemvMaxRows = 16 rows) and the
// tiled GEMM (17 rows and more), against the CPU backend's f32 linear on the dequantized weights
// (q * scale: what an int8 weight means; the CPU's own int8 kernels round x to 16 bits, and its
// GEMM above 32 rows to bf16), for groups of 128 and 32 (16-byte loads) and a row of 30 (its own
// group: the per-element path); x also one float off its 16-byte alignment, which sends the GEMV
// down the per-element path with several groups per row; n = 75 leaves the last block of outputs
// part full; m = 8 / 9 / 16 / 17 around the GEMV's old and new limits. And a weight without scales
// is refused.
TEST_F(CudaBackendTest, Int8WeightsMatchTheCpuBackend) {
  for (const int64_t k : {int64_t{256}, int64_t{96}, int64_t{30}}) {
    const int64_t n = 75, group = int8_group_for(k);
    SCOPED_TRACE("k=" + std::to_string(k) + " group " + std::to_string(group));
    const std::vector<float> w32 = test::random_floats(static_cast<size_t>(n * k), 12);
    std::vector<int8_t> q(w32.size());
    std::vector<float> scales(static_cast<size_t>(n * (k / group)));
    quantize_int8_rows(w32.data(), n, k, group, q.data(), scales.data());
    const Weight host{q.data(), DType::kI8, n, k, scales.data(), group};
    std::vector<float> dequantized(q.size());
    for (size_t i = 0; i < q.size(); ++i) {
      dequantized[i] = static_cast<float>(q[i]) * scales[i / static_cast<size_t>(group)];
    }
    const Weight reference{dequantized.data(), DType::kF32, n, k};
    const std::vector<float> bias = test::random_floats(static_cast<size_t>(n), 13);
    DeviceBuffer w_storage, b_storage;
    Expected<Weight> w = be_->upload_weight(host, &w_storage);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    Expected<const float*> b = be_->upload_f32(bias.data(), n, &b_storage);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    for (int64_t m : {1, 2, 8, 9, 16, 17, 70}) {
      SCOPED_TRACE("m=" + std::to_string(m));
      const std::vector<float> x = test::random_floats(static_cast<size_t>(m * k), 30 + m);
      std::vector<float> want(static_cast<size_t>(m * n));
      TESSERA_ASSERT_OK(cpu_->linear(x.data(), m, reference, bias.data(), want.data()));
      for (const bool misaligned : {false, true}) {
        SCOPED_TRACE(misaligned ? "x one float off alignment" : "x aligned");
        std::vector<float> padded(x.size() + 1, 0.0f);
        std::copy(x.begin(), x.end(), padded.begin() + (misaligned ? 1 : 0));
        const float* dx = put(padded) + (misaligned ? 1 : 0);
        float* dy = make<float>(want.size());
        TESSERA_ASSERT_OK(be_->linear(dx, m, *w, *b, dy));
        EXPECT_TRUE(
            test::all_close(get(dy, want.size()).data(), want.data(), want.size(), 1e-4, 1e-4));
      }
    }
  }
  const std::vector<int8_t> q(64, 1);
  const Weight no_scales{q.data(), DType::kI8, 2, 32, nullptr, 32};
  DeviceBuffer storage;
  EXPECT_FALSE(be_->upload_weight(no_scales, &storage).ok());
}

// attention_decode with the backend's own workspace, for shapes that need a larger one in turn
// (the workspace grows), and the bf16 K/V path and conversions.
// Backend::linear_swiglu: the fused GEMV (m <= 16, aligned) and the composed path (m = 40) against
// the CPU backend, for f32 and bf16 weights, with and without biases.
TEST_F(CudaBackendTest, LinearSwigluMatchesTheCpuBackend) {
  const int64_t k = 96, n = 75;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> g32 = test::random_floats(static_cast<size_t>(n * k), 41);
    std::vector<float> u32 = test::random_floats(static_cast<size_t>(n * k), 42);
    std::vector<uint16_t> g16(g32.size()), u16(u32.size());
    convert_f32_to_bf16(g32.data(), g16.data(), g16.size());
    convert_f32_to_bf16(u32.data(), u16.data(), u16.size());
    const bool bf16 = dtype == DType::kBF16;
    const Weight gh{bf16 ? static_cast<const void*>(g16.data()) : g32.data(), dtype, n, k};
    const Weight uh{bf16 ? static_cast<const void*>(u16.data()) : u32.data(), dtype, n, k};
    DeviceBuffer gs, us;
    Expected<Weight> gw = be_->upload_weight(gh, &gs);
    Expected<Weight> uw = be_->upload_weight(uh, &us);
    ASSERT_TRUE(gw.ok() && uw.ok());
    const std::vector<float> gb = test::random_floats(static_cast<size_t>(n), 43);
    const std::vector<float> ub = test::random_floats(static_cast<size_t>(n), 44);
    for (int64_t m : {1, 2, 16, 40}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE("m=" + std::to_string(m) + (with_bias ? " bias" : ""));
        const std::vector<float> x = test::random_floats(static_cast<size_t>(m * k), 45 + m);
        const size_t out = static_cast<size_t>(m * n);
        std::vector<float> ga(out), ua(out), want(out);
        TESSERA_ASSERT_OK(cpu_->linear_swiglu(x.data(), m, gh, with_bias ? gb.data() : nullptr, uh,
                                              with_bias ? ub.data() : nullptr, ga.data(), ua.data(),
                                              want.data()));
        float* dy = make<float>(out);
        TESSERA_ASSERT_OK(be_->linear_swiglu(put(x), m, *gw, with_bias ? put(gb) : nullptr, *uw,
                                             with_bias ? put(ub) : nullptr, make<float>(out),
                                             make<float>(out), dy));
        EXPECT_TRUE(test::all_close(get(dy, out).data(), want.data(), out, 1e-4, 1e-4));
      }
    }
  }
}

// Backend::attention of a large non-causal shape (the occupancy queries' cross-attention over the
// latents) takes the naive algorithm with the backend's scratch; a causal one keeps the flash
// kernel: both against the CPU backend.
TEST_F(CudaBackendTest, LargeAttentionTakesTheNaivePath) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "cross");
    const int64_t q_len = causal ? 1100 : 2048, kv_len = causal ? 1100 : 1024;
    const AttentionShape s =
        contiguous_attention(1, 2, q_len, kv_len, 64, causal, 1.0f / std::sqrt(64.0f));
    const std::vector<float> q = test::random_floats(static_cast<size_t>(q_len * 2 * 64), 31);
    const std::vector<float> k = test::random_floats(static_cast<size_t>(kv_len * 2 * 64), 32);
    const std::vector<float> v = test::random_floats(static_cast<size_t>(kv_len * 2 * 64), 33);
    std::vector<float> want(q.size());
    TESSERA_ASSERT_OK(cpu_->attention(q.data(), k.data(), v.data(), want.data(), s));
    float* dout = make<float>(q.size());
    TESSERA_ASSERT_OK(be_->attention(put(q), put(k), put(v), dout, s));
    EXPECT_TRUE(test::all_close(get(dout, q.size()).data(), want.data(), q.size(), 1e-4, 1e-4));
  }
}

TEST_F(CudaBackendTest, DecodeAttentionWorkspaceAndBf16Cache) {
  uint64_t seed = 50;
  for (auto [batch, heads, head_dim, kv_len] :
       {std::array<int64_t, 4>{1, 2, 32, 10}, {2, 4, 64, 300}, {2, 12, 128, 1102}, {1, 1, 16, 5}}) {
    SCOPED_TRACE("batch=" + std::to_string(batch) + " heads=" + std::to_string(heads) +
                 " head_dim=" + std::to_string(head_dim) + " kv_len=" + std::to_string(kv_len));
    const AttentionShape s = contiguous_attention(batch, heads, 1, kv_len, head_dim, false,
                                                  1.f / std::sqrt(static_cast<float>(head_dim)));
    const size_t qn = static_cast<size_t>(batch * heads * head_dim);
    const size_t kvn = static_cast<size_t>(batch * kv_len * heads * head_dim);
    const std::vector<float> q = test::random_floats(qn, seed++);
    const std::vector<float> k = test::random_floats(kvn, seed++);
    const std::vector<float> v = test::random_floats(kvn, seed++);
    std::vector<float> want(qn);
    TESSERA_ASSERT_OK(cpu_->attention_decode(q.data(), k.data(), v.data(), want.data(), s));
    float* dq = put(q);
    float* dk = put(k);
    float* dv = put(v);
    float* dout = make<float>(qn);
    TESSERA_ASSERT_OK(be_->attention_decode(dq, dk, dv, dout, s));
    EXPECT_TRUE(test::all_close(get(dout, qn).data(), want.data(), qn, 2e-5, 1e-4));

    // bf16 cache: convert on the device, compare the bits with the CPU backend's conversion.
    uint16_t* dk16 = make<uint16_t>(kvn);
    uint16_t* dv16 = make<uint16_t>(kvn);
    TESSERA_ASSERT_OK(be_->decode()->convert_f32_to_bf16(dk16, dk, static_cast<int64_t>(kvn)));
    TESSERA_ASSERT_OK(be_->decode()->convert_f32_to_bf16(dv16, dv, static_cast<int64_t>(kvn)));
    std::vector<uint16_t> k16(kvn), v16(kvn);
    TESSERA_ASSERT_OK(
        cpu_->decode()->convert_f32_to_bf16(k16.data(), k.data(), static_cast<int64_t>(kvn)));
    TESSERA_ASSERT_OK(
        cpu_->decode()->convert_f32_to_bf16(v16.data(), v.data(), static_cast<int64_t>(kvn)));
    EXPECT_EQ(get(dk16, kvn), k16);
    TESSERA_ASSERT_OK(
        cpu_->decode()->attention_decode_bf16kv(q.data(), k16.data(), v16.data(), want.data(), s));
    TESSERA_ASSERT_OK(be_->decode()->attention_decode_bf16kv(dq, dk16, dv16, dout, s));
    EXPECT_TRUE(test::all_close(get(dout, qn).data(), want.data(), qn, 2e-5, 1e-4));
    float* dk32 = make<float>(kvn);
    TESSERA_ASSERT_OK(be_->decode()->convert_bf16_to_f32(dk32, dk16, static_cast<int64_t>(kvn)));
    std::vector<float> k32(kvn);
    TESSERA_ASSERT_OK(
        cpu_->decode()->convert_bf16_to_f32(k32.data(), k16.data(), static_cast<int64_t>(kvn)));
    EXPECT_TRUE(test::all_equal(get(dk32, kvn).data(), k32.data(), kvn));
  }
}

TEST_F(CudaBackendTest, RejectedLaunchesComeBackAsStatusNamingTheOp) {
  float* buf = make<float>(4096);
  ASSERT_NE(buf, nullptr);
  const AttentionShape s = contiguous_attention(1, 1, 4, 4, 512, true, 0.1f);  // head_dim 512
  const Status st = be_->attention(buf, buf, buf, buf, s);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << st.to_string();
  EXPECT_NE(st.message().find("attention"), std::string::npos) << st.message();
  const Weight f16{buf, DType::kF16, 2, 2};
  DeviceBuffer storage;
  const Expected<Weight> w = be_->upload_weight(f16, &storage);
  EXPECT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("F16"), std::string::npos) << w.status().message();
  TESSERA_EXPECT_OK(be_->synchronize());  // nothing sticky
}

}  // namespace
}  // namespace tessera::kernels
