// The instruction set the CPU kernels run with. Every op of kernels/cpu dispatches on
// active_isa() once per call and runs its AVX-512, AVX2 or scalar body (files *_avx512.cpp,
// *_avx2.cpp, compiled with those ISAs' flags, and the portable scalar code).
#pragma once

namespace tessera::kernels::cpu {

// Ordered: each ISA's kernels may use everything the lower ones do, and limit_isa() caps by this
// order.
enum class Isa { kScalar, kAvx2, kAvx512 };

// True when this CPU can run `isa`'s kernels, as cpu_features() reports it (so false for every
// SIMD ISA while SIMD is switched off). kAvx2 needs AVX2 + FMA; kAvx512 also needs AVX-512
// F/BW/VL. kScalar is always supported.
bool isa_supported(Isa isa);

// The best supported ISA, capped by limit_isa(). What the CPU kernels use.
Isa active_isa();

// Caps active_isa() at `max_isa` (tests use it to run the AVX2 path on AVX-512 machines;
// limit_isa(Isa::kAvx512), the initial state, removes the cap). Never raises the ISA above what is
// supported. Not for use while kernels run: an op in flight may already have read the old value,
// so ops running concurrently could use different paths.
void limit_isa(Isa max_isa);

// "scalar", "avx2" or "avx512" (static storage).
const char* isa_name(Isa isa);

}  // namespace tessera::kernels::cpu
