// Runs the `tessera` executable built next to the tests, as a user would from a shell.
#pragma once

#include <string>

namespace tessera::testing {

struct CliResult {
  int exit_code = -1;  // 128 + signal number when the process was killed by a signal
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `[env] tessera ARGS`; ARGS is shell text, so the caller quotes (see shell_quote).
CliResult run_tessera(const std::string& args, const std::string& env = "");
// Runs `[env] tessera-bench ARGS` (the developer's benchmark tool, bench/bench.h), the same way.
CliResult run_bench(const std::string& args, const std::string& env = "");

// 'text' quoted for /bin/sh.
std::string shell_quote(const std::string& text);

// A whole file's bytes ("" when it cannot be read): what a test compares written files with.
std::string slurp(const std::string& path);

}  // namespace tessera::testing
