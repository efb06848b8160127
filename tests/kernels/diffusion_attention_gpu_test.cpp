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

namespace tessera::kernels {
namespace {

// Outputs are convex combinations of v rows; f32 dot products over head_dim <= 512, expf and f32
// sums over <= 300 keys: ~1e-6 of scale. A wrong max, sum, stride or tile edge is off by O(0.01).
constexpr double kTol = 1e-5;

struct Case {
  int64_t batch, heads, q_len, kv_len, head_dim;
  bool packed;  // q, k, v interleaved in one [token][3][heads][head_dim] buffer (self-attention)
};

const Case kCases[] = {
    {1, 1, 1, 1, 1, false},       {1, 2, 7, 5, 3, false},      {2, 3, 67, 77, 40, false},
    {1, 2, 129, 129, 80, true},   {1, 1, 61, 300, 160, false}, {2, 8, 17, 77, 40, false},
    {1, 1, 130, 130, 512, false}, {1, 1, 3, 257, 13, false},   {1, 2, 65, 65, 64, true},
};

std::string describe(const Case& c, AttentionAlgo algo) {
  static const char* kNames[] = {"auto", "flash", "partial-fused", "naive"};
  return std::string(kNames[static_cast<int>(algo)]) + " batch " + std::to_string(c.batch) +
         " heads " + std::to_string(c.heads) + " q " + std::to_string(c.q_len) + " kv " +
         std::to_string(c.kv_len) + " d " + std::to_string(c.head_dim) +
         (c.packed ? " packed" : "");
}

class CudaDiffusionAttention : public test::GpuTest {};

TEST_F(CudaDiffusionAttention, EveryAlgorithmMatchesReference) {
  uint64_t seed = 1000;
  for (const Case& c : kCases) {
    const int64_t hd = c.heads * c.head_dim;
    AttentionShape s = contiguous_attention(c.batch, c.heads, c.q_len, c.kv_len, c.head_dim, false,
                                            1.0f / std::sqrt(float(c.head_dim)));
    std::vector<float> q, k, v;
    int64_t k_offset = 0, v_offset = 0;  // of k and v in the q buffer when packed
    if (c.packed) {                      // q_len == kv_len
      q = test::random_floats(size_t(c.batch * c.kv_len * 3 * hd), seed++, -2.0f, 2.0f);
      k_offset = hd;
      v_offset = 2 * hd;
      s.q_token_stride = s.k_token_stride = s.v_token_stride = 3 * hd;
      s.q_batch_stride = s.k_batch_stride = s.v_batch_stride = c.kv_len * 3 * hd;
      s.o_token_stride = hd + 3;  // padded output rows
      s.o_batch_stride = c.q_len * s.o_token_stride;
    } else {
      q = test::random_floats(size_t(c.batch * c.q_len * hd), seed++, -2.0f, 2.0f);
      k = test::random_floats(size_t(c.batch * c.kv_len * hd), seed++, -2.0f, 2.0f);
      v = test::random_floats(size_t(c.batch * c.kv_len * hd), seed++);
    }
    const float* hq = q.data();
    const float* hk = c.packed ? hq + k_offset : k.data();
    const float* hv = c.packed ? hq + v_offset : v.data();
    const size_t o_size = size_t(c.batch * s.o_batch_stride);
    std::vector<float> expected(o_size, 0.0f);
    ref::attention(hq, hk, hv, expected.data(), s);

    cuda::DeviceBuffer d_q = upload(q);
    cuda::DeviceBuffer d_k = c.packed ? cuda::DeviceBuffer() : upload(k);
    cuda::DeviceBuffer d_v = c.packed ? cuda::DeviceBuffer() : upload(v);
    const float* dq = d_q.as<float>();
    const float* dk = c.packed ? dq + k_offset : d_k.as<float>();
    const float* dv = c.packed ? dq + v_offset : d_v.as<float>();
    std::vector<float> naive;
    for (AttentionAlgo algo : {AttentionAlgo::kNaive, AttentionAlgo::kPartialFused,
                               AttentionAlgo::kFlash, AttentionAlgo::kAuto}) {
      if (algo == AttentionAlgo::kFlash && c.head_dim > cuda::kAttentionMaxHeadDim) continue;
      SCOPED_TRACE(describe(c, algo));
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
  EXPECT_EQ(cuda::choose_attention_algo(self), AttentionAlgo::kFlash);
  EXPECT_EQ(cuda::choose_attention_algo(vae), AttentionAlgo::kPartialFused);
  EXPECT_EQ(cuda::choose_attention_algo(causal), AttentionAlgo::kFlash);
  EXPECT_EQ(cuda::attention_scratch_floats(self, AttentionAlgo::kNaive), 4096 * 4096);
  EXPECT_EQ(cuda::attention_scratch_floats(self, AttentionAlgo::kPartialFused),
            4096 * 4096 + 2 * 4096);
  EXPECT_EQ(cuda::attention_scratch_floats(self, AttentionAlgo::kFlash), 0);
  EXPECT_EQ(cuda::attention_scratch_floats(vae, AttentionAlgo::kAuto), 4096 * 4096 + 2 * 4096);

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
