// `tessera bench` (bench.h): the parent subcommand and its children (subcommands.h).
#include "bench/bench.h"

#include "bench/subcommands.h"

namespace tessera::bench {

void register_bench(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (never fail on timings)");
  bench->require_subcommand(1);
  register_kernels_bench(bench, exit_code);
  register_shape_bench(bench, exit_code);
  register_generate_bench(bench, exit_code);
  register_diffusion_bench(bench, exit_code);
  register_make_model_bench(bench, exit_code);
}

}  // namespace tessera::bench
