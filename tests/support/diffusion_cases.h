// Case tables, trace strings and inputs shared by the CPU diffusion op tests
// (tests/kernels/diffusion_*_test.cpp) and their CUDA counterparts (*_gpu_test.cpp), so that both
// backends are held to the same shapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/diffusion_ops.h"
#include "kernels/ops.h"

namespace tessera::test {

// Which backend's test runs a case (a shape only one backend's code paths need).
enum class RunsOn { kBoth, kCpu, kGpu };
inline bool runs_on_cpu(RunsOn r) {
  return r != RunsOn::kGpu;
}
inline bool runs_on_gpu(RunsOn r) {
  return r != RunsOn::kCpu;
}

// ---- conv2d -------------------------------------------------------------------------------------
struct ConvCase {
  int64_t batch, in_h, in_w, in_c, out_c, kernel, stride;
  bool upsample;
  bool pad_end_only = false;  // the VAE encoder's Downsample padding
};

// 1-pixel images, primes, images that are not multiples of the 4x4 Winograd tile, channel counts
// that are not multiples of the 16-lane transforms, batches, stride 2, 1x1, fused upsampling,
// the encoder's end-only padding (even, odd and 2-pixel sides).
inline constexpr ConvCase kConvCases[] = {
    {1, 1, 1, 1, 1, 3, 1, false},        {1, 5, 7, 3, 2, 3, 1, false},
    {2, 9, 6, 17, 13, 3, 1, false},      {1, 13, 11, 64, 70, 3, 1, false},
    {1, 8, 8, 5, 7, 3, 2, false},        {1, 9, 7, 16, 3, 3, 2, false},
    {2, 5, 3, 7, 9, 1, 1, false},        {1, 4, 5, 6, 5, 3, 1, true},
    {1, 7, 9, 33, 20, 3, 1, true},       {1, 1, 2, 4, 320, 3, 1, false},
    {1, 2, 1, 1, 1, 3, 2, false},        {1, 8, 8, 5, 7, 3, 2, false, true},
    {2, 9, 7, 16, 3, 3, 2, false, true}, {1, 2, 2, 3, 4, 3, 2, false, true},
};

kernels::Conv2dShape conv_shape(const ConvCase& c);
// "winograd batch 1 5x7 3->2 k3 s1 up2".
std::string describe(const kernels::Conv2dShape& s, kernels::ConvAlgo algo);

// ---- diffusion attention ------------------------------------------------------------------------
struct AttentionCase {
  int64_t batch, heads, q_len, kv_len, head_dim;
  bool packed;  // q, k, v interleaved in one [token][3][heads][head_dim] buffer (self-attention)
  RunsOn runs_on = RunsOn::kBoth;
};

// 1 token, odd lengths, SD's head dims (40, 80, 160) with cross-attention's 77 keys, key counts
// around the 256-key exp tile, packed QKV. CPU only: a kv_len large enough that the partially
// fused path's query block shrinks below 64 (and does not divide q_len). GPU only: the VAE's single
// head of 512 (beyond the flash kernel) and a packed head_dim of 64.
inline constexpr AttentionCase kAttentionCases[] = {
    {1, 1, 1, 1, 1, false},      {1, 2, 7, 5, 3, false},
    {2, 3, 67, 77, 40, false},   {1, 2, 129, 129, 80, true},
    {1, 1, 61, 300, 160, false}, {1, 1, 50, 4099, 8, false, RunsOn::kCpu},
    {2, 8, 17, 77, 40, false},   {1, 1, 130, 130, 512, false, RunsOn::kGpu},
    {1, 1, 3, 257, 13, false},   {1, 2, 65, 65, 64, true, RunsOn::kGpu},
};

// "flash batch 2 heads 3 q 67 kv 77 d 40 packed".
std::string describe(const AttentionCase& c, kernels::AttentionAlgo algo);

// A case's shape (scale 1/sqrt(head_dim)) and random inputs: q and k uniform in [-2, 2], v in
// [-1, 1]. Packed: q holds q, k and v interleaved (k at k_offset, v at v_offset floats; k and v
// are empty) and the output rows are padded by 3 floats.
struct AttentionInputs {
  kernels::AttentionShape shape;
  bool packed = false;
  std::vector<float> q, k, v;
  int64_t k_offset = 0, v_offset = 0;

  size_t out_floats() const { return static_cast<size_t>(shape.batch * shape.o_batch_stride); }
  // Where k and v start, given the q, k and v buffers (host or device copies of the ones above).
  const float* k_in(const float* q_buffer, const float* k_buffer) const {
    return packed ? q_buffer + k_offset : k_buffer;
  }
  const float* v_in(const float* q_buffer, const float* v_buffer) const {
    return packed ? q_buffer + v_offset : v_buffer;
  }
};
// Draws the inputs from seeds `seed`, `seed + 1`, ... and advances `seed` past the ones used.
AttentionInputs attention_inputs(const AttentionCase& c, uint64_t& seed);

// ---- group norm ---------------------------------------------------------------------------------
struct GroupNormCase {
  int64_t batch, height, width, channels, groups;
  // Input range. The default, offset 3 +- 1 (variance 1/9 of the squared mean), cancels a naive
  // E[x^2] - E[x]^2.
  float lo = 2.0f, hi = 4.0f;

  kernels::ImageShape image() const { return {batch, height, width, channels}; }
};

// "batch 2 5x7 channels 12 groups 3".
std::string describe(const GroupNormCase& c);

}  // namespace tessera::test
