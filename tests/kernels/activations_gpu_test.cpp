// cuda::silu / gelu_erf / gelu_tanh / quick_gelu / add / swiglu / geglu against the
// double-precision references: lengths 1 to 100003 (grid-stride tails), inputs in [-8, 8]
// (saturated tails included), in place and aliased outputs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/kernel_test_util.h"

#if TESSERA_HAVE_CUDA
namespace tessera::kernels {
namespace {

// f32 expf/erff/tanhf are within a few ulp; 1 + tanh / 1 + erf cancel in the negative tail, where
// the absolute error stays ~1e-7.
constexpr double kAtol = 1e-6;
constexpr double kRtol = 1e-5;

using HostUnary = void (*)(const float*, float*, int64_t);
using CudaUnary = Status (*)(const float*, float*, int64_t, cudaStream_t);

class CudaActivations : public test::GpuTest {
 protected:
  void check_unary(const char* name, HostUnary reference, CudaUnary op, int64_t n, bool in_place,
                   uint64_t seed) {
    SCOPED_TRACE(std::string(name) + " n=" + std::to_string(n) + (in_place ? " in place" : ""));
    const std::vector<float> x = test::random_floats(static_cast<size_t>(n), seed, -8.f, 8.f);
    std::vector<float> expected(x.size());
    reference(x.data(), expected.data(), n);
    cuda::DeviceBuffer d_x = upload(x);
    cuda::DeviceBuffer d_y_separate = in_place ? cuda::DeviceBuffer() : alloc<float>(x.size());
    float* d_y = in_place ? d_x.as<float>() : d_y_separate.as<float>();
    TESSERA_ASSERT_OK(op(d_x.as<float>(), d_y, n, stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(in_place ? d_x : d_y_separate, x.size());
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), x.size(), kAtol, kRtol));
  }

  void check_all_unary(int64_t n, uint64_t seed) {
    for (bool in_place : {false, true}) {
      check_unary("silu", ref::silu, cuda::silu, n, in_place, seed++);
      check_unary("gelu_erf", ref::gelu_erf, cuda::gelu_erf, n, in_place, seed++);
      check_unary("gelu_tanh", ref::gelu_tanh, cuda::gelu_tanh, n, in_place, seed++);
      check_unary("quick_gelu", ref::quick_gelu, cuda::quick_gelu, n, in_place, seed++);
    }
  }

  // alias: 0 = separate output, 1 = y aliases gate, 2 = y aliases up.
  void check_swiglu(int64_t n, int alias, uint64_t seed) {
    SCOPED_TRACE("swiglu n=" + std::to_string(n) + " alias=" + std::to_string(alias));
    const size_t count = static_cast<size_t>(n);
    const std::vector<float> gate = test::random_floats(count, seed, -8.f, 8.f);
    const std::vector<float> up = test::random_floats(count, seed + 1, -2.f, 2.f);
    std::vector<float> expected(count);
    ref::swiglu(gate.data(), up.data(), expected.data(), n);
    cuda::DeviceBuffer d_gate = upload(gate);
    cuda::DeviceBuffer d_up = upload(up);
    cuda::DeviceBuffer d_out = alloc<float>(count);
    const cuda::DeviceBuffer& result = alias == 1 ? d_gate : (alias == 2 ? d_up : d_out);
    TESSERA_ASSERT_OK(
        cuda::swiglu(d_gate.as<float>(), d_up.as<float>(), result.as<float>(), n, stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(result, count);
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), count, kAtol, kRtol));
  }

  // alias: 0 = separate output, 1 = y aliases a, 2 = y aliases b. An f32 add is correctly
  // rounded on both sides: the result must be bit-identical to the reference.
  void check_add(int64_t n, int alias, uint64_t seed) {
    SCOPED_TRACE("add n=" + std::to_string(n) + " alias=" + std::to_string(alias));
    const size_t count = static_cast<size_t>(n);
    const std::vector<float> a = test::random_floats(count, seed, -100.f, 100.f);
    const std::vector<float> b = test::random_floats(count, seed + 1, -1.f, 1.f);
    std::vector<float> expected(count);
    ref::add(a.data(), b.data(), expected.data(), n);
    cuda::DeviceBuffer d_a = upload(a);
    cuda::DeviceBuffer d_b = upload(b);
    cuda::DeviceBuffer d_out = alloc<float>(count);
    const cuda::DeviceBuffer& result = alias == 1 ? d_a : (alias == 2 ? d_b : d_out);
    TESSERA_ASSERT_OK(cuda::add(d_a.as<float>(), d_b.as<float>(), result.as<float>(), n, stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(result, count);
    EXPECT_TRUE(test::all_equal(actual.data(), expected.data(), count));
  }

  void check_geglu(int64_t rows, int64_t hidden, uint64_t seed) {
    SCOPED_TRACE("geglu rows=" + std::to_string(rows) + " hidden=" + std::to_string(hidden));
    const std::vector<float> x =
        test::random_floats(static_cast<size_t>(rows * 2 * hidden), seed, -6.f, 6.f);
    const size_t count = static_cast<size_t>(rows * hidden);
    std::vector<float> expected(count);
    ref::geglu(x.data(), expected.data(), rows, hidden);
    cuda::DeviceBuffer d_x = upload(x);
    cuda::DeviceBuffer d_y = alloc<float>(count);
    TESSERA_ASSERT_OK(cuda::geglu(d_x.as<float>(), d_y.as<float>(), rows, hidden, stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(d_y, count);
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), count, kAtol, kRtol));
  }
};

TEST_F(CudaActivations, SmallUnary) {
  check_all_unary(1, 1);
  check_all_unary(1000, 10);
}

TEST_F(CudaActivations, LongUnary) {
  check_all_unary(100003, 20);
}

TEST_F(CudaActivations, SmallSwiglu) {
  uint64_t seed = 100;
  for (int64_t n : {1, 33, 4097}) {
    for (int alias : {0, 1, 2}) check_swiglu(n, alias, seed++);
  }
}

TEST_F(CudaActivations, Add) {
  uint64_t seed = 300;
  for (int64_t n : {1, 33, 4097, 100003}) {
    for (int alias : {0, 1, 2}) check_add(n, alias, seed++);
  }
}

TEST_F(CudaActivations, SmallGeglu) {
  uint64_t seed = 200;
  for (int64_t rows : {1, 3, 17}) {
    for (int64_t hidden : {1, 37, 1024}) check_geglu(rows, hidden, seed++);
  }
}

TEST(CudaActivationsArgs, RejectsNegativeSizes) {
  float dummy = 0;
  EXPECT_EQ(cuda::silu(&dummy, &dummy, -1, nullptr).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(cuda::geglu(&dummy, &dummy, 2, -1, nullptr).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(cuda::swiglu(nullptr, &dummy, &dummy, 4, nullptr).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(cuda::quick_gelu(&dummy, &dummy, -1, nullptr).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(cuda::add(&dummy, nullptr, &dummy, 4, nullptr).code(), ErrorCode::kInvalidArgument);
  TESSERA_EXPECT_OK(cuda::gelu_tanh(nullptr, nullptr, 0, nullptr));
  TESSERA_EXPECT_OK(cuda::add(nullptr, nullptr, nullptr, 0, nullptr));
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaActivations)
#endif
