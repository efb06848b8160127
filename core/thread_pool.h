// ThreadPool: a fixed set of worker threads for data-parallel kernels.
//
// run(n, fn) calls fn(i) for every i in [0, n) spread over the workers and the calling thread, and
// returns when all calls finished. Tasks are handed out dynamically (an atomic counter), so uneven
// tasks balance. Workers spin briefly before sleeping, which keeps the per-call overhead of the
// many small kernels in a decode step low. A call made from inside a task runs serially on that
// thread (no deadlock); concurrent callers from different threads are serialised.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

class ThreadPool {
 public:
  // num_threads counts the caller: 1 means "run everything on the calling thread".
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t num_tasks, const std::function<void(int64_t)>& fn);

  // Splits [0, n) into about num_threads()*4 chunks of at least `grain` items and calls
  // fn(begin, end) for each.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void drain(const std::function<void(int64_t)>* fn, int64_t num_tasks);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // serialises callers
  std::mutex mutex_;
  std::condition_variable wake_;
  std::mutex done_mutex_;
  std::condition_variable done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int64_t> tasks_done_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> active_workers_{0};
  bool stop_ = false;
};

// The process-wide pool the CPU kernels use (through kernels/cpu/threads.h, which also keeps
// OpenBLAS to one thread): std::thread::hardware_concurrency() threads unless sized by
// set_default_threads(), which the front ends reach through runtime::set_cpu_threads().
ThreadPool& default_thread_pool();
// Recreates the default pool with n threads (n <= 0: every core). Not safe while kernels run.
void set_default_threads(int n);

}  // namespace tessera
