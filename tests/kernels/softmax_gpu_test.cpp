// cuda::softmax against ref::softmax: row lengths around the warp and block sizes, large logits
// (the max subtraction), rows with some and with only -inf entries, in place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/kernel_test_util.h"

#if TESSERA_HAVE_CUDA
namespace tessera::kernels {
namespace {

// Probabilities in [0, 1]; expf and f32 sums against a double reference.
constexpr double kAtol = 1e-6;
constexpr double kRtol = 2e-5;

class CudaSoftmax : public test::GpuTest {
 protected:
  void check(std::vector<float> x, int64_t rows, int64_t cols, bool in_place) {
    SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                 (in_place ? " in place" : ""));
    const size_t n = static_cast<size_t>(rows * cols);
    std::vector<float> expected(n);
    ref::softmax(x.data(), expected.data(), rows, cols);
    cuda::DeviceBuffer d_x = upload(x);
    cuda::DeviceBuffer d_y_separate = in_place ? cuda::DeviceBuffer() : alloc<float>(n);
    float* d_y = in_place ? d_x.as<float>() : d_y_separate.as<float>();
    TESSERA_ASSERT_OK(cuda::softmax(d_x.as<float>(), d_y, rows, cols, stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(in_place ? d_x : d_y_separate, n);
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), n, kAtol, kRtol));
  }
};

TEST_F(CudaSoftmax, SmallShapes) {
  uint64_t seed = 1;
  for (int64_t rows : {1, 3}) {
    for (int64_t cols : {1, 7, 31, 32, 33, 256, 257}) {
      check(test::random_floats(static_cast<size_t>(rows * cols), seed, -20.f, 20.f), rows, cols,
            (seed % 2) == 0);
      ++seed;
    }
  }
}

TEST_F(CudaSoftmax, LongRowsAndLargeLogits) {
  check(test::random_floats(64 * 1000, 100, -30.f, 30.f), 64, 1000, false);
  check(test::random_floats(5 * 4099, 101, 80.f, 120.f), 5, 4099, true);  // exp would overflow
}

TEST_F(CudaSoftmax, MaskedEntriesAndFullyMaskedRows) {
  const int64_t rows = 4, cols = 45;
  std::vector<float> x = test::random_floats(static_cast<size_t>(rows * cols), 200, -5.f, 5.f);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < cols; c += 3) x[static_cast<size_t>(c)] = neg_inf;  // row 0: some masked
  for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(2 * cols + c)] = neg_inf;  // row 2: all
  check(x, rows, cols, false);
  check(x, rows, cols, true);
}

TEST(CudaSoftmaxArgs, RejectsNegativeSizes) {
  float dummy = 0;
  EXPECT_EQ(cuda::softmax(&dummy, &dummy, 1, -3, nullptr).code(), ErrorCode::kInvalidArgument);
  TESSERA_EXPECT_OK(cuda::softmax(nullptr, nullptr, 0, 5, nullptr));
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaSoftmax)
#endif
