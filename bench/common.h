// Machinery shared by the `tessera-bench` subcommands (kernels.cpp, shape.cpp, generate.cpp,
// diffusion.cpp): options, repeated timing, aligned buffers, result rows, the machine header, the
// memory-bandwidth measurement, the bench/RESULTS.md section writer, and the default shape model
// and pipeline options of `bench generate`.
//
// Everything runs on default_thread_pool(). Errors (allocation, file I/O) come back as Status /
// Expected whose message starts with "bench"; timings themselves never fail.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "engine/shape/pipeline.h"

namespace tessera::bench {

// Command-line options of both subcommands (each uses the fields it registers).
struct Options {
  std::string json_path;
  std::string results_path;
  bool quick = false;
  bool write_results = false;
  int64_t tokens = 0;            // bench shape: KV-cache decode steps timed per length (0: default)
  std::string device = "cpu";    // bench shape: "cpu" or "cuda" (kernels::parse_device_choice)
  std::string weights = "bf16";  // bench shape: the full-size GPT's linear layers, bf16 or int8
};

// Median, min and max of repeated timings (seconds).
struct Timing {
  double median = 0, min = 0, max = 0;
  int reps = 0;
};

// Sorts `seconds` and summarises it. `seconds` must not be empty.
Timing summarize(std::vector<double> seconds);

// One warm-up call, then `reps` timed calls of fn; each call's time is divided by `per_call`
// (a call that runs the kernel several times over rotating buffers).
Timing time_it(int reps, double per_call, const std::function<void()>& fn);

// Two calls timed alternately (a, b, a, b, ...) after one warm-up of each, so that a ratio of
// their medians is measured under the same load on a shared machine.
std::pair<Timing, Timing> time_interleaved(int reps, const std::function<void()>& a,
                                           const std::function<void()>& b);

// 64-byte aligned heap buffer, touched by the pool's threads (first touch places the pages).
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;

// Allocates `bytes` (rounded up to 64), zero-filled in parallel. Out of memory comes back as an
// error naming `what`.
Expected<Buffer> allocate(size_t bytes, const char* what);

// Deterministic values in [-1, 1) without the cost of <random> over a gigabyte: data[0, n).
void fill_floats(float* data, size_t n, uint32_t seed);

// One benchmark result row.
struct Row {
  std::string group;  // "bandwidth", "gemv", "gemm", "attention", "embedding"
  std::string name;   // "c_qk 1536->3072"
  std::string impl;   // "cpu", "ref", "memcpy", ...
  std::string dtype;  // weight dtype or "-"
  int64_t m = 0;
  Timing time;        // seconds per call
  std::string unit;   // "GB/s" or "GFLOP/s"
  double amount = 0;  // bytes or flops per call
  std::string note;
  double value() const { return time.median > 0 ? amount / time.median / 1e9 : 0; }
  double value_at(double seconds) const { return seconds > 0 ? amount / seconds / 1e9 : 0; }
};

// 1-minute load average from /proc/loadavg (-1 when unreadable).
double load_average();

// The current time as "YYYY-MM-DD HH:MM UTC".
std::string utc_now();

// The exact command line, from /proc/self/cmdline, the program shown as "tessera".
std::string command_line();

// Measured memory bandwidths, GB/s.
struct Bandwidth {
  double copy_gbs = 0;  // bytes read + bytes written (STREAM convention)
  double read_gbs = 0;
};

// Measures read-only and copy bandwidth over arrays far larger than the caches (opt.quick:
// 256 MiB / 2 x 128 MiB, else 1 GiB / 2 x 512 MiB), `reps` timed runs each; appends one Row per
// measurement to *rows (non-null). Fails only when an array cannot be allocated.
Expected<Bandwidth> bench_bandwidth(const Options& opt, int reps, std::vector<Row>* rows);

// One read-only pass over a private array far larger than the caches, timed, on demand: lets a
// benchmark interleave bandwidth probes with the steps it divides by them, so that a shared
// machine's swings (this VM's read bandwidth moves 1.5x within a minute) hit both alike.
class ReadProbe {
 public:
  // Allocates `bytes` (rounded down to whole 8-byte words); fails when it cannot.
  static Expected<ReadProbe> create(size_t bytes);
  // Read bandwidth of one pass over the array with default_thread_pool()'s threads, GB/s.
  double measure_gbs();

 private:
  Buffer data_;
  size_t bytes_ = 0;
  std::vector<uint64_t> sinks_;
};

// The machine header of every result (JSON and markdown).
struct Machine {
  std::string cpu, features, date, command;
  std::string blas;  // OpenBLAS's kernels (runtime::cpu_blas_core; --isa does not cap them)
  std::string isa;   // what the CPU kernels use ("avx512", "avx2", "scalar"; --isa caps it)
  int threads = 0;
  int nice = 0;  // the process's nice value: a benchmark run at raised priority says so
  double load = 0;
  bool simd = true;
};

// Peak device memory of a run on the GPU: kernels::cuda::device_memory().used (the whole device's
// memory in use: the CUDA context, every allocation and the libraries' workspaces), polled every
// 2 ms on a thread of its own while the object lives. Inactive (every figure -1) when `active` is
// false or no device answers. The device is the lent GPU, which runs nothing else: its memory in
// use is this process's.
class DeviceMemoryPeak {
 public:
  explicit DeviceMemoryPeak(bool active);
  ~DeviceMemoryPeak();
  DeviceMemoryPeak(const DeviceMemoryPeak&) = delete;
  DeviceMemoryPeak& operator=(const DeviceMemoryPeak&) = delete;
  bool active() const { return active_; }
  int64_t current() const;  // a fresh query, bytes
  int64_t peak() const;     // the largest seen since the start or reset()
  void reset();             // the peak starts again from the current figure

 private:
  bool active_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_{-1};
  std::thread poller_;
};

Machine describe_machine();
// One line for a bench's start: CPU, threads, features, the kernels in use and OpenBLAS's.
std::string machine_line(const Machine& machine);
// "Command / Machine / Date" lines that open every RESULTS.md section, then a blank line.
std::string machine_markdown(const Machine& machine);
// The same as the "machine" object of the --json files.
nlohmann::json machine_json(const Machine& machine);

// Prints a warning to stderr when the load average says the machine is not idle.
void warn_if_busy(const Machine& machine);

// --results, or the source tree's bench/RESULTS.md.
std::string results_path(const Options& opt);

// Nearest-rank percentile `p` (0-100) of v; 0 for an empty v.
double percentile(std::vector<double> v, double p);

// Replaces the section of the markdown file `path` that starts with `heading`
// ("## Kernels (CPU)\n"; up to the next "## " heading) with `section`, or appends it; creates the
// file with a title when it is missing. Written atomically; I/O errors come back as a Status.
Status write_results_section(const std::string& path, const std::string& heading,
                             const std::string& section);

}  // namespace tessera::bench
