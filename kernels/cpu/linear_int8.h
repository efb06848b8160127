// Internals of the int8-weight linear layer (kernels/int8.h), shared by linear.cpp (dispatch),
// linear_int8.cpp (x preparation, scalar kernel), linear_int8_avx2.cpp, linear_int8_vnni.cpp and
// tests/kernels/linear_int8_test.cpp, which runs every variant explicitly.
//
// Each call quantizes its rows of x once (symmetric int8, one scale per weight group: x_q =
// round(x / s_x), s_x = max |x| / 127 over the group), then for every weight row n and x row i:
//   y[i, n] = sum_g s_w[n, g] * s_x[i, g] * D[i, n, g],   D = sum_{k in g} q_w[n, k] * x_q[i, k]
// with D exact in int32. The AVX-512 VNNI kernel computes D with vpdpbusd on the offset weight bytes
// (q_w + 128, unsigned) and the signed x_q, starting each accumulator lane at its share of
// -128 * sum(x_q) (the offset's contribution to that lane); the AVX2 kernel with vpmaddubsw on
// |x_q| and sign(x_q) * q_w. Every output row is computed the same way whatever m or the task
// split: batch-invariant like the other GEMVs.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels::cpu::linear_detail {

// Rows of x prepared for the int8 kernels (at most 4, kMaxRowsPerPass).
struct Int8Rows {
  int64_t rows = 0;
  int64_t cols = 0;        // K
  int64_t group = 0;       // the weight's group
  const int8_t* q = nullptr;       // rows * cols quantized x
  const int8_t* abs_q = nullptr;   // |q| (AVX2's unsigned operand)
  const float* scale = nullptr;    // rows * groups
  const int32_t* sum = nullptr;    // rows * groups: sum of q over the group
  // VNNI only: rows * groups * 16 int32, each accumulator lane's share of -128 * sum (the lane
  // sums bytes 4l..4l+3 of each 64-byte chunk), so every lane stays an exact partial dot product.
  const int32_t* lane_offset = nullptr;
};

// Quantizes `rows` rows of x (each `w.cols` long) for `w`'s groups into thread-local scratch;
// the result stays valid until the calling thread prepares again.
Int8Rows prepare_int8_rows(const float* x, int64_t rows, const Weight& w);

// The dot kernels (DotRowsFn's contract, linear_internal.h) for kI8 weights.
void dot_rows_i8_scalar(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                        int64_t ldy, int64_t n_begin, int64_t n_end);
// Need w.group % 32 == 0 (AVX2) and w.group % 64 == 0 (VNNI); the dispatcher checks.
void dot_rows_i8_avx2(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                      int64_t ldy, int64_t n_begin, int64_t n_end);
void dot_rows_i8_vnni(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                      int64_t ldy, int64_t n_begin, int64_t n_end);

// Which kernel a kI8 weight gets on this CPU under `isa` (VNNI needs AVX-512 VNNI).
using Int8DotFn = void (*)(const float*, int64_t, const Weight&, const float*, float*, int64_t,
                           int64_t, int64_t);
Int8DotFn int8_dot_for(int isa_level, const Weight& w);

}  // namespace tessera::kernels::cpu::linear_detail
