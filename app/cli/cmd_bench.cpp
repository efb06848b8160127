// `tessera bench kernels [--json FILE] [--quick] [--write-results] [--results FILE]`: CPU kernel
// benchmarks against this machine's own memory bandwidth.
//
// Measures, with default_thread_pool() (so `tessera --threads N bench kernels` sets the threads):
// - memory bandwidth: copy (bytes read + bytes written, STREAM convention) and read-only, over
//   arrays far larger than the caches;
// - cpu::linear as GEMV (m = 1, 2) on the Cube 3D shapes, f32 and bf16 weights, in GB/s of bytes
//   moved and as a fraction of the measured bandwidths. The weights rotate through enough copies
//   to exceed the last-level cache several times, as in a real decode step (24 layers of weights);
// - cpu::linear as GEMM (prefill m = 77, 256, 1024) in GFLOP/s;
// - cpu::attention (causal prefill) and cpu::attention_decode;
// - the ref:: kernels on the smaller shapes, for comparison.
// Every figure is the median of >= 5 timed repetitions after one warm-up run, with min and max.
// Results are printed as a table; --json writes them with a machine header; --write-results
// replaces the "## Kernels (CPU)" section of bench/RESULTS.md (or --results FILE). Timings never
// fail the command: only bad arguments, allocation or file errors do (exit code 1).
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "engine/core/cpu_features.h"
#include "engine/core/dtype.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"
#include "engine/core/thread_pool.h"
#include "kernels/ops.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string json_path;
  std::string results_path;
  bool quick = false;
  bool write_results = false;
};

// Median, min and max of repeated timings (seconds).
struct Timing {
  double median = 0, min = 0, max = 0;
  int reps = 0;
};

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

// 64-byte aligned heap buffer, touched by the pool's threads (first touch places the pages).
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;

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

// ---- memory bandwidth
// ----------------------------------------------------------------------------

struct Bandwidth {
  double copy_gbs = 0;
  double read_gbs = 0;
};

Expected<Bandwidth> bench_bandwidth(const Options& opt, int reps, std::vector<Row>* rows) {
  ThreadPool& pool = default_thread_pool();
  const int threads = pool.num_threads();
  const size_t read_bytes = opt.quick ? (size_t{256} << 20) : (size_t{1} << 30);
  const size_t copy_bytes = opt.quick ? (size_t{128} << 20) : (size_t{512} << 20);  // per array
  Bandwidth bw;
  {
    TESSERA_ASSIGN_OR_RETURN(Buffer data, allocate(read_bytes, "the read-bandwidth array"));
    const auto* words = reinterpret_cast<const uint64_t*>(data.get());
    const size_t n_words = read_bytes / 8;
    std::vector<uint64_t> sinks(static_cast<size_t>(threads) * 8);
    // Integer sums with 8 independent accumulators: the compiler vectorises them (integer adds
    // reassociate freely) and they keep up with memory on one core.
    const Timing t = time_it(reps, 1, [&] {
      pool.run(threads, [&](int64_t part) {
        const size_t begin = n_words * static_cast<size_t>(part) / static_cast<size_t>(threads);
        const size_t end = n_words * static_cast<size_t>(part + 1) / static_cast<size_t>(threads);
        uint64_t a[8] = {};
        size_t i = begin;
        for (; i + 8 <= end; i += 8) {
          for (int j = 0; j < 8; ++j) a[j] += words[i + static_cast<size_t>(j)];
        }
        for (; i < end; ++i) a[0] += words[i];
        sinks[static_cast<size_t>(part) * 8] =
            a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
      });
    });
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

// ---- linear
// ----------------------------------------------------------------------------------------

struct LinearShape {
  const char* name;
  int64_t k, n;  // in -> out features
};

const LinearShape kGemvShapes[] = {{"c_qk", 1536, 3072},
                                   {"mlp_up", 1536, 6144},
                                   {"mlp_down", 6144, 1536},
                                   {"lm_head", 1536, 16387}};

std::string shape_label(const LinearShape& s) {
  return std::string(s.name) + " " + std::to_string(s.k) + "->" + std::to_string(s.n);
}

// Weights of one shape in `copies` copies (f32 master converted to bf16 when asked).
struct WeightSet {
  Buffer storage;
  std::vector<kernels::Weight> copies;
};

Expected<WeightSet> make_weights(const LinearShape& s, DType dtype, size_t min_total_bytes) {
  const size_t elements = static_cast<size_t>(s.n * s.k);
  const size_t bytes = elements * dtype_size(dtype);
  const size_t stride = (bytes + 63) / 64 * 64;
  const size_t copies = std::max<size_t>(1, (min_total_bytes + bytes - 1) / bytes);
  WeightSet set;
  TESSERA_ASSIGN_OR_RETURN(set.storage, allocate(stride * copies, "the weight copies"));
  std::vector<float> master(elements);
  fill_floats(master.data(), elements, 0x5eed + static_cast<uint32_t>(s.n));
  for (auto& v : master) v *= 0.05f;
  for (size_t c = 0; c < copies; ++c) {
    void* p = set.storage.get() + c * stride;
    if (dtype == DType::kBF16) {
      convert_f32_to_bf16(master.data(), static_cast<uint16_t*>(p), elements);
    } else {
      std::memcpy(p, master.data(), bytes);
    }
    set.copies.push_back({p, dtype, s.n, s.k});
  }
  return set;
}

Status bench_gemv(const Options& opt, int reps, const Bandwidth& bw, std::vector<Row>* rows) {
  // Several times the last-level cache (32 MiB on the reference machine), so every call streams
  // its weights from memory as in a real decode step.
  const size_t pool_bytes = opt.quick ? (size_t{128} << 20) : (size_t{256} << 20);
  for (const LinearShape& s : kGemvShapes) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      TESSERA_ASSIGN_OR_RETURN(WeightSet weights, make_weights(s, dtype, pool_bytes));
      std::vector<float> bias(static_cast<size_t>(s.n), 0.01f);
      for (int64_t m : {int64_t{1}, int64_t{2}}) {
        std::vector<float> x(static_cast<size_t>(m * s.k));
        fill_floats(x.data(), x.size(), 7);
        std::vector<float> y(static_cast<size_t>(m * s.n));
        const double copies = static_cast<double>(weights.copies.size());
        const Timing t = time_it(reps, copies, [&] {
          for (const auto& w : weights.copies) {
            kernels::cpu::linear(x.data(), m, w, bias.data(), y.data());
          }
        });
        const double bytes =
            static_cast<double>(s.n * s.k) * static_cast<double>(dtype_size(dtype)) +
            4.0 * static_cast<double>(m * (s.k + s.n) + s.n);
        Row r{"gemv", shape_label(s), "cpu", dtype_name(dtype), m, t, "GB/s", bytes, ""};
        char note[96];
        std::snprintf(note, sizeof note, "%.0f%% of copy, %.0f%% of read bandwidth",
                      100.0 * r.value() / bw.copy_gbs, 100.0 * r.value() / bw.read_gbs);
        r.note = note;
        rows->push_back(r);
        // The reference on the smallest shape only: it is ~50-100x slower.
        if (m == 1 && !opt.quick && std::strcmp(s.name, "c_qk") == 0) {
          const auto& w = weights.copies.front();
          const Timing tr =
              time_it(5, 1, [&] { kernels::ref::linear(x.data(), m, w, bias.data(), y.data()); });
          rows->push_back({"gemv", shape_label(s), "ref", dtype_name(dtype), m, tr, "GB/s", bytes,
                           "plain loops, double accumulation"});
        }
      }
    }
  }
  return Status::ok_status();
}

Status bench_gemm(const Options& opt, int reps, std::vector<Row>* rows) {
  const LinearShape shapes[] = {{"attn_proj", 1536, 1536}, {"mlp_up", 1536, 6144}};
  std::vector<int64_t> ms = {77, 256, 1024};
  if (opt.quick) ms = {77, 256};
  for (const LinearShape& s : shapes) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      TESSERA_ASSIGN_OR_RETURN(WeightSet weights, make_weights(s, dtype, 0));
      const kernels::Weight& w = weights.copies.front();
      std::vector<float> bias(static_cast<size_t>(s.n), 0.01f);
      for (int64_t m : ms) {
        std::vector<float> x(static_cast<size_t>(m * s.k));
        fill_floats(x.data(), x.size(), 11);
        std::vector<float> y(static_cast<size_t>(m * s.n));
        const double flops = 2.0 * static_cast<double>(m * s.n * s.k);
        const Timing t =
            time_it(reps, 1, [&] { kernels::cpu::linear(x.data(), m, w, bias.data(), y.data()); });
        rows->push_back(
            {"gemm", shape_label(s), "cpu", dtype_name(dtype), m, t, "GFLOP/s", flops, ""});
        if (m == 77 && !opt.quick && s.n == 1536) {
          const Timing tr =
              time_it(5, 1, [&] { kernels::ref::linear(x.data(), m, w, bias.data(), y.data()); });
          rows->push_back({"gemm", shape_label(s), "ref", dtype_name(dtype), m, tr, "GFLOP/s",
                           flops, "plain loops, double accumulation"});
        }
      }
    }
  }
  return Status::ok_status();
}

// ---- attention
// -------------------------------------------------------------------------------------

Status bench_attention(const Options& opt, int reps, std::vector<Row>* rows) {
  constexpr int64_t kHeads = 12, kHeadDim = 128;
  const int64_t kv_len = 1024;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const size_t tokens_elems = static_cast<size_t>(kv_len * kHeads * kHeadDim);
  std::vector<float> q(tokens_elems), k(tokens_elems), v(tokens_elems), o(tokens_elems);
  fill_floats(q.data(), q.size(), 21);
  fill_floats(k.data(), k.size(), 22);
  fill_floats(v.data(), v.size(), 23);
  const std::string label = "h=12 d=128 kv=" + std::to_string(kv_len);
  // Causal prefill: query i attends to i + 1 keys, QK^T and PV: 4 * d flops per (query, key).
  const double prefill_flops =
      4.0 * kHeadDim * kHeads * static_cast<double>(kv_len) * static_cast<double>(kv_len + 1) / 2;
  // Decode: one query reads every key and value once.
  const double decode_bytes = 2.0 * static_cast<double>(tokens_elems) * sizeof(float);
  const auto prefill =
      kernels::contiguous_attention(1, kHeads, kv_len, kv_len, kHeadDim, true, scale);
  const auto decode = kernels::contiguous_attention(1, kHeads, 1, kv_len, kHeadDim, true, scale);
  const Timing tp = time_it(
      reps, 1, [&] { kernels::cpu::attention(q.data(), k.data(), v.data(), o.data(), prefill); });
  rows->push_back({"attention", "prefill causal " + label, "cpu", "f32", kv_len, tp, "GFLOP/s",
                   prefill_flops, ""});
  const Timing td = time_it(std::max(reps, 20), 1, [&] {
    kernels::cpu::attention_decode(q.data(), k.data(), v.data(), o.data(), decode);
  });
  rows->push_back({"attention", "decode " + label, "cpu", "f32", 1, td, "GB/s", decode_bytes,
                   "K/V (12 MiB) fit in L3"});
  if (!opt.quick) {
    const Timing tr = time_it(
        5, 1, [&] { kernels::ref::attention(q.data(), k.data(), v.data(), o.data(), decode); });
    rows->push_back({"attention", "decode " + label, "ref", "f32", 1, tr, "GB/s", decode_bytes,
                     "plain loops, double softmax"});
  }
  return Status::ok_status();
}

// ---- output
// ----------------------------------------------------------------------------------------

std::string format_value(const Row& r) {
  if (r.time.reps == 0) return "-";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.1f (%.1f-%.1f)", r.value(), r.value_at(r.time.max),
                r.value_at(r.time.min));
  return buf;
}

std::string format_time(const Row& r) {
  if (r.time.reps == 0) return "-";
  char buf[64];
  const double t = r.time.median;
  if (t < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.1f us", t * 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f ms", t * 1e3);
  }
  return buf;
}

struct Machine {
  std::string cpu, features, date, command;
  int threads = 0;
  int nice = 0;  // the process's nice value: a benchmark run at raised priority says so
  double load = 0;
  bool simd = true;
};

nlohmann::json to_json(const Machine& machine, const Bandwidth& bw, const std::vector<Row>& rows) {
  nlohmann::json j;
  j["machine"] = {{"cpu", machine.cpu},           {"threads", machine.threads},
                  {"features", machine.features}, {"simd_enabled", machine.simd},
                  {"date", machine.date},         {"load_average_1min", machine.load},
                  {"nice", machine.nice},         {"command", machine.command}};
  j["bandwidth_gbs"] = {{"copy", bw.copy_gbs}, {"read", bw.read_gbs}};
  nlohmann::json list = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json e = {{"group", r.group}, {"name", r.name},     {"impl", r.impl},
                        {"dtype", r.dtype}, {"m", r.m},           {"unit", r.unit},
                        {"note", r.note},   {"reps", r.time.reps}};
    if (r.time.reps > 0) {
      e["seconds"] = {{"median", r.time.median}, {"min", r.time.min}, {"max", r.time.max}};
      e["value"] = {{"median", r.value()},
                    {"worst", r.value_at(r.time.max)},
                    {"best", r.value_at(r.time.min)}};
      if (r.group == "gemv") {
        e["fraction_of_copy"] = r.value() / bw.copy_gbs;
        e["fraction_of_read"] = r.value() / bw.read_gbs;
      }
    } else {
      e["available"] = false;
    }
    list.push_back(e);
  }
  j["results"] = list;
  return j;
}

std::string markdown_section(const Machine& machine, const std::vector<Row>& rows) {
  std::ostringstream md;
  md << "## Kernels (CPU)\n\n";
  md << "Command: `" << machine.command << "`  \n";
  md << "Machine: " << machine.cpu << ", " << machine.threads
     << " threads, features: " << machine.features << (machine.simd ? "" : " (SIMD disabled)")
     << "  \n";
  md << "Date: " << machine.date << ", load average before the run: " << machine.load
     << (machine.load > 0.5 ? " (machine not idle: figures may be low)" : "");
  if (machine.nice != 0) md << ", run at nice " << machine.nice;
  md << "\n\n";
  md << "Median of >= 5 runs after a warm-up, (worst-best) in parentheses. GEMV bytes are the "
        "weights plus x and y; the weights rotate through copies totalling several times the "
        "last-level cache, so they come from memory. Copy bandwidth counts bytes read + "
        "written.\n\n";
  md << "| group | kernel | impl | dtype | m | time | rate | unit | note |\n";
  md << "|---|---|---|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    md << "| " << r.group << " | " << r.name << " | " << r.impl << " | " << r.dtype << " | "
       << (r.m ? std::to_string(r.m) : "-") << " | " << format_time(r) << " | " << format_value(r)
       << " | " << r.unit << " | " << r.note << " |\n";
  }
  md << "\n";
  return md.str();
}

// Replaces the "## Kernels (CPU)" section (up to the next "## " heading) or appends it.
Status write_results_section(const std::string& path, const std::string& section) {
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
  const std::string heading = "## Kernels (CPU)\n";
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

void print_table(const std::vector<Row>& rows) {
  std::printf("%-10s %-36s %-6s %-5s %5s %11s  %-24s %-8s %s\n", "group", "kernel", "impl", "dtype",
              "m", "time", "rate (worst-best)", "unit", "note");
  for (const Row& r : rows) {
    std::printf("%-10s %-36s %-6s %-5s %5s %11s  %-24s %-8s %s\n", r.group.c_str(), r.name.c_str(),
                r.impl.c_str(), r.dtype.c_str(), r.m ? std::to_string(r.m).c_str() : "-",
                format_time(r).c_str(), format_value(r).c_str(), r.unit.c_str(), r.note.c_str());
  }
}

Status run_bench_kernels(const Options& opt) {
  Machine machine;
  machine.cpu = cpu_model_name();
  machine.threads = default_thread_pool().num_threads();
  machine.features = cpu_features_string(cpu_features());
  machine.simd = simd_enabled();
  machine.date = utc_now();
  machine.command = command_line();
  machine.load = load_average();
  errno = 0;
  const int priority = getpriority(PRIO_PROCESS, 0);
  machine.nice = errno == 0 ? priority : 0;
  std::printf("tessera bench kernels: %s, %d threads, features: %s\n", machine.cpu.c_str(),
              machine.threads, machine.features.c_str());
  if (machine.load > 0.5) {
    std::fprintf(stderr,
                 "tessera bench: warning: load average %.2f > 0.5, the machine is not idle; "
                 "timings will be low and noisy\n",
                 machine.load);
  }
  const int reps = opt.quick ? 5 : 7;
  std::vector<Row> rows;
  TESSERA_ASSIGN_OR_RETURN(const Bandwidth bw, bench_bandwidth(opt, reps, &rows));
  TESSERA_RETURN_IF_ERROR(bench_gemv(opt, reps, bw, &rows));
  TESSERA_RETURN_IF_ERROR(bench_gemm(opt, reps, &rows));
  TESSERA_RETURN_IF_ERROR(bench_attention(opt, reps, &rows));
  print_table(rows);

  if (!opt.json_path.empty()) {
    const std::string json = to_json(machine, bw, rows).dump(2) + "\n";
    TESSERA_RETURN_IF_ERROR(
        write_file_atomic(opt.json_path, json.data(), json.size()).with_context("bench: --json"));
  }
  if (opt.write_results) {
    const std::string path = opt.results_path.empty()
                                 ? std::string(TESSERA_SOURCE_DIR) + "/bench/RESULTS.md"
                                 : opt.results_path;
    TESSERA_RETURN_IF_ERROR(write_results_section(path, markdown_section(machine, rows)));
    std::printf("wrote the \"Kernels (CPU)\" section of %s\n", path.c_str());
  }
  return Status::ok_status();
}

}  // namespace

void register_bench(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (never fail on timings)");
  bench->require_subcommand(1);
  auto opt = std::make_shared<Options>();
  CLI::App* kernels = bench->add_subcommand(
      "kernels", "CPU kernels vs. this machine's memory bandwidth: GEMV, GEMM, attention");
  kernels->add_option("--json", opt->json_path, "Also write the results as JSON to FILE");
  kernels->add_flag("--quick", opt->quick, "Smaller arrays, fewer shapes, no reference rows");
  kernels->add_flag("--write-results", opt->write_results,
                    "Replace the \"## Kernels (CPU)\" section of bench/RESULTS.md");
  kernels->add_option("--results", opt->results_path,
                      "Results file for --write-results (default: the source tree's "
                      "bench/RESULTS.md)");
  kernels->callback([opt, exit_code] {
    const Status st = run_bench_kernels(*opt);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera bench: %s\n", st.to_string().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tessera::cli
