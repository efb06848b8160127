// `tessera bench`: the benchmark subcommands (kernels, shape, generate, diffusion), a library
// below the CLI (tessera_bench). Benchmarks measure; they never fail on a timing. Each subcommand
// prints its table on stdout and, with --write-results, replaces its section of bench/RESULTS.md.
//
// register_bench adds the `bench` subcommand to `app`; when a benchmark subcommand runs, its
// callback stores the exit code in *exit_code (0 ok, 1 bad arguments or a runtime error: missing
// model or fixture, allocation, file I/O). exit_code must outlive app's parse. Errors are printed
// to stderr as "tessera bench[ <subcommand>]: <message>".
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::bench {

void register_bench(CLI::App& app, int* exit_code);

}  // namespace tessera::bench
