// tessera-bench: the benchmark commands (kernels, shape, generate, diffusion, make-model), a
// developer tool of its own, not part of the product (not installed by the .deb). Benchmarks
// measure; they never fail on a timing. Each command prints its table on stdout and, with
// --write-results, replaces its section of bench/RESULTS.md in the source tree it was built from
// (--results FILE writes elsewhere). The fixtures they read are copied into the build tree at
// configure time (TESSERA_BENCH_FIXTURES), so the binary depends on its build, not on a source
// path.
//
// register_bench_commands adds the commands to `app`; when one runs, its callback stores the exit
// code in *exit_code (0 ok, 1 bad arguments or a runtime error: missing model or fixture,
// allocation, file I/O). exit_code must outlive app's parse. Errors are printed to stderr as
// "tessera-bench[ <command>]: <message>".
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::bench {

void register_bench_commands(CLI::App& app, int* exit_code);

}  // namespace tessera::bench
