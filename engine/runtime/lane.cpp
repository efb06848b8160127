#include "engine/runtime/lane_internal.h"

#include <chrono>
#include <exception>
#include <optional>

namespace tessera::runtime {

LaneWorker::LaneWorker(Dropped on_dropped,
                       std::function<void(uint64_t, std::exception_ptr)> on_exception)
    : on_dropped_(std::move(on_dropped)), on_exception_(std::move(on_exception)) {
  worker_ = std::thread([this] { worker_loop(); });
}

LaneWorker::~LaneWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    if (running_cancel_) running_cancel_->store(true);
    for (const Item& item : queue_) dropped_.emplace_back(item.id, "session closed");
    queue_.clear();
  }
  wake_.notify_all();
  worker_.join();
}

void LaneWorker::drop_matching(bool load, const std::string& reason) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->load == load) {
      dropped_.emplace_back(it->id, reason);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

void LaneWorker::submit_job(uint64_t id, Run run) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_cancel_) running_cancel_->store(true);
    drop_matching(false, "replaced by job " + std::to_string(id));
    queue_.push_back(Item{id, false, std::move(run)});
  }
  wake_.notify_all();
}

void LaneWorker::submit_load(uint64_t id, Run run) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_cancel_) running_cancel_->store(true);
    drop_matching(true, "replaced by load " + std::to_string(id));
    queue_.push_back(Item{id, true, std::move(run)});
  }
  wake_.notify_all();
}

void LaneWorker::cancel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_cancel_) running_cancel_->store(true);
    drop_matching(false, "cancelled before it started");
  }
  wake_.notify_all();
}

bool LaneWorker::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !busy_ && queue_.empty() && dropped_.empty();
}

void LaneWorker::worker_loop() {
  for (;;) {
    std::vector<std::pair<uint64_t, std::string>> dropped;
    std::optional<Item> item;
    std::shared_ptr<std::atomic<bool>> cancel;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty() || !dropped_.empty(); });
      dropped.swap(dropped_);
      stop = stop_;
      if (!queue_.empty() && !stop) {
        item = std::move(queue_.front());
        queue_.pop_front();
        cancel = std::make_shared<std::atomic<bool>>(false);
        running_cancel_ = cancel;
      }
      busy_ = true;
    }
    for (auto& [id, reason] : dropped) on_dropped_(id, reason);
    if (item) {
      try {
        item->run(item->id, *cancel);
      } catch (...) {
        on_exception_(item->id, std::current_exception());
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    running_cancel_.reset();
    busy_ = false;
    if (stop && queue_.empty() && dropped_.empty()) return;
  }
}

void Scheduler::shape_submitted(uint64_t job) {
  std::lock_guard<std::mutex> lock(mutex_);
  shape_jobs_.insert(job);
}

void Scheduler::shape_finished(uint64_t job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shape_jobs_.erase(job) == 0) return;
  }
  changed_.notify_all();
}

void Scheduler::set_exclusive(bool exclusive) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    exclusive_ = exclusive;
  }
  changed_.notify_all();
}

bool Scheduler::exclusive() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exclusive_;
}

bool Scheduler::wait_image_turn(const std::atomic<bool>& cancel,
                                const std::function<void(bool)>& on_wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto may_run = [this] { return !exclusive_ || shape_jobs_.empty(); };
  if (may_run()) return !cancel.load();
  lock.unlock();
  on_wait(true);
  lock.lock();
  // The cancel flag has no condition variable of its own: look at it every 10 ms.
  while (!may_run() && !cancel.load()) changed_.wait_for(lock, std::chrono::milliseconds(10));
  lock.unlock();
  on_wait(false);
  return !cancel.load();
}

}  // namespace tessera::runtime
