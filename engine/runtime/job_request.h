// A shape job as a request spells it in JSON: a `tessera batch` line, the body of `tessera serve`'s
// POST /v1/jobs. The fields over the product's defaults, each checked, and an error that names the
// field and what is wrong with it; any key not known is an error (a typo must not pass silently).
//
//   {"prompt": "a chair", "seed": 7, "variations": 4, "guidance": 3, "temperature": 1,
//    "top_k": 0, "top_p": 0.9, "resolution": 65, "name": "chair"}
//
// Only "prompt" is required. Sampling: greedy unless a sampling field (seed, temperature, top_k,
// top_p) is given or variations > 1, as on the command line.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/sampling.h"
#include "core/status.h"
#include "engine/runtime/defaults.h"
#include "engine/runtime/session.h"

namespace tessera::runtime {

struct JobRequest {
  std::string prompt;  // as given (accept_job_text applies the text rule when it is submitted)
  std::string name;    // "": none; else a plain file name (no '/', not starting with '.')
  int variations = 1;
  // seed, temperature, top_k, top_p and guidance; `sample` is set when a sampling field (seed,
  // temperature, top_k, top_p) was given.
  SamplingSettings sampling = kDefaultSampling;
  bool has_seed = false;  // "seed" was given (sampling.seed holds it)
  int resolution = 0;     // 0: the model's

  // The job it asks for (seed 0 when sampling without one: callers that want a random seed set it).
  JobOptions job() const;
};

// The keys parse_job_request knows.
const std::set<std::string>& job_request_keys();

// Reads `j` (an object) over `base` (the values of the fields `j` leaves out; a base that samples
// keeps sampling). `extra_keys`: keys the caller reads itself (not errors here). Errors
// (kInvalidArgument): not an object, an unknown key, "prompt" missing or not a string, a field of
// the wrong type ("\"top_k\" must be an integer"), the sampling settings out of range
// (check_sampling's message, "top_p: 1.5 is outside (0, 1]"), a resolution that is not 2^k + 1, a
// name that is not a plain file name.
Expected<JobRequest> parse_job_request(const nlohmann::json& j,
                                       const std::set<std::string>& extra_keys = {},
                                       const JobRequest& base = {});

}  // namespace tessera::runtime
