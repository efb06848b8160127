#include "app/serve/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include <nlohmann/json.hpp>

#include "app/serve/event_stream.h"
#include "core/mapped_file.h"
#include "core/png.h"
#include "engine/runtime/export_asset.h"
#include "engine/runtime/models.h"
#include "engine/runtime/provenance.h"

namespace tessera::serve {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The message of an error the HTTP library answers by itself, with the field or limit at fault.
Refusal library_refusal(int status) {
  switch (status) {
    case 413:
      return {413, "the body is larger than " + std::to_string(kMaxBody >> 20) + " MiB", "body"};
    case 414:
      return {414, "the request's path is too long", "path"};
    case 404:
      return {404, "no such path (the paths are in docs/serve-openapi.json)", "path"};
    case 405:
      return {405, "this path does not take that method", "method"};
    default:
      return {status, "the request could not be read (HTTP " + std::to_string(status) + ")", ""};
  }
}

void answer(httplib::Response& res, const Refusal& r) {
  res.status = r.status;
  res.set_content(error_json(r), "application/json");
}

}  // namespace

struct Server::State {
  State(ServerOptions o, std::unique_ptr<runtime::Session> s)
      : options(std::move(o)),
        session(std::move(s)),
        table(options.limits, (fs::path(options.out) / "jobs.jsonl").string()) {}

  ServerOptions options;
  std::unique_ptr<runtime::Session> session;
  httplib::Server http;
  std::string token;
  int listen_socket = -1;  // the bound socket (its backlog is deepened after the bind)
  // Names this start's files apart from an earlier start's (ids begin at 1 again).
  const std::string start_tag = [] {
    char buffer[32];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    std::strftime(buffer, sizeof(buffer), "%Y%m%d-%H%M%S", &tm);
    return std::string(buffer) + "-" + std::to_string(::getpid());
  }();

  std::mutex mutex;  // guards everything below and every Job
  std::condition_variable wake;
  JobTable table;
  std::optional<std::string> pending_load;  // a model to load before the next job
  bool loading = false;
  std::string loading_name, load_error;
  double last_tpot_ms = 0;
  bool stopping = false;
  std::thread worker;

  // ---- routing -----------------------------------------------------------------------------
  void routes();
  std::shared_ptr<Job> find(const httplib::Request& req, httplib::Response& res);
  void models(httplib::Response& res);
  void load(const httplib::Request& req, httplib::Response& res);
  void submit(const httplib::Request& req, httplib::Response& res);
  void cancel(const httplib::Request& req, httplib::Response& res);
  void events(const httplib::Request& req, httplib::Response& res);
  void result(const httplib::Request& req, httplib::Response& res);
  std::string metrics();

  // ---- the worker --------------------------------------------------------------------------
  void work();
  void load_model(const std::string& model);
  void run_job(Job& job);
  bool start_image_lane_job(Job& job);
  void run_on_image_lane(Job& job, const std::function<uint64_t()>& submit,
                         const std::function<std::optional<json>(const runtime::Event&)>& translate,
                         const std::function<std::string()>& finish);
  void run_image_job(Job& job);
  void run_paint_job(Job& job);
  json painted_mesh(Job& job, const runtime::PaintedMeshEvent& r);
  // The image model for image jobs: the default one, loaded before the first of them.
  Status ensure_image_model();
  json final_mesh(Job& job, const runtime::FinalMeshEvent& f);
  json final_image(Job& job, const runtime::ImageEvent& r);
  void stop_worker();
};

void Server::State::routes() {
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  http.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = session->shape_model().has_value();
    res.status = ready ? 200 : 503;
    res.set_content(json{{"ready", ready}}.dump(), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics(), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { models(res); });
  http.Post("/v1/models/load",
            [this](const httplib::Request& req, httplib::Response& res) { load(req, res); });
  http.Post("/v1/jobs",
            [this](const httplib::Request& req, httplib::Response& res) { submit(req, res); });
  http.Get("/v1/jobs", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mutex);
    res.set_content(table.describe_all().dump(), "application/json");
  });
  http.Get(R"(/v1/jobs/(\d+))", [this](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mutex);
    const auto job = find(req, res);
    if (job) res.set_content(table.describe(*job).dump(), "application/json");
  });
  http.Post(R"(/v1/jobs/(\d+)/cancel)",
            [this](const httplib::Request& req, httplib::Response& res) { cancel(req, res); });
  http.Get(R"(/v1/jobs/(\d+)/events)",
           [this](const httplib::Request& req, httplib::Response& res) { events(req, res); });
  http.Get(R"(/v1/jobs/(\d+)/result)",
           [this](const httplib::Request& req, httplib::Response& res) { result(req, res); });
}

// Under mutex. The job named by the path, or a 404 with a JSON error.
std::shared_ptr<Job> Server::State::find(const httplib::Request& req, httplib::Response& res) {
  uint64_t id = 0;
  try {
    id = std::stoull(req.matches[1].str());
  } catch (const std::exception&) {
  }
  std::shared_ptr<Job> job = table.find(id);
  if (!job) answer(res, Refusal{404, "no job " + req.matches[1].str(), "id"});
  return job;
}

void Server::State::models(httplib::Response& res) {
  json known = json::array();
  for (const runtime::KnownModel& m : runtime::known_models()) {
    known.push_back({{"name", m.name}, {"kind", runtime::model_kind_name(m.kind)}});
  }
  json loaded = nullptr;
  if (auto info = session->shape_model()) {
    loaded = {{"path", info->path},
              {"backend", info->backend},
              {"tokens", info->num_latents},
              {"weights", info->weights}};
  }
  json reply = {{"loaded", loaded}, {"known", known}};
  std::lock_guard<std::mutex> lock(mutex);
  if (pending_load || loading) reply["loading"] = pending_load.value_or(loading_name);
  if (!load_error.empty()) reply["load_error"] = load_error;
  res.set_content(reply.dump(), "application/json");
}

void Server::State::load(const httplib::Request& req, httplib::Response& res) {
  const json body = json::parse(req.body, nullptr, false);
  if (!body.is_object()) return answer(res, {400, "the body must be a JSON object", ""});
  for (const auto& [key, value] : body.items()) {
    if (key != "model")
      return answer(res, {400, "unknown key \"" + key + "\" (known: model)", key});
  }
  if (!body.contains("model") || !body["model"].is_string() ||
      body["model"].get<std::string>().empty()) {
    return answer(res, {400, "\"model\" (a model name or folder) is required", "model"});
  }
  std::lock_guard<std::mutex> lock(mutex);
  pending_load = body["model"].get<std::string>();
  load_error.clear();
  wake.notify_all();
  res.status = 202;
  res.set_content(json{{"loading", *pending_load}}.dump(), "application/json");
}

void Server::State::submit(const httplib::Request& req, httplib::Response& res) {
  Refusal refusal;
  std::shared_ptr<Job> job = parse_job(req.body, &refusal);
  if (!job) return answer(res, refusal);
  job->client = req.remote_addr;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto refused = table.admit(job)) return answer(res, *refused);
  wake.notify_all();
  res.status = 202;
  res.set_content(table.describe(*job).dump(), "application/json");
}

void Server::State::cancel(const httplib::Request& req, httplib::Response& res) {
  std::lock_guard<std::mutex> lock(mutex);
  const auto job = find(req, res);
  if (!job) return;
  if (table.cancel(*job)) {
    session->cancel(job->lane());
  }
  wake.notify_all();
  res.set_content(table.describe(*job).dump(), "application/json");
}

void Server::State::events(const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mutex);
    job = find(req, res);
  }
  if (!job) return;
  res.set_header("Cache-Control", "no-cache");
  auto sent = std::make_shared<size_t>(0);
  res.set_chunked_content_provider(
      "text/event-stream", [this, job, sent](size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> lock(mutex);
        // Waits for news, looking up now and then for a client that went away.
        wake.wait_for(lock, std::chrono::milliseconds(500),
                      [&] { return *sent < job->events.size() || stopping; });
        const std::string chunk = sse_frames(job->events, sent.get());
        const bool finished = terminal(job->state) || stopping;
        lock.unlock();
        if (!sink.write(chunk.data(), chunk.size())) return false;
        if (finished) sink.done();
        return sink.is_writable() || finished;
      });
}

void Server::State::result(const httplib::Request& req, httplib::Response& res) {
  std::string file;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto job = find(req, res);
    if (!job) return;
    int candidate = 0;
    if (req.has_param("candidate")) {
      try {
        candidate = std::stoi(req.get_param_value("candidate"));
      } catch (const std::exception&) {
        candidate = -1;
      }
    }
    const auto it = job->files.find(candidate);
    if (it == job->files.end()) {
      if (job->state == JobState::kDone || candidate < 0) {
        return answer(res, {404, "no such candidate", "candidate"});
      }
      return answer(res,
                    {409, "not finished yet (state " + std::string(state_name(job->state)) + ")",
                     "candidate"});
    }
    file = it->second;
  }
  auto bytes = read_file(file);
  if (!bytes.ok()) return answer(res, {500, bytes.status().message(), ""});
  res.set_header("Content-Disposition",
                 "attachment; filename=\"" + fs::path(file).filename().string() + "\"");
  res.set_content(*bytes, "application/octet-stream");
}

std::string Server::State::metrics() {
  std::lock_guard<std::mutex> lock(mutex);
  std::string out =
      "# HELP tessera_jobs Jobs by state since the server started.\n"
      "# TYPE tessera_jobs gauge\n";
  for (const auto& [s, n] : table.count_by_state()) {
    out += "tessera_jobs{state=\"" + s + "\"} " + std::to_string(n) + "\n";
  }
  out += "# HELP tessera_queue_length Jobs waiting.\n# TYPE tessera_queue_length gauge\n";
  out += "tessera_queue_length " + std::to_string(table.queue_length()) + "\n";
  out +=
      "# HELP tessera_tpot_ms Mean time per output token of the last finished job.\n"
      "# TYPE tessera_tpot_ms gauge\n";
  out += "tessera_tpot_ms " + std::to_string(last_tpot_ms) + "\n";
  const auto model = session->shape_model();
  const runtime::MemoryUse memory = runtime::memory_use(model && model->on_gpu);
  out +=
      "# HELP tessera_resident_bytes The process's resident memory.\n"
      "# TYPE tessera_resident_bytes gauge\n";
  out += "tessera_resident_bytes " + std::to_string(memory.resident_bytes) + "\n";
  if (memory.device_used_bytes >= 0) {
    out +=
        "# HELP tessera_device_used_bytes Device memory in use (all processes).\n"
        "# TYPE tessera_device_used_bytes gauge\n";
    out += "tessera_device_used_bytes " + std::to_string(memory.device_used_bytes) + "\n";
    out += "tessera_device_total_bytes " + std::to_string(memory.device_total_bytes) + "\n";
  }
  return out;
}

// The worker: one job at a time through the Session, its events recorded for the streams.
void Server::State::work() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || table.has_queued() || pending_load; });
      if (stopping) return;
      if (pending_load) {
        // A model load runs between two jobs; the jobs queued meanwhile wait for it.
        loading_name = *pending_load;
        pending_load.reset();
        loading = true;
        lock.unlock();
        load_model(loading_name);
        continue;
      }
      job = table.start_next();
      wake.notify_all();
    }
    run_job(*job);
  }
}

void Server::State::load_model(const std::string& model) {
  runtime::ShapeModelOptions load =
      cli::shape_model_options(model, options.weights, options.device);
  const runtime::Event end = session->wait_for(session->load_shape_model(load));
  std::lock_guard<std::mutex> lock(mutex);
  loading = false;
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&end.payload)) {
    load_error = model + ": " + e->status.message();
  } else if (!std::holds_alternative<runtime::DoneEvent>(end.payload)) {
    load_error = model + ": the load was cancelled";
  }
  wake.notify_all();
}

Status Server::State::ensure_image_model() {
  if (session->image_model()) return Status();
  runtime::ImageModelOptions load;
  load.device = options.device.choice();
  const runtime::Event end = session->wait_for(session->load_image_model(load));
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&end.payload)) return e->status;
  if (!std::holds_alternative<runtime::DoneEvent>(end.payload)) {
    return cancelled("the image model load was cancelled");
  }
  return Status();
}

// The image model loaded for an image or paint job (said in its stream while it loads); false when
// the job has ended (the model failed, or it was cancelled meanwhile).
bool Server::State::start_image_lane_job(Job& job) {
  if (!session->image_model()) {
    std::lock_guard<std::mutex> lock(mutex);
    job.events.push_back(json{{"type", "stage"}, {"name", "loading the image model"}}.dump());
    wake.notify_all();
  }
  Status st = ensure_image_model();
  std::lock_guard<std::mutex> lock(mutex);
  if (!st.ok()) {
    table.end(job, JobState::kFailed, "image model: " + st.message());
  } else if (job.cancel_requested || stopping) {
    table.end(job, JobState::kCancelled, "cancelled");
  } else {
    return true;
  }
  wake.notify_all();
  return false;
}

// An image-lane job (image or paint): the image model loaded, `submit` called, a cancel asked
// meanwhile passed on, every event `translate` turns into JSON added to the stream, then `finish`
// (which gives the error that fails a job whose run finished, or "") and the job's end by its
// last event.
void Server::State::run_on_image_lane(
    Job& job, const std::function<uint64_t()>& submit,
    const std::function<std::optional<json>(const runtime::Event&)>& translate,
    const std::function<std::string()>& finish) {
  if (!start_image_lane_job(job)) return;
  const uint64_t submitted = submit();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (job.cancel_requested || stopping) session->cancel(runtime::Lane::kImage);
  }
  const runtime::Event last = session->wait_for(submitted, [&](const runtime::Event& e) {
    std::optional<json> ev = translate(e);
    if (!ev) return;
    std::lock_guard<std::mutex> lock(mutex);
    job.events.push_back(ev->dump());
    wake.notify_all();
  });
  const std::string finish_error = finish();
  std::lock_guard<std::mutex> lock(mutex);
  if (std::holds_alternative<runtime::DoneEvent>(last.payload)) {
    table.end(job, finish_error.empty() ? JobState::kDone : JobState::kFailed, finish_error);
  } else if (const auto* err = std::get_if<runtime::ErrorEvent>(&last.payload)) {
    table.end(job, JobState::kFailed, err->status.message());
  } else {
    table.end(job, JobState::kCancelled, "cancelled");
  }
  wake.notify_all();
}

void Server::State::run_image_job(Job& job) {
  run_on_image_lane(
      job, [&] { return session->submit_image(*job.image); },
      [&](const runtime::Event& e) {
        std::optional<json> ev;
        if (const auto* s = std::get_if<runtime::ImageStepEvent>(&e.payload)) {
          ev = json{{"type", "step"},
                    {"step", s->step},
                    {"steps", s->steps},
                    {"sigma", s->sigma},
                    {"ms", s->ms}};
        } else if (const auto* stage = std::get_if<runtime::StageEvent>(&e.payload)) {
          ev = json{{"type", "stage"}, {"name", stage->name}, {"ms", stage->ms}};
        } else if (const auto* r = std::get_if<runtime::ImageEvent>(&e.payload)) {
          ev = final_image(job, *r);
        }
        return ev;
      },
      [] { return std::string(); });
}

// Writes the image under --out as a PNG with its settings, and says where to fetch it.
json Server::State::final_image(Job& job, const runtime::ImageEvent& r) {
  const std::string file =
      (fs::path(options.out) / (start_tag + "-job" + std::to_string(job.id) + ".png")).string();
  runtime::ImageProvenance provenance =
      runtime::image_provenance(*job.image, r, session->image_model());
  provenance.init_name = provenance.mask_name = provenance.control_name = "request";
  auto png = runtime::image_png(r, provenance);
  const Status written =
      png.ok() ? write_file_atomic(file, png->data(), png->size()) : png.status();
  json ev = {{"type", "image"},
             {"seed", r.seed},
             {"width", r.image->width},
             {"height", r.image->height},
             {"steps_run", r.steps_run},
             {"notes", r.notes},
             {"ms",
              {{"text", r.text_ms},
               {"encode", r.encode_ms},
               {"denoise", r.denoise_ms},
               {"vae", r.vae_ms}}}};
  std::lock_guard<std::mutex> lock(mutex);
  job.seeds[0] = r.seed;
  if (written.ok()) {
    job.files[0] = file;
    ev["result"] = "/v1/jobs/" + std::to_string(job.id) + "/result?candidate=0";
  } else {
    ev["error"] = written.message();
  }
  return ev;
}

// A paint job: the image model (loaded before the first), an event per view, the painted mesh
// written under --out through the export every front end shares.
void Server::State::run_paint_job(Job& job) {
  bool written = false;
  std::string write_error = "the painted mesh was not written";
  run_on_image_lane(
      job, [&] { return session->submit_paint(*job.paint); },
      [&](const runtime::Event& e) {
        std::optional<json> ev;
        if (const auto* s = std::get_if<runtime::ImageStepEvent>(&e.payload)) {
          ev = json{{"type", "step"}, {"step", s->step}, {"steps", s->steps}, {"ms", s->ms}};
        } else if (const auto* stage = std::get_if<runtime::StageEvent>(&e.payload)) {
          ev = json{{"type", "stage"}, {"name", stage->name}, {"ms", stage->ms}};
        } else if (const auto* v = std::get_if<runtime::PaintViewEvent>(&e.payload)) {
          ev = json{{"type", "view"},
                    {"view", v->view},
                    {"views", v->views},
                    {"name", v->name},
                    {"generated", v->generated_share},
                    {"ms",
                     {{"render", v->render_ms},
                      {"generate", v->generate_ms},
                      {"bake", v->bake_ms},
                      {"fill", v->fill_ms}}}};
        } else if (const auto* r = std::get_if<runtime::PaintedMeshEvent>(&e.payload)) {
          ev = painted_mesh(job, *r);
          written = !ev->contains("error");
          if (!written) write_error = (*ev)["error"].get<std::string>();
        }
        return ev;
      },
      [&] {
        std::lock_guard<std::mutex> lock(mutex);
        job.paint->mesh.reset();  // an ended job keeps its request, not the mesh it was sent
        return written ? std::string() : write_error;
      });
}

// Writes the painted mesh under --out (the job's format and export fields, the "paint" record as
// its settings) and says where to fetch it, with the paint's measures.
json Server::State::painted_mesh(Job& job, const runtime::PaintedMeshEvent& r) {
  const std::string file =
      (fs::path(options.out) / (start_tag + "-job" + std::to_string(job.id) + "-0." + job.format))
          .string();
  nlohmann::json settings = {
      {"paint",
       runtime::paint_settings_json(*job.paint, session->image_model(), r.view_size, r.new_atlas)}};
  auto export_options = cli::to_export_options(job.exporting, file);
  // The client fetches one file: an FBX keeps its texture inside only.
  if (export_options.ok()) export_options->texture_beside = false;
  auto request = export_options.ok()
                     ? cli::cli_asset_export(*export_options, job.exporting, nullptr, settings)
                     : Expected<runtime::AssetExport>(export_options.status());
  Expected<mesh::AssetReport> written = request.ok()
                                            ? runtime::export_asset(*r.mesh, file, *request)
                                            : Expected<mesh::AssetReport>(request.status());
  json agreement = json::object();
  for (size_t i = 0; i < r.agreement_db.size(); ++i) agreement[r.view_names[i]] = r.agreement_db[i];
  // The texture as written (a preset's limit may have shrunk it).
  const int64_t texture_w = written.ok() ? written->texture_width : r.mesh->texture.width;
  const int64_t texture_h = written.ok() ? written->texture_height : r.mesh->texture.height;
  json ev = {{"type", "painted"},
             {"vertices", r.mesh->vertex_count()},
             {"triangles", r.mesh->triangle_count()},
             {"texture", {texture_w, texture_h}},
             {"new_atlas", r.new_atlas},
             {"coverage", r.coverage},
             {"seam_error", {{"mean", r.seam_mean}, {"p95", r.seam_p95}}},
             {"agreement_db", agreement},
             {"notes", r.notes}};
  std::lock_guard<std::mutex> lock(mutex);
  job.seeds[0] = job.paint->image.seed;
  if (written.ok()) {
    job.files[0] = file;
    ev["result"] = "/v1/jobs/" + std::to_string(job.id) + "/result?candidate=0";
  } else {
    ev["error"] = written.status().message();
  }
  return ev;
}

void Server::State::run_job(Job& job) {
  if (job.image) return run_image_job(job);
  if (job.paint) return run_paint_job(job);
  runtime::JobOptions job_options = job.options;
  job_options.preview_every = 8;
  double token_ms = 0;
  int64_t steps = 0;
  const uint64_t submitted = session->submit(job_options);
  {
    // A cancel that came between "running" and the submit.
    std::lock_guard<std::mutex> lock(mutex);
    if (job.cancel_requested || stopping) session->cancel(runtime::Lane::kShape);
  }
  const runtime::Event last = session->wait_for(submitted, [&](const runtime::Event& e) {
    std::optional<json> ev = progress_event(e);
    if (const auto* t = std::get_if<runtime::TokenEvent>(&e.payload)) {
      if (t->candidate == 0 && t->index > 0) token_ms += t->ms, ++steps;
    } else if (const auto* f = std::get_if<runtime::FinalMeshEvent>(&e.payload)) {
      ev = final_mesh(job, *f);
    }
    if (!ev) return;
    std::lock_guard<std::mutex> lock(mutex);
    job.events.push_back(ev->dump());
    wake.notify_all();
  });
  std::lock_guard<std::mutex> lock(mutex);
  last_tpot_ms = steps > 0 ? token_ms / static_cast<double>(steps) : 0.0;
  if (std::holds_alternative<runtime::DoneEvent>(last.payload)) {
    table.end(job, JobState::kDone, "");
  } else if (const auto* err = std::get_if<runtime::ErrorEvent>(&last.payload)) {
    table.end(job, JobState::kFailed, err->status.message());
  } else {
    table.end(job, JobState::kCancelled, "cancelled");
  }
  wake.notify_all();
}

// Writes candidate f's mesh under --out (a name the server makes) and says where to fetch it.
json Server::State::final_mesh(Job& job, const runtime::FinalMeshEvent& f) {
  const std::string file =
      (fs::path(options.out) / (start_tag + "-job" + std::to_string(job.id) + "-" +
                                std::to_string(f.candidate) + "." + job.format))
          .string();
  nlohmann::json settings;
  if (auto model = session->shape_model()) {
    if (auto identity = runtime::model_identity(*model); identity.ok()) {
      settings = runtime::shape_settings_json(job.options, f.seed, f.resolution, identity->name,
                                              identity->gpt_sha256);
    }
  }
  // The command line's export, with the job's preset, size, pivot and budget (checked at submit).
  Expected<mesh::AssetReport> written = internal_error("not written");
  auto export_options = cli::to_export_options(job.exporting, file);
  // The client fetches one file: an FBX keeps its texture inside only.
  if (export_options.ok()) export_options->texture_beside = false;
  auto request = export_options.ok()
                     ? cli::cli_asset_export(*export_options, job.exporting, nullptr, settings)
                     : Expected<runtime::AssetExport>(export_options.status());
  written = request.ok() ? runtime::export_asset(*f.mesh, file, *request)
                         : Expected<mesh::AssetReport>(request.status());
  json ev = {{"type", "mesh"},
             {"candidate", f.candidate},
             {"seed", f.seed},
             {"vertices", f.mesh->vertex_count()},
             {"triangles", f.mesh->triangle_count()},
             {"mesh", compact_mesh(*f.mesh)}};
  std::lock_guard<std::mutex> lock(mutex);
  job.seeds[f.candidate] = f.seed;
  if (written.ok()) {
    job.files[f.candidate] = file;
    ev["result"] =
        "/v1/jobs/" + std::to_string(job.id) + "/result?candidate=" + std::to_string(f.candidate);
  } else {
    ev["error"] = written.status().message();
  }
  return ev;
}

void Server::State::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
    wake.notify_all();
  }
  session->cancel();
  if (worker.joinable()) worker.join();
}

Server::Server(ServerOptions options, std::unique_ptr<runtime::Session> session)
    : state_(std::make_unique<State>(std::move(options), std::move(session))) {}

Server::~Server() {
  state_->stop_worker();
}

int Server::run() {
  State& s = *state_;
  const ServerOptions& o = s.options;
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "tessera serve: %s\n", message.c_str());
    return 1;
  };
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) return fail("--out " + o.out + ": " + ec.message());
  s.table.report_dropped();
  if (!is_loopback(o.listen.host)) {
    auto token = server_token();
    if (!token.ok()) return fail(token.status().message());
    s.token = *token;
  }
  s.http.set_payload_max_length(kMaxBody);
  s.http.set_read_timeout(5, 0);
  s.http.set_write_timeout(5, 0);
  s.http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!s.options.cors.empty()) res.set_header("Access-Control-Allow-Origin", s.options.cors);
    const RequestFacts facts{req.method, req.path, req.get_header_value("Origin"),
                             req.get_header_value("Host"), req.get_header_value("Authorization")};
    const GateAnswer verdict = gate(facts, GateOptions{s.options.cors, s.token});
    switch (verdict.kind) {
      case GateAnswer::Kind::kPass:
        return httplib::Server::HandlerResponse::Unhandled;
      case GateAnswer::Kind::kPreflight:  // a browser's preflight for the --cors origin
        res.set_header("Access-Control-Allow-Methods", "GET, POST");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      case GateAnswer::Kind::kRefuse:
        break;
    }
    answer(res, verdict.refusal);
    return httplib::Server::HandlerResponse::Handled;
  });
  // The library's own errors (a body over the limit, an unknown path) in the one JSON form.
  // (Typed: cpp-httplib 0.11 overloads set_error_handler for handlers with and without a result.)
  const httplib::Server::HandlerWithResponse library_errors = [](const httplib::Request&,
                                                                 httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    answer(res, library_refusal(res.status));
    return httplib::Server::HandlerResponse::Handled;
  };
  s.http.set_error_handler(library_errors);
  s.routes();
  // Event streams hold a thread each for as long as their job runs: room for many of them.
  s.http.new_task_queue = [] { return new httplib::ThreadPool(64); };
  // cpp-httplib listens with a backlog of 5: many clients connecting at once (a pipeline, a busy
  // machine) overflow it and some find their connection reset. The listening socket is kept, and
  // listen() is called again with a deeper queue once it is bound.
  s.http.set_socket_options([&s](socket_t sock) {
    httplib::default_socket_options(sock);
    s.listen_socket = sock;
  });
  s.worker = std::thread([&s] { s.work(); });
  int port = o.listen.port;
  if (port == 0) {
    port = s.http.bind_to_any_port(o.listen.host.c_str());
  } else if (!s.http.bind_to_port(o.listen.host.c_str(), port)) {
    port = -1;
  }
  if (port >= 0 && s.listen_socket >= 0) ::listen(s.listen_socket, 1024);
  if (port < 0) {
    s.stop_worker();
    return fail("cannot listen on " + o.listen.url_host() + ":" + std::to_string(o.listen.port));
  }
  std::printf("tessera serve: listening on http://%s:%d (%s)\n", o.listen.url_host().c_str(), port,
              s.token.empty() ? "loopback, no token" : "bearer token required");
  std::fflush(stdout);
  s.http.listen_after_bind();
  s.stop_worker();
  return 0;
}

}  // namespace tessera::serve
