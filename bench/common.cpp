// Shared machinery of the `tessera-bench` subcommands (common.h).
#include "bench/common.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/assets.h"
#include "core/cpu_features.h"
#include "engine/runtime/capabilities.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "kernels/cuda/device.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Timing summarize(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  Timing t;
  t.reps = static_cast<int>(seconds.size());
  const size_t n = seconds.size();
  t.median = n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  t.min = seconds.front();
  t.max = seconds.back();
  return t;
}

// One warm-up call, then `reps` timed calls of fn; each call's time is divided by `per_call`
// (a call that runs the kernel several times over rotating buffers).
Timing time_it(int reps, double per_call, const std::function<void()>& fn) {
  fn();
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    fn();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count() / per_call);
  }
  return summarize(std::move(seconds));
}

std::pair<Timing, Timing> time_interleaved(int reps, const std::function<void()>& a,
                                           const std::function<void()>& b) {
  a();
  b();
  std::vector<double> ta, tb;
  for (int r = 0; r < reps; ++r) {
    for (int which = 0; which < 2; ++which) {
      const auto start = Clock::now();
      (which == 0 ? a : b)();
      (which == 0 ? ta : tb).push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  return {summarize(std::move(ta)), summarize(std::move(tb))};
}

Expected<Buffer> allocate(size_t bytes, const char* what) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, std::max<size_t>(64, rounded));
  if (!p) {
    return out_of_memory(std::string("bench: cannot allocate ") + std::to_string(bytes >> 20) +
                         " MiB for " + what);
  }
  Buffer buffer(static_cast<uint8_t*>(p));
  const int64_t pages = static_cast<int64_t>((rounded + 4095) / 4096);
  default_thread_pool().parallel_for(pages, 256, [&](int64_t b, int64_t e) {
    std::memset(
        buffer.get() + b * 4096, 0,
        std::min<size_t>(rounded, static_cast<size_t>(e) * 4096) - static_cast<size_t>(b) * 4096);
  });
  return buffer;
}

// Deterministic values in [-1, 1) without the cost of <random> over a gigabyte.
void fill_floats(float* data, size_t n, uint32_t seed) {
  default_thread_pool().parallel_for(static_cast<int64_t>(n), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
      h ^= h >> 15;
      h *= 2246822519u;
      h ^= h >> 13;
      data[i] = static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
  });
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  in >> one;
  return one;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// The exact command line, from /proc/self/cmdline (arguments are NUL-separated).
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  size_t start = 0;
  bool first = true;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    std::string arg = raw.substr(start, end - start);
    if (first) {  // the program as "tessera", whatever path it was started from
      const size_t slash = arg.rfind('/');
      if (slash != std::string::npos) arg = arg.substr(slash + 1);
      first = false;
    } else {
      out += ' ';
    }
    out += arg;
    start = end + 1;
  }
  return out;
}

Expected<ReadProbe> ReadProbe::create(size_t bytes) {
  ReadProbe probe;
  probe.bytes_ = bytes / 8 * 8;
  TESSERA_ASSIGN_OR_RETURN(probe.data_, allocate(probe.bytes_, "the read-bandwidth array"));
  probe.sinks_.assign(static_cast<size_t>(default_thread_pool().num_threads()) * 8, 0);
  return probe;
}

double ReadProbe::measure_gbs() {
  ThreadPool& pool = default_thread_pool();
  const int threads = pool.num_threads();
  if (sinks_.size() < static_cast<size_t>(threads) * 8)
    sinks_.resize(static_cast<size_t>(threads) * 8);
  const auto* words = reinterpret_cast<const uint64_t*>(data_.get());
  const size_t n_words = bytes_ / 8;
  const auto start = Clock::now();
  // Integer sums with 8 independent accumulators: the compiler vectorises them (integer adds
  // reassociate freely) and they keep up with memory on one core.
  pool.run(threads, [&](int64_t part) {
    const size_t begin = n_words * static_cast<size_t>(part) / static_cast<size_t>(threads);
    const size_t end = n_words * static_cast<size_t>(part + 1) / static_cast<size_t>(threads);
    uint64_t a[8] = {};
    size_t i = begin;
    for (; i + 8 <= end; i += 8) {
      for (int j = 0; j < 8; ++j) a[j] += words[i + static_cast<size_t>(j)];
    }
    for (; i < end; ++i) a[0] += words[i];
    sinks_[static_cast<size_t>(part) * 8] = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
  });
  const double seconds =
      std::max(std::chrono::duration<double>(Clock::now() - start).count(), 1e-9);
  return static_cast<double>(bytes_) / seconds / 1e9;
}

Expected<Bandwidth> bench_bandwidth(const Options& opt, int reps, std::vector<Row>* rows) {
  ThreadPool& pool = default_thread_pool();
  const int threads = pool.num_threads();
  const size_t read_bytes = opt.quick ? (size_t{256} << 20) : (size_t{1} << 30);
  const size_t copy_bytes = opt.quick ? (size_t{128} << 20) : (size_t{512} << 20);  // per array
  Bandwidth bw;
  {
    TESSERA_ASSIGN_OR_RETURN(ReadProbe probe, ReadProbe::create(read_bytes));
    std::vector<double> seconds;
    probe.measure_gbs();  // warm-up (first touch of the pages)
    for (int r = 0; r < reps; ++r) {
      seconds.push_back(static_cast<double>(read_bytes) / (probe.measure_gbs() * 1e9));
    }
    const Timing t = summarize(seconds);
    Row r{"bandwidth", "read-only " + std::to_string(read_bytes >> 20) + " MiB",
          "sum",       "-",
          0,           t,
          "GB/s",      static_cast<double>(read_bytes),
          ""};
    bw.read_gbs = r.value();
    rows->push_back(r);
  }
  {
    TESSERA_ASSIGN_OR_RETURN(Buffer src, allocate(copy_bytes, "the copy source"));
    TESSERA_ASSIGN_OR_RETURN(Buffer dst, allocate(copy_bytes, "the copy destination"));
    const Timing t = time_it(reps, 1, [&] {
      pool.run(threads, [&](int64_t part) {
        const size_t begin = copy_bytes * static_cast<size_t>(part) / static_cast<size_t>(threads);
        const size_t end =
            copy_bytes * static_cast<size_t>(part + 1) / static_cast<size_t>(threads);
        std::memcpy(dst.get() + begin, src.get() + begin, end - begin);
      });
    });
    Row r{"bandwidth",
          "copy 2 x " + std::to_string(copy_bytes >> 20) + " MiB",
          "memcpy",
          "-",
          0,
          t,
          "GB/s",
          2.0 * static_cast<double>(copy_bytes),
          "read + write bytes"};
    bw.copy_gbs = r.value();
    rows->push_back(r);
  }
  return bw;
}

DeviceMemoryPeak::DeviceMemoryPeak(bool active) {
  if (!active || !kernels::cuda::device_memory().ok()) return;
  active_ = true;
  peak_ = current();
  poller_ = std::thread([this] {
    while (!stop_.load(std::memory_order_relaxed)) {
      const int64_t now = current();
      int64_t seen = peak_.load(std::memory_order_relaxed);
      while (now > seen && !peak_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
}

DeviceMemoryPeak::~DeviceMemoryPeak() {
  stop_ = true;
  if (poller_.joinable()) poller_.join();
}

int64_t DeviceMemoryPeak::current() const {
  if (!active_) return -1;
  const auto m = kernels::cuda::device_memory();
  return m.ok() ? static_cast<int64_t>(m->used) : -1;
}

int64_t DeviceMemoryPeak::peak() const {
  if (!active_) return -1;
  const int64_t now = current();
  return std::max(now, peak_.load(std::memory_order_relaxed));
}

void DeviceMemoryPeak::reset() {
  if (active_) peak_ = current();
}

Machine describe_machine() {
  Machine machine;
  machine.cpu = cpu_model_name();
  machine.threads = default_thread_pool().num_threads();
  machine.features = cpu_features_string(cpu_features());
  machine.isa = runtime::cpu_isa();
  machine.blas = runtime::cpu_blas_core();
  machine.simd = simd_enabled();
  machine.date = utc_now();
  machine.command = command_line();
  machine.load = load_average();
  errno = 0;
  const int priority = getpriority(PRIO_PROCESS, 0);
  machine.nice = errno == 0 ? priority : 0;
  return machine;
}

void warn_if_busy(const Machine& machine) {
  if (machine.load > 0.5) {
    std::fprintf(stderr,
                 "tessera-bench: warning: load average %.2f > 0.5, the machine is not idle; "
                 "timings will be low and noisy\n",
                 machine.load);
  }
}

std::string results_path(const Options& opt) {
  return opt.results_path.empty() ? std::string(TESSERA_BENCH_RESULTS) : opt.results_path;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// Replaces the section that starts with `heading` ("## Kernels (CPU)\n"; up to the next "## "
// heading) or appends it.
Status write_results_section(const std::string& path, const std::string& heading,
                             const std::string& section) {
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    if (in) text.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  if (text.empty()) {
    text =
        "# Benchmark results\n\nMeasured numbers, one section per benchmark command; each "
        "section names the command that produced it.\n\n";
  }
  size_t begin = text.rfind("\n" + heading);
  begin = begin == std::string::npos ? (text.rfind(heading, 0) == 0 ? 0 : std::string::npos)
                                     : begin + 1;
  if (begin == std::string::npos) {
    if (!text.empty() && text.back() != '\n') text += '\n';
    if (text.size() < 2 || text.substr(text.size() - 2) != "\n\n") text += '\n';
    text += section;
  } else {
    size_t end = text.find("\n## ", begin + heading.size());
    end = end == std::string::npos ? text.size() : end + 1;
    text.replace(begin, end - begin, section);
  }
  return write_file_atomic(path, text.data(), text.size()).with_context("bench: --write-results");
}

std::string machine_line(const Machine& machine) {
  return machine.cpu + ", " + std::to_string(machine.threads) +
         " threads, features: " + machine.features + ", kernels: " + machine.isa + ", OpenBLAS " +
         machine.blas;
}

nlohmann::json machine_json(const Machine& machine) {
  return {{"cpu", machine.cpu},           {"threads", machine.threads},
          {"features", machine.features}, {"isa", machine.isa},
          {"blas", machine.blas},         {"simd_enabled", machine.simd},
          {"date", machine.date},         {"load_average_1min", machine.load},
          {"nice", machine.nice},         {"command", machine.command}};
}

// "Command / Machine / Date" lines that open every RESULTS.md section, then a blank line.
std::string machine_markdown(const Machine& machine) {
  std::ostringstream md;
  md << "Command: `" << machine.command << "`  \n";
  md << "Machine: " << machine.cpu << ", " << machine.threads
     << " threads, features: " << machine.features << (machine.simd ? "" : " (SIMD disabled)")
     << ", kernels: " << machine.isa << ", OpenBLAS " << machine.blas << "  \n";
  md << "Date: " << machine.date << ", load average before the run: " << machine.load
     << (machine.load > 0.5 ? " (machine not idle: figures may be low)" : "");
  if (machine.nice != 0) md << ", run at nice " << machine.nice;
  md << "\n\n";
  return md.str();
}

}  // namespace tessera::bench
