#include "tests/support/kernel_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "core/dtype.h"

namespace tessera::test {

namespace {
// Uniform in [0, 1) from the top 24 bits of a 64-bit draw: exact in float and independent of the
// standard library's distribution implementations.
float unit_float(std::mt19937_64& rng) {
  return static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f);
}
}  // namespace

void fill_random(float* data, size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i) data[i] = lo + (hi - lo) * unit_float(rng);
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  fill_random(v.data(), n, seed, lo, hi);
  return v;
}

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> f = random_floats(n, seed, lo, hi);
  std::vector<uint16_t> v(n);
  convert_f32_to_bf16(f.data(), v.data(), n);
  return v;
}

std::vector<float> random_small_ints(size_t n, uint64_t seed, int lo, int hi) {
  std::mt19937_64 rng(seed);
  const uint64_t span = static_cast<uint64_t>(hi - lo + 1);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(lo + static_cast<int>(rng() % span));
  return v;
}

std::vector<int32_t> random_ids(size_t n, uint64_t seed, int32_t limit) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(rng() % static_cast<uint64_t>(limit));
  return v;
}

ErrorStats compare(const float* actual, const float* expected, size_t n, double rel_floor) {
  ErrorStats s;
  for (size_t i = 0; i < n; ++i) {
    const double e = expected[i];
    const double a = actual[i];
    if (std::isfinite(e) && !std::isfinite(a)) {
      ++s.nonfinite;
      continue;
    }
    const double err = std::fabs(a - e);
    if (err > s.max_abs) {
      s.max_abs = err;
      s.worst_index = i;
    }
    s.max_rel = std::fmax(s.max_rel, err / std::fmax(std::fabs(e), rel_floor));
    s.max_abs_expected = std::fmax(s.max_abs_expected, std::fabs(e));
  }
  return s;
}

::testing::AssertionResult all_close(const float* actual, const float* expected, size_t n,
                                     double atol, double rtol) {
  size_t failures = 0;
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    const double tol = atol + rtol * std::fabs(static_cast<double>(expected[i]));
    if (!(err <= tol)) {  // NaN fails
      ++failures;
      const double excess = std::isnan(err) ? INFINITY : err - tol;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " of " << n << " elements off (atol " << atol
                                       << ", rtol " << rtol << "); worst [" << worst << "]: actual "
                                       << actual[worst] << ", expected " << expected[worst];
}

::testing::AssertionResult all_within(const float* actual, const float* expected,
                                      const double* bound, size_t n) {
  size_t failures = 0;
  size_t worst = 0;
  double worst_ratio = -1;
  for (size_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    const double ratio = std::isnan(err) ? INFINITY : err / bound[i];
    if (!(err <= bound[i])) ++failures;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << failures << " of " << n << " elements beyond their error bound; worst [" << worst
         << "]: actual " << actual[worst] << ", expected " << expected[worst] << ", bound "
         << bound[worst] << " (error " << worst_ratio << " x bound)";
}

::testing::AssertionResult close_rel(const std::vector<float>& actual,
                                     const std::vector<float>& expected, double rel) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  }
  double scale = 0;
  for (float e : expected) scale = std::max(scale, static_cast<double>(std::fabs(e)));
  return all_close(actual.data(), expected.data(), actual.size(), rel * scale, rel);
}

::testing::AssertionResult all_equal(const float* actual, const float* expected, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(actual + i, expected + i, sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "first difference at [" << i << "]: actual "
                                           << actual[i] << ", expected " << expected[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::test
