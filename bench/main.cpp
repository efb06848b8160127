// tessera-bench: the developer's benchmark tool (bench.h).
#include <cstdio>
#include <exception>
#include <string>

#include "bench/bench.h"
#include "engine/runtime/capabilities.h"
#include "kernels/cpu/threads.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera-bench: Tessera's benchmarks (developer tool; never fails on a timing)"};
  int threads = 0;
  app.add_option("--threads", threads, "CPU threads (default: all cores)")
      ->check(CLI::Range(0, 256));
  std::string isa;
  app.add_option("--isa", isa,
                 "Cap the CPU kernels' instruction set: avx512, avx2 or scalar (default: "
                 "TESSERA_ISA, else the best this CPU has)");
  int exit_code = 0;
  tessera::bench::register_bench_commands(app, &exit_code);
  app.parse_complete_callback([&] {
    tessera::kernels::cpu::configure_cpu_threads(threads);
    if (const tessera::Status s = tessera::runtime::set_cpu_isa(isa); !s.ok()) {
      throw CLI::ValidationError(s.message());
    }
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera-bench: internal error: %s\n", e.what());
    return 70;
  }
  return exit_code;
}
