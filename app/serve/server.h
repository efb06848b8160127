// tessera serve: one process holds the shape model (loaded once, through the runtime's Session) and
// serves an HTTP/JSON API (docs/serve.md; the OpenAPI document docs/serve-openapi.json):
//
//   GET  /healthz, /readyz            the process lives; the model is loaded (503 until it is)
//   GET  /metrics                     Prometheus text: jobs by state, queue length, TPOT, memory
//   GET  /v1/models                   the loaded model, the models known by name, a load under way
//   POST /v1/models/load              {"model": NAME or folder}: loaded between two jobs -> 202
//   POST /v1/jobs                     a job (runtime/job_request.h's JSON, plus "format") -> 202
//   GET  /v1/jobs, /v1/jobs/ID        every job / one job: state, seeds, files, error
//   POST /v1/jobs/ID/cancel           a queued job leaves the queue, a running one stops
//   GET  /v1/jobs/ID/events           Server-Sent Events: every token, stage, preview mesh, final
//                                     mesh and the end, from the job's start
//   GET  /v1/jobs/ID/result?candidate=I   the finished mesh file
//
// The parts: security.h (the address and the gate every request passes), jobs.h (request bodies,
// the queue and its limits, the journal), event_stream.h (the stream's events); this file routes
// HTTP to them and runs the worker, which takes one job at a time through the Session (the
// variations of a job decode together). Every error, the HTTP library's own (413 for a body over
// 16 MiB, 404 for an unknown path) included, is answered in answers.h's JSON form. Output files
// only ever go to --out under names the server makes.
#pragma once

#include <memory>
#include <string>

#include "app/cli/shape_cli.h"
#include "app/serve/jobs.h"
#include "app/serve/security.h"
#include "engine/runtime/session.h"

namespace tessera::serve {

// Bodies over this are refused with 413 before they are read: room for an image job's pictures
// (PNG in base64: a 1024 x 1024 photo is about 2-4 MiB).
constexpr size_t kMaxBody = 16 * 1024 * 1024;

struct ServerOptions {
  ListenAddress listen;  // parse_listen's
  std::string out;       // the result files and the journal
  JobLimits limits;
  std::string cors;  // the one origin allowed to call from a browser; empty: none
  // How a model named by POST /v1/models/load is loaded (the command line's --weights, --device).
  runtime::ShapeWeights weights = runtime::ShapeWeights::kAuto;
  cli::DeviceCli device;
};

class Server {
 public:
  Server(ServerOptions options, std::unique_ptr<runtime::Session> session);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Listens until the process is stopped; prints "listening on http://HOST:PORT" once bound. The
  // exit code: 0 after a stop, 1 when it cannot listen or prepare --out or the token.
  int run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tessera::serve
