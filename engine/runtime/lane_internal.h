// LaneWorker: one worker thread of a Session with its queue and cancel semantics (engine/runtime
// internal; front ends use session.h).
//
// A lane runs one job at a time, in submission order, on its own thread. Two kinds of work:
//   - jobs (replaceable): submit_job() cancels the running job and replaces any job still queued
//     (only the newest counts; the replaced one reports Cancelled without running).
//   - loads (sticky): submit_load() also cancels the running job, replaces any load still queued,
//     but never drops a queued job, and is never dropped by a job: loading a model while the user
//     presses Generate does not lose either. A running load cannot be interrupted.
// Dropped work is reported through `on_dropped` on the worker thread, before the next job runs, so
// that every event of a lane comes from its worker, in order.
//
// Threads: every method may be called from any thread; the destructor cancels everything, reports
// the dropped work and joins the worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tessera::runtime {

class LaneWorker {
 public:
  // `cancel` is the job's own flag: the job may set it too (to stop a loop that only listens to
  // it).
  using Run = std::function<void(uint64_t id, std::atomic<bool>& cancel)>;
  using Dropped = std::function<void(uint64_t id, const std::string& reason)>;

  // `on_dropped` is called on the worker thread for each job that never ran. `on_exception` runs
  // when a job throws (bad_alloc included) with the job id and the exception.
  LaneWorker(Dropped on_dropped, std::function<void(uint64_t, std::exception_ptr)> on_exception);
  ~LaneWorker();
  LaneWorker(const LaneWorker&) = delete;
  LaneWorker& operator=(const LaneWorker&) = delete;

  void submit_job(uint64_t id, Run run);
  void submit_load(uint64_t id, Run run);
  // Cancels the running job and drops the queued jobs (queued loads stay).
  void cancel();
  // No job running or queued, nothing left to report.
  bool idle() const;

 private:
  struct Item {
    uint64_t id = 0;
    bool load = false;
    Run run;
  };
  void worker_loop();
  void drop_matching(bool load, const std::string& reason);  // mutex_ held

  Dropped on_dropped_;
  std::function<void(uint64_t, std::exception_ptr)> on_exception_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Item> queue_;                                 // guarded by mutex_
  std::vector<std::pair<uint64_t, std::string>> dropped_;  // guarded by mutex_
  std::shared_ptr<std::atomic<bool>> running_cancel_;      // guarded by mutex_; null when idle
  bool busy_ = false;                                      // guarded by mutex_
  bool stop_ = false;                                      // guarded by mutex_
  std::thread worker_;                                     // last: started once the rest exists
};

// The policy between the shape lane and the image lane when both engines share a machine: the
// shape job the artist watches token by token comes first. While a shape job runs, an image job
// waits before it starts and between its denoising steps (its state is kept; it resumes where it
// stopped). Both engines use the same cores (the kernels' thread pool serialises callers) or the
// same GPU, so running them together would only interleave their kernels and slow the token stream.
// When the two engines run on different devices (shape on CUDA, image on the CPU, or the reverse)
// they run concurrently.
class Scheduler {
 public:
  // Shape jobs from submission to their terminal event (queued ones count: an image submitted just
  // after a shape job must not slip in before the shape lane's worker picks the job up).
  void shape_submitted(uint64_t job);
  void shape_finished(uint64_t job);  // no-op for an id that was not submitted
  // Whether image work yields to shape work (set when models load: true when both engines run on
  // the same device; true by default).
  void set_exclusive(bool exclusive);
  bool exclusive() const;
  // Image lane: returns at once when it may run; else calls `on_wait(true)`, waits until the shape
  // job ends or `cancel` is set, and calls `on_wait(false)`. Returns false when cancelled.
  bool wait_image_turn(const std::atomic<bool>& cancel, const std::function<void(bool)>& on_wait);

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::set<uint64_t> shape_jobs_;
  bool exclusive_ = true;
};

}  // namespace tessera::runtime
