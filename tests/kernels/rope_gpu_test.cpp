// cuda::rope_interleaved against ref::rope_interleaved: even and odd head_dim, one and several
// heads, contiguous and packed-QKV token strides (whose gaps must stay untouched), positions up to
// several thousand.
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

// Both compute angle, sin/cos and the rotation in double and round once.
constexpr double kAtol = 1e-6;
constexpr double kRtol = 1e-6;

class CudaRope : public test::GpuTest {
 protected:
  void check(int64_t tokens, int64_t heads, int64_t head_dim, bool packed, uint64_t seed) {
    SCOPED_TRACE("tokens=" + std::to_string(tokens) + " heads=" + std::to_string(heads) +
                 " head_dim=" + std::to_string(head_dim) + (packed ? " packed" : ""));
    const int64_t token_stride = packed ? 3 * heads * head_dim + 1 : heads * head_dim;
    const size_t n = static_cast<size_t>(tokens * token_stride);
    const std::vector<float> x = test::random_floats(n, seed);
    std::vector<int32_t> positions = test::random_ids(static_cast<size_t>(tokens), seed + 1, 5000);
    positions[0] = 0;
    const float theta = 10000.f;
    std::vector<float> expected = x;
    ref::rope_interleaved(expected.data(), tokens, heads, head_dim, token_stride, positions.data(),
                          theta);

    cuda::DeviceBuffer d_x = upload(x);
    cuda::DeviceBuffer d_pos = upload(positions);
    TESSERA_ASSERT_OK(cuda::rope_interleaved(d_x.as<float>(), tokens, heads, head_dim, token_stride,
                                             d_pos.as<int32_t>(), theta, stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(d_x, n);
    EXPECT_TRUE(test::all_close(actual.data(), expected.data(), n, kAtol, kRtol));
  }
};

TEST_F(CudaRope, SmallShapes) {
  uint64_t seed = 1;
  for (int64_t head_dim : {2, 6, 7, 64}) {
    for (int64_t heads : {1, 3}) {
      check(1, heads, head_dim, false, seed++);
      check(5, heads, head_dim, true, seed++);
    }
  }
}

TEST_F(CudaRope, ManyTokens) {
  check(300, 12, 64, false, 100);
  check(77, 16, 128, true, 101);
}

TEST(CudaRopeArgs, RejectsShortTokenStride) {
  float dummy = 0;
  int32_t pos = 0;
  const Status st = cuda::rope_interleaved(&dummy, 2, 2, 8, 15, &pos, 10000.f, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token_stride"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaRope)
#endif
