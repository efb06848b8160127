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

// One of kOff's two passes over y [rows, hidden], x being [rows][value | gate]: kGelu writes
// y = gelu_erf(gate) (exact GELU), the other pass multiplies y by the value in place.
template <bool kGelu>
__global__ void __launch_bounds__(kGegluThreads)
    geglu_pass_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                      int64_t hidden) {
  const int64_t total = rows * hidden;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / hidden;
    const int64_t col = i - r * hidden;
    if constexpr (kGelu) {
      const float g = x[(2 * r + 1) * hidden + col];
      y[i] = 0.5f * g * (1.f + erff(g * 0.70710678118654752f));  // 1/sqrt(2)
    } else {
      y[i] *= x[2 * r * hidden + col];
    }
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
  geglu_pass_kernel<true><<<blocks, kGegluThreads, 0, stream>>>(x, y, rows, hidden);
  TESSERA_CUDA_CHECK_LAUNCH("geglu_ff: gelu kernel launch");
  geglu_pass_kernel<false><<<blocks, kGegluThreads, 0, stream>>>(x, y, rows, hidden);
  TESSERA_CUDA_CHECK_LAUNCH("geglu_ff: multiply kernel launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
