// Starts tests/support/hub_server.py (a Hugging Face Hub stand-in on 127.0.0.1) for a test and
// stops it after; faults and statistics through its /_fault and /_stats endpoints (curl).
// Header-only: only the tests that include it depend on it.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/command_output.h"

namespace tessera::testing {

namespace hub_fs = std::filesystem;

// 'text' for /bin/sh (the header stands alone: not every test binary links cli_runner.cpp).
inline std::string hub_quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

// The parity fixtures as two repositories: Roblox/cube3d-v0.5 (its safetensors through LFS) and
// openai/clip-vit-large-patch14 (gated by `clip_token` unless empty), with the vocabulary files of
// `vocab_dir` (a FixtureModelDir's).
inline nlohmann::json parity_hub_spec(const std::string& vocab_dir, const std::string& clip_token) {
  const hub_fs::path parity = hub_fs::path(TESSERA_SOURCE_DIR) / "tests" / "fixtures" / "parity";
  auto file = [](const hub_fs::path& p, bool lfs) {
    return nlohmann::json{{"source", hub_fs::canonical(p).string()}, {"lfs", lfs}};
  };
  nlohmann::json spec;
  spec["Roblox/cube3d-v0.5"] = {
      {"commit", "1111111111111111111111111111111111111111"},
      {"files",
       {{"shape_gpt.safetensors", file(parity / "gpt_v05" / "shape_gpt.safetensors", true)},
        {"shape_tokenizer.safetensors", file(parity / "shape_tokenizer.safetensors", true)}}}};
  spec["openai/clip-vit-large-patch14"] = {
      {"commit", "2222222222222222222222222222222222222222"},
      {"gated_token", clip_token},
      {"files",
       {{"model.safetensors", file(parity / "text_encoder" / "model.safetensors", true)},
        {"config.json", file(parity / "text_encoder" / "config.json", false)},
        {"vocab.json", file(hub_fs::path(vocab_dir) / "vocab.json", false)},
        {"merges.txt", file(hub_fs::path(vocab_dir) / "merges.txt", false)}}}};
  return spec;
}

class HubServer {
 public:
  HubServer(const hub_fs::path& dir, const nlohmann::json& spec) : port_file_(dir / "port") {
    const hub_fs::path spec_file = dir / "spec.json";
    std::ofstream(spec_file) << spec.dump();
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string script =
          (hub_fs::path(TESSERA_SOURCE_DIR) / "tests" / "support" / "hub_server.py").string();
      ::execlp("python3", "python3", script.c_str(), "--spec", spec_file.c_str(), "--port-file",
               port_file_.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200 && !hub_fs::exists(port_file_); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::ifstream(port_file_) >> port_;
  }
  ~HubServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // POST /_fault and GET /_stats through curl's command line.
  void fault(const std::string& json) const {
    const std::string cmd =
        "curl -s -X POST --data " + hub_quote(json) + " " + url() + "/_fault > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
  int64_t cdn_bytes() const {
    const std::string out = command_output("curl -s " + url() + "/_stats");
    return nlohmann::json::parse(out, nullptr, false).value("cdn_bytes", int64_t{-1});
  }

 private:
  hub_fs::path port_file_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace tessera::testing
