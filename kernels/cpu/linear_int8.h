// Internals of the int8-weight linear layer (kernels/int8.h), shared by linear.cpp (dispatch),
// linear_int8.cpp (x preparation, scalar kernel), linear_int8_avx2.cpp, linear_int8_vnni.cpp and
// tests/kernels/linear_int8_test.cpp, which runs every variant explicitly.
//
// Each call quantizes its rows of x once (symmetric int16, one scale per weight group: x16 =
// round(x / s_x), s_x = max |x| / 32767 over the group; a group whose s_x is below FLT_MIN, where
// 1 / s_x would overflow, is quantized to zeros), then for every weight row n and x row i:
//   y[i, n] = sum_g s_w[n, g] * s_x[i, g] * D[i, n, g],   D = sum_{k in g} q_w[n, k] * x16[i, k]
// with D exact in int32 (|D| <= 127 * 32767 * group < 2^31 for groups up to 512). The AVX-512 VNNI
// kernel computes D with vpdpwssd on the sign-extended weights (vpmovsxbw), the AVX2 kernel with
// vpmaddwd; the scalar one in plain int32. Every output row is computed the same way whatever m or
// the task split: batch-invariant like the other GEMVs.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels::cpu::linear_detail {

// Rows of x prepared for the int8 kernels (each dot kernel call takes at most 4, kMaxRowsPerPass).
struct Int8Rows {
  int64_t rows = 0;
  int64_t cols = 0;              // K
  int64_t group = 0;             // the weight's group
  const int16_t* q = nullptr;    // rows * cols quantized x
  const float* scale = nullptr;  // rows * groups
};

// Quantizes `rows` rows of x (each `w.cols` long) for `w`'s groups into q[rows * w.cols] and
// scale[rows * (w.cols / w.group)].
void prepare_int8_rows_into(const float* x, int64_t rows, const Weight& w, int16_t* q,
                            float* scale);
// The AVX2 and AVX-512 twins (the same values); call only on CPUs with AVX2 / AVX-512 F/BW.
void prepare_int8_rows_into_avx2(const float* x, int64_t rows, const Weight& w, int16_t* q,
                                 float* scale);
void prepare_int8_rows_into_avx512(const float* x, int64_t rows, const Weight& w, int16_t* q,
                                   float* scale);
// Rows [row, row + rows) of an Int8Rows prepared for more rows (a pass of the GEMV).
inline Int8Rows int8_rows_slice(const Int8Rows& all, int64_t row, int64_t rows) {
  Int8Rows r = all;
  r.rows = rows;
  r.q = all.q + row * all.cols;
  r.scale = all.scale + row * (all.cols / all.group);
  return r;
}

// The dot kernels (DotRowsFn's contract, linear_internal.h, on x prepared above; p.rows <= 4). A
// linear call quantizes x once and every task of it reads the result, instead of each task
// quantizing x again (a 6144 -> 1536 GEMV at m = 2 splits into 48 tasks). AVX2 and VNNI need
// w.group % 32 == 0 and w.group <= 512; int8_kernel_for checks.
void dot_prepared_i8_scalar(const Int8Rows& p, const Weight& w, const float* bias, float* y,
                            int64_t ldy, int64_t n_begin, int64_t n_end);
void dot_prepared_i8_avx2(const Int8Rows& p, const Weight& w, const float* bias, float* y,
                          int64_t ldy, int64_t n_begin, int64_t n_end);
void dot_prepared_i8_vnni(const Int8Rows& p, const Weight& w, const float* bias, float* y,
                          int64_t ldy, int64_t n_begin, int64_t n_end);

// The kernel a kI8 weight gets on this CPU under `isa` (VNNI needs AVX-512 VNNI), with the
// preparation of x it reads.
struct Int8Kernel {
  void (*prepare)(const float* x, int64_t rows, const Weight& w, int16_t* q, float* scale);
  void (*dot)(const Int8Rows& p, const Weight& w, const float* bias, float* y, int64_t ldy,
              int64_t n_begin, int64_t n_end);
};
Int8Kernel int8_kernel_for(int isa_level, const Weight& w);

}  // namespace tessera::kernels::cpu::linear_detail
