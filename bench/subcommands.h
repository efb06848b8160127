// The `tessera-bench` subcommands, one file each; bench.cpp adds them under `bench` in this order
// (the order `tessera-bench --help` lists them). Each adds its subcommand to `bench` with its
// options; its callback stores the exit code in *exit_code as bench.h states.
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::bench {

void register_kernels_bench(CLI::App* bench, int* exit_code);     // kernels.cpp
void register_shape_bench(CLI::App* bench, int* exit_code);       // shape.cpp
void register_generate_bench(CLI::App* bench, int* exit_code);    // generate.cpp
void register_diffusion_bench(CLI::App* bench, int* exit_code);   // diffusion.cpp
void register_make_model_bench(CLI::App* bench, int* exit_code);  // make_model.cpp
void register_cleanup_bench(CLI::App* bench, int* exit_code);     // cleanup.cpp
void register_lora_bench(CLI::App* bench, int* exit_code);        // lora.cpp
void register_atlas_bench(CLI::App* bench, int* exit_code);       // atlas.cpp
void register_paint_bench(CLI::App* bench, int* exit_code);       // paint.cpp

}  // namespace tessera::bench
