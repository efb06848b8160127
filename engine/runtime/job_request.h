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

#include "core/status.h"
#include "engine/runtime/session.h"

namespace tessera::runtime {

struct JobRequest {
  std::string prompt;  // as given (accept_job_text applies the text rule when it is submitted)
  std::string name;    // "": none; else a plain file name (no '/', not starting with '.')
  std::optional<uint64_t> seed;
  int variations = 1;
  float guidance = kDefaultGuidance, temperature = kDefaultTemperature, top_p = kDefaultTopP;
  int64_t top_k = kDefaultTopK;
  int resolution = 0;   // 0: the model's
  bool sample = false;  // a sampling field was given

  // The job it asks for (seed 0 when sampling without one: callers that want a random seed set it).
  JobOptions job() const;
};

// The keys parse_job_request knows.
const std::set<std::string>& job_request_keys();

// Reads `j` (an object). `extra_keys`: keys the caller reads itself (not errors here). Errors
// (kInvalidArgument): not an object, an unknown key, "prompt" missing or not a string, a wrong type
// or range, a name that is not a plain file name.
Expected<JobRequest> parse_job_request(const nlohmann::json& j,
                                       const std::set<std::string>& extra_keys = {});

}  // namespace tessera::runtime
