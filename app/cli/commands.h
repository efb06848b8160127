// Subcommands of the `tessera` CLI. Each register_* adds one subcommand to the app; its callback
// runs the command and stores the process exit code in *exit_code (0 ok, 1 runtime error, 2 usage).
// Errors are printed to stderr as "tessera <cmd>: <message>"; results go to stdout.
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

void register_tokenize(CLI::App& app, int* exit_code);
void register_info(CLI::App& app, int* exit_code);
void register_generate(CLI::App& app, int* exit_code);
void register_batch(CLI::App& app, int* exit_code);
void register_decode(CLI::App& app, int* exit_code);
void register_render(CLI::App& app, int* exit_code);
void register_image(CLI::App& app, int* exit_code);
void register_paint(CLI::App& app, int* exit_code);
void register_check(CLI::App& app, int* exit_code);
void register_convert(CLI::App& app, int* exit_code);
void register_quantize(CLI::App& app, int* exit_code);
void register_models(CLI::App& app, int* exit_code);
void register_library(CLI::App& app, int* exit_code);
void register_serve(CLI::App& app, int* exit_code);

}  // namespace tessera::cli
