// The CPU kernels' threads, in one place: the pool every CPU kernel splits its work over (the
// process's, core/thread_pool.h) and OpenBLAS kept to one thread of its own, because its
// calls run inside the pool's tasks: threads of its own would compete with the pool's for the same
// cores (kernels/cpu/linear.cpp has the measurement).
//
// Front ends pass their thread count once at start-up (tessera --threads, tessera-studio
// --threads) through the runtime (runtime::set_cpu_threads), which calls configure_cpu_threads;
// nothing reads an environment variable. Threads: configure_cpu_threads is not safe while kernels
// run; cpu_pool is safe from any thread.
#pragma once

#include "core/thread_pool.h"

namespace tessera::kernels::cpu {

// The pool CPU kernels use (every core unless configured), OpenBLAS single-threaded from the
// first call on.
ThreadPool& cpu_pool();

// Sizes the pool to n threads (n <= 0: every core).
void configure_cpu_threads(int n);

// The kernels OpenBLAS picked when it loaded (its own CPU detection, or OPENBLAS_CORETYPE), e.g.
// "SkylakeX" or "Haswell". It serves the large f32 GEMMs and does not follow the --isa cap, so a
// capped measurement names both.
const char* blas_core();

}  // namespace tessera::kernels::cpu
