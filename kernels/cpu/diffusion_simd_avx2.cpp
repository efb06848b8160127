// The diffusion kernels of diffusion_kernels.inc compiled for AVX2 + FMA (flags from
// kernels/CMakeLists.txt). Call only after active_isa() returned kAvx2 or better.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/diffusion_internal.h"

namespace tessera::kernels::cpu::diffusion_detail::avx2 {
#include "kernels/cpu/diffusion_kernels.inc"
}  // namespace tessera::kernels::cpu::diffusion_detail::avx2
