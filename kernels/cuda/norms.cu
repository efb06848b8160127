// CUDA LayerNorm and RMSNorm: one block per row (grid-stride over rows), block reductions built on
// warp shuffles. Two passes over the row for LayerNorm (mean, then the centred second moment): more
// accurate than E[x^2] - mean^2 and the row is in L1/L2 anyway.
//
// In place (y == x) is safe: every thread reads all its elements for the reductions, the reductions
// end with a block barrier, and the final pass reads x[i] and writes y[i] in the same thread.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kNormThreads = 256;

// The rest of one row's LayerNorm once each thread has summed its elements into `sum`: the mean,
// the centred second moment, then y = (x - mean) / std (* weight + bias). All threads take part.
__device__ __forceinline__ void normalise_row(const float* xr, float sum,
                                              const float* __restrict__ weight,
                                              const float* __restrict__ bias, float* yr,
                                              int64_t dim, float eps, float* scratch) {
  const float mean = detail::block_sum(sum, scratch) / static_cast<float>(dim);
  float sq = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float c = xr[i] - mean;
    sq += c * c;
  }
  const float var = detail::block_sum(sq, scratch) / static_cast<float>(dim);
  const float inv_std = rsqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = (xr[i] - mean) * inv_std;
    if (weight != nullptr) v *= weight[i];
    if (bias != nullptr) v += bias[i];
    yr[i] = v;
  }
}

__global__ void __launch_bounds__(kNormThreads)
    layer_norm_kernel(const float* x, const float* __restrict__ weight,
                      const float* __restrict__ bias, float* y, int64_t rows, int64_t dim,
                      float eps) {
  __shared__ float scratch[33];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {  // uniform across the block
    const float* xr = x + row * dim;
    float sum = 0.f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += xr[i];
    normalise_row(xr, sum, weight, bias, y + row * dim, dim, eps, scratch);
  }
}

// x += t and h = LayerNorm(x) (no affine) in one pass per row: each thread stores the sums it
// computed and reads back only its own elements, so the arithmetic (and the bits) are those of
// add_kernel followed by layer_norm_kernel.
__global__ void __launch_bounds__(kNormThreads)
    add_layer_norm_kernel(float* x, const float* __restrict__ t, float* __restrict__ h,
                          int64_t rows, int64_t dim, float eps) {
  __shared__ float scratch[33];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float* xr = x + row * dim;
    const float* tr = t + row * dim;
    float sum = 0.f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float v = xr[i] + tr[i];
      xr[i] = v;
      sum += v;
    }
    normalise_row(xr, sum, nullptr, nullptr, h + row * dim, dim, eps, scratch);
  }
}

__global__ void __launch_bounds__(kNormThreads)
    rms_norm_kernel(const float* x, const float* __restrict__ weight, float* y, int64_t rows,
                    int64_t dim, float eps) {
  __shared__ float scratch[33];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * dim;
    float* yr = y + row * dim;
    float sq = 0.f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sq += xr[i] * xr[i];
    const float inv_rms = rsqrtf(detail::block_sum(sq, scratch) / static_cast<float>(dim) + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      float v = xr[i] * inv_rms;
      if (weight != nullptr) v *= weight[i];
      yr[i] = v;
    }
  }
}

Status check_norm_args(const char* op, const float* x, const float* y, int64_t rows, int64_t dim) {
  if (rows < 0 || dim < 0) {
    return invalid_argument(std::string("cuda ") + op + ": negative size (rows " +
                            std::to_string(rows) + ", dim " + std::to_string(dim) + ")");
  }
  if (rows > 0 && dim > 0 && (x == nullptr || y == nullptr)) {
    return invalid_argument(std::string("cuda ") + op + ": null x or y");
  }
  return Status();
}

// A block's threads: enough warps to cover dim (small rows waste no idle warps), at most
// kNormThreads.
int norm_threads(int64_t dim) {
  const int64_t warps = (dim + 31) / 32;
  return warps >= kNormThreads / 32 ? kNormThreads : static_cast<int>(warps) * 32;
}

}  // namespace

Status layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                  int64_t dim, float eps, cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_norm_args("layer_norm", x, y, rows, dim));
  if (rows == 0 || dim == 0) return Status();
  layer_norm_kernel<<<detail::grid_stride_blocks(rows, 1), norm_threads(dim), 0, stream>>>(
      x, weight, bias, y, rows, dim, eps);
  TESSERA_CUDA_CHECK_LAUNCH("layer_norm: kernel launch");
  return Status();
}

Status add_layer_norm(float* x, const float* t, float* h, int64_t rows, int64_t dim, float eps,
                      cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_norm_args("add_layer_norm", x, h, rows, dim));
  if (rows > 0 && dim > 0 && t == nullptr) {
    return invalid_argument("cuda add_layer_norm: null t");
  }
  if (rows == 0 || dim == 0) return Status();
  add_layer_norm_kernel<<<detail::grid_stride_blocks(rows, 1), norm_threads(dim), 0, stream>>>(
      x, t, h, rows, dim, eps);
  TESSERA_CUDA_CHECK_LAUNCH("add_layer_norm: kernel launch");
  return Status();
}

Status rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps,
                cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_norm_args("rms_norm", x, y, rows, dim));
  if (rows == 0 || dim == 0) return Status();
  rms_norm_kernel<<<detail::grid_stride_blocks(rows, 1), norm_threads(dim), 0, stream>>>(
      x, weight, y, rows, dim, eps);
  TESSERA_CUDA_CHECK_LAUNCH("rms_norm: kernel launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
