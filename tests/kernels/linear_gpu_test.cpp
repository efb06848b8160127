// cuda::linear against ref::linear: the GEMV path (m <= kGemvMaxRows = 16; 16-byte vector loads and
// the scalar fallback for misaligned or odd-K inputs), the cuBLAS paths (f32 weights; bf16 weights
// on the tensor cores, x rounded to bf16 as ops.h's contract says and as ref::linear does), with
// and without bias, on awkward sizes; plus argument checks that run without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/kernel_test_util.h"

#if TESSERA_HAVE_CUDA
namespace tessera::kernels {
namespace {

class CudaLinear : public test::GpuTest {
 protected:
  // Runs one problem and compares with the reference. x_offset shifts x by that many floats inside
  // its device buffer: 1 makes it misaligned for 16-byte loads, forcing the scalar GEMV loop.
  void check(int64_t m, int64_t n, int64_t k, DType dtype, bool with_bias, int x_offset,
             uint64_t seed) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                 " " + dtype_name(dtype) + (with_bias ? " bias" : "") +
                 " x_offset=" + std::to_string(x_offset));
    const size_t mk = static_cast<size_t>(m * k);
    const size_t nk = static_cast<size_t>(n * k);
    const size_t mn = static_cast<size_t>(m * n);
    std::vector<float> x(static_cast<size_t>(x_offset), 0.f);
    const std::vector<float> x_values = test::random_floats(mk, seed);
    x.insert(x.end(), x_values.begin(), x_values.end());
    std::vector<float> w_f32;
    std::vector<uint16_t> w_bf16;
    if (dtype == DType::kF32) {
      w_f32 = test::random_floats(nk, seed + 1);
    } else {
      w_bf16 = test::random_bf16(nk, seed + 1);
    }
    const std::vector<float> bias =
        with_bias ? test::random_floats(static_cast<size_t>(n), seed + 2) : std::vector<float>();

    // Reference on the very same (bf16-rounded) weights: only the summation order differs.
    const void* host_w = dtype == DType::kF32 ? static_cast<const void*>(w_f32.data())
                                              : static_cast<const void*>(w_bf16.data());
    std::vector<float> expected(mn);
    ref::linear(x.data() + x_offset, m, Weight{host_w, dtype, n, k},
                with_bias ? bias.data() : nullptr, expected.data());

    // Any f32 evaluation order of a K-term dot product plus bias is within
    // gamma(K + 1) * (sum |x w| + |bias|), gamma(j) = j u / (1 - j u), u = 2^-24 (Higham, eq. 3.5);
    // the reference rounds its double result once more (u |y|).
    const double u = std::ldexp(1.0, -24);
    const double gamma = (k + 1) * u / (1 - (k + 1) * u);
    std::vector<double> bound(mn);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double magnitude = with_bias ? std::fabs(bias[static_cast<size_t>(j)]) : 0.0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const float wv = dtype == DType::kF32
                               ? w_f32[static_cast<size_t>(j * k + kk)]
                               : bf16_to_f32(w_bf16[static_cast<size_t>(j * k + kk)]);
          magnitude +=
              std::fabs(static_cast<double>(x[static_cast<size_t>(x_offset + i * k + kk)]) * wv);
        }
        const size_t idx = static_cast<size_t>(i * n + j);
        bound[idx] = gamma * magnitude + u * std::fabs(expected[idx]) + 1e-30;
      }
    }

    cuda::DeviceBuffer d_x = upload(x);
    cuda::DeviceBuffer d_w = dtype == DType::kF32 ? upload(w_f32) : upload(w_bf16);
    cuda::DeviceBuffer d_bias = upload(bias);
    cuda::DeviceBuffer d_y = alloc<float>(mn);
    const Weight w{d_w.data(), dtype, n, k};
    TESSERA_ASSERT_OK(cuda::linear(d_x.as<float>() + x_offset, m, w,
                                   with_bias ? d_bias.as<float>() : nullptr, d_y.as<float>(),
                                   stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(d_y, mn);
    EXPECT_TRUE(test::all_within(actual.data(), expected.data(), bound.data(), mn));
  }
};

TEST_F(CudaLinear, SmallGemvShapes) {
  uint64_t seed = 100;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t m : {1, 2, 8, 9, 16}) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {67, 64}, {9, 264}}) {
        for (int x_offset : {0, 1}) {
          check(m, n, k, dtype, /*with_bias=*/(seed % 2) == 0, x_offset, seed);
          ++seed;
        }
      }
    }
  }
}

// Batch invariance (issue 23): a row's output is the same bits for every m the GEMV serves (1 ..
// kGemvMaxRows, up to 8 candidates with guidance), with 16-byte loads and without. With many
// features (4500, 9013: past the thresholds on a 132-SM card) the vectorized kernel gives a warp 2
// or 4 features when there are enough rows, which must not change a bit either.
TEST_F(CudaLinear, GemvIsBatchInvariant) {
  const int64_t k = 264, rows = cuda::kGemvMaxRows;
  for (auto [dtype, n, x_offset] :
       {std::tuple{DType::kF32, int64_t{75}, 0}, std::tuple{DType::kF32, int64_t{75}, 1},
        std::tuple{DType::kBF16, int64_t{75}, 0}, std::tuple{DType::kBF16, int64_t{75}, 1},
        std::tuple{DType::kBF16, int64_t{4500}, 0}, std::tuple{DType::kBF16, int64_t{9013}, 0},
        std::tuple{DType::kF32, int64_t{9013}, 0}}) {
    {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                   " x_offset=" + std::to_string(x_offset));
      std::vector<float> x(static_cast<size_t>(x_offset), 0.f);
      const std::vector<float> values = test::random_floats(static_cast<size_t>(rows * k), 600);
      x.insert(x.end(), values.begin(), values.end());
      const std::vector<float> w_f32 = test::random_floats(static_cast<size_t>(n * k), 601);
      const std::vector<uint16_t> w_bf16 = test::random_bf16(static_cast<size_t>(n * k), 601);
      const std::vector<float> bias = test::random_floats(static_cast<size_t>(n), 602);
      cuda::DeviceBuffer d_x = upload(x);
      cuda::DeviceBuffer d_w = dtype == DType::kF32 ? upload(w_f32) : upload(w_bf16);
      cuda::DeviceBuffer d_bias = upload(bias);
      const Weight w{d_w.data(), dtype, n, k};
      std::vector<float> all;
      for (int64_t m = rows; m >= 1; --m) {
        cuda::DeviceBuffer d_y = alloc<float>(static_cast<size_t>(m * n));
        TESSERA_ASSERT_OK(cuda::linear(d_x.as<float>() + x_offset, m, w, d_bias.as<float>(),
                                       d_y.as<float>(), stream_));
        ASSERT_TRUE(sync());
        const std::vector<float> y = download<float>(d_y, static_cast<size_t>(m * n));
        if (m == rows) {
          all = y;
          continue;
        }
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(y[i], all[i]) << "m=" << m << ", output " << i;
        }
      }
    }
  }
}

// Several features a warp (many features, many rows) against the reference, with the ragged end
// of n (not a multiple of the features a block takes).
TEST_F(CudaLinear, GemvWithSeveralFeaturesAWarp) {
  uint64_t seed = 300;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (auto [m, n] : {std::pair<int64_t, int64_t>{3, 4500}, {3, 4501}, {8, 9013}, {16, 8461}}) {
      check(m, n, 136, dtype, /*with_bias=*/true, 0, seed++);
    }
  }
}

TEST_F(CudaLinear, GemvLargeK) {
  uint64_t seed = 200;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    check(1, 130, 1000, dtype, true, 0, seed++);
    check(3, 33, 1537, dtype, false, 0, seed++);
    check(8, 300, 2048, dtype, true, 0, seed++);
  }
}

TEST_F(CudaLinear, SmallGemmShapes) {
  uint64_t seed = 300;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t m : {17, 64, 130}) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{67, 100}, {64, 64}, {5, 257}, {1, 1}}) {
        check(m, n, k, dtype, (seed % 2) == 0, 0, seed);
        ++seed;
      }
    }
  }
}

TEST_F(CudaLinear, GemmLarger) {
  check(257, 384, 512, DType::kF32, true, 0, 400);
  check(257, 384, 512, DType::kBF16, true, 0, 401);
  check(33, 1000, 768, DType::kBF16, false, 1, 402);  // misaligned x is fine for the GEMM paths
}

TEST_F(CudaLinear, EmptyReductionGivesBias) {
  for (int64_t m : {3, 20}) {
    const int64_t n = 5;
    const std::vector<float> bias = test::random_floats(static_cast<size_t>(n), 500);
    cuda::DeviceBuffer d_bias = upload(bias);
    cuda::DeviceBuffer d_y = alloc<float>(static_cast<size_t>(m * n));
    const std::vector<float> w_dummy(1, 0.f);
    cuda::DeviceBuffer d_w = upload(w_dummy);
    TESSERA_ASSERT_OK(cuda::linear(nullptr, m, Weight{d_w.data(), DType::kF32, n, 0},
                                   d_bias.as<float>(), d_y.as<float>(), stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> y = download<float>(d_y, static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
      EXPECT_TRUE(test::all_equal(y.data() + i * n, bias.data(), static_cast<size_t>(n)))
          << "row " << i;
    }
  }
}

// Argument checks happen before any CUDA call, so these run (and must pass) without a device.
TEST(CudaLinearArgs, RejectsUnsupportedWeightDtype) {
  float dummy = 0;
  const Status st =
      cuda::linear(&dummy, 1, Weight{&dummy, DType::kF16, 1, 1}, nullptr, &dummy, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("linear"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("F16"), std::string::npos) << st.message();
}

TEST(CudaLinearArgs, RejectsNullAndNegative) {
  float dummy = 0;
  EXPECT_EQ(
      cuda::linear(nullptr, 2, Weight{&dummy, DType::kF32, 3, 4}, nullptr, &dummy, nullptr).code(),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      cuda::linear(&dummy, -1, Weight{&dummy, DType::kF32, 3, 4}, nullptr, &dummy, nullptr).code(),
      ErrorCode::kInvalidArgument);
  // Nothing to compute: accepted without touching the device.
  TESSERA_EXPECT_OK(
      cuda::linear(nullptr, 0, Weight{nullptr, DType::kF32, 3, 4}, nullptr, nullptr, nullptr));
}

// linear_bf16_x takes bf16 weights only, a k of at least 1 and real pointers; checked before any
// device call.
TEST(CudaLinearArgs, Bf16XRejectsOtherWeightsAndBadSizes) {
  float dummy = 0;
  uint16_t xb = 0;
  Status st =
      cuda::linear_bf16_x(&xb, 2, Weight{&dummy, DType::kF32, 3, 4}, nullptr, &dummy, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("BF16"), std::string::npos) << st.message();
  EXPECT_EQ(
      cuda::linear_bf16_x(&xb, 2, Weight{&xb, DType::kBF16, 3, 0}, nullptr, &dummy, nullptr).code(),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      cuda::linear_bf16_x(nullptr, 2, Weight{&xb, DType::kBF16, 3, 4}, nullptr, &dummy, nullptr)
          .code(),
      ErrorCode::kInvalidArgument);
  TESSERA_EXPECT_OK(cuda::linear_bf16_x(nullptr, 0, Weight{nullptr, DType::kBF16, 3, 4}, nullptr,
                                        nullptr, nullptr));
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaLinear)
#endif
