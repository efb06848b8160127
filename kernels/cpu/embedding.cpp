// cpu::embedding_gather: row copies (f32) or exact bf16 -> f32 row expansion with the SIMD
// conversion kernels of cpu::linear, split over cpu_pool() when there is enough to copy.
#include <algorithm>
#include <cassert>
#include <cstring>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_internal.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu {

void embedding_gather(const Weight& table, const int32_t* ids, int64_t n, float* out) {
  assert(table.dtype == DType::kF32 || table.dtype == DType::kBF16);
  const int64_t dim = table.cols;
  if (n <= 0 || dim <= 0) return;
  const linear_detail::ExpandBf16Fn expand = linear_detail::expand_bf16_for(active_isa());
  auto gather_range = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      assert(ids[i] >= 0 && ids[i] < table.rows);
      const int64_t row = ids[i];
      if (table.dtype == DType::kF32) {
        std::memcpy(out + i * dim, static_cast<const float*>(table.data) + row * dim,
                    static_cast<size_t>(dim) * sizeof(float));
      } else {
        expand(static_cast<const uint16_t*>(table.data) + row * dim, dim, 1, dim, out + i * dim,
               dim);
      }
    }
  };
  // A decode step gathers one row (a few KB): threads would cost more than the copy. Prompt-sized
  // gathers are split into tasks of at least ~256 KB of output.
  constexpr int64_t kMinTaskElements = int64_t{1} << 16;
  const int64_t grain = std::max<int64_t>(1, kMinTaskElements / dim);
  if (n <= grain) {
    gather_range(0, n);
  } else {
    kernels::cpu::cpu_pool().parallel_for(n, grain, gather_range);
  }
}

}  // namespace tessera::kernels::cpu
