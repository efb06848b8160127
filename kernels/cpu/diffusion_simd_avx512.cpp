// The diffusion kernels of diffusion_kernels.inc compiled for AVX-512 (flags from
// kernels/CMakeLists.txt). Call only after active_isa() returned kAvx512.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/diffusion_internal.h"

namespace tessera::kernels::cpu::diffusion_detail::avx512 {
#include "kernels/cpu/diffusion_kernels.inc"
}  // namespace tessera::kernels::cpu::diffusion_detail::avx512
