#include "engine/runtime/preview_mesher.h"

#include <utility>

namespace tessera::runtime {

PreviewMesher::PreviewMesher(Work work, std::atomic<bool>* job_cancel, double budget,
                             double estimate_ms)
    : work_(std::move(work)),
      job_cancel_(job_cancel),
      budget_(budget),
      estimate_ms_(estimate_ms),
      start_(std::chrono::steady_clock::now()),
      thread_([this] { loop(); }) {}

void PreviewMesher::submit(int candidate, std::vector<int32_t> prefix) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_[candidate] = std::move(prefix);
  }
  cv_.notify_one();
}

void PreviewMesher::finish(bool success) {
  const bool drain = success && budget_ >= 1.0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    if (!drain) pending_.clear();
  }
  if (!drain) stop_preview_.store(true);
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

// The waiting candidate with the fewest previews (lowest index on ties).
std::map<int, std::vector<int32_t>>::iterator PreviewMesher::next_candidate() {
  auto best = pending_.begin();
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (done_[it->first] < done_[best->first]) best = it;
  }
  return best;
}

// When the next preview fits the budget: (busy + estimate) / budget after the start.
std::chrono::steady_clock::time_point PreviewMesher::fits_at() const {
  return start_ +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double, std::milli>((busy_ms_ + estimate_ms_) / budget_));
}

void PreviewMesher::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopped, nothing (more) to mesh
    if (budget_ < 1.0 && !stop_ && std::chrono::steady_clock::now() < fits_at()) {
      cv_.wait_until(lock, fits_at(), [this] { return stop_; });
      continue;  // re-check: stopped, or the pending set changed meanwhile
    }
    auto next = next_candidate();
    const int candidate = next->first;
    std::vector<int32_t> prefix = std::move(next->second);
    pending_.erase(next);
    lock.unlock();
    double ms = 0.0;
    try {
      ms = work_(candidate, prefix, &stop_preview_);
    } catch (...) {
      lock.lock();
      failure_ = std::current_exception();
      pending_.clear();
      stop_ = true;
      job_cancel_->store(true);
      return;
    }
    lock.lock();
    busy_ms_ += ms;
    if (!stop_preview_.load()) estimate_ms_ = ms;  // a cancelled preview's time is partial
    ++done_[candidate];
  }
}

}  // namespace tessera::runtime
