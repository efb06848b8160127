// The task split shared by the GEMMs whose B is packed in 32-column panels (gemm_bf16's packed
// path, gemm_i8): tasks are blocks of rows of A, split further over column chunks when there are
// too few row blocks to keep the threads busy (at least 4 tasks per thread where the panels allow).
// Each task gets whole micro-kernel rows (multiples of `row_unit`) and whole panels, so a row's
// outputs are computed the same way whatever the split.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"

namespace tessera::kernels::cpu {

struct RowPanelTask {
  int64_t i0 = 0, rows = 0;        // rows [i0, i0 + rows) of A and C
  int64_t p_begin = 0, p_end = 0;  // panels [p_begin, p_end) of B
};

// Runs task(const RowPanelTask&) over m rows x `panels` panels: row blocks of at most max_rows
// (rounded to row_unit), on cpu_pool() unless there is one task or the product is small
// (`work` multiply-adds below 2^18), then on this thread.
template <typename Task>
void run_row_panel_tasks(int64_t m, int64_t panels, int64_t row_unit, int64_t max_rows,
                         int64_t work, const Task& task) {
  ThreadPool& pool = kernels::cpu::cpu_pool();
  const int64_t threads = pool.num_threads();
  const int64_t mr = std::min(max_rows, (m + row_unit - 1) / row_unit * row_unit);
  const int64_t row_blocks = (m + mr - 1) / mr;
  int64_t col_chunks = 1;
  while (row_blocks * col_chunks < 4 * threads && col_chunks < panels) col_chunks *= 2;
  col_chunks = std::min(col_chunks, panels);
  const int64_t per_chunk = (panels + col_chunks - 1) / col_chunks;
  auto one = [&](int64_t t) {
    RowPanelTask rt;
    const int64_t rb = t / col_chunks, cc = t % col_chunks;
    rt.i0 = rb * mr;
    rt.rows = std::min(mr, m - rt.i0);
    rt.p_begin = cc * per_chunk;
    rt.p_end = std::min(panels, rt.p_begin + per_chunk);
    if (rt.rows <= 0 || rt.p_begin >= rt.p_end) return;
    task(rt);
  };
  const int64_t tasks = row_blocks * col_chunks;
  if (tasks == 1 || work < (int64_t{1} << 18)) {
    for (int64_t t = 0; t < tasks; ++t) one(t);
  } else {
    pool.run(tasks, one);
  }
}

}  // namespace tessera::kernels::cpu
