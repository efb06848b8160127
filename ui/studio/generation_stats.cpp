#include "ui/studio/generation_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

namespace tessera::studio {

void GenerationStats::start(uint64_t id, int64_t tokens, std::chrono::steady_clock::time_point now,
                            int candidate_count) {
  if (token_ms.size() >= 2) {
    previous_token_ms = token_ms;
    previous_kv_cache = kv_cache;
    previous_graphs = graphs;
  }
  job = id;
  state = JobState::kRunning;
  message.clear();
  expected_tokens = tokens;
  candidates = std::max(candidate_count, 1);
  token_ms.clear();
  token_ids.clear();
  stage_ms.fill(-1.0);
  partial_meshes = 0;
  first_partial_ms = -1;
  total_ms = 0;
  final_vertices = final_triangles = 0;
  extraction_queries = 0;
  submitted = now;
}

bool GenerationStats::apply(const runtime::Event& event,
                            std::chrono::steady_clock::time_point now) {
  if (event.job != job || job == 0) return false;
  if (const auto* m = std::get_if<runtime::ModeEvent>(&event.payload)) {
    backend = m->backend;
    kv_cache = m->kv_cache;
    graphs = m->graphs;
    graphs_reason = m->graphs_reason;
  } else if (const auto* t = std::get_if<runtime::TokenEvent>(&event.payload)) {
    // One step serves every candidate: its time (and the strip's ids) from candidate 0's event.
    if (t->candidate != 0) return true;
    // Indices arrive in order; be tolerant of a gap rather than trusting it blindly.
    const size_t index = static_cast<size_t>(std::max<int64_t>(t->index, 0));
    if (token_ms.size() <= index) {
      token_ms.resize(index + 1, 0.0f);
      token_ids.resize(index + 1, 0);
    }
    token_ms[index] = static_cast<float>(t->ms);
    token_ids[index] = t->id;
  } else if (const auto* s = std::get_if<runtime::StageEvent>(&event.payload)) {
    // Mesh stages come once per candidate: their sum is the job's time in that stage.
    for (size_t i = 0; i < kStageNames.size(); ++i) {
      if (s->name != kStageNames[i]) continue;
      stage_ms[i] = (s->candidate > 0 && stage_ms[i] >= 0) ? stage_ms[i] + s->ms : s->ms;
    }
  } else if (std::holds_alternative<runtime::PartialMeshEvent>(event.payload)) {
    if (partial_meshes++ == 0) {
      first_partial_ms = std::chrono::duration<double, std::milli>(now - submitted).count();
    }
  } else if (const auto* f = std::get_if<runtime::FinalMeshEvent>(&event.payload)) {
    extraction_queries += f->extraction.queries;
    if (f->candidate != 0) return true;  // the status line speaks of candidate 0 (the current)
    final_vertices = f->mesh->vertex_count();
    final_triangles = f->mesh->triangle_count();
  } else if (const auto* d = std::get_if<runtime::DoneEvent>(&event.payload)) {
    state = JobState::kDone;
    total_ms = d->total_ms;
  } else if (const auto* c = std::get_if<runtime::CancelledEvent>(&event.payload)) {
    state = JobState::kCancelled;
    message = c->reason;
  } else if (const auto* e = std::get_if<runtime::ErrorEvent>(&event.payload)) {
    state = JobState::kFailed;
    message = e->status.message();
  }
  return true;
}

std::string GenerationStats::stages_summary() const {
  double sum = 0, most = -1;
  size_t most_at = 0;
  for (size_t i = 0; i < stage_ms.size(); ++i) {
    if (stage_ms[i] < 0) continue;
    sum += stage_ms[i];
    if (stage_ms[i] > most) {
      most = stage_ms[i];
      most_at = i;
    }
  }
  if (most < 0) return std::string();
  // Done: the job's own total (it also holds what no stage counts, e.g. waiting for a lane).
  const double total = state == JobState::kDone && total_ms > 0 ? total_ms : sum;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.2f s, most in %s (%.0f %%)", total / 1000.0,
                kStageNames[most_at], total > 0 ? 100.0 * most / total : 0.0);
  return buf;
}

double GenerationStats::tpot_mean_ms() const {
  if (token_ms.size() < 2) return 0.0;
  const double sum = std::accumulate(token_ms.begin() + 1, token_ms.end(), 0.0);
  return sum / static_cast<double>(token_ms.size() - 1);
}

double GenerationStats::tpot_percentile_ms(double p) const {
  if (token_ms.size() < 2) return 0.0;
  return percentile(std::vector<float>(token_ms.begin() + 1, token_ms.end()), p);
}

double GenerationStats::tokens_per_second() const {
  const double sum = std::accumulate(token_ms.begin(), token_ms.end(), 0.0);
  return sum > 0 ? 1000.0 * static_cast<double>(token_ms.size()) * candidates / sum : 0.0;
}

double percentile(std::vector<float> values, double p) {
  if (values.empty()) return 0.0;
  p = std::clamp(p, 0.0, 100.0);
  // Nearest rank: the smallest value with at least p% of the samples at or below it.
  const size_t n = values.size();
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::clamp<size_t>(rank, 1, n);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank - 1),
                   values.end());
  return values[rank - 1];
}

const char* job_state_name(JobState state) {
  switch (state) {
    case JobState::kIdle:
      return "idle";
    case JobState::kRunning:
      return "running";
    case JobState::kDone:
      return "done";
    case JobState::kCancelled:
      return "cancelled";
    case JobState::kFailed:
      return "failed";
  }
  return "?";
}

}  // namespace tessera::studio
