// tessera serve: the command line of the HTTP server (app/serve/server.h says what it serves, and
// docs/serve.md how to use it):
//
//   tessera serve [--model M] [--port 8590] [--listen ADDR[:PORT]] [--out DIR] [--max-queue N]
//                 [--per-client N] [--cors ORIGIN] [--device ...] [--weights ...] [--threads N]
//
// --listen takes an address as people write it: 127.0.0.1, 0.0.0.0:9000, ::1, [::1]:9000. Safe by
// default: 127.0.0.1 only; any other address requires the bearer token (app/serve/security.h).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "app/cli/commands.h"
#include "app/cli/shape_cli.h"
#include "app/serve/server.h"
#include "engine/runtime/session.h"
#include "engine/runtime/user_dirs.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

struct ServeCliOptions {
  std::string model;
  std::string weights;
  DeviceCli device;
  int port = serve::kDefaultPort;
  bool port_given = false;
  std::string listen = "127.0.0.1";
  std::string out;
  int max_queue = 64;
  int per_client = 8;
  std::string cors;
};

int run_serve(const ServeCliOptions& o) {
  serve::ServerOptions options;
  auto listen = serve::parse_listen(o.listen, o.port, o.port_given);
  if (!listen.ok()) {
    std::fprintf(stderr, "tessera serve: %s\n", listen.status().message().c_str());
    return 2;
  }
  options.listen = *listen;
  options.out = o.out.empty() ? (fs::path(runtime::user_data_dir()) / "serve").string() : o.out;
  options.limits = serve::JobLimits{o.max_queue, o.per_client};
  options.cors = o.cors;
  options.device = o.device;
  if (!o.weights.empty()) {
    auto parsed = runtime::parse_shape_weights(o.weights);
    if (!parsed.ok()) {
      std::fprintf(stderr, "tessera serve: --weights: %s\n", parsed.status().message().c_str());
      return 2;
    }
    options.weights = *parsed;
  }
  auto session =
      runtime::Session::open(shape_model_options(o.model, options.weights, options.device));
  if (!session.ok()) {
    std::fprintf(stderr, "tessera serve: %s\n", session.status().message().c_str());
    return 1;
  }
  serve::Server server(std::move(options), std::move(session).value());
  return server.run();
}

}  // namespace

void register_serve(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ServeCliOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve shape generation over HTTP (docs/serve.md)");
  cmd->add_option("--model,-m", o->model, "Model folder or name (default: the embedded model)");
  cmd->add_option("--weights", o->weights, "auto, fast, f32, bf16 or int8 (as tessera generate)");
  add_device_options(cmd, &o->device);
  CLI::Option* port = cmd->add_option("--port", o->port, "TCP port (0: any free one, printed)")
                          ->check(CLI::Range(0, 65535));
  cmd->add_option("--listen", o->listen,
                  "Address to listen on, with or without :PORT (127.0.0.1, 0.0.0.0:9000, "
                  "[::1]:9000; default 127.0.0.1; any other than loopback needs the bearer token)");
  cmd->add_option("--out", o->out,
                  "Folder for the result files (default XDG_DATA_HOME/tessera/serve)");
  cmd->add_option("--max-queue", o->max_queue, "Jobs that may wait (429 beyond)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--per-client", o->per_client, "Jobs one client address may have waiting")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--cors", o->cors, "An origin allowed to call from a browser (none by default)");
  cmd->callback([o, port, exit_code] {
    o->port_given = port->count() > 0;
    *exit_code = run_serve(*o);
  });
}

}  // namespace tessera::cli
