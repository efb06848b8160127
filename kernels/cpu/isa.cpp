// The ISA choice of the CPU kernels (see isa.h).
#include "kernels/cpu/isa.h"

#include <atomic>

#include "core/cpu_features.h"

namespace tessera::kernels::cpu {

namespace {

// Relaxed is enough: limit_isa() is documented as not racing with kernels, and a test thread
// that sets it then runs ops on the pool hands the value over through the pool's own
// synchronisation.
std::atomic<int> g_isa_limit{static_cast<int>(Isa::kAvx512)};

bool supported_by(const CpuFeatures& f, Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return f.avx512f && f.avx512bw && f.avx512vl && f.avx2 && f.fma;
    case Isa::kAvx2:
      return f.avx2 && f.fma;
    case Isa::kScalar:
      break;
  }
  return true;
}

}  // namespace

bool isa_supported(Isa isa) {
  return supported_by(cpu_features(), isa);
}

Isa active_isa() {
  const CpuFeatures f = cpu_features();
  const int limit = g_isa_limit.load(std::memory_order_relaxed);
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (static_cast<int>(isa) <= limit && supported_by(f, isa)) return isa;
  }
  return Isa::kScalar;
}

void limit_isa(Isa max_isa) {
  g_isa_limit.store(static_cast<int>(max_isa), std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

}  // namespace tessera::kernels::cpu
