// Shared by the CUDA diffusion op tests (tests/kernels/diffusion_*_gpu_test.cpp): the
// scale-relative comparison the CPU diffusion tests use.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tests/support/kernel_test_util.h"

namespace tessera::test {

// Success when every element is finite and max |actual - expected| <= tol * max(1e-3, max
// |expected|). Relative to the output's scale: elementwise relative error is meaningless where a
// sum of mixed-sign terms cancels to ~0.
inline ::testing::AssertionResult close_to_scale(const std::vector<float>& actual,
                                                 const std::vector<float>& expected, double tol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " vs expected " << expected.size();
  }
  const ErrorStats e = compare(actual.data(), expected.data(), actual.size());
  const double scale = std::max(1e-3, e.max_abs_expected);
  if (e.nonfinite == 0 && e.max_abs <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "max |error| " << e.max_abs << " at " << e.worst_index << " (" << e.max_abs / scale
         << " of scale " << scale << ", tolerance " << tol << "), non-finite " << e.nonfinite;
}

}  // namespace tessera::test
