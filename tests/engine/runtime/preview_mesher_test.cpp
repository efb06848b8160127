// PreviewMesher (engine/runtime/preview_mesher.h) on its own, with a `work` that records what it
// was given: the newest prefix wins, candidates take turns, the budget holds previews back,
// finish() drains or drops as its contract says, and a failure of `work` reaches the worker.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "engine/runtime/preview_mesher.h"

namespace tessera::runtime {
namespace {

using namespace std::chrono_literals;

// What `work` saw, with a gate that holds the first call until opened.
struct PreviewRecorder {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::pair<int, size_t>> calls;  // candidate, prefix length
  bool gate_open = true;
  bool started = false;

  PreviewMesher::Work work(double ms = 5.0) {
    return [this, ms](int candidate, const std::vector<int32_t>& prefix, const std::atomic<bool>*) {
      std::unique_lock<std::mutex> lock(mutex);
      started = true;
      cv.notify_all();
      cv.wait(lock, [this] { return gate_open; });
      calls.emplace_back(candidate, prefix.size());
      return ms;
    };
  }
  void wait_started() {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [this] { return started; }));
  }
  void open() {
    std::lock_guard<std::mutex> lock(mutex);
    gate_open = true;
    cv.notify_all();
  }
};

std::vector<int32_t> prefix(size_t n) {
  return std::vector<int32_t>(n, 7);
}

TEST(PreviewMesher, WithoutBudgetEveryDuePreviewIsMeshedNewestFirstCandidatesTakingTurns) {
  PreviewRecorder r;
  r.gate_open = false;
  std::atomic<bool> cancel{false};
  PreviewMesher mesher(r.work(), &cancel, 1.0, 0.0);
  mesher.submit(0, prefix(4));
  r.wait_started();  // candidate 0's 4 tokens are being meshed (held at the gate)
  mesher.submit(0, prefix(8));
  mesher.submit(0, prefix(12));  // replaces the 8 waiting
  mesher.submit(1, prefix(4));
  r.open();
  mesher.finish(true);  // no budget, a successful decode: everything due is meshed
  const std::vector<std::pair<int, size_t>> expected = {{0, 4}, {1, 4}, {0, 12}};
  EXPECT_EQ(r.calls, expected);
  EXPECT_DOUBLE_EQ(mesher.estimate_ms(), 5.0);
  EXPECT_FALSE(cancel.load());
  EXPECT_NO_THROW(mesher.rethrow_failure());
}

TEST(PreviewMesher, FinishDropsWhatWaitsAndCancelsThePreviewBeingMeshed) {
  std::atomic<bool> cancel{false};
  std::atomic<int> calls{0};
  std::atomic<bool> started{false}, saw_cancel{false};
  PreviewMesher mesher(
      [&](int, const std::vector<int32_t>&, const std::atomic<bool>* stop) {
        ++calls;
        started = true;
        const auto until = std::chrono::steady_clock::now() + 10s;
        while (!stop->load() && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(1ms);
        }
        saw_cancel = stop->load();
        return 1.0;
      },
      &cancel, 1.0, 0.0);
  mesher.submit(0, prefix(4));
  while (!started) std::this_thread::sleep_for(1ms);
  mesher.submit(1, prefix(4));
  mesher.finish(false);  // a failed or cancelled decode: nothing more is meshed
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_FALSE(cancel.load()) << "finishing a job is not cancelling it";
  mesher.finish(false);  // idempotent
}

TEST(PreviewMesher, TheBudgetHoldsPreviewsBack) {
  // A preview expected to take 1 s may use 10 % of the job: none starts in the first 10 s.
  PreviewRecorder held;
  std::atomic<bool> cancel{false};
  {
    PreviewMesher mesher(held.work(), &cancel, 0.1, 1000.0);
    mesher.submit(0, prefix(4));
    std::this_thread::sleep_for(50ms);
    mesher.finish(true);  // with a budget, what waits is dropped even after a success
  }
  EXPECT_TRUE(held.calls.empty());
  // Nothing known yet: the first preview starts at once and measures itself.
  PreviewRecorder first;
  PreviewMesher mesher(first.work(30.0), &cancel, 0.1, 0.0);
  mesher.submit(0, prefix(4));
  first.wait_started();
  // Let the helper record what the preview took (a preview still running at finish() is
  // cancelled, and a cancelled preview's time is not an estimate).
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard<std::mutex> lock(first.mutex);
      if (!first.calls.empty()) break;
    }
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(100ms);
  mesher.finish(false);
  EXPECT_EQ(first.calls.size(), 1u);
  EXPECT_DOUBLE_EQ(mesher.estimate_ms(), 30.0);
}

TEST(PreviewMesher, AFailureOfWorkCancelsTheJobAndReachesTheWorker) {
  std::atomic<bool> cancel{false};
  PreviewMesher mesher([](int, const std::vector<int32_t>&,
                          const std::atomic<bool>*) -> double { throw std::bad_alloc(); },
                       &cancel, 1.0, 0.0);
  mesher.submit(0, prefix(4));
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!cancel.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(cancel.load()) << "the decode must stop";
  mesher.submit(1, prefix(4));  // after the failure: ignored, no crash
  mesher.finish(true);
  EXPECT_THROW(mesher.rethrow_failure(), std::bad_alloc);
}

}  // namespace
}  // namespace tessera::runtime
