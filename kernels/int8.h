// 8-bit weights for the linear layers (issue 25): symmetric int8 with one f32 scale per group of
// `group` consecutive weights of a row (along the input, K), quantized from f32 at load or read
// from a quantized safetensors file.
//
// In memory (kernels::Weight, dtype kI8) a weight is the byte q + 128 with q = round(w / scale) in
// [-127, 127] and scale = max |w| over the group / 127 (a group of zeros gets scale 0 and q 0).
// The offset makes the weights the unsigned operand of the 8-bit dot-product instructions
// (AVX-512 VNNI vpdpbusd: unsigned x signed bytes), so the signed operand is the activation,
// quantized per call (kernels/cpu/linear_int8*.cpp), and the offset's contribution, 128 * sum(x),
// depends on the activation only.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels {

// The group size the loader picks for a row of `cols` weights: 128 when it divides cols, else 64,
// else 32, else the whole row (one scale per output channel).
int64_t int8_group_for(int64_t cols);

// Quantizes rows x cols f32 weights (row-major) with groups of `group` (must divide cols): writes
// rows * cols offset bytes to `q` and rows * (cols / group) scales. Non-finite weights must not be
// passed (the loaders check).
void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int64_t group, uint8_t* q,
                        float* scales);

// The f32 value of weight (n, k) of a kI8 Weight on the host (references and tests).
inline float int8_weight_at(const Weight& w, int64_t n, int64_t k) {
  const auto* q = static_cast<const uint8_t*>(w.data);
  const int64_t groups = w.cols / w.group;
  return static_cast<float>(static_cast<int>(q[n * w.cols + k]) - 128) *
         w.scales[n * groups + k / w.group];
}

}  // namespace tessera::kernels
