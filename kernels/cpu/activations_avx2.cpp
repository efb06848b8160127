// activations_kernels.inc compiled for AVX2 + FMA (flags from kernels/CMakeLists.txt): the
// fallback for CPUs without AVX-512. Call only after active_isa() returned kAvx2 or better.
#include <cstdint>

#include "kernels/cpu/simd_internal.h"
#include "kernels/cpu/simd_vec.h"

namespace tessera::kernels::cpu::detail::avx2 {
#include "kernels/cpu/activations_kernels.inc"
}  // namespace tessera::kernels::cpu::detail::avx2
