// cuda::group_norm (fused GroupNorm+SiLU and the unfused GroupNorm, then SiLU) against the double
// reference: 1-pixel images, odd sizes, 1 to 10 channels per group, batches, null affine
// parameters, in place, inputs with a large common offset (the Welford/Chan statistics must not
// cancel); fused and unfused agree. Argument checks run without a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/diffusion_ops.h"
#include "tests/kernels/gpu_test_util.h"

#if TESSERA_HAVE_CUDA
#include "kernels/cuda/diffusion_cuda_ops.h"
#include "tests/kernels/diffusion_gpu_test_util.h"
#include "tests/support/diffusion_cases.h"

namespace tessera::kernels {
namespace {

// f32 statistics over <= 10K elements per group against double; measured error well below this.
// A wrong group, channel or variance is off by O(0.1).
constexpr double kTol = 1e-5;
constexpr float kEps = 1e-5f;

const test::GroupNormCase kCases[] = {
    {1, 1, 1, 4, 2, -1.f, 1.f},   {2, 5, 7, 12, 3, -2.f, 2.f},    {1, 9, 11, 64, 32, -1.f, 3.f},
    {3, 3, 3, 96, 32, -1.f, 1.f}, {1, 33, 17, 40, 4, 29.f, 31.f}, {2, 16, 16, 320, 32, -3.f, 1.f},
};

class CudaDiffusionGroupNorm : public test::GpuTest {};

TEST_F(CudaDiffusionGroupNorm, FusedAndUnfusedMatchReference) {
  uint64_t seed = 700;
  for (const test::GroupNormCase& c : kCases) {
    const ImageShape s = c.image();
    const size_t n = static_cast<size_t>(s.elements());
    const std::vector<float> x = test::random_floats(n, seed++, c.lo, c.hi);
    const std::vector<float> gamma =
        test::random_floats(static_cast<size_t>(c.channels), seed++, 0.5f, 1.5f);
    const std::vector<float> beta = test::random_floats(static_cast<size_t>(c.channels), seed++);
    cuda::DeviceBuffer d_x = upload(x);
    cuda::DeviceBuffer d_gamma = upload(gamma);
    cuda::DeviceBuffer d_beta = upload(beta);
    for (bool affine : {true, false}) {
      for (bool silu : {true, false}) {
        std::vector<float> expected(n);
        ref::group_norm(x.data(), affine ? gamma.data() : nullptr, affine ? beta.data() : nullptr,
                        expected.data(), s, c.groups, kEps, silu);
        std::vector<float> fused;
        for (Fusion fusion : {Fusion::kOn, Fusion::kOff}) {
          for (bool in_place : {false, true}) {
            SCOPED_TRACE(test::describe(c) + (affine ? " affine" : "") + (silu ? " silu" : "") +
                         (fusion == Fusion::kOn ? " fused" : " unfused") +
                         (in_place ? " in place" : ""));
            cuda::DeviceBuffer d_in = in_place ? upload(x) : cuda::DeviceBuffer();
            cuda::DeviceBuffer d_y = in_place ? cuda::DeviceBuffer() : alloc<float>(n);
            const float* in = in_place ? d_in.as<float>() : d_x.as<float>();
            float* out = in_place ? d_in.as<float>() : d_y.as<float>();
            TESSERA_ASSERT_OK(cuda::group_norm(in, affine ? d_gamma.as<float>() : nullptr,
                                               affine ? d_beta.as<float>() : nullptr, out, s,
                                               c.groups, kEps, silu, fusion, stream_));
            ASSERT_TRUE(sync());
            const std::vector<float> actual = download<float>(in_place ? d_in : d_y, n);
            EXPECT_TRUE(test::close_to_scale(actual, expected, kTol));
            if (fusion == Fusion::kOn && !in_place) fused = actual;
            // Same statistics kernel, SiLU in registers or as a second pass: agreement to a few
            // ulps of the scale.
            if (fusion == Fusion::kOff) {
              EXPECT_TRUE(test::close_to_scale(actual, fused, 1e-6));
            }
          }
        }
      }
    }
  }
}

TEST(CudaDiffusionGroupNormArgs, RejectsBadShapesBeforeTouchingTheDevice) {
  float dummy = 0;
  const ImageShape s{1, 2, 2, 6};
  EXPECT_EQ(
      cuda::group_norm(&dummy, nullptr, nullptr, &dummy, s, 4, kEps, true, Fusion::kOn, nullptr)
          .code(),
      ErrorCode::kInvalidArgument);  // 4 groups do not divide 6 channels
  EXPECT_EQ(
      cuda::group_norm(&dummy, nullptr, nullptr, &dummy, s, 0, kEps, true, Fusion::kOn, nullptr)
          .code(),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      cuda::group_norm(nullptr, nullptr, nullptr, &dummy, s, 3, kEps, false, Fusion::kOff, nullptr)
          .code(),
      ErrorCode::kInvalidArgument);
  const ImageShape negative{1, -2, 2, 6};
  EXPECT_EQ(cuda::group_norm(&dummy, nullptr, nullptr, &dummy, negative, 3, kEps, false,
                             Fusion::kOn, nullptr)
                .code(),
            ErrorCode::kInvalidArgument);
  const ImageShape empty{0, 2, 2, 6};
  TESSERA_EXPECT_OK(cuda::group_norm(nullptr, nullptr, nullptr, nullptr, empty, 3, kEps, true,
                                     Fusion::kOn, nullptr));
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaDiffusionGroupNorm)
#endif
