// cuda::conv2d and cuda::upsample_nearest2x (1x1 GEMM, 3x3 im2col + GEMM, 3x3 Winograd F(4x4,3x3);
// stride 2; nearest x2 upsampling read through the input indexing) against the direct
// double-precision reference, with weights packed by the CPU packer: 1-pixel images, primes, images
// that are not multiples of the 4x4 Winograd tile, batches, no bias; a convolution large enough to
// run in several workspace blocks on both algorithms; im2col and Winograd agree; the unfused
// upsampling (expand, then convolve) agrees with the fused one. Argument checks run without a
// device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/diffusion_ops.h"
#include "tests/kernels/gpu_test_util.h"

#if TESSERA_HAVE_CUDA
#include "kernels/cuda/diffusion_cuda_ops.h"
#include "tests/kernels/diffusion_gpu_test_util.h"
#include "tests/support/diffusion_cases.h"

namespace tessera::kernels {
namespace {

// Relative to max |y| (tests/kernels/diffusion_conv_test.cpp's reasoning): f32 sums over
// 9 * in_c products, 1e-5; Winograd's transform constants amplify f32 rounding, 2e-5 as the CPU
// test states. A wrong tap, tile edge or padding is off by O(0.1).
constexpr double kGemmTol = 1e-5, kWinogradTol = 2e-5;

// Run after the CPU test's cases (test::kConvCases), each with and without bias: SD's 320
// channels, and a batch of odd-sized images.
const test::ConvCase kGpuCases[] = {
    {2, 16, 16, 320, 320, 3, 1, false},
    {1, 12, 12, 320, 4, 1, 1, false},
    {2, 11, 13, 3, 8, 3, 1, false},
};

class CudaDiffusionConv : public test::GpuTest {
 protected:
  // Runs cuda::conv2d with every applicable algorithm and checks each against the reference and
  // the two 3x3 algorithms against each other.
  void check(const Conv2dShape& s, bool with_bias, uint64_t seed) {
    const int64_t taps = s.kernel * s.kernel;
    const std::vector<float> x =
        test::random_floats(static_cast<size_t>(s.batch * s.in_h * s.in_w * s.in_c), seed, -0.3f,
                            3.f);  // post-SiLU-like values
    const std::vector<float> w =
        test::random_floats(static_cast<size_t>(s.out_c * s.in_c * taps), seed + 1, -0.1f, 0.1f);
    const std::vector<float> bias = test::random_floats(static_cast<size_t>(s.out_c), seed + 2);
    const size_t n_out = static_cast<size_t>(s.batch * s.out_h() * s.out_w() * s.out_c);
    std::vector<float> expected(n_out);
    ref::conv2d(x.data(), w.data(), with_bias ? bias.data() : nullptr, expected.data(), s);

    cuda::DeviceBuffer d_x = upload(x);
    cuda::DeviceBuffer d_bias = upload(bias);
    std::vector<float> gemm_result;
    for (ConvAlgo algo : {ConvAlgo::kGemm, ConvAlgo::kWinograd}) {
      if (algo == ConvAlgo::kWinograd && !cpu::winograd_applies(s)) continue;
      SCOPED_TRACE(test::describe(s, algo) + (with_bias ? " bias" : ""));
      std::vector<float> packed(static_cast<size_t>(cpu::conv2d_packed_floats(s, algo)));
      cpu::conv2d_pack_weights(w.data(), s, algo, packed.data());
      cuda::DeviceBuffer d_packed = upload(packed);
      const size_t work_bytes = cuda::conv2d_workspace_bytes(s, algo);
      cuda::DeviceBuffer d_work = alloc<float>(work_bytes / sizeof(float));
      cuda::DeviceBuffer d_y = alloc<float>(n_out);
      TESSERA_ASSERT_OK(cuda::conv2d(d_x.as<float>(), d_packed.as<float>(),
                                     with_bias ? d_bias.as<float>() : nullptr, d_y.as<float>(), s,
                                     algo, d_work.data(), work_bytes, stream_));
      ASSERT_TRUE(sync());
      const std::vector<float> actual = download<float>(d_y, n_out);
      EXPECT_TRUE(test::close_to_scale(actual, expected,
                                       algo == ConvAlgo::kWinograd ? kWinogradTol : kGemmTol));
      if (algo == ConvAlgo::kGemm) {
        gemm_result = actual;
      } else {
        EXPECT_TRUE(test::close_to_scale(actual, gemm_result, kWinogradTol));
      }
    }
  }
};

TEST_F(CudaDiffusionConv, EveryAlgorithmMatchesReference) {
  uint64_t seed = 900;
  std::vector<test::ConvCase> cases(std::begin(test::kConvCases), std::end(test::kConvCases));
  cases.insert(cases.end(), std::begin(kGpuCases), std::end(kGpuCases));
  for (const test::ConvCase& c : cases) {
    for (bool bias : {false, true}) check(test::conv_shape(c), bias, seed);
    seed += 3;
  }
}

// cuda::conv2d_weight with the kGemm packing in bf16 (Precision::kBf16 on a GPU: the im2col blocks
// through cuda::linear's bf16 path, the tensor cores above the GEMV rows): the reference of the
// bf16-rounded input and weights, to f32 summation accuracy (the bf16 products are exact in f32;
// 1e-4 of the scale allows the tensor cores' own order of additions). Also kernel 1, stride 2,
// the fused upsampling, a workspace in several blocks, and a weight of the wrong shape.
TEST_F(CudaDiffusionConv, Bf16WeightsMatchTheReferenceOfTheRoundedOperands) {
  std::vector<Conv2dShape> shapes;
  for (const test::ConvCase& c : test::kConvCases) shapes.push_back(test::conv_shape(c));
  for (const test::ConvCase& c : kGpuCases) shapes.push_back(test::conv_shape(c));
  Conv2dShape large;  // LargeConvolutionRunsInBlocks' shape: several im2col blocks
  large.in_h = large.in_w = 128;
  large.in_c = 512;
  large.out_c = 1;
  large.upsample2x = true;
  shapes.push_back(large);
  uint64_t seed = 1200;
  for (const Conv2dShape& s : shapes) {
    SCOPED_TRACE(test::describe(s, ConvAlgo::kGemm));
    const int64_t taps = s.kernel * s.kernel;
    auto rounded = [](std::vector<float> v) {
      for (float& f : v) f = bf16_to_f32(f32_to_bf16(f));
      return v;
    };
    const std::vector<float> x = test::random_floats(
        static_cast<size_t>(s.batch * s.in_h * s.in_w * s.in_c), seed, -0.3f, 3.f);
    const std::vector<float> w = rounded(
        test::random_floats(static_cast<size_t>(s.out_c * s.in_c * taps), seed + 1, -0.1f, 0.1f));
    const std::vector<float> bias = test::random_floats(static_cast<size_t>(s.out_c), seed + 2);
    seed += 3;
    const size_t n_out = static_cast<size_t>(s.batch * s.out_h() * s.out_w() * s.out_c);
    std::vector<float> expected(n_out);
    ref::conv2d(rounded(x).data(), w.data(), bias.data(), expected.data(), s);

    std::vector<float> packed(static_cast<size_t>(cpu::conv2d_packed_floats(s, ConvAlgo::kGemm)));
    cpu::conv2d_pack_weights(w.data(), s, ConvAlgo::kGemm, packed.data());
    std::vector<uint16_t> packed_bf16(packed.size());
    convert_f32_to_bf16(packed.data(), packed_bf16.data(), packed.size());
    cuda::DeviceBuffer d_x = upload(x);
    cuda::DeviceBuffer d_bias = upload(bias);
    cuda::DeviceBuffer d_w = upload(packed_bf16);
    const Weight weight{d_w.data(), DType::kBF16, s.out_c, taps * s.in_c};
    const size_t work_bytes = cuda::conv2d_workspace_bytes(s, ConvAlgo::kGemm);
    cuda::DeviceBuffer d_work = alloc<float>(std::max<size_t>(1, work_bytes / sizeof(float)));
    cuda::DeviceBuffer d_y = alloc<float>(n_out);
    TESSERA_ASSERT_OK(cuda::conv2d_weight(d_x.as<float>(), weight, d_bias.as<float>(),
                                          d_y.as<float>(), s, d_work.data(), work_bytes, stream_));
    ASSERT_TRUE(sync());
    EXPECT_TRUE(test::close_to_scale(download<float>(d_y, n_out), expected, 1e-4));

    Weight wrong = weight;
    wrong.cols += 1;
    const Status st = cuda::conv2d_weight(d_x.as<float>(), wrong, d_bias.as<float>(),
                                          d_y.as<float>(), s, d_work.data(), work_bytes, stream_);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
  }
}

// 256x256 output (upsampled from 128x128), 512 -> 1 channels: the im2col matrix (256 x 256 x 4608
// floats) and Winograd's V and M (36 x 4096 tiles x 513) exceed kConvWorkspaceMaxFloats, so both
// run in several blocks (block edges are where an offset bug would show).
TEST_F(CudaDiffusionConv, LargeConvolutionRunsInBlocks) {
  Conv2dShape s;
  s.in_h = s.in_w = 128;
  s.in_c = 512;
  s.out_c = 1;
  s.upsample2x = true;
  ASSERT_LT(cuda::conv2d_workspace_bytes(s, ConvAlgo::kGemm) / sizeof(float),
            static_cast<size_t>(s.out_h() * s.out_w() * 9 * s.in_c));
  ASSERT_LT(cuda::conv2d_workspace_bytes(s, ConvAlgo::kWinograd) / sizeof(float),
            static_cast<size_t>(36 * 64 * 64 * (s.in_c + s.out_c)));
  check(s, true, 990);
}

// The upsample off switch: cuda::upsample_nearest2x equals the reference exactly, and a plain
// convolution of the expanded tensor agrees with the convolution that reads through the
// upsampling (same products in the same order: a few ulps at most).
TEST_F(CudaDiffusionConv, UnfusedUpsampleMatchesFused) {
  uint64_t seed = 950;
  const int64_t shapes[][4] = {{1, 7, 9, 33}, {2, 5, 6, 16}, {1, 1, 1, 3}};
  for (const auto& shape : shapes) {
    const ImageShape small{shape[0], shape[1], shape[2], shape[3]};
    const ImageShape big{small.batch, 2 * small.height, 2 * small.width, small.channels};
    const std::vector<float> x = test::random_floats(size_t(small.elements()), seed++, -0.3f, 3.f);
    std::vector<float> expanded(size_t(big.elements()));
    ref::upsample_nearest2x(x.data(), expanded.data(), small);
    cuda::DeviceBuffer d_x = upload(x);
    cuda::DeviceBuffer d_big = alloc<float>(expanded.size());
    TESSERA_ASSERT_OK(cuda::upsample_nearest2x(d_x.as<float>(), d_big.as<float>(), small, stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual_big = download<float>(d_big, expanded.size());
    EXPECT_TRUE(test::all_equal(actual_big.data(), expanded.data(), expanded.size()));

    Conv2dShape fused;
    fused.batch = small.batch;
    fused.in_h = small.height;
    fused.in_w = small.width;
    fused.in_c = small.channels;
    fused.out_c = 11;
    fused.upsample2x = true;
    Conv2dShape plain = fused;
    plain.in_h = big.height;
    plain.in_w = big.width;
    plain.upsample2x = false;
    const std::vector<float> w =
        test::random_floats(size_t(11 * small.channels * 9), seed++, -0.1f, 0.1f);
    const std::vector<float> bias = test::random_floats(11, seed++);
    cuda::DeviceBuffer d_bias = upload(bias);
    const size_t n_out = size_t(big.pixels() * 11);
    for (ConvAlgo algo : {ConvAlgo::kGemm, ConvAlgo::kWinograd}) {
      SCOPED_TRACE(test::describe(fused, algo));
      std::vector<float> packed(size_t(cpu::conv2d_packed_floats(fused, algo)));
      cpu::conv2d_pack_weights(w.data(), fused, algo, packed.data());
      cuda::DeviceBuffer d_packed = upload(packed);
      std::vector<float> results[2];
      for (int unfused = 0; unfused < 2; ++unfused) {
        const Conv2dShape& s = unfused ? plain : fused;
        const size_t work_bytes = cuda::conv2d_workspace_bytes(s, algo);
        cuda::DeviceBuffer d_work = alloc<float>(work_bytes / sizeof(float));
        cuda::DeviceBuffer d_y = alloc<float>(n_out);
        TESSERA_ASSERT_OK(cuda::conv2d(unfused ? d_big.as<float>() : d_x.as<float>(),
                                       d_packed.as<float>(), d_bias.as<float>(), d_y.as<float>(), s,
                                       algo, d_work.data(), work_bytes, stream_));
        ASSERT_TRUE(sync());
        results[unfused] = download<float>(d_y, n_out);
      }
      EXPECT_TRUE(test::close_to_scale(results[1], results[0], 1e-6));
    }
  }
}

TEST(CudaDiffusionConvArgs, RejectsBadShapesBeforeTouchingTheDevice) {
  float dummy = 0;
  Conv2dShape s;
  s.in_h = s.in_w = 4;
  s.in_c = s.out_c = 2;
  s.kernel = 5;
  EXPECT_EQ(
      cuda::conv2d(&dummy, &dummy, nullptr, &dummy, s, ConvAlgo::kGemm, &dummy, 4, nullptr).code(),
      ErrorCode::kUnsupported);
  s.kernel = 1;
  s.stride = 2;
  EXPECT_EQ(
      cuda::conv2d(&dummy, &dummy, nullptr, &dummy, s, ConvAlgo::kGemm, &dummy, 4, nullptr).code(),
      ErrorCode::kUnsupported);
  s.kernel = 3;
  EXPECT_EQ(
      cuda::conv2d(&dummy, &dummy, nullptr, &dummy, s, ConvAlgo::kWinograd, &dummy, 4, nullptr)
          .code(),
      ErrorCode::kUnsupported);  // Winograd needs stride 1
  s.stride = 1;
  EXPECT_GT(cuda::conv2d_workspace_bytes(s, ConvAlgo::kGemm), 4u);
  EXPECT_EQ(
      cuda::conv2d(&dummy, &dummy, nullptr, &dummy, s, ConvAlgo::kGemm, &dummy, 4, nullptr).code(),
      ErrorCode::kInvalidArgument);  // workspace too small
  EXPECT_EQ(
      cuda::conv2d(&dummy, &dummy, nullptr, &dummy, s, ConvAlgo::kWinograd, nullptr, 0, nullptr)
          .code(),
      ErrorCode::kInvalidArgument);  // no workspace
  EXPECT_EQ(
      cuda::conv2d(nullptr, &dummy, nullptr, &dummy, s, ConvAlgo::kGemm, &dummy, 4, nullptr).code(),
      ErrorCode::kInvalidArgument);
  const ImageShape negative{1, -1, 2, 3};
  EXPECT_EQ(cuda::upsample_nearest2x(&dummy, &dummy, negative, nullptr).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(cuda::upsample_nearest2x(nullptr, &dummy, ImageShape{1, 2, 2, 3}, nullptr).code(),
            ErrorCode::kInvalidArgument);
  s.in_h = -1;
  EXPECT_EQ(
      cuda::conv2d(&dummy, &dummy, nullptr, &dummy, s, ConvAlgo::kGemm, &dummy, 4, nullptr).code(),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(cuda::conv2d_workspace_bytes(s, ConvAlgo::kGemm), 0u);
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaDiffusionConv)
#endif
