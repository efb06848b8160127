// The diffusion engine's small elementwise ops on the GPU (kernels/cuda/diffusion_cuda_ops.h):
// the per-image timestep projection added to every pixel (ResBlock), the UNet's skip
// concatenation along channels, and the VAE's division by the latent scale. Grid-stride loops
// over the output, one thread per element.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/diffusion_cuda_ops.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    add_per_image_kernel(float* __restrict__ y, const float* __restrict__ rows, int64_t batch,
                         int64_t pixels, int64_t channels) {
  const int64_t per_image = pixels * channels;
  const int64_t total = batch * per_image;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / per_image;
    const int64_t c = i % channels;
    y[i] += rows[n * channels + c];
  }
}

__global__ void __launch_bounds__(kThreads)
    concat_channels_kernel(const float* __restrict__ a, int64_t a_channels,
                           const float* __restrict__ b, int64_t b_channels, float* __restrict__ y,
                           int64_t pixels) {
  const int64_t yc = a_channels + b_channels;
  const int64_t total = pixels * yc;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = i / yc;
    const int64_t c = i - p * yc;
    y[i] = c < a_channels ? a[p * a_channels + c] : b[p * b_channels + (c - a_channels)];
  }
}

__global__ void __launch_bounds__(kThreads)
    divide_kernel(const float* x, float divisor, float* y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = x[i] / divisor;  // a division, as the reference (not a multiply by 1 / divisor)
  }
}

__global__ void __launch_bounds__(kThreads)
    pointwise_kernel(const float* x, float* y, int64_t n, Pointwise::Kind kind, float a, float b) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    switch (kind) {
      case Pointwise::Kind::kRelu:
        y[i] = v > 0.f ? v : 0.f;
        break;
      case Pointwise::Kind::kScaledTanh:
        y[i] = a * tanhf(v / a);
        break;
      case Pointwise::Kind::kAffine:
        y[i] = fmaf(a, v, b);
        break;
    }
  }
}

}  // namespace

Status add_per_image(float* y, const float* rows, int64_t batch, int64_t pixels, int64_t channels,
                     cudaStream_t stream) {
  if (batch < 0 || pixels < 0 || channels < 0) {
    return invalid_argument("cuda add_per_image: negative size (batch " + std::to_string(batch) +
                            ", pixels " + std::to_string(pixels) + ", channels " +
                            std::to_string(channels) + ")");
  }
  const int64_t total = batch * pixels * channels;
  if (total == 0) return Status();
  if (y == nullptr || rows == nullptr) return invalid_argument("cuda add_per_image: null pointer");
  add_per_image_kernel<<<detail::grid_stride_blocks(total, kThreads), kThreads, 0, stream>>>(
      y, rows, batch, pixels, channels);
  TESSERA_CUDA_CHECK_LAUNCH("add_per_image: kernel launch");
  return Status();
}

Status concat_channels(const float* a, int64_t a_channels, const float* b, int64_t b_channels,
                       float* y, int64_t pixels, cudaStream_t stream) {
  if (a_channels < 0 || b_channels < 0 || pixels < 0) {
    return invalid_argument("cuda concat_channels: negative size (channels " +
                            std::to_string(a_channels) + " + " + std::to_string(b_channels) +
                            ", pixels " + std::to_string(pixels) + ")");
  }
  const int64_t total = pixels * (a_channels + b_channels);
  if (total == 0) return Status();
  if (y == nullptr || (a_channels > 0 && a == nullptr) || (b_channels > 0 && b == nullptr)) {
    return invalid_argument("cuda concat_channels: null pointer");
  }
  concat_channels_kernel<<<detail::grid_stride_blocks(total, kThreads), kThreads, 0, stream>>>(
      a, a_channels, b, b_channels, y, pixels);
  TESSERA_CUDA_CHECK_LAUNCH("concat_channels: kernel launch");
  return Status();
}

Status divide(const float* x, float divisor, float* y, int64_t n, cudaStream_t stream) {
  if (n < 0) return invalid_argument("cuda divide: negative size " + std::to_string(n));
  if (n == 0) return Status();
  if (x == nullptr || y == nullptr) return invalid_argument("cuda divide: null x or y");
  divide_kernel<<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(x, divisor, y, n);
  TESSERA_CUDA_CHECK_LAUNCH("divide: kernel launch");
  return Status();
}

Status pointwise(const float* x, float* y, int64_t n, const Pointwise& f, cudaStream_t stream) {
  if (n < 0) return invalid_argument("cuda pointwise: negative size " + std::to_string(n));
  if (n == 0) return Status();
  if (x == nullptr || y == nullptr) return invalid_argument("cuda pointwise: null x or y");
  pointwise_kernel<<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
      x, y, n, f.kind, f.a, f.b);
  TESSERA_CUDA_CHECK_LAUNCH("pointwise: kernel launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
