// 8-bit weights for the linear layers (issue 25): symmetric int8 with one f32 scale per group of
// `group` consecutive weights of a row (along the input, K), quantized from f32 at load or read
// from a quantized safetensors file.
//
// In memory (kernels::Weight, dtype kI8) a weight is the byte q + 128 with q = round(w / scale) in
// [-127, 127] and scale = max |w| over the group / 127 (a group of zeros gets q 0 and scale 1: any
// positive scale represents it, and quantized files must hold positive, finite scales).
//
// In a file (engine/shape/quantize.h) a quantized matrix NAME.weight is stored as I8 (the signed q,
// [-127, 127]) with its scales beside it as NAME.weight_scale, F32 [rows, cols / group].
// Only matrices whose rows are a multiple of 32 long are quantized (int8_quantizable): the SIMD
// kernels work on groups of 32 or 64 bytes, and the few narrow matrices (Cube 3D's bbox_proj, 3
// columns) are too small to matter.
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
// Whether a [rows, cols] matrix is stored in int8 when a model is quantized: cols % 32 == 0.
inline bool int8_quantizable(int64_t cols) { return cols > 0 && cols % 32 == 0; }
// The largest |q| a stored weight may have (symmetric: -128 is not used, and the AVX2 kernel's
// sign trick needs it absent).
constexpr int kInt8MaxQ = 127;
// NAME.weight (I8) has its scales in NAME.weight + kInt8ScaleSuffix.
constexpr const char* kInt8ScaleSuffix = "_scale";

// Signed file bytes q -> offset bytes q + 128 (n values). Returns the index of the first value
// outside [-127, 127] (then dst is incomplete), or -1 when all are valid.
int64_t int8_offset_from_signed(const int8_t* src, int64_t n, uint8_t* dst);
// Offset bytes -> signed q (for writing files).
void int8_signed_from_offset(const uint8_t* src, int64_t n, int8_t* dst);

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
