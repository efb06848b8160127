// tessera: the command-line front end of the engine.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "app/cli/commands.h"
#include "core/cpu_features.h"
#include "core/assets.h"
#include "engine/runtime/capabilities.h"

namespace tessera::cli {

namespace {
void print_version() {
  const runtime::Capabilities caps = runtime::probe_capabilities();
  std::printf("tessera %s (%s build)\n", TESSERA_VERSION, TESSERA_BUILD_TYPE);
  if (!caps.built_with_cuda) {
    std::printf("cuda: off (built without CUDA)\n");
  } else if (caps.cuda.usable) {
    std::printf("cuda: on, device %s; decode graphs available\n", caps.cuda.name.c_str());
  } else {
    std::printf("cuda: built in, no usable device (%s); CPU backend\n", caps.cuda.reason.c_str());
  }
  std::printf("cpu: %s, %d threads, %s kernels, OpenBLAS %s\n", cpu_model_name().c_str(),
              runtime::cpu_threads(), runtime::cpu_isa(), runtime::cpu_blas_core());
  std::printf("cpu features: %s%s\n", cpu_features_string(cpu_features_detected()).c_str(),
              simd_enabled() ? "" : " (SIMD disabled by TESSERA_NO_SIMD)");
}
}  // namespace
}  // namespace tessera::cli

int main(int argc, char** argv) {
  CLI::App app{"Tessera: text prompt to 3D asset, on CPU and CUDA"};
  app.require_subcommand(0, 1);
  bool version = false;
  int threads = 0;
  app.add_flag("--version", version, "Print version, build type, CUDA and CPU features");
  app.add_option("--threads", threads, "CPU threads (default: all cores)")
      ->check(CLI::Range(0, 256));
  std::string isa;
  app.add_option("--isa", isa,
                 "Cap the CPU kernels' instruction set: avx512, avx2 or scalar (default: "
                 "TESSERA_ISA, else the best this CPU has)");
  int exit_code = 0;
  tessera::cli::register_tokenize(app, &exit_code);
  tessera::cli::register_info(app, &exit_code);
  tessera::cli::register_generate(app, &exit_code);
  tessera::cli::register_batch(app, &exit_code);
  tessera::cli::register_decode(app, &exit_code);
  tessera::cli::register_render(app, &exit_code);
  tessera::cli::register_image(app, &exit_code);
  tessera::cli::register_paint(app, &exit_code);
  tessera::cli::register_check(app, &exit_code);
  tessera::cli::register_convert(app, &exit_code);
  tessera::cli::register_quantize(app, &exit_code);
  tessera::cli::register_models(app, &exit_code);
  tessera::cli::register_library(app, &exit_code);
  tessera::cli::register_serve(app, &exit_code);
  app.parse_complete_callback([&] {
    tessera::runtime::set_cpu_threads(threads);
    if (const tessera::Status s = tessera::runtime::set_cpu_isa(isa); !s.ok()) {
      throw CLI::ValidationError(s.message());
    }
  });
  // The commands run inside parse(). No exception leaves the program as a crash: one that
  // escapes a command is a bug, reported as such with a non-zero status (files already written
  // stay: every write is atomic).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: internal error: %s\n", e.what());
    return 70;  // EX_SOFTWARE
  } catch (...) {
    std::fprintf(stderr, "tessera: internal error (unknown exception)\n");
    return 70;
  }
  if (version) {
    tessera::cli::print_version();
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  return exit_code;
}
