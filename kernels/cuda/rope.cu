// CUDA rotary position embedding, interleaved pairs, in place: one thread per (token, head, pair);
// and rms_norm_rope, the per-head RMSNorm fused with it (one warp per (token, head)).
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
constexpr int kNormRopeThreads = 128;  // rms_norm_rope: one warp per (token, head)

// Rotates the pair (x0, x1) of dims (2 * pair, 2 * pair + 1) by position * theta^(-2 pair / dim),
// in double.
__device__ __forceinline__ void rotate_pair(float* x0, float* x1, int32_t position, int64_t pair,
                                            int64_t head_dim, float theta) {
  const double inv_freq = pow(static_cast<double>(theta),
                              -2.0 * static_cast<double>(pair) / static_cast<double>(head_dim));
  const double angle = static_cast<double>(position) * inv_freq;
  double s = 0.0;
  double c = 0.0;
  sincos(angle, &s, &c);
  const double a = *x0;
  const double b = *x1;
  *x0 = static_cast<float>(a * c - b * s);
  *x1 = static_cast<float>(a * s + b * c);
}

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
    float* p = x + token * token_stride + head * head_dim + 2 * pair;
    rotate_pair(&p[0], &p[1], positions[token], pair, head_dim, theta);
  }
}

// rms_norm then (positions != null) rope_interleaved, fused: one warp per row of head_dim
// (row = token * heads + head), the row's sum of squares by warp shuffles, each lane normalising
// and rotating its pairs (2i, 2i + 1), i = lane, lane + 32, ...
__global__ void __launch_bounds__(kNormRopeThreads)
    rms_norm_rope_kernel(float* x_first, const float* weight_first, int64_t rows, int64_t heads,
                         int64_t head_dim, float eps, const int32_t* __restrict__ positions,
                         float theta, float* x_second, const float* weight_second) {
  // gridDim.y 2: y = 1 normalises (x_second, weight_second), the k of a q/k pair, in the same
  // launch.
  float* __restrict__ x = blockIdx.y == 1 ? x_second : x_first;
  const float* __restrict__ weight = blockIdx.y == 1 ? weight_second : weight_first;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       row < rows; row += warps) {
    float* xr = x + row * head_dim;
    float sq = 0.f;
    for (int64_t i = lane; i < head_dim; i += 32) sq += xr[i] * xr[i];
    const float inv_rms = rsqrtf(detail::warp_sum(sq) / static_cast<float>(head_dim) + eps);
    const int32_t position = positions != nullptr ? positions[row / heads] : 0;
    for (int64_t pair = lane; 2 * pair < head_dim; pair += 32) {
      const int64_t i = 2 * pair;
      float v0 = xr[i] * inv_rms;
      if (weight != nullptr) v0 *= weight[i];
      if (i + 1 < head_dim) {
        float v1 = xr[i + 1] * inv_rms;
        if (weight != nullptr) v1 *= weight[i + 1];
        if (positions != nullptr) rotate_pair(&v0, &v1, position, pair, head_dim, theta);
        xr[i + 1] = v1;
      }
      xr[i] = v0;
    }
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

namespace {

Status norm_rope(const char* name, float* x, const float* weight, float* x2, const float* weight2,
                 int64_t tokens, int64_t heads, int64_t head_dim, float eps,
                 const int32_t* positions, float theta, cudaStream_t stream) {
  if (tokens < 0 || heads < 0 || head_dim < 0) {
    return invalid_argument(std::string("cuda ") + name + ": negative size (tokens " +
                            std::to_string(tokens) + ", heads " + std::to_string(heads) +
                            ", head_dim " + std::to_string(head_dim) + ")");
  }
  const int64_t rows = tokens * heads;
  if (rows == 0 || head_dim == 0) return Status();
  if (x == nullptr) return invalid_argument(std::string("cuda ") + name + ": null x");
  constexpr int kRowsPerBlock = kNormRopeThreads / 32;
  const dim3 grid(detail::grid_stride_blocks((rows + kRowsPerBlock - 1) / kRowsPerBlock, 1),
                  x2 != nullptr ? 2u : 1u);
  rms_norm_rope_kernel<<<grid, kNormRopeThreads, 0, stream>>>(x, weight, rows, heads, head_dim, eps,
                                                              positions, theta, x2, weight2);
  TESSERA_CUDA_CHECK_LAUNCH(std::string(name) + ": kernel launch");
  return Status();
}

}  // namespace

Status rms_norm_rope(float* x, const float* weight, int64_t tokens, int64_t heads, int64_t head_dim,
                     float eps, const int32_t* positions, float theta, cudaStream_t stream) {
  return norm_rope("rms_norm_rope", x, weight, nullptr, nullptr, tokens, heads, head_dim, eps,
                   positions, theta, stream);
}

Status rms_norm_rope_pair(float* q, const float* q_weight, float* k, const float* k_weight,
                          int64_t tokens, int64_t heads, int64_t head_dim, float eps,
                          const int32_t* positions, float theta, cudaStream_t stream) {
  if (tokens > 0 && heads > 0 && head_dim > 0 && k == nullptr) {
    return invalid_argument("cuda rms_norm_rope_pair: null k");
  }
  return norm_rope("rms_norm_rope_pair", q, q_weight, k, k_weight, tokens, heads, head_dim, eps,
                   positions, theta, stream);
}

}  // namespace tessera::kernels::cuda
