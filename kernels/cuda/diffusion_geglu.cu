// cuda::geglu_ff: SD's GEGLU feed-forward gate with its off switch. kOn is cuda::geglu (split,
// GELU and multiply in one elementwise kernel); kOff runs the same math as two kernels through
// memory, as a framework without the fusion would: gelu_erf(gate) into y, then y *= value.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/diffusion_cuda_ops.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kGegluThreads = 256;

__global__ void __launch_bounds__(kGegluThreads)
    gelu_gate_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                     int64_t hidden) {
  const int64_t total = rows * hidden;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / hidden;
    const float g = x[(2 * r + 1) * hidden + (i - r * hidden)];
    y[i] = 0.5f * g * (1.f + erff(g * 0.70710678118654752f));  // exact GELU, 1/sqrt(2)
  }
}

__global__ void __launch_bounds__(kGegluThreads)
    mul_value_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                     int64_t hidden) {
  const int64_t total = rows * hidden;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / hidden;
    y[i] *= x[2 * r * hidden + (i - r * hidden)];
  }
}

}  // namespace

Status geglu_ff(const float* x, float* y, int64_t rows, int64_t hidden, Fusion fusion,
                cudaStream_t stream) {
  if (fusion == Fusion::kOn) return cuda::geglu(x, y, rows, hidden, stream);
  if (rows < 0 || hidden < 0) {
    return invalid_argument("cuda geglu_ff: negative size (rows " + std::to_string(rows) +
                            ", hidden " + std::to_string(hidden) + ")");
  }
  const int64_t total = rows * hidden;
  if (total == 0) return Status();
  if (x == nullptr || y == nullptr) return invalid_argument("cuda geglu_ff: null x or y");
  const unsigned blocks = detail::grid_stride_blocks(total, kGegluThreads);
  gelu_gate_kernel<<<blocks, kGegluThreads, 0, stream>>>(x, y, rows, hidden);
  TESSERA_CUDA_CHECK_LAUNCH("geglu_ff: gelu kernel launch");
  mul_value_kernel<<<blocks, kGegluThreads, 0, stream>>>(x, y, rows, hidden);
  TESSERA_CUDA_CHECK_LAUNCH("geglu_ff: multiply kernel launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
