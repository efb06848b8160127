// The diffusion kernels of diffusion_kernels.inc compiled with the portable flags: the path used
// while SIMD is off (active_isa() == kScalar). The dispatch table is in diffusion_gemm.cpp.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/diffusion_internal.h"

namespace tessera::kernels::cpu::diffusion_detail::scalar {
#include "kernels/cpu/diffusion_kernels.inc"
}  // namespace tessera::kernels::cpu::diffusion_detail::scalar
