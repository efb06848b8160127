// The standard output of a shell command, for the tests that drive other programs (curl, blender).
// Header-only: not every test binary links cli_runner.cpp.
#pragma once

#include <cstdio>
#include <string>

namespace tessera::testing {

// Runs `cmd` with /bin/sh and returns what it wrote on stdout ("" when it could not start).
inline std::string command_output(const std::string& cmd) {
  std::string out;
  if (std::FILE* p = ::popen(cmd.c_str(), "r")) {
    char buffer[4096];
    size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof(buffer), p)) > 0) out.append(buffer, n);
    ::pclose(p);
  }
  return out;
}

}  // namespace tessera::testing
