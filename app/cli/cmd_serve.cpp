// tessera serve: one process holds the shape model (loaded once, through the runtime's Session) and
// serves an HTTP/JSON API (docs/serve.md; the OpenAPI document docs/serve-openapi.json):
//
//   tessera serve [--model M] [--port 8590] [--listen ADDR] [--out DIR] [--max-queue N]
//                 [--per-client N] [--cors ORIGIN] [--device ...] [--weights ...] [--threads N]
//
//   GET  /healthz, /readyz            the process lives; the model is loaded (503 until it is)
//   GET  /metrics                     Prometheus text: jobs by state, queue length, TPOT, memory
//   GET  /v1/models                   the loaded model, the models known by name, a load under way
//   POST /v1/models/load              {"model": NAME or folder}: loaded between two jobs -> 202
//   POST /v1/jobs                     a job (runtime/job_request.h's JSON, plus "format") -> 202
//   GET  /v1/jobs, /v1/jobs/ID        every job / one job: state, seeds, files, error
//   POST /v1/jobs/ID/cancel           a queued job leaves the queue, a running one stops
//   GET  /v1/jobs/ID/events           Server-Sent Events: every token, stage, preview mesh, final
//                                     mesh and the end, from the job's start (a late client misses
//                                     nothing)
//   GET  /v1/jobs/ID/result?candidate=I   the finished mesh file
//
// Safe by default: 127.0.0.1 only; --listen ADDR (any other address) requires the bearer token
// kept in XDG_CONFIG_HOME/tessera/serve-token (made on first use, mode 0600) on every request but
// /healthz and /readyz. No CORS unless --cors ORIGIN. Bodies over 64 KiB, prompts over the
// product's limit, a full queue or too many jobs of one client are refused with a 4xx and a JSON
// error naming the field or the limit. Output files only ever go to --out under names the server
// makes. Jobs run one after the other on the one Session (the variations of a job decode
// together); a restart drops what was queued, and the next start says which jobs were dropped
// (--out/jobs.jsonl holds the accepted ones until they end).
#include <httplib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/shape_cli.h"
#include "engine/core/mapped_file.h"
#include "engine/runtime/export_asset.h"
#include "engine/runtime/job_request.h"
#include "engine/runtime/models.h"
#include "engine/runtime/provenance.h"
#include "engine/runtime/session.h"
#include "engine/runtime/user_dirs.h"
#include "engine/runtime/user_text.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxBody = 64 * 1024;
constexpr const char* kFormats[] = {"glb", "obj", "fbx", "stl", "3mf"};
// The export fields a job may carry besides runtime/job_request.h's, as the command line takes
// them.
const std::set<std::string>& export_keys() {
  static const std::set<std::string> kKeys = {"format", "preset",  "height", "size",
                                              "pivot",  "up_axis", "unit",   "max_faces"};
  return kKeys;
}

struct ServeCliOptions {
  std::string model;
  std::string weights;
  DeviceCli device;
  int port = 8590;
  std::string listen = "127.0.0.1";
  std::string out;
  int max_queue = 64;
  int per_client = 8;
  std::string cors;
};

enum class State { kQueued, kRunning, kDone, kFailed, kCancelled };
const char* state_name(State s) {
  switch (s) {
    case State::kQueued:
      return "queued";
    case State::kRunning:
      return "running";
    case State::kDone:
      return "done";
    case State::kFailed:
      return "failed";
    case State::kCancelled:
      return "cancelled";
  }
  return "?";
}
bool terminal(State s) {
  return s == State::kDone || s == State::kFailed || s == State::kCancelled;
}

struct Job {
  uint64_t id = 0;
  std::string client;
  json request;  // as accepted
  runtime::JobOptions options;
  std::string format = "glb";
  MeshExportCli exporting;  // preset, size or height, pivot, axes, unit, budget
  State state = State::kQueued;
  std::string error;
  std::vector<std::string> events;   // SSE data lines (JSON), in order
  std::map<int, std::string> files;  // candidate -> file under --out
  std::map<int, uint64_t> seeds;
  double tpot_ms = 0;
  bool cancel_requested = false;  // asked while running: applied as soon as the Session has it
};

// Ended jobs kept for GET /v1/jobs and late streams; older ones are forgotten (their files stay).
constexpr size_t kEndedJobsKept = 256;

std::string base64(const std::string& bytes) {
  static const char* kTable = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kTable[(v >> s) & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kTable[(v >> 18) & 63];
    out += kTable[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kTable[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// A mesh for the event stream, compact: "TSM1", uint32 vertex and triangle counts, float32 xyz per
// vertex, uint32 indices per triangle (little-endian), base64 in the event's JSON.
std::string compact_mesh(const mesh::Mesh& m) {
  std::string bytes = "TSM1";
  auto put32 = [&](uint32_t v) { bytes.append(reinterpret_cast<const char*>(&v), 4); };
  put32(static_cast<uint32_t>(m.vertex_count()));
  put32(static_cast<uint32_t>(m.triangle_count()));
  bytes.append(reinterpret_cast<const char*>(m.positions.data()), m.positions.size() * 4);
  bytes.append(reinterpret_cast<const char*>(m.triangles.data()), m.triangles.size() * 4);
  return base64(bytes);
}

std::string error_json(const std::string& message, const std::string& field = "") {
  json j = {{"error", message}};
  if (!field.empty()) j["field"] = field;
  return j.dump();
}

// The bearer token for non-loopback listening: XDG_CONFIG_HOME/tessera/serve-token, made once.
Expected<std::string> server_token() {
  const fs::path dir = runtime::user_config_dir();
  const fs::path file = dir / "serve-token";
  std::ifstream in(file);
  std::string token;
  if (in >> token && token.size() >= 32) {
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      return invalid_argument("the server token " + file.string() +
                              " can be read by other users: chmod 600 it");
    }
    return token;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  token.clear();
  for (int i = 0; i < 48; ++i) token += kHex[rd() & 15];
  const std::string text = token + "\n";
  const mode_t old_mask = ::umask(077);  // never readable by others, not even for a moment
  const Status written = write_file_atomic(file.string(), text.data(), text.size());
  ::umask(old_mask);
  if (!written.ok())
    return io_error("the server token " + file.string() + ": " + written.message());
  std::fprintf(stderr, "tessera serve: a new token was written to %s\n", file.c_str());
  return token;
}

class Server {
 public:
  Server(const ServeCliOptions& o, runtime::ShapeWeights weights,
         std::unique_ptr<runtime::Session> session)
      : o_(o), weights_(weights), session_(std::move(session)) {}

  int run() {
    std::error_code ec;
    fs::create_directories(o_.out, ec);
    if (ec) return fail("--out " + o_.out + ": " + ec.message());
    report_dropped();
    const bool loopback =
        o_.listen == "127.0.0.1" || o_.listen == "::1" || o_.listen == "localhost";
    if (!loopback) {
      auto token = server_token();
      if (!token.ok()) return fail(token.status().message());
      token_ = *token;
    }
    http_.set_payload_max_length(kMaxBody);
    http_.set_read_timeout(5, 0);
    http_.set_write_timeout(5, 0);
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!o_.cors.empty()) res.set_header("Access-Control-Allow-Origin", o_.cors);
      auto refuse = [&](int status, const std::string& message, const std::string& field) {
        res.status = status;
        res.set_content(error_json(message, field), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      };
      // Web pages: one on another site must not drive the server (a form post, a rebound DNS
      // name): a browser's Origin must be the --cors one, and without a token the Host must be a
      // loopback name.
      const std::string origin = req.get_header_value("Origin");
      if (!origin.empty() && origin != o_.cors) {
        return refuse(
            403,
            "requests from web pages are refused (origin " + origin + "; allow one with --cors)",
            "Origin");
      }
      if (req.method == "OPTIONS") {  // a browser's preflight for the --cors origin
        res.set_header("Access-Control-Allow-Methods", "GET, POST");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
      if (token_.empty()) {
        std::string host = req.get_header_value("Host");
        if (const size_t colon = host.rfind(':');
            colon != std::string::npos && host.find(']') == std::string::npos) {
          host.resize(colon);
        } else if (host.rfind("]:") != std::string::npos) {
          host.resize(host.rfind("]:") + 1);
        }
        if (host != "127.0.0.1" && host != "localhost" && host != "[::1]") {
          return refuse(403, "Host " + host + " is not this machine's loopback", "Host");
        }
      }
      if (token_.empty() || req.path == "/healthz" || req.path == "/readyz") {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      if (req.get_header_value("Authorization") != "Bearer " + token_) {
        res.status = 401;
        res.set_content(error_json("a bearer token is required (Authorization: Bearer <the token "
                                   "in the server's serve-token file>)"),
                        "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    routes();
    // Event streams hold a thread each for as long as their job runs: room for many of them.
    http_.new_task_queue = [] { return new httplib::ThreadPool(64); };
    // cpp-httplib listens with a backlog of 5: many clients connecting at once (a pipeline, a
    // busy machine) overflow it and some find their connection reset. The listening socket is
    // kept, and listen() is called again with a deeper queue once it is bound.
    http_.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_socket_ = sock;
    });
    worker_ = std::thread([this] { work(); });
    int port = o_.port;
    if (port == 0) {
      port = http_.bind_to_any_port(o_.listen.c_str());
    } else if (!http_.bind_to_port(o_.listen.c_str(), port)) {
      port = -1;
    }
    if (port >= 0 && listen_socket_ >= 0) ::listen(listen_socket_, 1024);
    if (port < 0) {
      stop_worker();
      return fail("cannot listen on " + o_.listen + ":" + std::to_string(o_.port));
    }
    std::printf("tessera serve: listening on http://%s:%d (%s)\n", o_.listen.c_str(), port,
                token_.empty() ? "loopback, no token" : "bearer token required");
    std::fflush(stdout);
    http_.listen_after_bind();
    stop_worker();
    return 0;
  }

 private:
  int fail(const std::string& message) {
    std::fprintf(stderr, "tessera serve: %s\n", message.c_str());
    return 1;
  }

  void routes() {
    http_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    http_.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      const bool ready = session_->shape_model().has_value();
      res.status = ready ? 200 : 503;
      res.set_content(json{{"ready", ready}}.dump(), "application/json");
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json known = json::array();
      for (const runtime::KnownModel& m : runtime::known_models()) {
        known.push_back({{"name", m.name}, {"kind", runtime::model_kind_name(m.kind)}});
      }
      json loaded = nullptr;
      if (auto info = session_->shape_model()) {
        loaded = {{"path", info->path},
                  {"backend", info->backend},
                  {"tokens", info->num_latents},
                  {"weights", info->weights}};
      }
      json answer = {{"loaded", loaded}, {"known", known}};
      std::lock_guard<std::mutex> lock(mutex_);
      if (pending_load_ || loading_) answer["loading"] = pending_load_.value_or(loading_name_);
      if (!load_error_.empty()) answer["load_error"] = load_error_;
      res.set_content(answer.dump(), "application/json");
    });
    http_.Post("/v1/models/load",
               [this](const httplib::Request& req, httplib::Response& res) { load(req, res); });
    http_.Post("/v1/jobs",
               [this](const httplib::Request& req, httplib::Response& res) { submit(req, res); });
    http_.Get("/v1/jobs", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mutex_);
      json all = json::array();
      for (const auto& [id, job] : jobs_) all.push_back(describe(*job));
      res.set_content(all.dump(), "application/json");
    });
    http_.Get(R"(/v1/jobs/(\d+))", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto job = find(req, res);
      if (job) res.set_content(describe(*job).dump(), "application/json");
    });
    http_.Post(R"(/v1/jobs/(\d+)/cancel)",
               [this](const httplib::Request& req, httplib::Response& res) { cancel(req, res); });
    http_.Get(R"(/v1/jobs/(\d+)/events)",
              [this](const httplib::Request& req, httplib::Response& res) { events(req, res); });
    http_.Get(R"(/v1/jobs/(\d+)/result)",
              [this](const httplib::Request& req, httplib::Response& res) { result(req, res); });
  }

  // Under mutex_. The job named by the path, or a 404 with a JSON error.
  std::shared_ptr<Job> find(const httplib::Request& req, httplib::Response& res) {
    uint64_t id = 0;
    try {
      id = std::stoull(req.matches[1].str());
    } catch (const std::exception&) {
    }
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
      res.status = 404;
      res.set_content(error_json("no job " + req.matches[1].str(), "id"), "application/json");
      return nullptr;
    }
    return it->second;
  }

  json describe(const Job& job) const {
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
    if (job.state == State::kQueued) {
      int position = 0;
      for (uint64_t q : queue_) {
        if (q == job.id) break;
        ++position;
      }
      j["queue_position"] = position;
    }
    return j;
  }

  void load(const httplib::Request& req, httplib::Response& res) {
    auto bad = [&](const std::string& message, const std::string& field) {
      res.status = 400;
      res.set_content(error_json(message, field), "application/json");
    };
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return bad("the body must be a JSON object", "");
    for (const auto& [key, value] : body.items()) {
      if (key != "model") return bad("unknown key \"" + key + "\" (known: model)", key);
    }
    if (!body.contains("model") || !body["model"].is_string() ||
        body["model"].get<std::string>().empty()) {
      return bad("\"model\" (a model name or folder) is required", "model");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    pending_load_ = body["model"].get<std::string>();
    load_error_.clear();
    wake_.notify_all();
    res.status = 202;
    res.set_content(json{{"loading", *pending_load_}}.dump(), "application/json");
  }

  void submit(const httplib::Request& req, httplib::Response& res) {
    auto bad = [&](int status, const std::string& message, const std::string& field = "") {
      res.status = status;
      res.set_content(error_json(message, field), "application/json");
    };
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) return bad(400, "the body is not valid JSON");
    auto request = runtime::parse_job_request(body, export_keys());
    if (!request.ok()) {
      const std::string m = request.status().message();
      const size_t q = m.find('"');
      return bad(400, m, q == std::string::npos ? "" : m.substr(q + 1, m.find('"', q + 1) - q - 1));
    }
    auto job = std::make_shared<Job>();
    job->request = body;
    job->options = request->job();
    if (request->sample && !request->seed) {
      job->options.generation.sampler.seed = std::random_device{}() & 0x7fffffff;
    } else if (!request->seed && request->variations > 1) {
      job->options.generation.sampler.seed = std::random_device{}() & 0x7fffffff;
    }
    if (auto notes = runtime::accept_job_text(&job->options); !notes.ok()) {
      return bad(400, notes.status().message(), "prompt");
    }
    if (body.contains("format")) {
      if (!body["format"].is_string()) return bad(400, "\"format\" must be a string", "format");
      job->format = body["format"].get<std::string>();
      bool known = false;
      for (const char* f : kFormats) known |= job->format == f;
      if (!known) return bad(400, "\"format\" must be one of glb, obj, fbx, stl, 3mf", "format");
    }
    if (Status st = read_export_fields(body, job.get()); !st.ok()) {
      const std::string& m = st.message();
      return bad(400, m, m.substr(1, m.find('"', 1) - 1));
    }
    job->client = req.remote_addr;
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int>(queue_.size()) >= o_.max_queue) {
      return bad(429, "the queue is full (" + std::to_string(o_.max_queue) + " jobs)", "queue");
    }
    int mine = 0;
    for (uint64_t q : queue_) mine += jobs_[q]->client == job->client ? 1 : 0;
    if (mine >= o_.per_client) {
      return bad(429,
                 "this client has " + std::to_string(mine) + " jobs queued (at most " +
                     std::to_string(o_.per_client) + ")",
                 "client");
    }
    job->id = ++last_id_;
    job->events.push_back(json{{"type", "queued"}, {"position", queue_.size()}}.dump());
    jobs_[job->id] = job;
    queue_.push_back(job->id);
    journal_accepted(*job);
    wake_.notify_all();
    res.status = 202;
    res.set_content(describe(*job).dump(), "application/json");
  }

  // The export fields of `body` into job->exporting, checked as the command line checks its
  // options; errors start with the field's name in quotes.
  static Status read_export_fields(const json& body, Job* job) {
    MeshExportCli& e = job->exporting;
    auto text = [&](const char* key, std::string* out) -> Status {
      if (!body.contains(key)) return Status();
      if (!body[key].is_string())
        return invalid_argument(std::string("\"") + key + "\" must be a string");
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
    auto options = to_export_options(e, "job." + job->format);
    if (!options.ok())
      return invalid_argument(field_of(options.status().message()) + options.status().message());
    auto asset = to_asset_options(e);
    if (!asset.ok())
      return invalid_argument(field_of(asset.status().message()) + asset.status().message());
    return Status();
  }

  // "--max-faces 3: ..." -> "\"max_faces\": " (the request's name for a command-line option).
  static std::string field_of(const std::string& message) {
    if (message.rfind("--", 0) != 0) return "\"preset\": ";
    std::string name = message.substr(2, message.find_first_of(" '", 2) - 2);
    std::replace(name.begin(), name.end(), '-', '_');
    return "\"" + name + "\": ";
  }

  void cancel(const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto job = find(req, res);
    if (!job) return;
    if (job->state == State::kQueued) {
      queue_.erase(std::remove(queue_.begin(), queue_.end(), job->id), queue_.end());
      end(*job, State::kCancelled, "cancelled while queued");
    } else if (job->state == State::kRunning) {
      job->cancel_requested = true;
      session_->cancel(runtime::Lane::kShape);
    }
    res.set_content(describe(*job).dump(), "application/json");
  }

  void events(const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job = find(req, res);
    }
    if (!job) return;
    res.set_header("Cache-Control", "no-cache");
    auto sent = std::make_shared<size_t>(0);
    res.set_chunked_content_provider(
        "text/event-stream", [this, job, sent](size_t, httplib::DataSink& sink) {
          std::unique_lock<std::mutex> lock(mutex_);
          // Waits for news, looking up now and then for a client that went away.
          const bool news = wake_.wait_for(lock, std::chrono::milliseconds(500),
                                           [&] { return *sent < job->events.size() || stopping_; });
          // Nothing new: a comment line, so that a client that went away is noticed now.
          std::string chunk = news ? "" : ":\n\n";
          for (; *sent < job->events.size(); ++*sent) {
            chunk += "data: " + job->events[*sent] + "\n\n";
          }
          const bool finished = terminal(job->state) || stopping_;
          lock.unlock();
          if (!sink.write(chunk.data(), chunk.size())) return false;
          if (finished) sink.done();
          return sink.is_writable() || finished;
        });
  }

  void result(const httplib::Request& req, httplib::Response& res) {
    std::string file;
    {
      std::lock_guard<std::mutex> lock(mutex_);
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
        res.status = job->state == State::kDone || candidate < 0 ? 404 : 409;
        res.set_content(
            error_json(res.status == 404
                           ? "no such candidate"
                           : "not finished yet (state " + std::string(state_name(job->state)) + ")",
                       "candidate"),
            "application/json");
        return;
      }
      file = it->second;
    }
    auto bytes = read_file(file);
    if (!bytes.ok()) {
      res.status = 500;
      res.set_content(error_json(bytes.status().message()), "application/json");
      return;
    }
    res.set_header("Content-Disposition",
                   "attachment; filename=\"" + fs::path(file).filename().string() + "\"");
    res.set_content(*bytes, "application/octet-stream");
  }

  std::string metrics() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::map<std::string, int> by_state;
    for (const char* s : {"queued", "running", "done", "failed", "cancelled"}) by_state[s] = 0;
    for (const auto& [id, job] : jobs_) ++by_state[state_name(job->state)];
    std::string out =
        "# HELP tessera_jobs Jobs by state since the server started.\n"
        "# TYPE tessera_jobs gauge\n";
    for (const auto& [s, n] : by_state) {
      out += "tessera_jobs{state=\"" + s + "\"} " + std::to_string(n) + "\n";
    }
    out += "# HELP tessera_queue_length Jobs waiting.\n# TYPE tessera_queue_length gauge\n";
    out += "tessera_queue_length " + std::to_string(queue_.size()) + "\n";
    out +=
        "# HELP tessera_tpot_ms Mean time per output token of the last finished job.\n"
        "# TYPE tessera_tpot_ms gauge\n";
    out += "tessera_tpot_ms " + std::to_string(last_tpot_ms_) + "\n";
    const auto model = session_->shape_model();
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

  // Under mutex_.
  void end(Job& job, State state, const std::string& error) {
    job.state = state;
    job.error = error;
    json e = {{"type", state_name(state)}};
    if (!error.empty()) e["error"] = error;
    job.events.push_back(e.dump());
    // The preview meshes were for watching it form: an ended job keeps their place (streams count
    // events by index) but not their bytes; the final meshes stay.
    for (std::string& event : job.events) {
      if (event.rfind("{\"candidate\"", 0) == 0 &&
          event.find("\"type\":\"preview\"") != std::string::npos) {
        json stub = json::parse(event, nullptr, false);
        if (stub.is_object()) {
          stub.erase("mesh");
          event = stub.dump();
        }
      }
    }
    journal_ended(job);
    forget_old_jobs();
    wake_.notify_all();
  }

  // Under mutex_: the oldest ended jobs beyond kEndedJobsKept leave the table.
  void forget_old_jobs() {
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

  // The worker: one job at a time through the Session, its events recorded for the streams.
  void work() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || pending_load_; });
        if (stopping_) return;
        if (pending_load_) {
          // A model load runs between two jobs; the jobs queued meanwhile wait for it.
          loading_name_ = *pending_load_;
          pending_load_.reset();
          loading_ = true;
          lock.unlock();
          load_model(loading_name_);
          continue;
        }
        job = jobs_[queue_.front()];
        queue_.pop_front();
        job->state = State::kRunning;
        job->events.push_back(json{{"type", "started"}}.dump());
        wake_.notify_all();
      }
      run_job(*job);
    }
  }

  void load_model(const std::string& model) {
    runtime::ShapeModelOptions options = shape_model_options(model, weights_, o_.device);
    const runtime::Event end = session_->wait_for(session_->load_shape_model(options));
    std::lock_guard<std::mutex> lock(mutex_);
    loading_ = false;
    if (const auto* e = std::get_if<runtime::ErrorEvent>(&end.payload)) {
      load_error_ = model + ": " + e->status.message();
    } else if (!std::holds_alternative<runtime::DoneEvent>(end.payload)) {
      load_error_ = model + ": the load was cancelled";
    }
    wake_.notify_all();
  }

  void run_job(Job& job) {
    runtime::JobOptions options = job.options;
    options.preview_every = 8;
    double token_ms = 0;
    int64_t steps = 0;
    const uint64_t submitted = session_->submit(options);
    {
      // A cancel that came between "running" and the submit.
      std::lock_guard<std::mutex> lock(mutex_);
      if (job.cancel_requested || stopping_) session_->cancel(runtime::Lane::kShape);
    }
    const runtime::Event last = session_->wait_for(submitted, [&](const runtime::Event& e) {
      json ev;
      if (const auto* t = std::get_if<runtime::TokenEvent>(&e.payload)) {
        ev = {{"type", "token"},
              {"candidate", t->candidate},
              {"index", t->index},
              {"id", t->id},
              {"ms", t->ms}};
        if (t->candidate == 0 && t->index > 0) token_ms += t->ms, ++steps;
      } else if (const auto* s = std::get_if<runtime::StageEvent>(&e.payload)) {
        ev = {{"type", "stage"}, {"name", s->name}, {"ms", s->ms}, {"candidate", s->candidate}};
      } else if (const auto* p = std::get_if<runtime::PartialMeshEvent>(&e.payload)) {
        ev = {{"type", "preview"},
              {"candidate", p->candidate},
              {"tokens", p->tokens},
              {"mesh", compact_mesh(*p->mesh)}};
      } else if (const auto* f = std::get_if<runtime::FinalMeshEvent>(&e.payload)) {
        ev = final_mesh(job, *f);
      } else {
        return;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      job.events.push_back(ev.dump());
      wake_.notify_all();
    });
    std::lock_guard<std::mutex> lock(mutex_);
    last_tpot_ms_ = steps > 0 ? token_ms / static_cast<double>(steps) : 0.0;
    if (std::holds_alternative<runtime::DoneEvent>(last.payload)) {
      end(job, State::kDone, "");
    } else if (const auto* err = std::get_if<runtime::ErrorEvent>(&last.payload)) {
      end(job, State::kFailed, err->status.message());
    } else {
      end(job, State::kCancelled, "cancelled");
    }
  }

  // Writes candidate f's mesh under --out (a name the server makes) and says where to fetch it.
  json final_mesh(Job& job, const runtime::FinalMeshEvent& f) {
    const std::string file =
        (fs::path(o_.out) / (start_tag_ + "-job" + std::to_string(job.id) + "-" +
                             std::to_string(f.candidate) + "." + job.format))
            .string();
    nlohmann::json settings;
    if (auto model = session_->shape_model()) {
      if (auto identity = runtime::model_identity(*model); identity.ok()) {
        settings = runtime::shape_settings_json(job.options, f.seed, f.resolution, identity->name,
                                                identity->gpt_sha256);
      }
    }
    // The command line's export, with the job's preset, size, pivot and budget (checked at submit).
    Expected<mesh::AssetReport> written = internal_error("not written");
    auto options = to_export_options(job.exporting, file);
    auto request = options.ok() ? cli_asset_export(*options, job.exporting, nullptr, settings)
                                : Expected<runtime::AssetExport>(options.status());
    written = request.ok() ? runtime::export_asset(*f.mesh, file, *request)
                           : Expected<mesh::AssetReport>(request.status());
    json ev = {{"type", "mesh"},
               {"candidate", f.candidate},
               {"seed", f.seed},
               {"vertices", f.mesh->vertex_count()},
               {"triangles", f.mesh->triangle_count()},
               {"mesh", compact_mesh(*f.mesh)}};
    std::lock_guard<std::mutex> lock(mutex_);
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

  // --out/jobs.jsonl: the accepted jobs not yet ended, so that a restart can say what it dropped.
  std::string journal_path() const { return (fs::path(o_.out) / "jobs.jsonl").string(); }
  void journal_accepted(const Job& job) {
    std::ofstream(journal_path(), std::ios::app)
        << json{{"id", job.id}, {"request", job.request}, {"pid", ::getpid()}}.dump() << "\n";
  }
  void journal_ended(const Job& job) {
    bool open = false;  // any job still queued or running
    for (const auto& [id, j] : jobs_) open |= !terminal(j->state);
    if (!open) {
      std::ofstream(journal_path(), std::ios::trunc);  // nothing to report: start afresh
      return;
    }
    std::ofstream(journal_path(), std::ios::app)
        << json{{"ended", job.id}, {"pid", ::getpid()}}.dump() << "\n";
  }
  void report_dropped() {
    std::ifstream in(journal_path());
    std::map<std::string, json> open;
    std::string line;
    while (std::getline(in, line)) {
      const json j = json::parse(line, nullptr, false);
      if (!j.is_object()) continue;
      const std::string pid = std::to_string(j.value("pid", 0));
      if (j.contains("ended")) {
        open.erase(pid + ":" + std::to_string(j.value("ended", uint64_t{0})));
      } else {
        open[pid + ":" + std::to_string(j.value("id", uint64_t{0}))] = j;
      }
    }
    for (const auto& [key, j] : open) {
      std::fprintf(
          stderr, "tessera serve: dropped by the last stop: job %llu (%s); submit it again\n",
          static_cast<unsigned long long>(j.value("id", uint64_t{0})), j["request"].dump().c_str());
    }
    std::error_code ec;
    fs::remove(journal_path(), ec);
  }

  void stop_worker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      wake_.notify_all();
    }
    session_->cancel();
    if (worker_.joinable()) worker_.join();
  }

  const ServeCliOptions& o_;
  int listen_socket_ = -1;  // the bound socket (its backlog is deepened after the bind)
  // Names this start's files apart from an earlier start's (ids begin at 1 again).
  const std::string start_tag_ = [] {
    char buffer[32];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    std::strftime(buffer, sizeof(buffer), "%Y%m%d-%H%M%S", &tm);
    return std::string(buffer) + "-" + std::to_string(::getpid());
  }();
  runtime::ShapeWeights weights_ = runtime::ShapeWeights::kAuto;
  std::optional<std::string> pending_load_;  // a model to load before the next job
  bool loading_ = false;
  std::string loading_name_, load_error_;
  std::unique_ptr<runtime::Session> session_;
  httplib::Server http_;
  std::string token_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, std::shared_ptr<Job>> jobs_;
  std::deque<uint64_t> queue_;
  uint64_t last_id_ = 0;
  double last_tpot_ms_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

int run_serve(ServeCliOptions& o) {
  if (o.out.empty()) o.out = (fs::path(runtime::user_data_dir()) / "serve").string();
  runtime::ShapeWeights weights = runtime::ShapeWeights::kAuto;
  if (!o.weights.empty()) {
    auto parsed = runtime::parse_shape_weights(o.weights);
    if (!parsed.ok()) {
      std::fprintf(stderr, "tessera serve: --weights: %s\n", parsed.status().message().c_str());
      return 2;
    }
    weights = *parsed;
  }
  auto session = runtime::Session::open(shape_model_options(o.model, weights, o.device));
  if (!session.ok()) {
    std::fprintf(stderr, "tessera serve: %s\n", session.status().message().c_str());
    return 1;
  }
  Server server(o, weights, std::move(session).value());
  return server.run();
}

}  // namespace

void register_serve(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ServeCliOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve shape generation over HTTP (docs/serve.md)");
  cmd->add_option("--model,-m", o->model, "Model folder or name (default: the embedded model)");
  cmd->add_option("--weights", o->weights, "auto, f32, bf16 or int8 (as tessera generate)");
  add_device_options(cmd, &o->device);
  cmd->add_option("--port", o->port, "TCP port (0: any free one, printed)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--listen", o->listen,
                  "Address to listen on (default 127.0.0.1; any other needs the bearer token)");
  cmd->add_option("--out", o->out,
                  "Folder for the result files (default XDG_DATA_HOME/tessera/serve)");
  cmd->add_option("--max-queue", o->max_queue, "Jobs that may wait (429 beyond)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--per-client", o->per_client, "Jobs one client address may have waiting")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--cors", o->cors, "An origin allowed to call from a browser (none by default)");
  cmd->callback([o, exit_code] { *exit_code = run_serve(*o); });
}

}  // namespace tessera::cli
