// Reference embedding gather: one element at a time.
#include <cassert>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace tessera::kernels::ref {

void embedding_gather(const Weight& table, const int32_t* ids, int64_t n, float* out) {
  assert(table.dtype == DType::kF32 || table.dtype == DType::kBF16);
  const int64_t dim = table.cols;
  for (int64_t i = 0; i < n; ++i) {
    assert(ids[i] >= 0 && ids[i] < table.rows);
    const int64_t row = ids[i];
    for (int64_t d = 0; d < dim; ++d) {
      out[i * dim + d] = table.dtype == DType::kF32
                             ? static_cast<const float*>(table.data)[row * dim + d]
                             : bf16_to_f32(static_cast<const uint16_t*>(table.data)[row * dim + d]);
    }
  }
}

}  // namespace tessera::kernels::ref
