// Live previews' cost on a whole object (issue 23: "tessera-bench shape reports the whole-object
// time with previews on and off; previews on may cost at most 10 %"), measured end to end through
// the runtime Session on the embedded tessera-tiny (a real model with real surfaces, CPU backend):
// for each prompt, jobs with previews off, on with the default budget (JobOptions::preview_budget)
// and on with no budget (every due preview, meshed beside the decode as before the budget),
// alternated, `repeat` timed jobs of each after one warm-up of each; the studio's preview settings
// (every 16 tokens at 33) and the model's default final resolution.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::bench {

struct PreviewMode {
  std::string name;         // "off", "budget 10 %", "no budget"
  double budget = 0.0;      // 0: previews off
  double job_ms = 0.0;      // median job time (submit -> Done)
  double previews = 0.0;    // median number of previews shown per job
  double preview_ms = 0.0;  // median time one preview took (0 when none)
};

struct PreviewRow {
  std::string prompt;
  std::vector<PreviewMode> modes;  // off first
};

struct PreviewBench {
  std::string model;  // what RESULTS.md names
  int preview_every = 16;
  int preview_resolution = 33;
  int repeat = 0;
  std::vector<PreviewRow> rows;
};

Expected<PreviewBench> bench_previews(bool quick);

// The markdown table (one row per prompt: job time per mode and the overhead against off).
std::string previews_markdown(const PreviewBench& b);

}  // namespace tessera::bench
