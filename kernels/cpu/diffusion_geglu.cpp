// cpu::geglu_ff: SD's GEGLU with its off switch. The fused form is ops.h's cpu::geglu (value
// first, gate second, as diffusers); the unfused form writes gelu(gate) to y and multiplies by the
// value in a second pass over y, as a framework without the fusion would.
#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/diffusion_internal.h"
#include "kernels/diffusion_ops.h"

namespace tessera::kernels::cpu {

void geglu_ff(const float* x, float* y, int64_t rows, int64_t hidden, Fusion fusion) {
  if (rows <= 0 || hidden <= 0) return;
  if (fusion == Fusion::kOn) {
    geglu(x, y, rows, hidden);
    return;
  }
  const diffusion_detail::IsaKernels& kr = diffusion_detail::isa_kernels(active_isa());
  // Same task grain as the elementwise activations (~32K floats per task).
  const int64_t grain = std::max<int64_t>(1, (int64_t{32} * 1024) / hidden);
  ThreadPool& pool = kernels::cpu::cpu_pool();
  pool.parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      kr.gelu_erf(x + (2 * r + 1) * hidden, y + r * hidden, hidden);
  });
  pool.parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      kr.mul_inplace(x + 2 * r * hidden, y + r * hidden, hidden);
  });
}

}  // namespace tessera::kernels::cpu
