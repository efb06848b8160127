// PreviewMesher: a shape job's live previews, meshed on a helper thread beside the decode
// (Session::run_shape_job). Internal to engine/runtime; tested on its own
// (tests/engine/runtime/preview_mesher_test.cpp).
//
// Live previews meshed beside the decode instead of inside its token loop (a preview every 16
// tokens meshed in the loop would stop the token stream for the whole meshing, TPOT p99 290 ms on
// tessera-tiny). The token callback hands the due prefix to this helper thread and returns at once;
// a candidate's prefix still waiting when its next one is due is replaced (the newest wins), and
// the waiting candidate with the fewest previews goes first (candidates take turns).
//
// Budget: the helper's meshing takes compute from the decode (two cores), and a preview costs a
// latent decode plus an extraction (on a full-size model as much as ~20 decode steps). So previews
// may use at most `budget` of the wall time since the job began (JobOptions::preview_budget,
// 10 % by default): a preview starts only once busy + estimate <= budget * elapsed, where busy is
// the time the helper has spent and estimate what the last preview took (this job's, else the
// session's previous job's at this resolution; none known: the first one starts at once and
// measures it). A due preview that does not fit waits (the newest prefix wins meanwhile). On a
// short job (tessera-tiny: ~120 ms) that means few or no previews: the final mesh is moments
// away; on a long one (full-size v0.5 on the CPU: about a minute) previews keep coming.
//
// finish() drops what waits and cancels the preview being meshed (its extraction stops at the
// next batch, and it emits nothing): the final meshes come next and are better than any preview,
// and no preview may hold them back. Except with no budget (1) after a successful decode: then
// every due preview was asked for (the studio's frame recording) and is meshed before the final
// shapes. It joins before the job meshes its final shapes with the same decoder. The helper only
// calls `work`, which meshes with the shape decoder (its own buffers; the generator uses the
// GPT's) and emits the event.
//
// An exception thrown by `work` (std::bad_alloc from a backend op) must not end the process on the
// helper thread: it is kept, the job's cancel flag is set so the decode stops, and
// rethrow_failure() hands it to the worker, where the lane turns it into the job's error event as
// for any exception of the job.
//
// Threads: submit() from the decoding thread (the token callback); finish(), rethrow_failure()
// and estimate_ms() from the job's worker; `work` runs on the helper thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::runtime {

class PreviewMesher {
 public:
  // work(candidate, prefix, cancel) meshes and emits one preview, stopping when *cancel is set;
  // it returns how long it took (ms).
  using Work = std::function<double(int candidate, const std::vector<int32_t>& prefix,
                                    const std::atomic<bool>* cancel)>;
  // budget in (0, 1] (1: no limit); estimate_ms: what a preview is expected to take (0: unknown,
  // the first one starts at once and measures it).
  PreviewMesher(Work work, std::atomic<bool>* job_cancel, double budget, double estimate_ms);
  ~PreviewMesher() { finish(false); }
  PreviewMesher(const PreviewMesher&) = delete;
  PreviewMesher& operator=(const PreviewMesher&) = delete;

  // The prefix of `candidate` is due: it replaces that candidate's waiting one, if any.
  void submit(int candidate, std::vector<int32_t> prefix);
  // success: the decode finished; with no budget (1) every due preview is still meshed, as asked
  // (a frame recording wants each step); otherwise, and on a failure or cancel, nothing more is.
  // Joins the helper. Idempotent.
  void finish(bool success);
  // After finish(): the exception `work` threw, if any, thrown here.
  void rethrow_failure() {
    if (failure_) std::rethrow_exception(failure_);
  }
  // After finish(): what the last whole preview took (the estimate given if none finished).
  double estimate_ms() const { return estimate_ms_; }

 private:
  std::map<int, std::vector<int32_t>>::iterator next_candidate();
  std::chrono::steady_clock::time_point fits_at() const;
  void loop();

  Work work_;
  std::atomic<bool>* job_cancel_;
  const double budget_;  // (0, 1]; 1: no limit (every due preview starts when the helper is free)
  double estimate_ms_;   // guarded by mutex_ while the helper runs
  const std::chrono::steady_clock::time_point start_;
  std::atomic<bool> stop_preview_{false};  // cancels the preview being meshed
  std::exception_ptr failure_;             // written by the helper, read after join
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<int, std::vector<int32_t>> pending_;
  std::map<int, int> done_;  // previews meshed per candidate
  double busy_ms_ = 0.0;     // time spent in work_
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace tessera::runtime
