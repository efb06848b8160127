// cuda::rope_interleaved against ref::rope_interleaved: even and odd head_dim, one and several
// heads, contiguous and packed-QKV token strides (whose gaps must stay untouched), positions up to
// several thousand; and the fused cuda::rms_norm_rope.
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

// cuda::rms_norm_rope (the fused per-head RMSNorm + RoPE of the GPT's q/k) against ref::rms_norm
// then ref::rope_interleaved: head dims 2..256 (odd ones leave the last element unrotated), with
// and without a weight, with and without positions (condition tokens: norm only), many rows.
TEST_F(CudaRope, FusedRmsNormRopeMatchesTheTwoReferenceOps) {
  uint64_t seed = 300;
  for (int64_t head_dim : {2, 7, 64, 128, 256}) {
    for (bool with_weight : {true, false}) {
      for (bool with_positions : {true, false}) {
        const int64_t tokens = 33, heads = 5, n = tokens * heads * head_dim;
        SCOPED_TRACE("head_dim=" + std::to_string(head_dim) + (with_weight ? " weight" : "") +
                     (with_positions ? " positions" : ""));
        const std::vector<float> x = test::random_floats(static_cast<size_t>(n), seed++, -3.f, 3.f);
        const std::vector<float> w = test::random_floats(static_cast<size_t>(head_dim), seed++);
        std::vector<int32_t> positions =
            test::random_ids(static_cast<size_t>(tokens), seed++, 4000);
        const float eps = 1e-6f, theta = 10000.f;
        std::vector<float> expected(x.size());
        ref::rms_norm(x.data(), with_weight ? w.data() : nullptr, expected.data(), tokens * heads,
                      head_dim, eps);
        if (with_positions) {
          ref::rope_interleaved(expected.data(), tokens, heads, head_dim, heads * head_dim,
                                positions.data(), theta);
        }
        cuda::DeviceBuffer d_x = upload(x), d_w = upload(w), d_pos = upload(positions);
        TESSERA_ASSERT_OK(cuda::rms_norm_rope(
            d_x.as<float>(), with_weight ? d_w.as<float>() : nullptr, tokens, heads, head_dim, eps,
            with_positions ? d_pos.as<int32_t>() : nullptr, theta, stream_));
        ASSERT_TRUE(sync());
        const std::vector<float> actual = download<float>(d_x, static_cast<size_t>(n));
        // The row's sum of squares in f32 (a warp reduction here, double in the reference).
        EXPECT_TRUE(test::all_close(actual.data(), expected.data(), actual.size(), 1e-5, 1e-5));
      }
    }
  }
}

// The q/k pair in one launch gives the bits of two rms_norm_rope calls.
TEST_F(CudaRope, RmsNormRopePairIsTwoCalls) {
  const int64_t tokens = 2, heads = 12, head_dim = 128, n = tokens * heads * head_dim;
  const std::vector<float> q = test::random_floats(static_cast<size_t>(n), 400, -3.f, 3.f);
  const std::vector<float> k = test::random_floats(static_cast<size_t>(n), 401, -3.f, 3.f);
  const std::vector<float> qw = test::random_floats(static_cast<size_t>(head_dim), 402);
  const std::vector<float> kw = test::random_floats(static_cast<size_t>(head_dim), 403);
  const std::vector<int32_t> positions = {17, 17};
  cuda::DeviceBuffer pq = upload(q), pk = upload(k), sq = upload(q), sk = upload(k);
  cuda::DeviceBuffer d_qw = upload(qw), d_kw = upload(kw), d_pos = upload(positions);
  TESSERA_ASSERT_OK(cuda::rms_norm_rope_pair(pq.as<float>(), d_qw.as<float>(), pk.as<float>(),
                                             d_kw.as<float>(), tokens, heads, head_dim, 1e-6f,
                                             d_pos.as<int32_t>(), 10000.f, stream_));
  TESSERA_ASSERT_OK(cuda::rms_norm_rope(sq.as<float>(), d_qw.as<float>(), tokens, heads, head_dim,
                                        1e-6f, d_pos.as<int32_t>(), 10000.f, stream_));
  TESSERA_ASSERT_OK(cuda::rms_norm_rope(sk.as<float>(), d_kw.as<float>(), tokens, heads, head_dim,
                                        1e-6f, d_pos.as<int32_t>(), 10000.f, stream_));
  ASSERT_TRUE(sync());
  const size_t count = static_cast<size_t>(n);
  EXPECT_EQ(download<float>(pq, count), download<float>(sq, count));
  EXPECT_EQ(download<float>(pk, count), download<float>(sk, count));
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
