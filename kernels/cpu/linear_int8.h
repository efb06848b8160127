// Internals of the int8-weight linear layer (kernels/int8.h), shared by linear.cpp (dispatch),
// linear_int8.cpp (x preparation, scalar kernel), linear_int8_avx2.cpp, linear_int8_vnni.cpp and
// tests/kernels/linear_int8_test.cpp, which runs every variant explicitly.
//
// Each call quantizes its rows of x once (symmetric int16, one scale per weight group: x16 =
// round(x / s_x), s_x = max |x| / 32767 over the group), then for every weight row n and x row i:
//   y[i, n] = sum_g s_w[n, g] * s_x[i, g] * D[i, n, g],   D = sum_{k in g} q_w[n, k] * x16[i, k]
// with D exact in int32 (|D| <= 127 * 32767 * group < 2^31 for groups up to 512). The AVX-512 VNNI kernel computes D with vpdpwssd on the
// sign-extended weights (vpmovsxbw), the AVX2 kernel with vpmaddwd; the scalar one in plain int32.
// Every output row is computed the same way whatever m or the task split: batch-invariant like the
// other GEMVs.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels::cpu::linear_detail {

// Rows of x prepared for the int8 kernels (at most 4, kMaxRowsPerPass).
struct Int8Rows {
  int64_t rows = 0;
  int64_t cols = 0;             // K
  int64_t group = 0;            // the weight's group
  const int16_t* q = nullptr;   // rows * cols quantized x
  const float* scale = nullptr; // rows * groups
};

// Quantizes `rows` rows of x (each `w.cols` long) for `w`'s groups into thread-local scratch;
// the result stays valid until the calling thread prepares again.
Int8Rows prepare_int8_rows(const float* x, int64_t rows, const Weight& w);

// The dot kernels (DotRowsFn's contract, linear_internal.h) for kI8 weights.
void dot_rows_i8_scalar(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                        int64_t ldy, int64_t n_begin, int64_t n_end);
// Need w.group % 32 == 0 (AVX2 and VNNI) and w.group <= 512; the dispatcher checks.
void dot_rows_i8_avx2(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                      int64_t ldy, int64_t n_begin, int64_t n_end);
void dot_rows_i8_vnni(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                      int64_t ldy, int64_t n_begin, int64_t n_end);

// Which kernel a kI8 weight gets on this CPU under `isa` (VNNI needs AVX-512 VNNI).
using Int8DotFn = void (*)(const float*, int64_t, const Weight&, const float*, float*, int64_t,
                           int64_t, int64_t);
Int8DotFn int8_dot_for(int isa_level, const Weight& w);

}  // namespace tessera::kernels::cpu::linear_detail
