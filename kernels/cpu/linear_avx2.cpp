// linear_kernels.inc compiled for AVX2 + FMA (flags from kernels/CMakeLists.txt): called only
// when active_isa() returned kAvx2 or better (see linear.cpp).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "kernels/cpu/linear_internal.h"
#include "kernels/cpu/simd_vec.h"

namespace tessera::kernels::cpu::linear_detail::avx2 {
#include "kernels/cpu/linear_kernels.inc"
}  // namespace tessera::kernels::cpu::linear_detail::avx2
