// cuda::group_norm: GroupNorm(+SiLU) over NHWC activations in one kernel (the fused form), or
// GroupNorm then cuda::silu (Fusion::kOff).
//
// One block per (image, group). Statistics: each thread runs Welford's update over its share of
// the group's hw * (channels / groups) elements; the (count, mean, M2) triples are merged with
// Chan et al.'s pairwise formula, first across the warp by shuffles, then across warps in shared
// memory. Unlike sum / sum-of-squares this does not cancel when the mean is large against the
// spread. The same block then normalises its group (the group's rows are mostly still in L2).
//
// In place (y == x) is safe: the statistics pass ends with block barriers before any write, and
// the final pass reads x[i] and writes y[i] in the same thread.
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/diffusion_cuda_ops.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kGroupNormThreads = 512;

struct Moments {
  float count;
  float mean;
  float m2;  // sum of squared deviations from mean
};

// Chan, Golub & LeVeque: the moments of the union of two disjoint sets.
__device__ __forceinline__ Moments merge(const Moments& a, const Moments& b) {
  const float count = a.count + b.count;
  if (count == 0.f) return a;
  const float delta = b.mean - a.mean;
  const float fb = b.count / count;
  return {count, a.mean + delta * fb, a.m2 + b.m2 + delta * delta * a.count * fb};
}

__device__ __forceinline__ Moments shfl_xor(const Moments& m, int offset) {
  return {__shfl_xor_sync(detail::kFullWarpMask, m.count, offset),
          __shfl_xor_sync(detail::kFullWarpMask, m.mean, offset),
          __shfl_xor_sync(detail::kFullWarpMask, m.m2, offset)};
}

__global__ void __launch_bounds__(kGroupNormThreads)
    group_norm_kernel(const float* x, const float* __restrict__ gamma,
                      const float* __restrict__ beta, float* y, int64_t hw, int64_t channels,
                      int64_t groups, float eps, bool silu) {
  __shared__ Moments partial[kGroupNormThreads / 32];
  __shared__ float stats[2];  // mean, rstd
  const int64_t image = blockIdx.x / groups;
  const int64_t group = blockIdx.x % groups;
  const int64_t cg = channels / groups;
  const int64_t count = hw * cg;
  const int64_t base = image * hw * channels + group * cg;

  Moments m{0.f, 0.f, 0.f};
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const float v = x[base + (e / cg) * channels + e % cg];
    m.count += 1.f;
    const float d = v - m.mean;
    m.mean += d / m.count;
    m.m2 += d * (v - m.mean);
  }
  for (int offset = 16; offset > 0; offset >>= 1) m = merge(m, shfl_xor(m, offset));
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    Moments t = lane < warps ? partial[lane] : Moments{0.f, 0.f, 0.f};
    for (int offset = 16; offset > 0; offset >>= 1) t = merge(t, shfl_xor(t, offset));
    if (lane == 0) {
      stats[0] = t.mean;
      stats[1] = rsqrtf(t.m2 / t.count + eps);
    }
  }
  __syncthreads();
  const float mean = stats[0];
  const float rstd = stats[1];
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const int64_t c = e % cg;
    const int64_t i = base + (e / cg) * channels + c;
    float v = (x[i] - mean) * rstd;
    if (gamma != nullptr) v *= gamma[group * cg + c];
    if (beta != nullptr) v += beta[group * cg + c];
    if (silu) v = v / (1.f + expf(-v));
    y[i] = v;
  }
}

}  // namespace

Status group_norm(const float* x, const float* gamma, const float* beta, float* y,
                  const ImageShape& s, int64_t groups, float eps, bool silu, Fusion fusion,
                  cudaStream_t stream) {
  if (s.batch < 0 || s.height < 0 || s.width < 0 || s.channels < 0) {
    return invalid_argument("cuda group_norm: negative size (batch " + std::to_string(s.batch) +
                            ", " + std::to_string(s.height) + "x" + std::to_string(s.width) +
                            ", channels " + std::to_string(s.channels) + ")");
  }
  if (groups < 1 || s.channels % groups != 0) {
    return invalid_argument("cuda group_norm: groups " + std::to_string(groups) +
                            " must be >= 1 and divide channels " + std::to_string(s.channels));
  }
  if (s.elements() == 0) return Status();
  if (x == nullptr || y == nullptr) return invalid_argument("cuda group_norm: null x or y");
  if (s.batch * groups > INT_MAX) {
    return invalid_argument("cuda group_norm: batch x groups = " +
                            std::to_string(s.batch * groups) + " blocks (grid limit 2^31-1)");
  }
  const bool fused_silu = silu && fusion == Fusion::kOn;
  group_norm_kernel<<<static_cast<unsigned>(s.batch * groups), kGroupNormThreads, 0, stream>>>(
      x, gamma, beta, y, s.height * s.width, s.channels, groups, eps, fused_silu);
  TESSERA_CUDA_CHECK_LAUNCH("group_norm: kernel launch");
  if (silu && !fused_silu) return cuda::silu(y, y, s.elements(), stream);
  return Status();
}

}  // namespace tessera::kernels::cuda
