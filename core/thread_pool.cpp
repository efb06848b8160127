#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define TESSERA_PAUSE() _mm_pause()
#else
#define TESSERA_PAUSE() ((void)0)
#endif

namespace tessera {

namespace {
thread_local bool t_inside_pool_task = false;
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  const int extra = std::max(0, num_threads - 1);
  workers_.reserve(extra);
  for (int i = 0; i < extra; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain(const std::function<void(int64_t)>* fn, int64_t num_tasks) {
  const bool was_inside = t_inside_pool_task;
  t_inside_pool_task = true;
  int64_t finished = 0;
  for (;;) {
    const int64_t i = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (i >= num_tasks) break;
    (*fn)(i);
    ++finished;
  }
  t_inside_pool_task = was_inside;
  if (finished &&
      tasks_done_.fetch_add(finished, std::memory_order_acq_rel) + finished == num_tasks) {
    std::lock_guard<std::mutex> lock(done_mutex_);
    done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little: consecutive kernels of a decode step arrive microseconds apart.
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations) {
      TESSERA_PAUSE();
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    const std::function<void(int64_t)>* fn = nullptr;
    int64_t num_tasks = 0;
    {
      // fn_, num_tasks_ and the active count change together under mutex_, so a worker that wakes
      // late either joins the current call or sees none; it can never run a finished call's fn.
      std::lock_guard<std::mutex> lock(mutex_);
      seen = generation_.load(std::memory_order_acquire);
      if (stop_) return;
      fn = fn_;
      num_tasks = num_tasks_;
      if (fn) active_workers_.fetch_add(1, std::memory_order_acq_rel);
    }
    if (fn) {
      drain(fn, num_tasks);
      active_workers_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

void ThreadPool::run(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1 || t_inside_pool_task) {
    for (int64_t i = 0; i < num_tasks; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    tasks_done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  drain(&fn, num_tasks);
  // Wait for all tasks, spinning first.
  int spins = 0;
  while (tasks_done_.load(std::memory_order_acquire) < num_tasks && spins < kSpinIterations) {
    TESSERA_PAUSE();
    ++spins;
  }
  if (tasks_done_.load(std::memory_order_acquire) < num_tasks) {
    std::unique_lock<std::mutex> lock(done_mutex_);
    done_.wait(lock, [&] { return tasks_done_.load(std::memory_order_acquire) >= num_tasks; });
  }
  // Workers still inside drain() hold a pointer to fn: wait them out, holding mutex_ so that no
  // late worker can pick fn up, then retire it. Workers never take mutex_ while active.
  std::lock_guard<std::mutex> lock(mutex_);
  while (active_workers_.load(std::memory_order_acquire) != 0) TESSERA_PAUSE();
  fn_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, int64_t{num_threads()} * 4);
  chunks = std::max<int64_t>(1, chunks);
  const int64_t per = (n + chunks - 1) / chunks;
  chunks = (n + per - 1) / per;
  run(chunks, [&](int64_t c) {
    const int64_t begin = c * per;
    fn(begin, std::min(n, begin + per));
  });
}

namespace {
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
int automatic_threads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}
std::mutex g_pool_mutex;
}  // namespace

ThreadPool& default_thread_pool() {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  auto& slot = pool_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(automatic_threads());
  return *slot;
}

void set_default_threads(int n) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  pool_slot() = std::make_unique<ThreadPool>(n > 0 ? std::min(n, 256) : automatic_threads());
}

}  // namespace tessera
