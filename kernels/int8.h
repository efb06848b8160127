// 8-bit weights for the linear layers: symmetric int8 with one f32 scale per group of
// `group` consecutive weights of a row (along the input, K), quantized from f32 at load or read
// from a quantized safetensors file.
//
// In memory (kernels::Weight, dtype kI8) a weight is the signed byte q = round(w / scale) in
// [-127, 127] with scale = max |w| over the group / 127 (a group of zeros gets q 0 and scale 1: any
// positive scale represents it, and quantized files must hold positive, finite scales).
//
// In a file (engine/runtime/quantize.h) a quantized matrix NAME.weight is stored the same way, as
// I8, with its scales beside it as NAME.weight_scale, F32 [rows, cols / group], so the CPU backend
// uses the mapped file's bytes as they are (no copy). Only matrices whose rows are a multiple of 32
// long are quantized (int8_quantizable): the SIMD kernels work on groups of 32 or 64 weights, and
// the few narrow matrices (Cube 3D's bbox_proj, 3 columns) are too small to matter.
//
// With more than 32 rows of x on CPUs with AVX-512 BF16 (the prefill, the no-cache baseline), the
// weights are instead dequantized to bf16(q * scale) panels once per call and multiplied by the
// bf16 GEMM (kernels/cpu/gemm_bf16.h, BLayout::kI8NK): the dot kernels below read the whole weight
// once per 4 rows, which made an int8 prefill memory-bound (0.96 s against bf16's 0.45 s).
// Activations (kernels/cpu/linear_int8*.cpp) are quantized per call to int16 with a scale per row
// and weight group (x = s_x * x16, |x16| <= 32767), a rounding of 2^-16 of the group's largest
// value: measured on tessera-tiny (tools/train/int8_sensitivity.py), 8-bit activations cost more
// than the 8-bit weights themselves (token agreement with f32 0.71 against 0.84), 16-bit ones
// nothing visible. The products are exact in int32 (AVX-512 VNNI vpdpwssd, AVX2 vpmaddwd).
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels {

// The group size the loader picks for a row of `cols` weights: 128 when it divides cols, else 64,
// else 32, else the whole row (one scale per output channel).
int64_t int8_group_for(int64_t cols);
// Whether a [rows, cols] matrix is stored in int8 when a model is quantized: cols % 32 == 0.
inline bool int8_quantizable(int64_t cols) {
  return cols > 0 && cols % 32 == 0;
}
// The largest |q| a stored weight may have (symmetric: -128 is not used; files holding it are
// refused, so what is stored is exactly what the quantizer can write).
constexpr int kInt8MaxQ = 127;
// NAME.weight (I8) has its scales in NAME.weight + kInt8ScaleSuffix.
constexpr const char* kInt8ScaleSuffix = "_scale";

// max |v[k]| over n values: the symmetric scale's numerator, for weights and activations alike.
inline float int8_abs_max(const float* v, int64_t n) {
  float amax = 0.0f;
  for (int64_t k = 0; k < n; ++k) amax = v[k] > amax ? v[k] : (-v[k] > amax ? -v[k] : amax);
  return amax;
}

// The index of the first -128 among n stored weights, or -1 when all are in [-127, 127].
int64_t int8_find_out_of_range(const int8_t* q, int64_t n);

// Quantizes rows x cols f32 weights (row-major) with groups of `group` (must divide cols): writes
// rows * cols signed bytes to `q` and rows * (cols / group) scales. Non-finite weights must not be
// passed (the loaders check).
void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int64_t group, int8_t* q,
                        float* scales);

// The f32 value of weight (n, k) of a kI8 Weight on the host (references and tests).
inline float int8_weight_at(const Weight& w, int64_t n, int64_t k) {
  const auto* q = static_cast<const int8_t*>(w.data);
  const int64_t groups = w.cols / w.group;
  return static_cast<float>(q[n * w.cols + k]) * w.scales[n * groups + k / w.group];
}

}  // namespace tessera::kernels
