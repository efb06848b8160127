// Helpers shared by several CPU ops, one version per ISA (see isa.h): the exp that softmax and
// attention use. Defined in activations.cpp (scalar) and activations_kernels.inc (compiled by
// activations_avx2.cpp and activations_avx512.cpp); accuracy notes in activations.cpp.
// Declarations only, so this header is safe to include from portable and ISA-specific files alike
// (the vector types and intrinsic wrappers the *_kernels.inc bodies are written with are in
// simd_vec.h, for ISA-specific files only). Call an ISA's version only when active_isa() returned
// that ISA or better.
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu::detail {

// exp_sub_sum: y[i] = exp(x[i] - shift) for i < n; returns sum(y). y may alias x.
// exp_sub_vec: y[i] = exp(x[i] - shift[i]) for i < n. y may alias x.
namespace scalar {
float exp_sub_sum(const float* x, float shift, float* y, int64_t n);
}  // namespace scalar
namespace avx2 {
float exp_sub_sum(const float* x, float shift, float* y, int64_t n);
void exp_sub_vec(const float* x, const float* shift, float* y, int64_t n);
}  // namespace avx2
namespace avx512 {
float exp_sub_sum(const float* x, float shift, float* y, int64_t n);
void exp_sub_vec(const float* x, const float* shift, float* y, int64_t n);
}  // namespace avx512

}  // namespace tessera::kernels::cpu::detail
