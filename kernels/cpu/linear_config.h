// cpu::linear (kernels/ops.h: y[m, n] = x[m, :] . w[n, :] + bias[n]) with its dispatch choices made
// explicit: which instruction set runs the dot-product and conversion kernels, whether large m
// goes through OpenBLAS sgemm, and whether bf16 weights take the AVX-512 BF16 path (x rounded to
// bf16). cpu::linear itself always runs default_linear_config().
//
// For benchmarks and tuning (`tessera-bench kernels` times the same layer with and without
// bf16_gemm in one run) and for tests that run every variant; models call cpu::linear or the
// backend, never this. The plan these switches select, and the constants behind it, are in
// kernels/cpu/linear_internal.h (the kernels' own files and their tests only).
//
// Threads: default_linear_config() may be called from any thread; it reads the process-wide
// switches (active_isa(), simd_enabled(), gemm_bf16::available()) each time, so a config taken
// before limit_isa() / set_simd_enabled() / gemm_bf16::set_enabled() keeps the old choice.
// linear_with_config() is as thread-safe as cpu::linear: it runs on cpu_pool(), and
// calls from several threads are fine (they share the pool) as long as each has its own y.
// A LinearConfig is a plain value: copy it, change a field, pass it.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu::linear_detail {

struct LinearConfig {
  // Instruction set of the dot-product and conversion kernels (isa.h).
  Isa isa = Isa::kScalar;
  // Large m through OpenBLAS sgemm. False gives the all-scalar path (TESSERA_NO_SIMD=1) that uses
  // no vector code of ours or OpenBLAS's.
  bool use_blas = false;
  // bf16 weights with m > kBf16GemmMinRows through gemm_bf16 (AVX-512 BF16: x rounded to bf16,
  // ~2x the f32 rate), and with m <= kMaxRowsPerPass through the vdpbf16ps GEMV kernel (x rounded
  // too). Only where gemm_bf16::available(); default_linear_config() turns it on there.
  bool bf16_gemm = false;
};

// What cpu::linear uses now: active_isa() (scalar when SIMD is disabled or the CPU lacks
// AVX2+FMA), BLAS unless SIMD is disabled.
LinearConfig default_linear_config();

// cpu::linear with an explicit configuration (tests, benchmarks). `config.isa` must be supported
// (asserted), and bf16_gemm set only where gemm_bf16::available(). Same contract as cpu::linear
// otherwise: w.dtype kF32 or kBF16, bias may be null, y [m, w.rows] owned by the
// caller and not aliasing x.
void linear_with_config(const LinearConfig& config, const float* x, int64_t m, const Weight& w,
                        const float* bias, float* y);

}  // namespace tessera::kernels::cpu::linear_detail
