// A low-rank change added into a weight: c[rows, cols] += up[rows, rank] . down_t[cols, rank]^T,
// the product of a LoRA module merged at load (engine/weights/weight_store.h, add_low_rank). One
// OpenBLAS sgemm with beta = 1 per band of rows, the bands over cpu_pool(): no product tensor is
// made and c is written once (the product is output-bound at LoRA ranks).
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

void add_low_rank_product(float* c, int64_t rows, int64_t cols, const float* up,
                          const float* down_t, int64_t rank);

}  // namespace tessera::kernels::cpu
