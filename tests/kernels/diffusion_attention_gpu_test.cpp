// cuda::diffusion_attention (flash, partially fused softmax, naive baseline, auto) against the
// double reference: 1 token, odd lengths, the UNet's head dims 40/80/160 with cross-attention's
// 77 keys, the VAE's single head of 512 (beyond the flash kernel: partial and naive only), q/k/v
// interleaved in one buffer with padded output rows; the partially fused and naive forms agree;
// no keys gives zeros. Argument checks run without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/diffusion_ops.h"
#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"

#if TESSERA_HAVE_CUDA
#include "kernels/cuda/diffusion_cuda_ops.h"
#include "tests/kernels/diffusion_gpu_test_util.h"
#include "tests/support/diffusion_cases.h"

namespace tessera::kernels {
namespace {

// Outputs are convex combinations of v rows; f32 dot products over head_dim <= 512, expf and f32
// sums over <= 300 keys: ~1e-6 of scale. A wrong max, sum, stride or tile edge is off by O(0.01).
constexpr double kTol = 1e-5;

class CudaDiffusionAttention : public test::GpuTest {};

TEST_F(CudaDiffusionAttention, EveryAlgorithmMatchesReference) {
  uint64_t seed = 1000;
  for (const test::AttentionCase& c : test::kAttentionCases) {
    if (!test::runs_on_gpu(c.runs_on)) continue;
    const test::AttentionInputs in = test::attention_inputs(c, seed);
    const AttentionShape& s = in.shape;
    const size_t o_size = in.out_floats();
    std::vector<float> expected(o_size, 0.0f);
    ref::attention(in.q.data(), in.k_in(in.q.data(), in.k.data()),
                   in.v_in(in.q.data(), in.v.data()), expected.data(), s);

    cuda::DeviceBuffer d_q = upload(in.q);
    cuda::DeviceBuffer d_k = c.packed ? cuda::DeviceBuffer() : upload(in.k);
    cuda::DeviceBuffer d_v = c.packed ? cuda::DeviceBuffer() : upload(in.v);
    const float* dq = d_q.as<float>();
    const float* dk = in.k_in(dq, d_k.as<float>());
    const float* dv = in.v_in(dq, d_v.as<float>());
    std::vector<float> naive;
    for (AttentionAlgo algo : {AttentionAlgo::kNaive, AttentionAlgo::kPartialFused,
                               AttentionAlgo::kFlash, AttentionAlgo::kAuto}) {
      if (algo == AttentionAlgo::kFlash && c.head_dim > cuda::kAttentionMaxHeadDim) continue;
      SCOPED_TRACE(test::describe(c, algo));
      const int64_t scratch_floats = cuda::attention_scratch_floats(s, algo);
      cuda::DeviceBuffer d_scratch = alloc<float>(size_t(scratch_floats));
      cuda::DeviceBuffer d_o = upload(std::vector<float>(o_size, 0.0f));  // padding stays 0
      TESSERA_ASSERT_OK(cuda::diffusion_attention(dq, dk, dv, d_o.as<float>(), s, algo,
                                                  d_scratch.as<float>(), scratch_floats, stream_));
      ASSERT_TRUE(sync());
      const std::vector<float> actual = download<float>(d_o, o_size);
      EXPECT_TRUE(test::close_to_scale(actual, expected, kTol));
      if (algo == AttentionAlgo::kNaive) naive = actual;
      // The unfused baseline and the partially fused form: the same scores, normalised in memory
      // or tile by tile.
      if (algo == AttentionAlgo::kPartialFused) {
        EXPECT_TRUE(test::close_to_scale(actual, naive, kTol));
      }
    }
  }
}

TEST_F(CudaDiffusionAttention, NoKeysGivesZeros) {
  const AttentionShape s = contiguous_attention(2, 3, 5, 0, 40, false, 0.2f);
  const std::vector<float> q = test::random_floats(size_t(2 * 5 * 3 * 40), 1100);
  cuda::DeviceBuffer d_q = upload(q);
  cuda::DeviceBuffer d_kv = alloc<float>(1);
  for (AttentionAlgo algo :
       {AttentionAlgo::kNaive, AttentionAlgo::kPartialFused, AttentionAlgo::kFlash}) {
    SCOPED_TRACE(static_cast<int>(algo));
    cuda::DeviceBuffer d_o = alloc<float>(q.size());  // NaN-filled
    TESSERA_ASSERT_OK(cuda::diffusion_attention(d_q.as<float>(), d_kv.as<float>(), d_kv.as<float>(),
                                                d_o.as<float>(), s, algo, nullptr, 0, stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(d_o, q.size());
    EXPECT_TRUE(
        test::all_equal(actual.data(), std::vector<float>(q.size(), 0.0f).data(), q.size()));
  }
}

TEST(CudaDiffusionAttentionArgs, ChooserScratchAndRejections) {
  const float scale = 1.0f / std::sqrt(40.0f);
  const AttentionShape self = contiguous_attention(2, 8, 4096, 4096, 40, false, scale);
  const AttentionShape vae = contiguous_attention(1, 1, 4096, 4096, 512, false, scale);
  const AttentionShape causal = contiguous_attention(1, 12, 77, 77, 64, true, scale);
  EXPECT_EQ(cuda::choose_attention_algo(self), AttentionAlgo::kNaive);
  EXPECT_EQ(cuda::choose_attention_algo(vae), AttentionAlgo::kNaive);
  EXPECT_EQ(cuda::choose_attention_algo(causal), AttentionAlgo::kFlash);
  EXPECT_EQ(cuda::attention_scratch_floats(self, AttentionAlgo::kNaive), 4096 * 4096);
  EXPECT_EQ(cuda::attention_scratch_floats(self, AttentionAlgo::kPartialFused),
            4096 * 4096 + 2 * 4096);
  EXPECT_EQ(cuda::attention_scratch_floats(self, AttentionAlgo::kFlash), 0);
  EXPECT_EQ(cuda::attention_scratch_floats(vae, AttentionAlgo::kAuto), 4096 * 4096);

  float dummy = 0;
  for (AttentionAlgo algo : {AttentionAlgo::kNaive, AttentionAlgo::kPartialFused}) {
    EXPECT_EQ(cuda::diffusion_attention(&dummy, &dummy, &dummy, &dummy, causal, algo, &dummy,
                                        1 << 30, nullptr)
                  .code(),
              ErrorCode::kUnsupported);  // no causal mask outside flash
    EXPECT_EQ(
        cuda::diffusion_attention(&dummy, &dummy, &dummy, &dummy, self, algo, &dummy, 16, nullptr)
            .code(),
        ErrorCode::kInvalidArgument);  // scratch too small
    AttentionShape narrow = self;
    narrow.k_token_stride = 20;
    EXPECT_EQ(cuda::diffusion_attention(&dummy, &dummy, &dummy, &dummy, narrow, algo, &dummy,
                                        1 << 30, nullptr)
                  .code(),
              ErrorCode::kInvalidArgument);  // token stride below head_dim
  }
  EXPECT_EQ(cuda::diffusion_attention(&dummy, &dummy, &dummy, &dummy, vae, AttentionAlgo::kFlash,
                                      nullptr, 0, nullptr)
                .code(),
            ErrorCode::kUnsupported);  // head_dim 512 is beyond the flash kernel
  EXPECT_EQ(cuda::diffusion_attention(nullptr, &dummy, &dummy, &dummy, self, AttentionAlgo::kAuto,
                                      nullptr, 0, nullptr)
                .code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaDiffusionAttention)
#endif
