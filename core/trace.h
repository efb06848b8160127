// Tracing timers for per-op, per-stage and per-token timings.
//
// Stopwatch measures one interval (steady clock, nanosecond resolution). Trace collects named
// durations (a stage, an op, one token) with count, total, min and max and keeps every sample of a
// name when asked (per-token latency plots need the series). ScopedTimer adds the lifetime of a
// scope to a Trace. A Trace is not thread-safe: one per worker thread or job.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void restart() { start_ = std::chrono::steady_clock::now(); }
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

struct TraceStats {
  int64_t count = 0;
  double total_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  std::vector<double> samples_ms;  // only for names registered with keep_samples()
  double mean_ms() const { return count ? total_ms / static_cast<double>(count) : 0.0; }
  // Percentile p in [0, 100] of the kept samples (nearest rank); 0 when none kept.
  double percentile_ms(double p) const;
};

class Trace {
 public:
  void add(const std::string& name, double ms);
  void keep_samples(const std::string& name) {
    stats_[name].samples_ms.reserve(1024);
    keep_.push_back(name);
  }
  const TraceStats* find(const std::string& name) const;
  const std::map<std::string, TraceStats>& all() const { return stats_; }
  void clear() {
    stats_.clear();
    keep_.clear();
  }
  // One line per name: "name  count  total  mean  min  max" in ms.
  std::string summary() const;

 private:
  std::map<std::string, TraceStats> stats_;
  std::vector<std::string> keep_;
};

class ScopedTimer {
 public:
  ScopedTimer(Trace* trace, std::string name) : trace_(trace), name_(std::move(name)) {}
  ~ScopedTimer() {
    if (trace_) trace_->add(name_, watch_.elapsed_ms());
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Trace* trace_;
  std::string name_;
  Stopwatch watch_;
};

}  // namespace tessera
