// CUDA row-wise softmax: one block per row (grid-stride over rows), three passes over the row (max,
// sum of exp(x - max), normalise) with block reductions on warp shuffles. Subtracting the row max
// keeps exp() in range for any finite input; a row of only -inf (fully masked) becomes zeros, as in
// the reference. In place is safe for the same reason as in norms.cu: reads for the reductions
// finish at a block barrier, and the last pass reads and writes the same element in the same
// thread.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kSoftmaxThreads = 256;

__global__ void __launch_bounds__(kSoftmaxThreads)
    softmax_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  __shared__ float scratch[33];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {  // uniform across the block
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float local_max = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) local_max = fmaxf(local_max, xr[i]);
    const float row_max = detail::block_max(local_max, scratch);
    if (row_max == -INFINITY) {  // fully masked row: zeros, as the reference (uniform branch)
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = 0.f;
      continue;
    }
    float local_sum = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) local_sum += expf(xr[i] - row_max);
    const float inv_sum = 1.f / detail::block_sum(local_sum, scratch);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
      yr[i] = expf(xr[i] - row_max) * inv_sum;
  }
}

}  // namespace

Status softmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows < 0 || cols < 0) {
    return invalid_argument("cuda softmax: negative size (rows " + std::to_string(rows) +
                            ", cols " + std::to_string(cols) + ")");
  }
  if (rows == 0 || cols == 0) return Status();
  if (x == nullptr || y == nullptr) return invalid_argument("cuda softmax: null x or y");
  const int64_t warps = (cols + 31) / 32;
  const int threads =
      warps >= kSoftmaxThreads / 32 ? kSoftmaxThreads : static_cast<int>(warps) * 32;
  softmax_kernel<<<detail::grid_stride_blocks(rows, 1), threads, 0, stream>>>(x, y, rows, cols);
  TESSERA_CUDA_CHECK_LAUNCH("softmax: kernel launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
