// Run-time CPU feature detection. Kernels dispatch on these: AVX2+FMA is the base fast path,
// AVX-512 (F/BW/VL) and AVX-512 BF16 the faster one. TESSERA_NO_SIMD=1 in the environment, or
// set_simd_enabled(false), forces the scalar paths (the "off switch" every fast path has).
#pragma once

#include <string>

namespace tessera {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512bf16 = false;
  bool avx512vnni = false;
  // AVX-512 executed as two 256-bit halves (AMD family 0x19, Zen 4): a 512-bit instruction costs
  // two 256-bit ones there, so kernels whose AVX2 version issues as many multiply-adds per cycle
  // may prefer it (the int8 GEMV does: linear_int8.cpp).
  bool avx512_half_width = false;
};

// What the CPU and OS support (XSAVE state checked), independent of the switches.
const CpuFeatures& cpu_features_detected();
// What kernels may use: detected features, with everything off when SIMD is disabled.
CpuFeatures cpu_features();
void set_simd_enabled(bool enabled);
bool simd_enabled();
// "avx2 fma f16c avx512f avx512bw avx512vl avx512bf16"
std::string cpu_features_string(const CpuFeatures& f);
// The CPU's model name from /proc/cpuinfo, or "unknown".
std::string cpu_model_name();

}  // namespace tessera
