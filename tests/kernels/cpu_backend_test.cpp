// The CPU backend: memory (alignment, ownership through DeviceBuffer, copies), zero-copy weights,
// and that each op forwards to the cpu:: kernel with the documented semantics.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/ops.h"
#include "tests/support/kernel_test_util.h"

// ASSERT with the Status's message on failure.
#define ASSERT_STATUS_OK(expr)                        \
  do {                                                \
    const ::tessera::Status status_ = (expr);         \
    ASSERT_TRUE(status_.ok()) << status_.to_string(); \
  } while (0)

namespace tessera::kernels {
namespace {

TEST(CpuBackend, DescribesItself) {
  const auto backend = make_cpu_backend();
  EXPECT_EQ(backend->device(), Device::kCpu);
  const std::string name = backend->name();
  EXPECT_EQ(name.rfind("cpu (", 0), 0u) << name;
  EXPECT_NE(name.find("thread"), std::string::npos) << name;
}

TEST(CpuBackend, AllocatesAlignedBuffers) {
  const auto backend = make_cpu_backend();
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000}, size_t{1} << 20}) {
    auto buffer = backend->allocate(bytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status().message();
    EXPECT_EQ(buffer->bytes(), bytes);
    ASSERT_NE(buffer->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % 64, 0u) << bytes << " bytes";
    if (bytes != 0) std::memset(buffer->data(), 0xab, bytes);  // writable over its whole size
  }
}

TEST(CpuBackend, HugeAllocationIsOutOfMemoryNotACrash) {
  const auto backend = make_cpu_backend();
  auto buffer = backend->allocate(size_t{1} << 62);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(buffer.status().message().find("bytes"), std::string::npos);
}

TEST(CpuBackend, DeviceBufferMovesOwnership) {
  const auto backend = make_cpu_backend();
  auto first = backend->allocate(256);
  ASSERT_TRUE(first.ok());
  DeviceBuffer a = std::move(first).value();
  void* data = a.data();
  DeviceBuffer b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.bytes(), 256u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(a.bytes(), 0u);
  auto second = backend->allocate(128);
  ASSERT_TRUE(second.ok());
  b = std::move(second).value();  // frees the first allocation (ASan/LSan would report a leak)
  EXPECT_EQ(b.bytes(), 128u);
  b = DeviceBuffer();
  EXPECT_EQ(b.data(), nullptr);
}

TEST(CpuBackend, CopiesRoundTrip) {
  const auto backend = make_cpu_backend();
  const std::vector<float> host = test::random_floats(1001, 7);
  const size_t bytes = host.size() * sizeof(float);
  auto a = backend->allocate(bytes);
  auto b = backend->allocate(bytes);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_STATUS_OK(backend->upload(a->data(), host.data(), bytes));
  ASSERT_STATUS_OK(backend->copy(b->data(), a->data(), bytes));
  std::vector<float> back(host.size(), 0.0f);
  ASSERT_STATUS_OK(backend->download(back.data(), b->data(), bytes));
  EXPECT_TRUE(test::all_equal(back.data(), host.data(), host.size()));
  ASSERT_STATUS_OK(backend->fill_zero(b->data(), bytes));
  ASSERT_STATUS_OK(backend->download(back.data(), b->data(), bytes));
  for (float v : back) ASSERT_EQ(v, 0.0f);
  ASSERT_STATUS_OK(backend->synchronize());
}

TEST(CpuBackend, WeightsAreZeroCopy) {
  const auto backend = make_cpu_backend();
  const std::vector<float> w = test::random_floats(12, 3);
  const Weight host{w.data(), DType::kF32, 3, 4};
  DeviceBuffer storage;
  auto uploaded = backend->upload_weight(host, &storage);
  ASSERT_TRUE(uploaded.ok());
  EXPECT_EQ(uploaded->data, w.data());
  EXPECT_EQ(uploaded->dtype, DType::kF32);
  EXPECT_EQ(uploaded->rows, 3);
  EXPECT_EQ(uploaded->cols, 4);
  EXPECT_EQ(storage.data(), nullptr);
  auto vec = backend->upload_f32(w.data(), 12, &storage);
  ASSERT_TRUE(vec.ok());
  EXPECT_EQ(*vec, w.data());

  const std::vector<uint16_t> bf = test::random_bf16(12, 4);
  auto bf_weight = backend->upload_weight(Weight{bf.data(), DType::kBF16, 3, 4}, &storage);
  ASSERT_TRUE(bf_weight.ok());
  EXPECT_EQ(bf_weight->data, bf.data());

  auto bad = backend->upload_weight(Weight{w.data(), DType::kI32, 3, 4}, &storage);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dtype"), std::string::npos);
}

// Each op through the backend equals the cpu:: kernel (same code, so bitwise).
TEST(CpuBackend, OpsForwardToCpuKernels) {
  const auto backend = make_cpu_backend();
  const int64_t m = 3, k = 40, n = 24;
  const auto x = test::random_floats(size_t(m * k), 11);
  const auto wdata = test::random_floats(size_t(n * k), 12);
  const auto bias = test::random_floats(size_t(n), 13);
  const Weight w{wdata.data(), DType::kF32, n, k};
  std::vector<float> got(size_t(m * n)), want(size_t(m * n));
  ASSERT_STATUS_OK(backend->linear(x.data(), m, w, bias.data(), got.data()));
  cpu::linear(x.data(), m, w, bias.data(), want.data());
  EXPECT_TRUE(test::all_equal(got.data(), want.data(), got.size()));

  std::vector<float> y1(x.size()), y2(x.size());
  ASSERT_STATUS_OK(
      backend->layer_norm(x.data(), wdata.data(), bias.data(), y1.data(), m, k, 1e-5f));
  cpu::layer_norm(x.data(), wdata.data(), bias.data(), y2.data(), m, k, 1e-5f);
  EXPECT_TRUE(test::all_equal(y1.data(), y2.data(), y1.size()));
  ASSERT_STATUS_OK(backend->rms_norm(x.data(), wdata.data(), y1.data(), m, k, 1e-5f));
  cpu::rms_norm(x.data(), wdata.data(), y2.data(), m, k, 1e-5f);
  EXPECT_TRUE(test::all_equal(y1.data(), y2.data(), y1.size()));
  ASSERT_STATUS_OK(backend->softmax(x.data(), y1.data(), m, k));
  cpu::softmax(x.data(), y2.data(), m, k);
  EXPECT_TRUE(test::all_equal(y1.data(), y2.data(), y1.size()));

  const int64_t len = int64_t(x.size());
  using Unary = Status (Backend::*)(const float*, float*, int64_t);
  using CpuUnary = void (*)(const float*, float*, int64_t);
  const std::pair<Unary, CpuUnary> unary[] = {{&Backend::silu, cpu::silu},
                                              {&Backend::gelu_erf, cpu::gelu_erf},
                                              {&Backend::gelu_tanh, cpu::gelu_tanh},
                                              {&Backend::quick_gelu, cpu::quick_gelu}};
  for (const auto& [op, cpu_op] : unary) {
    ASSERT_STATUS_OK(((*backend).*op)(x.data(), y1.data(), len));
    cpu_op(x.data(), y2.data(), len);
    EXPECT_TRUE(test::all_equal(y1.data(), y2.data(), y1.size()));
  }
  ASSERT_STATUS_OK(backend->add(x.data(), x.data(), y1.data(), len));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y1[i], 2.0f * x[i]);
  ASSERT_STATUS_OK(backend->swiglu(x.data(), x.data(), y1.data(), len));
  cpu::swiglu(x.data(), x.data(), y2.data(), len);
  EXPECT_TRUE(test::all_equal(y1.data(), y2.data(), y1.size()));
  std::vector<float> g1(x.size() / 2), g2(x.size() / 2);
  ASSERT_STATUS_OK(backend->geglu(x.data(), g1.data(), m, k / 2));
  cpu::geglu(x.data(), g2.data(), m, k / 2);
  EXPECT_TRUE(test::all_equal(g1.data(), g2.data(), g1.size()));

  // Attention over [1][5][2][8] q/k/v, causal, and decode of the last query.
  const auto q = test::random_floats(5 * 2 * 8, 21);
  const auto kk = test::random_floats(5 * 2 * 8, 22);
  const auto v = test::random_floats(5 * 2 * 8, 23);
  const AttentionShape s = contiguous_attention(1, 2, 5, 5, 8, true, 0.35f);
  std::vector<float> o1(q.size()), o2(q.size());
  ASSERT_STATUS_OK(backend->attention(q.data(), kk.data(), v.data(), o1.data(), s));
  cpu::attention(q.data(), kk.data(), v.data(), o2.data(), s);
  EXPECT_TRUE(test::all_equal(o1.data(), o2.data(), o1.size()));
  const AttentionShape d = contiguous_attention(1, 2, 1, 5, 8, true, 0.35f);
  ASSERT_STATUS_OK(backend->attention_decode(q.data(), kk.data(), v.data(), o1.data(), d));
  cpu::attention_decode(q.data(), kk.data(), v.data(), o2.data(), d);
  EXPECT_TRUE(test::all_equal(o1.data(), o2.data(), 16));

  std::vector<int32_t> ids = {2, 0, 2};
  std::vector<float> e1(3 * size_t(k)), e2(3 * size_t(k));
  const Weight table{wdata.data(), DType::kF32, n, k};
  ASSERT_STATUS_OK(backend->embedding_gather(table, ids.data(), 3, e1.data()));
  cpu::embedding_gather(table, ids.data(), 3, e2.data());
  EXPECT_TRUE(test::all_equal(e1.data(), e2.data(), e1.size()));
  EXPECT_EQ(0, std::memcmp(e1.data(), wdata.data() + 2 * k, size_t(k) * sizeof(float)));

  std::vector<int32_t> positions = {0, 1, 2, 3, 4};
  std::vector<float> r1 = q, r2 = q;
  ASSERT_STATUS_OK(backend->rope_interleaved(r1.data(), 5, 2, 8, 16, positions.data(), 10000.0f));
  cpu::rope_interleaved(r2.data(), 5, 2, 8, 16, positions.data(), 10000.0f);
  EXPECT_TRUE(test::all_equal(r1.data(), r2.data(), r1.size()));
}

}  // namespace
}  // namespace tessera::kernels
