#include "core/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tessera {

double TraceStats::percentile_ms(double p) const {
  if (samples_ms.empty()) return 0.0;
  std::vector<double> sorted = samples_ms;
  std::sort(sorted.begin(), sorted.end());
  p = std::clamp(p, 0.0, 100.0);
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

void Trace::add(const std::string& name, double ms) {
  TraceStats& s = stats_[name];
  if (s.count == 0) {
    s.min_ms = s.max_ms = ms;
  } else {
    s.min_ms = std::min(s.min_ms, ms);
    s.max_ms = std::max(s.max_ms, ms);
  }
  ++s.count;
  s.total_ms += ms;
  if (std::find(keep_.begin(), keep_.end(), name) != keep_.end()) s.samples_ms.push_back(ms);
}

const TraceStats* Trace::find(const std::string& name) const {
  auto it = stats_.find(name);
  return it == stats_.end() ? nullptr : &it->second;
}

std::string Trace::summary() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %8s %12s %10s %10s %10s\n", "name", "count", "total ms",
                "mean ms", "min ms", "max ms");
  out += line;
  for (const auto& [name, s] : stats_) {
    std::snprintf(line, sizeof line, "%-24s %8lld %12.3f %10.4f %10.4f %10.4f\n", name.c_str(),
                  static_cast<long long>(s.count), s.total_ms, s.mean_ms(), s.min_ms, s.max_ms);
    out += line;
  }
  return out;
}

}  // namespace tessera
