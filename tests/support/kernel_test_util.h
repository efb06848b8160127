// Helpers for kernel tests: deterministic random inputs and error measures for comparing a fast
// kernel with its reference. Generic on purpose (any op, any backend once the data is on the host).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace tessera::test {

// n floats uniform in [lo, hi), reproducible from `seed` (std::mt19937_64 with a fixed recipe, so
// the values are the same on every platform and standard library).
std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// Fills data[0, n) the same way.
void fill_random(float* data, size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// n bf16 values (bit patterns) of uniform floats in [lo, hi), rounded to nearest even.
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// n integers uniform in [lo, hi], as floats: sums and products of small integers are exact in f32,
// so a kernel fed with them must match its reference bit for bit whatever its summation order.
std::vector<float> random_small_ints(size_t n, uint64_t seed, int lo, int hi);
// n ids uniform in [0, limit).
std::vector<int32_t> random_ids(size_t n, uint64_t seed, int32_t limit);

struct ErrorStats {
  double max_abs = 0;           // max |actual - expected|
  double max_rel = 0;           // max |actual - expected| / max(|expected|, rel_floor)
  size_t worst_index = 0;       // index of max_abs
  size_t nonfinite = 0;         // elements where actual is NaN/inf but expected is finite
  double max_abs_expected = 0;  // max |expected|, for scale-aware tolerances
};
// Error measures of actual against expected (n elements). rel_floor keeps near-zero expected
// values from dominating max_rel.
ErrorStats compare(const float* actual, const float* expected, size_t n, double rel_floor = 1e-6);

// Success when |actual[i] - expected[i]| <= atol + rtol * |expected[i]| for every i (NaN fails);
// otherwise a message with the count of failures and the worst element.
::testing::AssertionResult all_close(const float* actual, const float* expected, size_t n,
                                     double atol, double rtol);
// Success when |actual[i] - expected[i]| <= bound[i] for every i (per-element error bounds, e.g.
// from a rounding-error analysis); otherwise the worst element relative to its bound.
::testing::AssertionResult all_within(const float* actual, const float* expected,
                                      const double* bound, size_t n);
// Success when actual and expected are bitwise equal (NaNs with equal payloads compare equal).
::testing::AssertionResult all_equal(const float* actual, const float* expected, size_t n);
// The parity fixtures' tolerance: |a - e| <= rel * (max|e| + |e|) element-wise (relative to the
// tensor's scale, so near-zero elements are not held to a relative bound); sizes must match.
::testing::AssertionResult close_rel(const std::vector<float>& actual,
                                     const std::vector<float>& expected, double rel = 1e-4);

// Runs fn once per (code path, thread count): AVX-512 and AVX2 where the CPU has them, scalar
// (SIMD switched off), each with 1 and 2 threads. Restores the defaults afterwards.
template <class Fn>
void for_each_cpu_mode(Fn fn) {
  using ::tessera::kernels::cpu::Isa;
  const CpuFeatures& f = cpu_features_detected();
  struct Mode {
    const char* name;
    bool simd;
    Isa limit;
  };
  const bool simd_was_enabled = simd_enabled();
  std::vector<Mode> modes;
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx2 && f.fma) {
    modes.push_back({"avx512", true, Isa::kAvx512});
  }
  if (f.avx2 && f.fma) modes.push_back({"avx2", true, Isa::kAvx2});
  modes.push_back({"scalar", false, Isa::kScalar});
  for (const Mode& mode : modes) {
    for (int threads : {1, 2}) {
      set_simd_enabled(mode.simd);
      ::tessera::kernels::cpu::limit_isa(mode.limit);
      set_default_threads(threads);
      SCOPED_TRACE(std::string(mode.name) + ", threads " + std::to_string(threads));
      fn();
    }
  }
  set_simd_enabled(simd_was_enabled);
  ::tessera::kernels::cpu::limit_isa(Isa::kAvx512);
  set_default_threads(0);
}

}  // namespace tessera::test
