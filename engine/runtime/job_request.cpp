#include "engine/runtime/job_request.h"

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
  job.generation.guidance_scale = guidance;
  job.generation.sampler.sample = sample || variations > 1;
  job.generation.sampler.seed = seed.value_or(0);
  job.generation.sampler.temperature = temperature;
  job.generation.sampler.top_k = top_k;
  job.generation.sampler.top_p = top_p;
  job.mesh.resolution = resolution;
  return job;
}

Expected<JobRequest> parse_job_request(const json& j, const std::set<std::string>& extra_keys) {
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
  JobRequest r;
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
  double d = 0;
  if (j.contains("seed")) {
    const json& seed = j["seed"];
    if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0)) {
      return invalid_argument("\"seed\" must be an integer >= 0");
    }
    r.seed = seed.get<uint64_t>();
    r.sample = true;
  }
  TESSERA_RETURN_IF_ERROR(number("variations", 1, kMaxVariations, true, &d));
  if (j.contains("variations")) r.variations = static_cast<int>(d);
  TESSERA_RETURN_IF_ERROR(number("guidance", 0, 1e6, false, &d));
  if (j.contains("guidance")) r.guidance = static_cast<float>(d);
  TESSERA_RETURN_IF_ERROR(number("temperature", 1e-6, 1e6, false, &d));
  if (j.contains("temperature")) r.temperature = static_cast<float>(d), r.sample = true;
  TESSERA_RETURN_IF_ERROR(number("top_p", 1e-9, 1, false, &d));
  if (j.contains("top_p")) r.top_p = static_cast<float>(d), r.sample = true;
  TESSERA_RETURN_IF_ERROR(number("top_k", 0, 1e9, true, &d));
  if (j.contains("top_k")) r.top_k = static_cast<int64_t>(d), r.sample = true;
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
