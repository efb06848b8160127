// cuda::layer_norm and cuda::rms_norm against the references: rows of 1 to 1537 elements (below,
// at and above one block's 256 threads), with and without affine parameters, out of place and in
// place, inputs with a large common offset (tests the two-pass variance).
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

// Outputs are O(1); f32 reductions over <= 1537 elements against a double reference.
constexpr double kAtol = 1e-5;
constexpr double kRtol = 1e-5;
constexpr float kEps = 1e-5f;

enum class Affine { kNone, kWeight, kWeightAndBias, kBiasOnly };

class CudaNorms : public test::GpuTest {
 protected:
  void check(bool rms, int64_t rows, int64_t dim, Affine affine, bool in_place, uint64_t seed) {
    SCOPED_TRACE(std::string(rms ? "rms_norm" : "layer_norm") + " rows=" + std::to_string(rows) +
                 " dim=" + std::to_string(dim) + " affine=" +
                 std::to_string(static_cast<int>(affine)) + (in_place ? " in place" : ""));
    const size_t n = static_cast<size_t>(rows * dim);
    const std::vector<float> x = test::random_floats(n, seed, 2.f, 4.f);  // mean ~3, spread ~0.6
    const std::vector<float> weight =
        test::random_floats(static_cast<size_t>(dim), seed + 1, 0.5f, 1.5f);
    const std::vector<float> bias = test::random_floats(static_cast<size_t>(dim), seed + 2);
    const bool use_weight = affine == Affine::kWeight || affine == Affine::kWeightAndBias;
    const bool use_bias = affine == Affine::kWeightAndBias || affine == Affine::kBiasOnly;

    std::vector<float> expected(n);
    if (rms) {
      ref::rms_norm(x.data(), use_weight ? weight.data() : nullptr, expected.data(), rows, dim,
                    kEps);
    } else {
      ref::layer_norm(x.data(), use_weight ? weight.data() : nullptr,
                      use_bias ? bias.data() : nullptr, expected.data(), rows, dim, kEps);
    }

    cuda::DeviceBuffer d_x = upload(x);
    cuda::DeviceBuffer d_w = upload(weight);
    cuda::DeviceBuffer d_b = upload(bias);
    cuda::DeviceBuffer d_y_separate = in_place ? cuda::DeviceBuffer() : alloc<float>(n);
    float* d_y = in_place ? d_x.as<float>() : d_y_separate.as<float>();
    const float* w = use_weight ? d_w.as<float>() : nullptr;
    const float* b = use_bias ? d_b.as<float>() : nullptr;
    if (rms) {
      TESSERA_ASSERT_OK(cuda::rms_norm(d_x.as<float>(), w, d_y, rows, dim, kEps, stream_));
    } else {
      TESSERA_ASSERT_OK(cuda::layer_norm(d_x.as<float>(), w, b, d_y, rows, dim, kEps, stream_));
    }
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(in_place ? d_x : d_y_separate, n);
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), n, kAtol, kRtol));
  }
};

TEST_F(CudaNorms, SmallLayerNorm) {
  uint64_t seed = 1;
  for (int64_t rows : {1, 5}) {
    for (int64_t dim : {1, 7, 32, 33, 256}) {
      check(false, rows, dim, Affine::kWeightAndBias, false, seed++);
      check(false, rows, dim, Affine::kNone, true, seed++);
    }
  }
}

TEST_F(CudaNorms, LayerNormShapes) {
  uint64_t seed = 100;
  for (int64_t dim : {255, 1000, 1537}) {
    for (Affine affine :
         {Affine::kNone, Affine::kWeight, Affine::kWeightAndBias, Affine::kBiasOnly}) {
      check(false, 33, dim, affine, (seed % 2) == 0, seed);
      ++seed;
    }
  }
}

TEST_F(CudaNorms, SmallRmsNorm) {
  uint64_t seed = 200;
  for (int64_t rows : {1, 5}) {
    for (int64_t dim : {1, 7, 32, 33, 256}) {
      check(true, rows, dim, Affine::kWeight, false, seed++);
      check(true, rows, dim, Affine::kNone, true, seed++);
    }
  }
}

TEST_F(CudaNorms, RmsNormShapes) {
  uint64_t seed = 300;
  for (int64_t dim : {255, 1000, 1537}) {
    check(true, 33, dim, Affine::kWeight, true, seed++);
    check(true, 70, dim, Affine::kNone, false, seed++);
  }
}

// The fused residual add + LayerNorm of the decode step gives the bits of add then layer_norm.
TEST_F(CudaNorms, AddLayerNormIsAddThenLayerNorm) {
  uint64_t seed = 900;
  for (int64_t dim : {1, 7, 256, 1536}) {
    for (int64_t rows : {1, 2, 5}) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " dim=" + std::to_string(dim));
      const size_t n = static_cast<size_t>(rows * dim);
      const std::vector<float> x = test::random_floats(n, seed++, 2.f, 4.f);
      const std::vector<float> t = test::random_floats(n, seed++);
      cuda::DeviceBuffer fused_x = upload(x), sep_x = upload(x), d_t = upload(t);
      cuda::DeviceBuffer fused_h = alloc<float>(n), sep_h = alloc<float>(n);
      TESSERA_ASSERT_OK(cuda::add_layer_norm(fused_x.as<float>(), d_t.as<float>(),
                                             fused_h.as<float>(), rows, dim, kEps, stream_));
      TESSERA_ASSERT_OK(cuda::add(sep_x.as<float>(), d_t.as<float>(), sep_x.as<float>(),
                                  static_cast<int64_t>(n), stream_));
      TESSERA_ASSERT_OK(cuda::layer_norm(sep_x.as<float>(), nullptr, nullptr, sep_h.as<float>(),
                                         rows, dim, kEps, stream_));
      ASSERT_TRUE(sync());
      const std::vector<float> fx = download<float>(fused_x, n), sx = download<float>(sep_x, n);
      const std::vector<float> fh = download<float>(fused_h, n), sh = download<float>(sep_h, n);
      EXPECT_TRUE(test::all_equal(fx.data(), sx.data(), n));
      EXPECT_TRUE(test::all_equal(fh.data(), sh.data(), n));
    }
  }
}

TEST(CudaNormsArgs, RejectsNegativeSizesAndNulls) {
  float dummy = 0;
  EXPECT_EQ(cuda::layer_norm(&dummy, nullptr, nullptr, &dummy, -1, 4, kEps, nullptr).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(cuda::rms_norm(nullptr, nullptr, &dummy, 2, 4, kEps, nullptr).code(),
            ErrorCode::kInvalidArgument);
  TESSERA_EXPECT_OK(cuda::rms_norm(nullptr, nullptr, nullptr, 0, 4, kEps, nullptr));
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaNorms)
#endif
