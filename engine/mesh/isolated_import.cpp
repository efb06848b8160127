// import_isolated: Assimp in a child process with limits (isolated_import.h).
#include "engine/mesh/isolated_import.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>

#include "engine/mesh/import.h"

#ifndef TESSERA_BUILD_MESH_READER
#error "isolated_import.cpp is compiled with TESSERA_BUILD_MESH_READER (engine/CMakeLists.txt)"
#endif

namespace tessera::mesh {
namespace {

namespace fs = std::filesystem;

bool is_executable_file(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

struct ChildResult {
  bool started = false;
  std::string start_error;
  bool timed_out = false;
  bool output_overflow = false;
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  std::string out;
  std::string err;  // at most 64 KiB kept
};

void set_limit(int resource, uint64_t value) {
  struct rlimit limit;
  limit.rlim_cur = value;
  limit.rlim_max = value;
  setrlimit(resource, &limit);
}

// Runs argv[0] with the limits; stdout and stderr captured. Only async-signal-safe calls between
// fork and exec (the studio and the server call this with other threads running).
ChildResult run_child(const std::vector<std::string>& args, const IsolatedReadLimits& limits) {
  ChildResult r;
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    r.start_error = std::strerror(errno);
    return r;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    r.start_error = std::strerror(errno);
    close(out_pipe[0]);
    close(out_pipe[1]);
    return r;
  }
  const uint64_t cpu_seconds = static_cast<uint64_t>(std::ceil(limits.seconds)) + 1;
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    r.start_error = std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return r;
  }
  if (pid == 0) {
    // The child: limits, then the reader. dup2 clears O_CLOEXEC on 1 and 2; every other
    // descriptor the parent had open is closed below or by exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    set_limit(RLIMIT_AS, limits.memory_bytes);
    set_limit(RLIMIT_CPU, cpu_seconds);
    set_limit(RLIMIT_CORE, 0);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    const int max_fd = static_cast<int>(sysconf(_SC_OPEN_MAX));
    for (int fd = 3; fd < std::min(max_fd, 65536); ++fd) close(fd);
    execv(argv[0], argv.data());
    _exit(127);
  }
  r.started = true;
  close(out_pipe[1]);
  close(err_pipe[1]);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(limits.seconds * 1000.0));
  struct pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buffer[65536];
  bool killed = false;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    const int ready = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      if (i == 0) {
        if (r.out.size() + static_cast<size_t>(n) > limits.output_bytes) {
          r.output_overflow = true;
          break;
        }
        r.out.append(buffer, static_cast<size_t>(n));
      } else if (r.err.size() < 65536) {
        r.err.append(buffer, std::min<size_t>(static_cast<size_t>(n), 65536 - r.err.size()));
      }
    }
    if (r.output_overflow) break;
  }
  if (r.timed_out || r.output_overflow) {
    kill(pid, SIGKILL);
    killed = true;
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status) && !killed) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

// The child's stderr lines with `prefix` ("warning: ", "error: "), prefix removed.
std::vector<std::string> lines_with(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line.substr(prefix.size()));
  }
  return out;
}

// The last non-empty line of the child's stderr (an ai_assert message, a libc abort message).
std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  if (last.size() > 300) last = last.substr(0, 300) + "...";
  return last;
}

std::string signal_text(int signal) {
  switch (signal) {
    case SIGABRT:
      return "SIGABRT: an assertion inside Assimp failed";
    case SIGSEGV:
      return "SIGSEGV: Assimp read outside its memory";
    case SIGXCPU:
      return "SIGXCPU: it used up its CPU time";
    case SIGFPE:
      return "SIGFPE";
    case SIGBUS:
      return "SIGBUS";
    default:
      return "signal " + std::to_string(signal);
  }
}

std::string format_bytes(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30) && bytes % (uint64_t{1} << 30) == 0)
    return std::to_string(bytes >> 30) + " GiB";
  return std::to_string((bytes + (uint64_t{1} << 20) - 1) >> 20) + " MiB";
}

std::string format_seconds(double seconds) {
  std::ostringstream s;
  s << seconds << " s";
  return s.str();
}

}  // namespace

std::string mesh_reader_path(std::vector<std::string>* tried) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TESSERA_MESH_READER"); env != nullptr && *env != '\0') {
    // An explicit choice is the only one looked at.
    candidates.push_back(env);
  } else {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back((exe.parent_path() / "tessera-mesh-reader").string());
      candidates.push_back(
          (exe.parent_path().parent_path() / "libexec" / "tessera" / "tessera-mesh-reader")
              .string());
    }
    candidates.push_back(TESSERA_BUILD_MESH_READER);
  }
  for (const std::string& c : candidates) {
    if (tried != nullptr) tried->push_back(c);
    if (is_executable_file(c)) return c;
  }
  return std::string();
}

IsolatedFormats isolated_formats() {
  static std::mutex mutex;
  static std::map<std::string, IsolatedFormats> asked;  // by reader path
  std::vector<std::string> tried;
  const std::string reader = mesh_reader_path(&tried);
  IsolatedFormats f;
  if (reader.empty()) {
    f.why_not = "tessera-mesh-reader (Tessera's Assimp reader) is not installed: looked for ";
    for (size_t i = 0; i < tried.size(); ++i) f.why_not += (i ? ", " : "") + tried[i];
    return f;
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = asked.find(reader); it != asked.end()) return it->second;
  IsolatedReadLimits limits;
  limits.seconds = 10.0;
  limits.output_bytes = 1 << 20;
  const ChildResult r = run_child({reader, "--formats"}, limits);
  f.reader = reader;
  if (!r.started || r.exit_code != 0) {
    f.why_not =
        reader + " --formats failed (" +
        (!r.started      ? r.start_error
         : r.timed_out   ? std::string("no answer within 10 s")
         : r.signal != 0 ? signal_text(r.signal)
                         : "exit status " + std::to_string(r.exit_code) + ": " + last_line(r.err)) +
        ")";
  } else {
    std::istringstream in(r.out);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("assimp ", 0) == 0) {
        f.version = line.substr(7);
      } else if (line.size() > 1 && line[0] == '.') {
        f.extensions.push_back(line);
      }
    }
    std::sort(f.extensions.begin(), f.extensions.end());
    f.available = !f.extensions.empty();
    if (!f.available) f.why_not = reader + " --formats listed no formats";
  }
  asked[reader] = f;
  return f;
}

Expected<Mesh> import_isolated(const std::string& path, std::vector<std::string>* warnings,
                               const IsolatedReadLimits& limits) {
  std::vector<std::string> tried;
  const std::string reader = mesh_reader_path(&tried);
  if (reader.empty()) {
    std::string where;
    for (size_t i = 0; i < tried.size(); ++i) where += (i ? ", " : "") + tried[i];
    return unsupported("'" + path + "' needs Assimp, and tessera-mesh-reader is not installed (" +
                       where + ")");
  }
  // An absolute path: the child starts in the same directory, but a name starting with '-' must
  // not read as an option.
  std::error_code ec;
  std::string absolute = fs::absolute(path, ec).string();
  if (ec) absolute = path;
  const ChildResult r = run_child({reader, absolute}, limits);
  if (!r.started) {
    return internal_error("'" + path + "': the Assimp reader " + reader +
                          " could not be started (" + r.start_error + ")");
  }
  if (r.timed_out) {
    return internal_error("'" + path + "': Assimp did not finish reading it within " +
                          format_seconds(limits.seconds) + " and was stopped");
  }
  if (r.output_overflow) {
    return internal_error("'" + path + "': the mesh Assimp read passed the " +
                          format_bytes(limits.output_bytes) + " limit and was stopped");
  }
  // Warnings name the file as the child was given it; say it as the caller did.
  const auto named = [&](std::string text) {
    if (absolute != path) {
      for (size_t at = text.find(absolute); at != std::string::npos;
           at = text.find(absolute, at + path.size())) {
        text.replace(at, absolute.size(), path);
      }
    }
    return text;
  };
  if (warnings != nullptr) {
    for (const std::string& w : lines_with(r.err, "warning: ")) warnings->push_back(named(w));
  }
  if (r.signal != 0) {
    const std::string detail = last_line(r.err);
    return internal_error("'" + path + "': Assimp crashed reading it (" + signal_text(r.signal) +
                          (detail.empty() ? "" : ": " + detail) +
                          "); the file is malformed or uses what Assimp " + "cannot read");
  }
  if (r.exit_code == 3) {
    return out_of_memory("'" + path + "': Assimp needed more than " +
                         format_bytes(limits.memory_bytes) +
                         " of memory reading it and was stopped");
  }
  if (r.exit_code != 0) {
    const std::vector<std::string> errors = lines_with(r.err, "error: ");
    if (r.exit_code == 2 && !errors.empty()) {
      // The reader's own refusal: it names the file (as the child saw it).
      const std::string& e = errors.back();
      const ErrorCode code =
          e.find("no triangles") != std::string::npos ? ErrorCode::kNotFound
          : e.find("not finite") != std::string::npos || e.find("out of range") != std::string::npos
              ? ErrorCode::kCorruptData
              : ErrorCode::kUnsupported;
      return Status(code, named(e));
    }
    const std::string detail = last_line(r.err);
    return internal_error("'" + path + "': the Assimp reader failed (exit status " +
                          std::to_string(r.exit_code) + (detail.empty() ? "" : ": " + detail) +
                          ")");
  }
  // What came back is untrusted like any file: the GLB reader checks it, under the file's name.
  auto mesh = parse_glb(r.out, path, warnings);
  if (!mesh.ok()) {
    return Status(mesh.status().code(),
                  mesh.status().message() + " (in what the Assimp reader handed back)");
  }
  TESSERA_RETURN_IF_ERROR(validate(*mesh));
  return mesh;
}

}  // namespace tessera::mesh
