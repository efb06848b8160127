#include "core/sampling.h"

#include <charconv>
#include <cmath>

namespace tessera {

namespace {

// The shortest decimal that reads back as `v` (0.9f -> "0.9", not "0.899999976"); "nan", "inf".
std::string shortest(float v) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof(text), v).ptr;
  return std::string(text, end);
}

}  // namespace

std::vector<std::string> sampling_errors(const SamplingSettings& s) {
  std::vector<std::string> errors;
  if (!(s.temperature > 0.0f && std::isfinite(s.temperature))) {
    errors.push_back("temperature: " + shortest(s.temperature) + " is outside (0, inf)");
  }
  if (s.top_k < 0) errors.push_back("top_k: " + std::to_string(s.top_k) + " is outside [0, inf)");
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) {
    errors.push_back("top_p: " + shortest(s.top_p) + " is outside (0, 1]");
  }
  if (!(s.guidance >= 0.0f && std::isfinite(s.guidance))) {
    errors.push_back("guidance: " + shortest(s.guidance) + " is outside [0, inf)");
  }
  return errors;
}

Status check_sampling(const SamplingSettings& s) {
  const std::vector<std::string> errors = sampling_errors(s);
  if (errors.empty()) return Status();
  std::string message;
  for (const std::string& e : errors) message += (message.empty() ? "" : "; ") + e;
  return invalid_argument(message);
}

}  // namespace tessera
