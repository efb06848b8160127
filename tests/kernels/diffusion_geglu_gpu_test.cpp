// cuda::geglu_ff (fused: one kernel; unfused: GELU of the gate, then the product, as two kernels)
// against the double reference, diffusers' [value | gate] order, on row widths below, at and
// above a warp and SD's 1280 + an odd tail; fused and unfused agree. Argument checks run without
// a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/diffusion_ops.h"
#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"

#if TESSERA_HAVE_CUDA
#include "kernels/cuda/diffusion_cuda_ops.h"
#include "tests/kernels/diffusion_gpu_test_util.h"

namespace tessera::kernels {
namespace {

// One erf and two products per element in f32: a few ulps. A swapped value/gate or a row offset
// is off by O(1).
constexpr double kTol = 1e-5;

class CudaDiffusionGeglu : public test::GpuTest {};

TEST_F(CudaDiffusionGeglu, FusedAndUnfusedMatchReference) {
  uint64_t seed = 800;
  const int64_t shapes[][2] = {{1, 1}, {3, 7}, {2, 32}, {17, 33}, {9, 320}, {5, 1283}};
  for (const auto& shape : shapes) {
    const int64_t rows = shape[0], hidden = shape[1];
    const size_t n_out = static_cast<size_t>(rows * hidden);
    const std::vector<float> x = test::random_floats(2 * n_out, seed++, -3.f, 3.f);
    std::vector<float> expected(n_out);
    ref::geglu(x.data(), expected.data(), rows, hidden);
    cuda::DeviceBuffer d_x = upload(x);
    std::vector<float> fused;
    for (Fusion fusion : {Fusion::kOn, Fusion::kOff}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " hidden " + std::to_string(hidden) +
                   (fusion == Fusion::kOn ? " fused" : " unfused"));
      cuda::DeviceBuffer d_y = alloc<float>(n_out);
      TESSERA_ASSERT_OK(
          cuda::geglu_ff(d_x.as<float>(), d_y.as<float>(), rows, hidden, fusion, stream_));
      ASSERT_TRUE(sync());
      const std::vector<float> actual = download<float>(d_y, n_out);
      EXPECT_TRUE(test::close_to_scale(actual, expected, kTol));
      if (fusion == Fusion::kOn) {
        fused = actual;
      } else {
        EXPECT_TRUE(test::close_to_scale(actual, fused, 1e-6));
      }
    }
  }
}

TEST(CudaDiffusionGegluArgs, RejectsBadSizesBeforeTouchingTheDevice) {
  float dummy = 0;
  for (Fusion fusion : {Fusion::kOn, Fusion::kOff}) {
    EXPECT_EQ(cuda::geglu_ff(&dummy, &dummy, -1, 4, fusion, nullptr).code(),
              ErrorCode::kInvalidArgument);
    EXPECT_EQ(cuda::geglu_ff(nullptr, &dummy, 2, 4, fusion, nullptr).code(),
              ErrorCode::kInvalidArgument);
    TESSERA_EXPECT_OK(cuda::geglu_ff(nullptr, nullptr, 0, 4, fusion, nullptr));
  }
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaDiffusionGeglu)
#endif
