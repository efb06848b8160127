#include "engine/runtime/job_request.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/runtime/user_text.h"

namespace tessera::runtime {

using nlohmann::json;

const std::set<std::string>& job_request_keys() {
  static const std::set<std::string> kKeys = {"prompt",   "seed",        "variations",
                                              "guidance", "temperature", "top_k",
                                              "top_p",    "resolution",  "name"};
  return kKeys;
}

JobOptions JobRequest::job() const {
  JobOptions job;
  job.prompt = prompt;
  job.variations = variations;
  job.generation.sampling = sampling;
  job.generation.sampling.sample = sampling.sample || variations > 1;
  job.mesh.resolution = resolution;
  return job;
}

Expected<JobRequest> parse_job_request(const json& j, const std::set<std::string>& extra_keys,
                                       const JobRequest& base) {
  if (!j.is_object()) return invalid_argument("a job must be a JSON object");
  std::string known =
      "prompt, seed, variations, guidance, temperature, top_k, top_p, resolution, name";
  for (const std::string& key : extra_keys) known += ", " + key;
  for (const auto& [key, value] : j.items()) {
    if (job_request_keys().count(key) == 0 && extra_keys.count(key) == 0) {
      return invalid_argument("unknown key \"" + key + "\" (known: " + known + ")");
    }
  }
  if (!j.contains("prompt") || !j["prompt"].is_string()) {
    return invalid_argument("\"prompt\" (a string) is required");
  }
  JobRequest r = base;
  r.prompt = j["prompt"].get<std::string>();
  // A number field in [lo, hi] (an integer when `integer`); absent: *out untouched.
  auto number = [&](const char* key, double lo, double hi, bool integer, double* out) -> Status {
    if (!j.contains(key)) return Status();
    const json& v = j[key];
    if (!v.is_number() || (integer && !v.is_number_integer())) {
      return invalid_argument(std::string("\"") + key + "\" must be " +
                              (integer ? "an integer" : "a number"));
    }
    const double d = v.get<double>();
    if (!(d >= lo && d <= hi)) {
      return invalid_argument(std::string("\"") + key + "\" " + v.dump() + " is out of range");
    }
    *out = d;
    return Status();
  };
  // The sampling fields: their form here, their range in check_sampling (the one range check).
  auto real = [&](const char* key, float* out) -> Status {
    if (!j.contains(key)) return Status();
    if (!j[key].is_number()) {
      return invalid_argument(std::string("\"") + key + "\" must be a number");
    }
    // Beyond float's range: infinity (which check_sampling refuses), not an undefined conversion.
    constexpr float kInf = std::numeric_limits<float>::infinity();
    const double v = j[key].get<double>();
    if (std::abs(v) > std::numeric_limits<float>::max()) {
      *out = v > 0 ? kInf : -kInf;
    } else {
      *out = static_cast<float>(v);
    }
    return Status();
  };
  if (j.contains("seed")) {
    const json& seed = j["seed"];
    if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0)) {
      return invalid_argument("\"seed\" must be an integer >= 0");
    }
    r.sampling.seed = seed.get<uint64_t>();
    r.has_seed = true;
  }
  double d = 0;
  TESSERA_RETURN_IF_ERROR(number("variations", 1, kMaxVariations, true, &d));
  if (j.contains("variations")) r.variations = static_cast<int>(d);
  TESSERA_RETURN_IF_ERROR(real("guidance", &r.sampling.guidance));
  TESSERA_RETURN_IF_ERROR(real("temperature", &r.sampling.temperature));
  TESSERA_RETURN_IF_ERROR(real("top_p", &r.sampling.top_p));
  if (j.contains("top_k")) {
    const json& k = j["top_k"];
    // An integer an int64 holds (a larger unsigned one is out of range all the same).
    if (!k.is_number_integer() ||
        (k.is_number_unsigned() && k.get<uint64_t>() > uint64_t{INT64_MAX})) {
      return invalid_argument("\"top_k\" must be an integer");
    }
    r.sampling.top_k = k.get<int64_t>();
  }
  for (const char* key : {"seed", "temperature", "top_k", "top_p"}) {
    if (j.contains(key)) r.sampling.sample = true;
  }
  TESSERA_RETURN_IF_ERROR(check_sampling(r.sampling));
  TESSERA_RETURN_IF_ERROR(number("resolution", 3, 1025, true, &d));
  if (j.contains("resolution")) {
    r.resolution = static_cast<int>(d);
    if (auto k = resolution_base(r.resolution); !k.ok()) {
      return invalid_argument("\"resolution\": " + k.status().message());
    }
  }
  if (j.contains("name")) {
    if (!j["name"].is_string()) return invalid_argument("\"name\" must be a string");
    r.name = j["name"].get<std::string>();
    auto checked = check_user_text("\"name\"", r.name, kMaxNameBytes);
    if (!checked.ok()) return checked.status();
    if (checked->changed()) {
      return invalid_argument("\"name\" must be plain text (" + checked->repairs + ")");
    }
    if (r.name.empty() || r.name.find('/') != std::string::npos ||
        r.name.find('\\') != std::string::npos || r.name[0] == '.') {
      return invalid_argument("\"name\" must be a plain file name (no '/', not starting with '.')");
    }
  }
  return r;
}

}  // namespace tessera::runtime
