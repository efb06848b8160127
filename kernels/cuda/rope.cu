// CUDA rotary position embedding, interleaved pairs, in place: one thread per (token, head, pair).
//
// The angle pos * theta^(-2i/head_dim), its sine/cosine and the rotation are computed in double, as
// in the reference: at positions in the thousands an f32 angle is off by ~1e-4 rad, which would be
// the dominant error of the whole op. The op is tiny (one sincos per pair), so the FP64 rate of the
// GPU does not matter. An odd head_dim leaves the last element of each head unchanged (no partner).
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kRopeThreads = 256;

__global__ void __launch_bounds__(kRopeThreads)
    rope_interleaved_kernel(float* __restrict__ x, int64_t tokens, int64_t heads, int64_t head_dim,
                            int64_t token_stride, const int32_t* __restrict__ positions,
                            float theta) {
  const int64_t half = head_dim / 2;
  const int64_t total = tokens * heads * half;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pair = idx % half;
    const int64_t head = (idx / half) % heads;
    const int64_t token = idx / (half * heads);
    const double inv_freq = pow(static_cast<double>(theta),
                                -2.0 * static_cast<double>(pair) / static_cast<double>(head_dim));
    const double angle = static_cast<double>(positions[token]) * inv_freq;
    double s = 0.0;
    double c = 0.0;
    sincos(angle, &s, &c);
    float* p = x + token * token_stride + head * head_dim + 2 * pair;
    const double x0 = p[0];
    const double x1 = p[1];
    p[0] = static_cast<float>(x0 * c - x1 * s);
    p[1] = static_cast<float>(x0 * s + x1 * c);
  }
}

}  // namespace

Status rope_interleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                        int64_t token_stride, const int32_t* positions, float theta,
                        cudaStream_t stream) {
  if (tokens < 0 || heads < 0 || head_dim < 0) {
    return invalid_argument("cuda rope_interleaved: negative size (tokens " +
                            std::to_string(tokens) + ", heads " + std::to_string(heads) +
                            ", head_dim " + std::to_string(head_dim) + ")");
  }
  if (tokens == 0 || heads == 0 || head_dim < 2) return Status();
  if (token_stride < heads * head_dim) {
    return invalid_argument("cuda rope_interleaved: token_stride " + std::to_string(token_stride) +
                            " < heads * head_dim " + std::to_string(heads * head_dim));
  }
  if (x == nullptr || positions == nullptr) {
    return invalid_argument("cuda rope_interleaved: null x or positions");
  }
  const int64_t total = tokens * heads * (head_dim / 2);
  rope_interleaved_kernel<<<detail::grid_stride_blocks(total, kRopeThreads), kRopeThreads, 0,
                            stream>>>(x, tokens, heads, head_dim, token_stride, positions, theta);
  TESSERA_CUDA_CHECK_LAUNCH("rope_interleaved: kernel launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
