// SamplingSettings: how a shape's tokens are chosen (greedy, or sampled with a seed, temperature,
// top-k and top-p) and how strongly the prompt steers them (classifier-free guidance). One type
// from the door to the engine: the CLI, the studio, `tessera serve`, the batch manifest, the
// library and the settings written into files all hold it, and the shape engine samples with it.
// It lives in core/ because the engine (engine/shape) and the front ends (which reach only
// engine/runtime, engine/mesh and core/) both include it.
//
// Defaults: a default-constructed SamplingSettings is the reference's (greedy; when sampling,
// temperature 1, no top-k, no nucleus filter; guidance 3), what the engine assumes when nobody
// asks otherwise. The product's defaults are the runtime's rule, runtime::kDefaultSampling
// (engine/runtime/defaults.h), built from this one; every front end starts from that.
//
// Validation: sampling_errors() is THE range check, one message per bad field, each naming the
// field, its value and the allowed range ("top_p: 1.5 is outside (0, 1]"). Every door calls it
// (through check_sampling) once the settings are read: the command line, a JSON job, the studio's
// panel, settings restored from a file; the engine calls it again before it samples. A door checks
// only the form of what it reads (a number, an integer), never the range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera {

struct SamplingSettings {
  bool sample = false;       // false: greedy argmax; seed, temperature, top-k and top-p unused
  uint64_t seed = 0;         // any value
  float temperature = 1.0f;  // finite, > 0
  int64_t top_k = 0;         // >= 0; 0: no top-k filter
  float top_p = 1.0f;        // in (0, 1]; 1: no nucleus filter
  float guidance = 3.0f;     // finite, >= 0; 0: no guidance (the conditional row only)

  bool operator==(const SamplingSettings&) const = default;
};

// One message per field out of its range, in the order above; empty when every field is valid.
// Every field is checked, whether or not `sample` is on.
std::vector<std::string> sampling_errors(const SamplingSettings& settings);

// OK, or kInvalidArgument whose message is sampling_errors() joined by "; ".
Status check_sampling(const SamplingSettings& settings);

}  // namespace tessera
