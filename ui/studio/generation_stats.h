// GenerationStats: the snapshot of one job's progress that the studio's panels read (the ImGui
// overlay, the token strip, the status bar). It is fed engine events on the UI thread by
// EngineBridge and never points into the engine: panels read a plain value, never engine state.
//
// Units: milliseconds for times, bytes for memory. Token samples are kept per token index (the
// latency plot is "ms over token index", independent of the frame rate).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/events.h"

namespace tessera::studio {

// The stages the overlay breaks a job into, in order (names of runtime::StageEvent).
inline constexpr std::array<const char*, 6> kStageNames = {
    runtime::kStageText,         runtime::kStagePrefill,    runtime::kStageDecode,
    runtime::kStageLatentDecode, runtime::kStageExtraction, runtime::kStageCleanup};

enum class JobState { kIdle, kRunning, kDone, kCancelled, kFailed };

struct GenerationStats {
  uint64_t job = 0;  // 0: no job yet
  JobState state = JobState::kIdle;
  std::string message;  // error text (kFailed) or cancel reason (kCancelled)

  int64_t expected_tokens = 0;     // tokens the job will generate (for progress)
  int candidates = 1;              // variations decoded together (one step serves them all)
  std::vector<float> token_ms;     // ms of each generation step, by token index
  std::vector<int32_t> token_ids;  // candidate 0's (the token strip shows one sequence)
  std::array<double, kStageNames.size()> stage_ms{};  // -1: not reached yet
  int64_t partial_meshes = 0;
  double first_partial_ms = -1;  // wall-clock from submit to the first partial mesh, -1: none yet
  double total_ms = 0;           // DoneEvent::total_ms
  int64_t final_vertices = 0, final_triangles = 0;
  int64_t extraction_queries = 0;  // occupancy queries of the final meshes, all candidates

  // Model / mode facts: set by the bridge when the job starts, then by the job's ModeEvent (how
  // the runtime actually runs it).
  std::string backend;  // e.g. "cpu (avx512, 2 threads)"
  std::string weights;  // the shape GPT's weights, e.g. "int8, 6.3 MB read per token"
  bool kv_cache = true;
  runtime::GraphMode graphs = runtime::GraphMode::kUnavailable;
  std::string graphs_reason;  // why not on (runtime::ModeEvent::graphs_reason)

  // The previous job's per-token curve and mode, kept by start() so the plot can show both (the
  // A/B of the KV cache and graph switches).
  std::vector<float> previous_token_ms;
  bool previous_kv_cache = true;
  runtime::GraphMode previous_graphs = runtime::GraphMode::kUnavailable;

  std::chrono::steady_clock::time_point submitted{};

  // A replay's cursor: the token whose prefix is shown (the plot marks it); -1: no replay.
  int64_t cursor = -1;

  // Clears the per-job fields for a new job `id` expecting `tokens` tokens; the finished job's
  // token curve (when it has one) becomes previous_token_ms.
  void start(uint64_t id, int64_t tokens, std::chrono::steady_clock::time_point now,
             int candidates = 1);
  // Applies one event of the current job (events of other jobs are ignored; returns false then).
  bool apply(const runtime::Event& event, std::chrono::steady_clock::time_point now);

  // Where the time went, for the folded Stages panel's title: the time so far (the job total
  // once done) and the stage that took most of it, e.g. "1.69 s, most in extraction (48 %)";
  // empty before any stage has finished.
  std::string stages_summary() const;

  // TPOT statistics over the decode steps (every token after the first, which includes prefill).
  double tpot_mean_ms() const;
  double tpot_percentile_ms(double p) const;  // p in [0, 100]; 0 when there are no samples
  // Tokens per second over the generation steps so far, over all candidates (0 before the first
  // token).
  double tokens_per_second() const;
};

// Nearest-rank percentile of `values` (copied; p in [0, 100]); 0 for an empty input.
double percentile(std::vector<float> values, double p);

const char* job_state_name(JobState state);

}  // namespace tessera::studio
