#include "app/serve/jobs.h"

#include "engine/runtime/image_request.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>

#include "app/serve/event_stream.h"
#include "engine/runtime/job_request.h"
#include "engine/runtime/user_text.h"

namespace tessera::serve {

namespace fs = std::filesystem;
using nlohmann::json;

const char* state_name(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kRunning:
      return "running";
    case JobState::kDone:
      return "done";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "?";
}

bool terminal(JobState s) {
  return s == JobState::kDone || s == JobState::kFailed || s == JobState::kCancelled;
}

namespace {

// The export fields a job may carry besides runtime/job_request.h's, as the command line takes
// them.
const std::set<std::string>& export_keys() {
  static const std::set<std::string> kKeys = {"format", "preset",  "height", "size",
                                              "pivot",  "up_axis", "unit",   "max_faces"};
  return kKeys;
}

// "--max-faces 3: ..." -> "\"max_faces\": " (the request's name for a command-line option).
std::string field_of(const std::string& message) {
  if (message.rfind("--", 0) != 0) return "\"preset\": ";
  std::string name = message.substr(2, message.find_first_of(" '", 2) - 2);
  std::replace(name.begin(), name.end(), '-', '_');
  return "\"" + name + "\": ";
}

// The export fields of `body` into job->exporting, checked as the command line checks its
// options; errors start with the field's name in quotes.
Status read_export_fields(const json& body, Job* job) {
  cli::MeshExportCli& e = job->exporting;
  auto text = [&](const char* key, std::string* out) -> Status {
    if (!body.contains(key)) return Status();
    if (!body[key].is_string()) {
      return invalid_argument(std::string("\"") + key + "\" must be a string");
    }
    *out = body[key].get<std::string>();
    return Status();
  };
  auto metres = [&](const char* key, double* out, bool* given) -> Status {
    if (!body.contains(key)) return Status();
    if (!body[key].is_number() || !(body[key].get<double>() > 0)) {
      return invalid_argument(std::string("\"") + key + "\" must be a number of metres > 0");
    }
    *out = body[key].get<double>();
    *given = true;
    return Status();
  };
  TESSERA_RETURN_IF_ERROR(text("preset", &e.preset));
  TESSERA_RETURN_IF_ERROR(text("pivot", &e.pivot));
  TESSERA_RETURN_IF_ERROR(text("up_axis", &e.up_axis));
  TESSERA_RETURN_IF_ERROR(text("unit", &e.unit));
  TESSERA_RETURN_IF_ERROR(metres("height", &e.height, &e.height_given));
  TESSERA_RETURN_IF_ERROR(metres("size", &e.size, &e.size_given));
  if (body.contains("max_faces")) {
    if (!body["max_faces"].is_number_integer() || body["max_faces"].get<int64_t>() < 0) {
      return invalid_argument("\"max_faces\" must be an integer >= 0");
    }
    e.max_faces = body["max_faces"].get<int64_t>();
  }
  if (e.pivot.empty()) e.pivot = "origin";
  if (e.pivot != "origin" && e.pivot != "base" && e.pivot != "center") {
    return invalid_argument("\"pivot\" must be origin, base or center");
  }
  if (!e.up_axis.empty() && e.up_axis != "y" && e.up_axis != "z") {
    return invalid_argument("\"up_axis\" must be y or z");
  }
  // The command line's own checks (names of presets and units, size or height, budgets).
  auto options = cli::to_export_options(e, "job." + job->format);
  if (!options.ok()) {
    return invalid_argument(field_of(options.status().message()) + options.status().message());
  }
  auto asset = cli::to_asset_options(e);
  if (!asset.ok()) {
    return invalid_argument(field_of(asset.status().message()) + asset.status().message());
  }
  return Status();
}

// The field a refusal names: the leading name of check_sampling's messages ("top_p: 1.5 is
// outside (0, 1]" -> "top_p"), else the first quoted name ("\"seed\" must be ..." -> "seed"), else
// "".
std::string named_field(const std::string& m) {
  const size_t colon = m.find(": ");
  if (colon != std::string::npos && colon > 0 &&
      m.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == colon) {
    return m.substr(0, colon);
  }
  const size_t q = m.find('"');
  return q == std::string::npos ? "" : m.substr(q + 1, m.find('"', q + 1) - q - 1);
}

// A job without a seed gets this one, so that its files say how to make it again.
uint64_t random_job_seed() {
  return std::random_device{}() & 0x7fffffff;
}

}  // namespace

std::shared_ptr<Job> parse_job(const std::string& text, Refusal* refusal) {
  auto refuse = [&](const std::string& message, const std::string& field) {
    *refusal = Refusal{400, message, field};
    return nullptr;
  };
  const json body = json::parse(text, nullptr, false);
  if (body.is_discarded()) return refuse("the body is not valid JSON", "");
  if (body.is_object() && body.contains("kind")) {
    if (!body["kind"].is_string() ||
        (body["kind"] != "image" && body["kind"] != "shape" && body["kind"] != "paint")) {
      return refuse("\"kind\" must be \"shape\" (the default), \"image\" or \"paint\"", "kind");
    }
    if (body["kind"] == "paint") {
      std::set<std::string> extra = export_keys();
      extra.insert("format");
      auto paint = runtime::parse_paint_request(body, extra);
      if (!paint.ok()) {
        return refuse(paint.status().message(), named_field(paint.status().message()));
      }
      auto job = std::make_shared<Job>();
      job->request = body;
      job->request["mesh"] = "(mesh, base64)";  // the journal and the job list keep no bytes
      if (body.contains("format")) {
        if (!body["format"].is_string()) return refuse("\"format\" must be a string", "format");
        job->format = body["format"].get<std::string>();
        if (job->format != "glb" && job->format != "fbx") {
          return refuse(
              "\"format\" must be glb or fbx (files that carry their texture: the "
              "result is one file)",
              "format");
        }
      }
      if (!body.contains("seed")) paint->image.seed = random_job_seed();
      if (auto notes = runtime::accept_job_text(&paint->image); !notes.ok()) {
        return refuse(notes.status().message(), "prompt");
      }
      job->paint = std::make_shared<runtime::PaintJobOptions>(std::move(*paint));
      if (Status st = read_export_fields(body, job.get()); !st.ok()) {
        return refuse(st.message(), named_field(st.message()));
      }
      return job;
    }
    if (body["kind"] == "image") {
      auto image = runtime::parse_image_request(body);
      if (!image.ok()) {
        return refuse(image.status().message(), named_field(image.status().message()));
      }
      auto job = std::make_shared<Job>();
      job->request = body;
      // The journal and the job list keep the request without its pictures' bytes.
      for (const char* key : {"init_image", "mask", "control_image"}) {
        if (job->request.contains(key)) job->request[key] = "(PNG, base64)";
      }
      job->format = "png";
      job->image = std::make_shared<runtime::ImageJobOptions>(std::move(*image));
      if (!body.contains("seed")) job->image->seed = random_job_seed();
      if (auto notes = runtime::accept_job_text(job->image.get()); !notes.ok()) {
        return refuse(notes.status().message(), "prompt");
      }
      return job;
    }
  }
  std::set<std::string> extra = export_keys();
  extra.insert("kind");
  auto request = runtime::parse_job_request(body, extra);
  if (!request.ok()) {
    return refuse(request.status().message(), named_field(request.status().message()));
  }
  auto job = std::make_shared<Job>();
  job->request = body;
  job->options = request->job();
  if (!request->has_seed && (request->sampling.sample || request->variations > 1)) {
    job->options.generation.sampling.seed = random_job_seed();
  }
  if (auto notes = runtime::accept_job_text(&job->options); !notes.ok()) {
    return refuse(notes.status().message(), "prompt");
  }
  if (body.contains("format")) {
    if (!body["format"].is_string()) return refuse("\"format\" must be a string", "format");
    job->format = body["format"].get<std::string>();
    bool known = false;
    for (const char* f : kJobFormats) known |= job->format == f;
    if (!known) return refuse("\"format\" must be one of glb, obj, fbx, stl, 3mf", "format");
  }
  if (Status st = read_export_fields(body, job.get()); !st.ok()) {
    return refuse(st.message(), named_field(st.message()));
  }
  return job;
}

std::optional<Refusal> JobTable::admit(const std::shared_ptr<Job>& job) {
  if (static_cast<int>(queue_.size()) >= limits_.max_queue) {
    return Refusal{429, "the queue is full (" + std::to_string(limits_.max_queue) + " jobs)",
                   "queue"};
  }
  int mine = 0;
  for (uint64_t q : queue_) mine += jobs_.at(q)->client == job->client ? 1 : 0;
  if (mine >= limits_.per_client) {
    return Refusal{429,
                   "this client has " + std::to_string(mine) + " jobs queued (at most " +
                       std::to_string(limits_.per_client) + ")",
                   "client"};
  }
  job->id = ++last_id_;
  job->events.push_back(json{{"type", "queued"}, {"position", queue_.size()}}.dump());
  jobs_[job->id] = job;
  queue_.push_back(job->id);
  std::ofstream(journal_path_, std::ios::app)
      << json{{"id", job->id}, {"request", job->request}, {"pid", ::getpid()}}.dump() << "\n";
  return std::nullopt;
}

std::shared_ptr<Job> JobTable::find(uint64_t id) const {
  const auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

std::shared_ptr<Job> JobTable::start_next() {
  if (queue_.empty()) return nullptr;
  std::shared_ptr<Job> job = jobs_.at(queue_.front());
  queue_.pop_front();
  job->state = JobState::kRunning;
  job->events.push_back(json{{"type", "started"}}.dump());
  return job;
}

bool JobTable::cancel(Job& job) {
  if (job.state == JobState::kQueued) {
    queue_.erase(std::remove(queue_.begin(), queue_.end(), job.id), queue_.end());
    end(job, JobState::kCancelled, "cancelled while queued");
    return false;
  }
  if (job.state == JobState::kRunning) {
    job.cancel_requested = true;
    return true;
  }
  return false;
}

void JobTable::end(Job& job, JobState state, const std::string& error) {
  job.state = state;
  job.error = error;
  json e = {{"type", state_name(state)}};
  if (!error.empty()) e["error"] = error;
  job.events.push_back(e.dump());
  // The previews were for watching it form; the final meshes stay.
  drop_preview_meshes(&job.events);
  journal_ended(job);
  forget_old_jobs();
}

json JobTable::describe(const Job& job) const {
  json files = json::object(), seeds = json::object();
  for (const auto& [c, f] : job.files) {
    files[std::to_string(c)] =
        "/v1/jobs/" + std::to_string(job.id) + "/result?candidate=" + std::to_string(c);
  }
  for (const auto& [c, s] : job.seeds) seeds[std::to_string(c)] = s;
  json j = {{"id", job.id},           {"state", state_name(job.state)},
            {"request", job.request}, {"format", job.format},
            {"results", files},       {"seeds", seeds}};
  if (!job.error.empty()) j["error"] = job.error;
  if (job.state == JobState::kQueued) {
    int position = 0;
    for (uint64_t q : queue_) {
      if (q == job.id) break;
      ++position;
    }
    j["queue_position"] = position;
  }
  return j;
}

json JobTable::describe_all() const {
  json all = json::array();
  for (const auto& [id, job] : jobs_) all.push_back(describe(*job));
  return all;
}

std::map<std::string, int> JobTable::count_by_state() const {
  std::map<std::string, int> by_state;
  for (const char* s : {"queued", "running", "done", "failed", "cancelled"}) by_state[s] = 0;
  for (const auto& [id, job] : jobs_) ++by_state[state_name(job->state)];
  return by_state;
}

void JobTable::forget_old_jobs() {
  size_t ended = 0;
  for (const auto& [id, j] : jobs_) ended += terminal(j->state) ? 1 : 0;
  for (auto it = jobs_.begin(); it != jobs_.end() && ended > kEndedJobsKept;) {
    if (terminal(it->second->state)) {
      it = jobs_.erase(it);
      --ended;
    } else {
      ++it;
    }
  }
}

void JobTable::journal_ended(const Job& job) const {
  bool open = false;  // any job still queued or running
  for (const auto& [id, j] : jobs_) open |= !terminal(j->state);
  if (!open) {
    std::ofstream(journal_path_, std::ios::trunc);  // nothing to report: start afresh
    return;
  }
  std::ofstream(journal_path_, std::ios::app)
      << json{{"ended", job.id}, {"pid", ::getpid()}}.dump() << "\n";
}

void JobTable::report_dropped() const {
  // The journal is this program's own, but a torn write or a hand edit must not stop a start:
  // lines and fields of the wrong form are read past.
  auto number = [](const json& j, const char* key) -> std::optional<uint64_t> {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned()) return std::nullopt;
    return it->get<uint64_t>();
  };
  std::ifstream in(journal_path_);
  std::map<std::string, json> open;
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    const std::string pid = std::to_string(number(j, "pid").value_or(0));
    if (const auto ended = number(j, "ended")) {
      open.erase(pid + ":" + std::to_string(*ended));
    } else if (const auto id = number(j, "id")) {
      open[pid + ":" + std::to_string(*id)] = j;
    }
  }
  for (const auto& [key, j] : open) {
    std::fprintf(stderr,
                 "tessera serve: dropped by the last stop: job %llu (%s); submit it again\n",
                 static_cast<unsigned long long>(j.at("id").get<uint64_t>()),
                 j.value("request", json()).dump().c_str());
  }
  std::error_code ec;
  fs::remove(journal_path_, ec);
}

}  // namespace tessera::serve
