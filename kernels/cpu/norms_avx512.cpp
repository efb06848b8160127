// norms_kernels.inc compiled for AVX-512 (flags from kernels/CMakeLists.txt).
// Call only after active_isa() returned kAvx512.
#include <cstdint>

#include "kernels/cpu/simd_vec.h"

namespace tessera::kernels::cpu::detail::avx512 {
#include "kernels/cpu/norms_kernels.inc"
}  // namespace tessera::kernels::cpu::detail::avx512
