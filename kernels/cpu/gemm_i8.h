// int8 GEMM with 8-bit activations: C[m, n] = A[m, k] . W[n, k]^T + bias[n], both operands
// quantized to 8 bits, products exact in int32 (AVX-512 VNNI vpdpbusd: 64 multiply-adds per
// instruction, twice vdpbf16ps's and vpdpwssd's).
//
// Why: the occupancy queries of the shape decoder are compute-bound GEMMs (m = thousands of points,
// k = n = 768 and 3072 on Cube 3D) that already run at the bf16 GEMM's peak; with --weights int8
// they may run at twice its multiply-add rate. 8-bit activations cost the GPT's tokens too much
// (kernels/int8.h), so this path is used for the occupancy queries only, whose error is measured on
// meshes (bench/RESULTS.md).
//
// Quantization:
//   weights  per output channel: s_w[n] = max_k |W[n, k]| / 127, q_w = round(W / s_w) in [-127,
//   127]
//            (a zero row: q 0, s_w 0), packed once at load (pack());
//   A        per row at each call: s_x[i] = max_k |A[i, k]| / 127, q_x = round(A * (1 / s_x)) in
//            [-127, 127] (round to nearest even; a zero row: q 0), stored as u8 = q_x + 128 for
//            vpdpbusd (unsigned x signed);
//   product  D[i, n] = sum_k u8[i, k] * q_w[n, k] - 128 * sum_k q_w[n, k] = sum_k q_x * q_w, exact
//   in
//            int32 (|D| <= 255 * 127 * k < 2^31 for k < 66000);
//   output   C[i, n] = fma(float(D), s_x[i] * s_w[n], bias[n]).
// The scalar reference (gemm_reference) computes the same integers and the same float operations,
// so the AVX-512 path gives the same bits; every output row is computed the same way whatever m or
// the task split (batch-invariant).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace tessera::kernels::cpu::gemm_i8 {

// Weights packed for the kernel: (n + 31) / 32 panels of kq = kpad / 4 quads x 32 columns x 4 bytes
// (the 4 weights W[j0 + j, 4p .. 4p + 3] of column j in quad p), zero padded past n and past k.
struct PackedI8 {
  int64_t n = 0, k = 0;
  std::vector<int8_t> panels;
  std::vector<float> scales;    // s_w per column, panels * 32 (0 past n)
  std::vector<int32_t> offset;  // 128 * sum_k q_w per column, panels * 32
  bool empty() const { return panels.empty(); }
  int64_t kpad() const { return (k + 3) & ~int64_t{3}; }
  size_t bytes() const { return panels.size() + scales.size() * 4 + offset.size() * 4; }
};

// True when this CPU has AVX-512 F/BW/VL + VNNI, SIMD is enabled and active_isa() is AVX-512.
bool available();

// Quantizes and packs W[n][k] (f32 or bf16 host weights: Weight with dtype kF32 or kBF16, rows = n,
// cols = k, host memory). Non-finite weights must not be passed (the loaders check). n, k >= 1.
PackedI8 pack(const Weight& w);

// The value the kernels multiply for W[j, kk] (tests): q_w * s_w.
float packed_weight_at(const PackedI8& b, int64_t j, int64_t kk);

// Per-row activation quantization (the definition above): dst[r * kpad + c] = u8 of A[r, c] for
// c < k, 128 for k <= c < kpad; scale[r] = s_x.
void quantize_rows_reference(const float* a, int64_t lda, int64_t rows, int64_t k, int64_t kpad,
                             uint8_t* dst, float* scale);

// C[i, j] = the definition above for i < m, j < n; plain loops (the reference of the SIMD kernel,
// and its definition on CPUs without VNNI). a f32 [m][lda], c [m][ldc]; bias may be null.
void gemm_reference(int64_t m, const float* a, int64_t lda, const PackedI8& b, const float* bias,
                    float* c, int64_t ldc);

// The same on AVX-512 VNNI over cpu_pool(). Requires available() and !b.empty().
void gemm(int64_t m, const float* a, int64_t lda, const PackedI8& b, const float* bias, float* c,
          int64_t ldc);

// The AVX-512 VNNI pieces (gemm_i8_vnni.cpp, compiled with those flags).
namespace vnni {
// quantize_rows_reference with AVX-512 (the same bytes and scales).
void quantize_rows(const float* a, int64_t lda, int64_t rows, int64_t k, int64_t kpad, uint8_t* dst,
                   float* scale);
// C rows [0, rows) x columns [0, cols) (cols <= 32) of one panel from quantized rows (stride kpad,
// their scales sx) and the panel's quads, scales, offsets and bias (all at the panel's first
// column; bias may be null).
void panel_rows(const uint8_t* a, const float* sx, int64_t rows, int64_t kpad, const int8_t* panel,
                const float* sw, const int32_t* offset, const float* bias, int64_t cols, float* c,
                int64_t ldc);
}  // namespace vnni

}  // namespace tessera::kernels::cpu::gemm_i8
