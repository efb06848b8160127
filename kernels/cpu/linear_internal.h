// Internals of cpu::linear shared by its ISA-specific files (linear.cpp; linear_kernels.inc,
// compiled by linear_avx2.cpp and linear_avx512.cpp; linear_bf16x_avx512.cpp) and by
// tests/kernels/linear_test.cpp, which runs every variant explicitly.
//
// Plan of cpu::linear (y[m, n] = x[m, :] . w[n, :] + bias[n]):
// - m <= kMaxGemvRows (the decode GEMVs, up to 8 candidates with guidance): tasks of
//   ~kGemvTaskBytes of weight rows, each one batch-invariant kernel call per kMaxRowsPerPass rows
//   of x over its rows (linear.cpp, gemv_parts); cpu::linear_multi runs several layers over the
//   same x as one such pass.
// - Small m (m <= kBlockedMaxRowsF32 / kBlockedMaxRowsBf16), or BLAS not in use: the "row-block"
//   path. Output rows n are split across cpu_pool(); each task walks its weight rows in
//   blocks of kRowBlock rows and, for every block, runs the dot kernel over all m rows of x,
//   kMaxRowsPerPass at a time. The block is read from memory once and re-read from L1/L2 by later
//   passes, so for the decode GEMV (m == 1) and small m the weights stream through exactly once:
//   the memory-bound case. With m <= kMaxRowsPerPass (one pass: the decode GEMVs) a task makes a
//   single dot-kernel call over its whole range of rows, so that the kernel can stream the rows in
//   order and prepare x once per call (linear_kernels.inc). bf16 weights are widened to f32 in
//   registers (exact), x stays f32; except with LinearConfig::bf16_gemm, where the GEMV
//   (m <= kMaxRowsPerPass) rounds x to bf16 once per call and runs vdpbf16ps (2 ops per 32
//   weights at m = 2 instead of 6: the f32-x kernel was instruction-bound there).
// - bf16 weights, m > kBf16GemmMinRows, CPU with AVX-512 BF16 (LinearConfig::bf16_gemm):
//   gemm_bf16 (vdpbf16ps, x rounded to bf16, f32 accumulation): ~2x the f32 rate.
// - Larger m with BLAS: GEMM through single-threaded OpenBLAS sgemm, one call per column block of
//   y inside the pool (linear.cpp says why OpenBLAS runs single-threaded). bf16 weights are first
//   expanded into a per-thread f32 panel of kPanelRows x kPanelCols.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_config.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu::linear_detail {

// LinearConfig, default_linear_config() and linear_with_config(): linear_config.h (public).

// True when linear_with_config(config, ...) rounds x to bf16 for weights of `dtype` and m rows:
// for bf16 weights always (the ops.h contract): the vdpbf16ps GEMV and gemm_bf16 round x as they
// pack it, the f32 paths get x rounded first.
bool rounds_x_to_bf16(const LinearConfig& config, DType dtype, int64_t m);

// cpu::linear_multi with an explicit configuration (tests, benchmarks).
void linear_multi_with_config(const LinearConfig& config, const float* x, int64_t m,
                              const LinearPart* parts, int64_t n_parts);

// Largest m served by the row-block path when BLAS is available, per weight dtype. Measured on
// Zen 4, 2 threads (best of 15 runs; the machine was shared): f32 sgemm wins from m ~ 12 on; bf16
// weights must first be expanded into panels for sgemm, and the row-block kernel (which expands in
// registers) stays ahead up to m ~ 100 (1536x1536: 134 vs 115 GFLOP/s at m = 77; 71 vs 89 at m =
// 256).
constexpr int64_t kBlockedMaxRowsF32 = 8;
// Smallest m (exclusive) that bf16 weights send through gemm_bf16 when LinearConfig::bf16_gemm is
// set (`tessera-bench kernels`, rows "gemm bf16"; see bench/RESULTS.md).
constexpr int64_t kBf16GemmMinRows = 32;
constexpr int64_t kBlockedMaxRowsBf16 = 96;
// Rows of x handled per pass over a weight block by the dot kernels (register blocking limit).
constexpr int64_t kMaxRowsPerPass = 4;
// Largest m served by the GEMV path (the decode step: up to 8 candidates x [cond ; uncond]): each
// task runs the batch-invariant kernel over its weight rows once per kMaxRowsPerPass rows of x,
// the later passes re-reading the task's weights from L2. A row's result is then the same bit for
// bit for every m in [1, kMaxGemvRows] (LinearTest.GemvIsBatchInvariant).
constexpr int64_t kMaxGemvRows = 16;
// Weight rows per block in the row-block path: the block is reused from cache for every pass.
constexpr int64_t kRowBlock = 16;
// Weight bytes per task of the GEMV path (m <= kMaxRowsPerPass): ~64 rows of K = 1536 bf16, 16 of
// K = 6144. Large enough that a task's x preparation (the even/odd split, <= 48 KB) and its
// hand-out cost < 2 % of its streaming time, small enough that a 4.7 MB layer makes 24 tasks.
constexpr int64_t kGemvTaskBytes = 192 * 1024;
// f32 panel of expanded bf16 weights for the sgemm path (per thread, 1 MiB): 256 output columns x
// 1024 of K. sgemm packs x once per call, so each packed element of x is reused 2 * 256 flops.
constexpr int64_t kPanelRows = 256;
constexpr int64_t kPanelCols = 1024;

// Dot-product kernel of the row-block path, one per ISA:
//   y[i * ldy + n] = sum_k x[i * k_dim + k] * w[n, k]  (+ bias[n] when bias != nullptr)
// for i in [0, rows) with rows <= kMaxRowsPerPass, and n in [n_begin, n_end).
// w.dtype is kF32 or kBF16; k_dim == w.cols.
using DotRowsFn = void (*)(const float* x, int64_t rows, const Weight& w, const float* bias,
                           float* y, int64_t ldy, int64_t n_begin, int64_t n_end);
void dot_rows_scalar(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                     int64_t ldy, int64_t n_begin, int64_t n_end);

// The GEMV dot kernel for bf16 weights when LinearConfig::bf16_gemm is set (AVX-512 BF16 CPUs):
// x rounded to bf16 once per call, vdpbf16ps with f32 accumulation, as gemm_bf16 does for larger m.
// Same contract as avx512::dot_rows (which it calls for f32 weights); rows <= kMaxRowsPerPass.
void dot_rows_bf16x_avx512(const float* x, int64_t rows, const Weight& w, const float* bias,
                           float* y, int64_t ldy, int64_t n_begin, int64_t n_end);
// Its two halves, for a GEMV call that rounds x once and runs many tasks on it (gemv_parts):
// xb[i * kpad + c] = bf16(x[i * k + c]), zero up to kpad = bf16x_kpad(k), for `rows` rows; then the
// kernel on rows <= kMaxRowsPerPass rows of such an xb and bf16 weights of k = w.cols.
int64_t bf16x_kpad(int64_t k);
void prepare_bf16x_avx512(const float* x, int64_t rows, int64_t k, uint16_t* xb);
void dot_prepared_bf16x_avx512(const uint16_t* xb, int64_t rows, const Weight& w, const float* bias,
                               float* y, int64_t ldy, int64_t n_begin, int64_t n_end);

// bf16 -> f32 for a rows x cols block: dst[r * ld_dst + c] = src[r * ld_src + c]. Exact.
using ExpandBf16Fn = void (*)(const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols,
                              float* dst, int64_t ld_dst);
void expand_bf16_scalar(const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                        int64_t ld_dst);

// The SIMD versions of dot_rows_scalar and expand_bf16_scalar (same contracts), written once in
// linear_kernels.inc and compiled per ISA (linear_avx2.cpp, linear_avx512.cpp). gemv_rows: the
// GEMV path's kernel, dot_rows' contract, but batch-invariant: the order of additions of an
// output depends on the weight dtype and row length, never on `rows` (dot_rows picks its kernel
// by rows too). dot_rows_scalar and dot_rows_bf16x_avx512 are batch-invariant as they are.
#define TESSERA_LINEAR_ISA_DECLS                                                                \
  void dot_rows(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,     \
                int64_t ldy, int64_t n_begin, int64_t n_end);                                   \
  void gemv_rows(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,    \
                 int64_t ldy, int64_t n_begin, int64_t n_end);                                  \
  void expand_bf16(const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst, \
                   int64_t ld_dst);
namespace avx2 {
TESSERA_LINEAR_ISA_DECLS
}  // namespace avx2
namespace avx512 {
TESSERA_LINEAR_ISA_DECLS
}  // namespace avx512
#undef TESSERA_LINEAR_ISA_DECLS

// The expansion kernel of `isa` (also used by cpu::embedding_gather).
ExpandBf16Fn expand_bf16_for(Isa isa);

}  // namespace tessera::kernels::cpu::linear_detail
