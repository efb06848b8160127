// tessera-bench's commands (bench.h, subcommands.h).
#include "bench/bench.h"

#include "bench/subcommands.h"

namespace tessera::bench {

void register_bench_commands(CLI::App& app, int* exit_code) {
  app.require_subcommand(1);
  register_kernels_bench(&app, exit_code);
  register_shape_bench(&app, exit_code);
  register_generate_bench(&app, exit_code);
  register_diffusion_bench(&app, exit_code);
  register_make_model_bench(&app, exit_code);
  register_cleanup_bench(&app, exit_code);
  register_lora_bench(&app, exit_code);
  register_atlas_bench(&app, exit_code);
  register_paint_bench(&app, exit_code);
}

}  // namespace tessera::bench
