// linear_kernels.inc compiled for AVX-512 (flags from kernels/CMakeLists.txt): called only
// when active_isa() returned kAvx512 (see linear.cpp).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "kernels/cpu/linear_internal.h"
#include "kernels/cpu/simd_vec.h"

namespace tessera::kernels::cpu::linear_detail::avx512 {
#include "kernels/cpu/linear_kernels.inc"
}  // namespace tessera::kernels::cpu::linear_detail::avx512
