// CUDA embedding gather: one block per id (grid-stride over ids), threads across the row.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kGatherThreads = 256;

template <typename TableT>
__global__ void __launch_bounds__(kGatherThreads)
    embedding_gather_kernel(const TableT* __restrict__ table, int64_t table_rows, int64_t dim,
                            const int32_t* __restrict__ ids, int64_t n, float* __restrict__ out) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int32_t id = ids[i];
    float* out_row = out + i * dim;
    if (id < 0 || id >= table_rows) {  // caller bug: make it visible, never read out of bounds
      for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
        out_row[d] = __int_as_float(0x7fc00000);
      continue;
    }
    const TableT* row = table + static_cast<int64_t>(id) * dim;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
      out_row[d] = detail::load_weight(row + d);
  }
}

}  // namespace

Status embedding_gather(const Weight& table, const int32_t* ids, int64_t n, float* out,
                        cudaStream_t stream) {
  if (table.dtype != DType::kF32 && table.dtype != DType::kBF16) {
    return unsupported(std::string("cuda embedding_gather: table dtype ") +
                       dtype_name(table.dtype) + " (expected F32 or BF16)");
  }
  if (n < 0 || table.rows < 0 || table.cols < 0) {
    return invalid_argument("cuda embedding_gather: negative size (n " + std::to_string(n) +
                            ", table " + std::to_string(table.rows) + " x " +
                            std::to_string(table.cols) + ")");
  }
  if (n == 0 || table.cols == 0) return Status();
  if (table.data == nullptr || ids == nullptr || out == nullptr) {
    return invalid_argument("cuda embedding_gather: null table, ids or out");
  }
  const unsigned blocks = detail::grid_stride_blocks(n, 1);
  if (table.dtype == DType::kF32) {
    embedding_gather_kernel<<<blocks, kGatherThreads, 0, stream>>>(
        static_cast<const float*>(table.data), table.rows, table.cols, ids, n, out);
  } else {
    embedding_gather_kernel<<<blocks, kGatherThreads, 0, stream>>>(
        static_cast<const uint16_t*>(table.data), table.rows, table.cols, ids, n, out);
  }
  TESSERA_CUDA_CHECK_LAUNCH("embedding_gather: kernel launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
