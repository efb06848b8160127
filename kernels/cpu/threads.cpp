#include "kernels/cpu/threads.h"

#include <cblas.h>

#include <mutex>

namespace tessera::kernels::cpu {

namespace {

void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace

ThreadPool& cpu_pool() {
  blas_single_threaded();
  return default_thread_pool();
}

const char* blas_core() {
  return openblas_get_corename();
}

void configure_cpu_threads(int n) {
  blas_single_threaded();
  set_default_threads(n);
}

}  // namespace tessera::kernels::cpu
