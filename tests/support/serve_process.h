// Starts `tessera serve --port 0` for a test (its own config and output folders under `dir`), reads
// the port it printed, and stops it after: tests/app/serve_test.cpp,
// tests/e2e/blender_addon_test.cpp. Header-only: only the tests that include it depend on
// cpp-httplib.
#pragma once

#include <httplib.h>
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
#include <vector>

namespace tessera::testing {

class ServeProcess {
 public:
  ServeProcess(const std::filesystem::path& dir, std::vector<std::string> args) : dir_(dir) {
    std::filesystem::create_directories(dir);
    const std::string out = (dir / "stdout").string(), err = (dir / "stderr").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen(out.c_str(), "w", stdout);
      std::freopen(err.c_str(), "w", stderr);
      ::setenv("XDG_CONFIG_HOME", (dir_ / "config").c_str(), 1);
      std::vector<std::string> all = {TESSERA_CLI_PATH,       "serve", "--port", "0", "--out",
                                      (dir_ / "out").string()};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(TESSERA_CLI_PATH, argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 600 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // it stopped without listening
        pid_ = -1;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        break;
      }
      std::ifstream in(out);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t at = text.find("listening on http://");
      if (at == std::string::npos) continue;
      // http://HOST:PORT or http://[IPV6]:PORT
      const size_t close = text[at + 20] == '[' ? text.find(']', at + 20) : at + 20;
      const size_t colon = text.find(':', close);
      port_ = std::atoi(text.c_str() + colon + 1);
      host_ = text.substr(at + 20, colon - at - 20);
      if (host_.front() == '[') host_ = host_.substr(1, host_.size() - 2);
    }
  }
  // Waits for a process that stops by itself (a refused start) and gives its exit code, or -1
  // when it is still running after `seconds` (then it is stopped).
  int wait(int seconds = 30) {
    if (pid_ <= 0) return exit_code_;
    for (int i = 0; i < seconds * 20 && pid_ > 0; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    stop(SIGTERM);
    return -1;
  }
  ~ServeProcess() { stop(SIGTERM); }
  void stop(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int port() const { return port_; }
  httplib::Client client() const {
    httplib::Client c(host_, port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  std::string err() const {
    std::ifstream in(dir_ / "stderr");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  std::filesystem::path out() const { return dir_ / "out"; }
  std::filesystem::path config() const { return dir_ / "config"; }
  std::string url() const { return "http://" + host_ + ":" + std::to_string(port_); }

 private:
  std::filesystem::path dir_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  int port_ = 0;
  std::string host_;
};

}  // namespace tessera::testing
