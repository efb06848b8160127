#include "kernels/cpu/low_rank.h"

#include <algorithm>

#include "kernels/cpu/diffusion_internal.h"
#include "kernels/cpu/threads.h"

namespace tessera::kernels::cpu {

void add_low_rank_product(float* c, int64_t rows, int64_t cols, const float* up,
                          const float* down_t, int64_t rank) {
  if (rows <= 0 || cols <= 0 || rank <= 0) return;
  ThreadPool& pool = cpu_pool();
  // Bands of at least 16 rows, a few per thread, so the bands balance.
  const int64_t bands = std::max<int64_t>(1, std::min<int64_t>(rows / 16, 4 * pool.num_threads()));
  const int64_t band = (rows + bands - 1) / bands;
  pool.parallel_for(bands, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t r0 = b * band, r1 = std::min(rows, r0 + band);
      if (r0 >= r1) continue;
      diffusion_detail::sgemm(r1 - r0, cols, rank, 1.0f, up + r0 * rank, rank, down_t, rank,
                              /*b_trans=*/true, 1.0f, c + r0 * cols, cols);
    }
  });
}

}  // namespace tessera::kernels::cpu
