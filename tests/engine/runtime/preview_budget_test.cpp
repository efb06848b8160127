// Live previews within their budget (issue 23, JobOptions::preview_budget) on the embedded
// tessera-tiny through the runtime: previews are meshed beside the decode, take at most the
// budgeted share of the job's time (plus the one preview that starts before any cost is known),
// never come after the decode, and a bad budget is refused by name. The decode is slowed by
// sleeping in the token events (on_event runs on the emitting thread) so that a job lasts long
// enough for many previews to be due: tessera-tiny alone decodes 64 tokens in ~30 ms.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "engine/runtime/session.h"

namespace tessera::runtime {
namespace {

struct JobRun {
  int previews = 0;
  double preview_ms = 0.0;  // sum over the previews shown
  double max_preview_ms = 0.0;
  double job_ms = 0.0;
  bool preview_after_decode = false;
  std::string error;
};

class PreviewBudget : public ::testing::Test {
 protected:
  void SetUp() override {
    SessionOptions options;
    options.on_event = [this](const Event& e) {
      if (std::holds_alternative<TokenEvent>(e.payload)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(4));  // a slower decode
      }
      std::lock_guard<std::mutex> lock(mutex_);
      events_.push_back(e);
    };
    auto session = Session::open(ShapeModelOptions{}, options);
    ASSERT_TRUE(session.ok()) << session.status().to_string();
    session_ = std::move(session).value();
  }

  JobRun run(double budget) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events_.clear();
    }
    JobOptions job;
    job.prompt = "a torus";
    job.preview_every = 2;
    job.preview_resolution = 33;
    job.preview_budget = budget;
    const auto start = std::chrono::steady_clock::now();
    const uint64_t id = session_->submit(job);
    JobRun r;
    bool decoded = false;
    size_t seen = 0;
    for (bool done = false; !done;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard<std::mutex> lock(mutex_);
      for (; seen < events_.size(); ++seen) {
        const Event& e = events_[seen];
        if (e.job != id) continue;
        if (const auto* s = std::get_if<StageEvent>(&e.payload)) {
          if (s->name == kStageDecode) decoded = true;
        } else if (const auto* p = std::get_if<PartialMeshEvent>(&e.payload)) {
          ++r.previews;
          r.preview_ms += p->ms;
          r.max_preview_ms = std::max(r.max_preview_ms, p->ms);
          if (decoded) r.preview_after_decode = true;
        } else if (const auto* err = std::get_if<ErrorEvent>(&e.payload)) {
          r.error = err->status.message();
        }
        if (e.terminal()) done = true;
      }
      if (done) {
        r.job_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
      }
    }
    return r;
  }

  std::unique_ptr<Session> session_;
  std::mutex mutex_;
  std::vector<Event> events_;
};

TEST_F(PreviewBudget, PreviewsStayWithinTheirShareOfTheJob) {
  // No budget: the helper meshes whatever is due, back to back, for the whole decode (~260 ms of
  // slowed decode against previews of tens of ms).
  const JobRun free = run(1.0);
  ASSERT_TRUE(free.error.empty()) << free.error;
  EXPECT_FALSE(free.preview_after_decode);
  EXPECT_GE(free.previews, 3) << "job " << free.job_ms << " ms";

  // A quarter: with the cost of a preview known from the job before, the previews' time fits in
  // a quarter of the job (slack: one preview running over its estimate).
  const JobRun limited = run(0.25);
  ASSERT_TRUE(limited.error.empty()) << limited.error;
  EXPECT_FALSE(limited.preview_after_decode);
  EXPECT_LT(limited.previews, free.previews);
  EXPECT_LE(limited.preview_ms, 0.25 * limited.job_ms + limited.max_preview_ms)
      << limited.previews << " previews in a " << limited.job_ms << " ms job";

  // A tiny budget: with the cost known from the jobs before, no preview fits.
  const JobRun none = run(0.001);
  ASSERT_TRUE(none.error.empty()) << none.error;
  EXPECT_EQ(none.previews, 0);
}

TEST_F(PreviewBudget, ABadBudgetIsRefusedByName) {
  for (double bad : {0.0, -0.5, 1.5}) {
    const JobRun r = run(bad);
    EXPECT_NE(r.error.find("preview_budget"), std::string::npos) << bad << ": " << r.error;
  }
  EXPECT_TRUE(run(0.5).error.empty());  // the session goes on
}

}  // namespace
}  // namespace tessera::runtime
