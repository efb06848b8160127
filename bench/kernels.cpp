// `tessera-bench kernels [--json FILE] [--quick] [--write-results] [--results FILE]`: CPU kernel
// benchmarks against this machine's own memory bandwidth.
//
// Measures, with default_thread_pool() (so `tessera --threads N bench kernels` sets the threads):
// - memory bandwidth: copy (bytes read + bytes written, STREAM convention) and read-only, over
//   arrays far larger than the caches;
// - cpu::linear as GEMV (m = 1, 2; 8 for bf16 and int8) on the Cube 3D shapes, f32, bf16 and int8
//   weights (quantized as `tessera quantize` does), in GB/s of bytes
//   moved and as a fraction of the measured bandwidths. The weights rotate through enough copies
//   to exceed the last-level cache several times, as in a real decode step (24 layers of weights);
//   and on 192 KB of weights in L2 on one core (no hand-off): the rate its arithmetic keeps up
//   with;
// - cpu::linear as GEMM (prefill m = 77, 256, 1024; f32, bf16, int8) in GFLOP/s;
// - cpu::attention (causal prefill) and cpu::attention_decode;
// - one core's multiply-add issue rates: f32 FMA against 16-bit vpmaddwd (AVX2);
// - the ref:: kernels on the smaller shapes, for comparison.
// Every figure is the median of >= 5 timed repetitions after one warm-up run, with min and max.
// Results are printed as a table; --json writes them with a machine header; --write-results
// replaces the "## Kernels (CPU)" section of bench/RESULTS.md (or --results FILE). Timings never
// fail the command: only bad arguments, allocation or file errors do (exit code 1).
//
//
// The other subcommands are in shape.cpp, generate.cpp and diffusion.cpp; the shared machinery in
// common.h.
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
#include <immintrin.h>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/common.h"
#include "bench/subcommands.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "core/trace.h"
#include "engine/shape/gpt.h"
#include "engine/shape/gpt_config.h"
#include "kernels/backend.h"
#include "kernels/cpu/linear_config.h"
#include "kernels/int8.h"
#include "kernels/cpu/gemm_i8.h"
#include "kernels/ops.h"

namespace tessera::bench {

namespace {

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
  std::vector<float> scales;  // kI8: one set, shared by the copies (small beside the weights)
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
  // int8: quantized as `tessera quantize` and --weights int8 do (kernels/int8.h's groups).
  const int64_t group = kernels::int8_group_for(s.k);
  std::vector<int8_t> q;
  if (dtype == DType::kI8) {
    q.resize(elements);
    set.scales.resize(static_cast<size_t>(s.n * (s.k / group)));
    kernels::quantize_int8_rows(master.data(), s.n, s.k, group, q.data(), set.scales.data());
  }
  for (size_t c = 0; c < copies; ++c) {
    void* p = set.storage.get() + c * stride;
    if (dtype == DType::kI8) {
      std::memcpy(p, q.data(), elements);
      set.copies.push_back({p, dtype, s.n, s.k, set.scales.data(), group});
      continue;
    }
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
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI8}) {
      TESSERA_ASSIGN_OR_RETURN(WeightSet weights, make_weights(s, dtype, pool_bytes));
      std::vector<float> bias(static_cast<size_t>(s.n), 0.01f);
      // m = 2: one candidate with guidance; m = 8: four (bf16 and int8, the formats that run them).
      std::vector<int64_t> ms = {1, 2};
      if (dtype != DType::kF32) ms.push_back(8);
      for (int64_t m : ms) {
        std::vector<float> x(static_cast<size_t>(m * s.k));
        fill_floats(x.data(), x.size(), 7);
        std::vector<float> y(static_cast<size_t>(m * s.n));
        const double copies = static_cast<double>(weights.copies.size());
        const Timing t = time_it(reps, copies, [&] {
          for (const auto& w : weights.copies) {
            kernels::cpu::linear(x.data(), m, w, bias.data(), y.data());
          }
        });
        const double scale_bytes =
            dtype == DType::kI8 ? 4.0 * static_cast<double>(weights.scales.size()) : 0.0;
        const double bytes =
            static_cast<double>(s.n * s.k) * static_cast<double>(dtype_size(dtype)) + scale_bytes +
            4.0 * static_cast<double>(m * (s.k + s.n) + s.n);
        Row r{"gemv", shape_label(s), "cpu", dtype_name(dtype), m, t, "GB/s", bytes, ""};
        char note[96];
        std::snprintf(note, sizeof note, "%.0f%% of copy, %.0f%% of read bandwidth",
                      100.0 * r.value() / bw.copy_gbs, 100.0 * r.value() / bw.read_gbs);
        r.note = note;
        rows->push_back(r);
        const kernels::cpu::linear_detail::LinearConfig config =
            kernels::cpu::linear_detail::default_linear_config();
        if (dtype == DType::kBF16 && config.bf16_gemm) {
          // Same layer, f32 x against the widened weights: the GEMV of CPUs without AVX-512 BF16
          // and the baseline of the vdpbf16ps kernel's speed-up (same run).
          kernels::cpu::linear_detail::LinearConfig f32x = config;
          f32x.bf16_gemm = false;
          const Timing t2 = time_it(reps, copies, [&] {
            for (const auto& w : weights.copies) {
              kernels::cpu::linear_detail::linear_with_config(f32x, x.data(), m, w, bias.data(),
                                                              y.data());
            }
          });
          Row r2{"gemv", shape_label(s), "cpu-f32x", dtype_name(dtype), m, t2, "GB/s", bytes, ""};
          std::snprintf(note, sizeof note, "f32 x, widened weights; %.0f%% of read bandwidth",
                        100.0 * r2.value() / bw.read_gbs);
          r2.note = note;
          rows->push_back(r2);
        }
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

// The GEMV's compute ceiling on one core: the same kernels on 192 KB of weights (the largest a
// linear call runs on the calling thread, no hand-off), called back to back so that the weights
// stay in L2: GB/s of weights the core's arithmetic keeps up with. A decode step is bound by memory
// only while the machine's read bandwidth per core stays below this (int8 weights cost more
// instructions per byte than bf16: vpmovsxbw + vpdpwssd on 16-bit x against vdpbf16ps).
Status bench_gemv_compute(const Options& opt, std::vector<Row>* rows) {
  const int64_t kBytes = 192 * 1024;
  for (const int64_t k : {int64_t{1536}, int64_t{6144}}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI8}) {
      const LinearShape s{"in L2, 1 core", k,
                          kBytes / (k * static_cast<int64_t>(dtype_size(dtype)))};
      TESSERA_ASSIGN_OR_RETURN(WeightSet weights, make_weights(s, dtype, 0));
      const kernels::Weight& w = weights.copies.front();
      for (int64_t m : {int64_t{2}, int64_t{8}}) {
        std::vector<float> x(static_cast<size_t>(m * s.k)), y(static_cast<size_t>(m * s.n));
        fill_floats(x.data(), x.size(), 9);
        const int calls = opt.quick ? 500 : 2000;
        const Timing t = time_it(opt.quick ? 5 : 7, calls, [&] {
          for (int c = 0; c < calls; ++c) {
            kernels::cpu::linear(x.data(), m, w, nullptr, y.data());
          }
        });
        rows->push_back({"gemv", shape_label(s), "cpu-l2", dtype_name(dtype), m, t, "GB/s",
                         static_cast<double>(kBytes), "the core's arithmetic: the ceiling"});
      }
    }
  }
  return Status::ok_status();
}

// Multiply-add issue rates of one core, the arithmetic behind the AVX2 kernels' choices and the
// query path's compute floor: f32 vfmadd231ps (8 multiply-adds per ymm instruction) against 16-bit
// vpmaddwd + vpaddd (16 per instruction pair: what an int16 x int16 or int8-widened GEMM would run
// on), and AVX-512 BF16's vdpbf16ps (32 per zmm instruction) where the CPU has it. Twelve
// independent chains each, so the rate is the instructions' throughput, not their latency. On a CPU
// that issues vpmaddwd at half the FMA's rate (Zen 4: one per cycle against two) 16-bit products
// buy nothing over f32 FMAs.
__attribute__((target("avx2,fma"))) double fma_loop(int64_t n) {
  __m256 x = _mm256_set1_ps(1.0001f), y = _mm256_set1_ps(0.9999f);
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(static_cast<float>(i));
  for (int64_t j = 0; j < n; ++j) {
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(x, y, a[i]);
    asm volatile("" : "+x"(x), "+x"(y));
  }
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  return _mm256_cvtss_f32(s);
}
__attribute__((target("avx2,fma"))) double madd_loop(int64_t n) {
  __m256i w = _mm256_set1_epi16(3);
  __m256i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_epi32(i);
  for (int64_t j = 0; j < n; ++j) {
    for (int i = 0; i < 12; ++i) a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(w, a[i]));
    asm volatile("" : "+x"(w));
  }
  __m256i s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_epi32(s, a[i]);
  return _mm256_extract_epi32(s, 0);
}

__attribute__((target("avx512f,avx512bf16"))) double dpbf16_loop(int64_t n) {
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3f80);
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(static_cast<float>(i));
  for (int64_t j = 0; j < n; ++j) {
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
    asm volatile("" : "+v"(x), "+v"(y));
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0];
}

Status bench_issue_rates(const Options& opt, std::vector<Row>* rows) {
  if (!cpu_features().avx2 || !cpu_features().fma) return Status::ok_status();
  const int64_t n = opt.quick ? 2'000'000 : 10'000'000;
  volatile double sink = 0;
  const Timing fma = time_it(5, 1, [&] { sink = sink + fma_loop(n); });
  const Timing madd = time_it(5, 1, [&] { sink = sink + madd_loop(n); });
  const double per_call = static_cast<double>(n) * 12;
  rows->push_back({"arith", "vfmadd231ps ymm, 12 chains", "cpu-1core", "f32", 1, fma,
                   "G multiply-adds/s", per_call * 8, "f32 multiply-adds, 8 per instruction"});
  rows->push_back({"arith", "vpmaddwd + vpaddd ymm, 12 chains", "cpu-1core", "i16", 1, madd,
                   "G multiply-adds/s", per_call * 16, "16-bit multiply-adds, 16 per vpmaddwd"});
  if (cpu_features().avx512bf16) {  // the AVX-512 query path's instruction (gemm_bf16)
    const Timing dp = time_it(5, 1, [&] { sink = sink + dpbf16_loop(n); });
    rows->push_back({"arith", "vdpbf16ps zmm, 12 chains", "cpu-1core", "bf16", 1, dp,
                     "G multiply-adds/s", per_call * 32, "bf16 multiply-adds, 32 per instruction"});
  }
  return Status::ok_status();
}

Status bench_gemm(const Options& opt, int reps, std::vector<Row>* rows) {
  const LinearShape shapes[] = {{"attn_proj", 1536, 1536}, {"mlp_up", 1536, 6144}};
  std::vector<int64_t> ms = {16, 77, 256, 1024, 4096};
  if (opt.quick) ms = {16, 77, 256};
  for (const LinearShape& s : shapes) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI8}) {
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
        const kernels::cpu::linear_detail::LinearConfig config =
            kernels::cpu::linear_detail::default_linear_config();
        rows->push_back({"gemm", shape_label(s), "cpu", dtype_name(dtype), m, t, "GFLOP/s", flops,
                         dtype == DType::kBF16 && config.bf16_gemm
                             ? "AVX-512 BF16 GEMM (x rounded to bf16)"
                         : dtype == DType::kI8 ? "int8 weights, x in int16 per group"
                                               : ""});
        if (dtype == DType::kBF16 && config.bf16_gemm) {
          // The same layer without gemm_bf16 (f32 x, weights widened): the path CPUs without
          // AVX-512 BF16 take, and the baseline of the bf16 GEMM's speed-up.
          kernels::cpu::linear_detail::LinearConfig f32x = config;
          f32x.bf16_gemm = false;
          const Timing t2 = time_it(reps, 1, [&] {
            kernels::cpu::linear_detail::linear_with_config(f32x, x.data(), m, w, bias.data(),
                                                            y.data());
          });
          rows->push_back({"gemm", shape_label(s), "cpu-f32x", dtype_name(dtype), m, t2, "GFLOP/s",
                           flops, "bf16 weights widened, f32 x (no bf16 GEMM)"});
        }
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

// The occupancy queries' layers (Cube 3D's shape decoder: width 768, MLP 3072) at the decoder's
// chunk of 8192 points: the bf16 GEMM (what bf16 and int8 models ran) against the int8 GEMM with
// 8-bit activations (cpu/gemm_i8.h: what --weights int8 runs them with on AVX-512 VNNI CPUs).
Status bench_query_gemm(const Options& opt, int reps, std::vector<Row>* rows) {
  const LinearShape shapes[] = {{"proj", 768, 768}, {"mlp_up", 768, 3072}, {"mlp_down", 3072, 768}};
  const int64_t m = opt.quick ? 2048 : 8192;
  for (const LinearShape& s : shapes) {
    TESSERA_ASSIGN_OR_RETURN(WeightSet weights, make_weights(s, DType::kBF16, 0));
    const kernels::Weight& w = weights.copies.front();
    std::vector<float> bias(static_cast<size_t>(s.n), 0.01f);
    std::vector<float> x(static_cast<size_t>(m * s.k));
    fill_floats(x.data(), x.size(), 13);
    std::vector<float> y(static_cast<size_t>(m * s.n));
    const double flops = 2.0 * static_cast<double>(m * s.n * s.k);
    const std::string label = "query " + shape_label(s);
    const Timing t =
        time_it(reps, 1, [&] { kernels::cpu::linear(x.data(), m, w, bias.data(), y.data()); });
    rows->push_back({"gemm", label, "cpu", "BF16", m, t, "GFLOP/s", flops,
                     kernels::cpu::linear_detail::default_linear_config().bf16_gemm
                         ? "AVX-512 BF16 GEMM (x rounded to bf16)"
                         : "bf16 weights widened, f32 x"});
    if (kernels::cpu::gemm_i8::available()) {
      const kernels::cpu::gemm_i8::PackedI8 packed = kernels::cpu::gemm_i8::pack(w);
      const Timing t8 = time_it(reps, 1, [&] {
        kernels::cpu::gemm_i8::gemm(m, x.data(), s.k, packed, bias.data(), y.data(), s.n);
      });
      rows->push_back({"gemm", label, "cpu-i8a", "I8", m, t8, "GFLOP/s", flops,
                       "int8 weights per channel, x in int8 per row (vpdpbusd)"});
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

nlohmann::json to_json(const Machine& machine, const Bandwidth& bw, const std::vector<Row>& rows) {
  nlohmann::json j;
  j["machine"] = machine_json(machine);
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
  md << "## Kernels (CPU)\n\n" << machine_markdown(machine);
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
  const Machine machine = describe_machine();
  std::printf("tessera-bench kernels: %s\n", machine_line(machine).c_str());
  warn_if_busy(machine);
  const int reps = opt.quick ? 5 : 7;
  std::vector<Row> rows;
  TESSERA_ASSIGN_OR_RETURN(const Bandwidth bw, bench_bandwidth(opt, reps, &rows));
  TESSERA_RETURN_IF_ERROR(bench_gemv(opt, reps, bw, &rows));
  TESSERA_RETURN_IF_ERROR(bench_gemv_compute(opt, &rows));
  TESSERA_RETURN_IF_ERROR(bench_issue_rates(opt, &rows));
  TESSERA_RETURN_IF_ERROR(bench_gemm(opt, reps, &rows));
  TESSERA_RETURN_IF_ERROR(bench_query_gemm(opt, reps, &rows));
  TESSERA_RETURN_IF_ERROR(bench_attention(opt, reps, &rows));
  print_table(rows);

  if (!opt.json_path.empty()) {
    const std::string json = to_json(machine, bw, rows).dump(2) + "\n";
    TESSERA_RETURN_IF_ERROR(
        write_file_atomic(opt.json_path, json.data(), json.size()).with_context("bench: --json"));
  }
  if (opt.write_results) {
    const std::string path = results_path(opt);
    TESSERA_RETURN_IF_ERROR(
        write_results_section(path, "## Kernels (CPU)\n", markdown_section(machine, rows)));
    std::printf("wrote the \"Kernels (CPU)\" section of %s\n", path.c_str());
  }
  return Status::ok_status();
}

}  // namespace

void register_kernels_bench(CLI::App* bench, int* exit_code) {
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
      std::fprintf(stderr, "tessera-bench: %s\n", st.to_string().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tessera::bench
