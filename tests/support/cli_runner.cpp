#include "tests/support/cli_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::testing {

namespace {
namespace fs = std::filesystem;

}  // namespace

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string shell_quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

namespace {
CliResult run_program(const char* program, const std::string& args, const std::string& env) {
  static std::atomic<int> counter{0};
  const fs::path dir = fs::temp_directory_path() / ("tessera_cli_" + std::to_string(::getpid()) +
                                                    "_" + std::to_string(counter++));
  fs::create_directories(dir);
  const std::string cmd = env + " " + shell_quote(program) + " " + args + " >" +
                          shell_quote((dir / "out").string()) + " 2>" +
                          shell_quote((dir / "err").string());
  const int status = std::system(cmd.c_str());
  CliResult r;
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.exit_code = 128 + WTERMSIG(status);
  }
  r.out = slurp((dir / "out").string());
  r.err = slurp((dir / "err").string());
  fs::remove_all(dir);
  return r;
}
}  // namespace

CliResult run_tessera(const std::string& args, const std::string& env) {
  return run_program(TESSERA_CLI_PATH, args, env);
}

CliResult run_bench(const std::string& args, const std::string& env) {
  return run_program(TESSERA_BENCH_PATH, args, env);
}

}  // namespace tessera::testing
