// `tessera-bench shape [--quick] [--tokens N] [--json FILE] [--write-results] [--results FILE]`:
// the Cube 3D GPT on the CPU backend. A full-size v0.5 model (tensor names and shapes from
// tests/fixtures/cube3d/cube3d-gpt_v05-tensors.txt, random bf16 values built in memory: no
// download, no disk; ~3.6 GB of RAM) and the parity fixture GPT (tests/fixtures/parity) as a
// small-model row. Per model, batch 2 ([cond ; uncond]): text/bbox projection; prefill from
// scratch and with the unconditional row reused; at 64, 256 and 1024 tokens in the cache (--quick:
// 64, 256) the uncached step (forward_full: 1-3 runs; ~1 minute at 1024 on 2 cores) and N
// KV-cache decode steps (--tokens, default 16) with median/p50/p99, against the bandwidth floor:
// bf16 weight bytes per step / the read bandwidth probed just before each step (same process,
// ratio per step, median); and a
// per-op breakdown of a decode step (every Backend call timed through a forwarding backend).
// --device cuda runs it all on the CUDA backend (the floor's bandwidth then from a device copy).
// --write-results replaces the "## Shape engine (CPU)" (or "(CUDA)") section of bench/RESULTS.md.
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/common.h"
#include "bench/random_checkpoint.h"
#include "bench/previews.h"
#include "bench/subcommands.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "core/trace.h"
#include "engine/weights/weight_store.h"
#include "engine/mesh/extraction.h"
#include "engine/runtime/session.h"
#include "engine/shape/generator.h"
#include "engine/shape/gpt.h"
#include "engine/shape/gpt_config.h"
#include "engine/shape/pipeline.h"
#include "engine/shape/shape_decoder.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/forwarding_backend.h"
#include "kernels/ops.h"

namespace tessera::bench {

namespace {

// A Backend that forwards every call to the wrapped backend and, while `trace` is set, adds the
// time of each op and transfer to it under the op's name ("linear 1536->6144", "attention_decode",
// "layer_norm", ...): the per-op breakdown of a decode step. Device ops only enqueue, so each timed
// op is followed by a synchronize on a device backend (the trace would time the launch otherwise).
// Each op's weight bytes per call are kept beside (weight_bytes) for the breakdown's bandwidth.
class TimedBackend final : public kernels::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  Trace* trace = nullptr;                      // null: no timing
  std::map<std::string, double> weight_bytes;  // by op name: weight bytes read, summed over calls

 protected:
  Status run_op(const kernels::OpLabel& label, std::function<Status()> run) override {
    if (!trace || label.kind == kernels::OpLabel::Kind::kHost) return run();
    const Stopwatch watch;
    Status st = run();
    if (st.ok() && inner().device() != Device::kCpu) st = inner().synchronize();
    const std::string name = label.name();
    trace->add(name, watch.elapsed_ms());
    double bytes = 0;
    if (label.weight != nullptr) {
      // linear_swiglu reads the gate and the up weight, of one shape.
      bytes = (std::string(label.op) == "linear_swiglu" ? 2.0 : 1.0) * bytes_of(*label.weight);
    }
    for (int64_t p = 0; label.parts != nullptr && p < label.n_parts; ++p) {
      bytes += bytes_of(label.parts[p].w);
    }
    if (bytes > 0) weight_bytes[name] += bytes;
    return st;
  }

 private:
  static double bytes_of(const kernels::Weight& w) {
    double b = static_cast<double>(w.rows) * static_cast<double>(w.cols) *
               static_cast<double>(dtype_size(w.dtype));
    if (w.dtype == DType::kI8 && w.group > 0) {
      b += static_cast<double>(w.rows) * static_cast<double>(w.cols / w.group) * sizeof(float);
    }
    return b;
  }
};

// A whole object's time from measured parts (estimate_object says how).
struct ObjectEstimate {
  double prefill_ms = 0, decode_ms = 0, latent_ms = 0, query_us = 0, extraction_ms = 0;
  // us per query without the bf16 GEMM (same run, alternated); 0 where that path does not exist.
  double query_us_f32x = 0;
  int64_t queries = 0, tokens = 0;
  double polygonize_ms = 0;
  // One live preview (the studio's: a prefix filled to 1024 tokens, extraction at 33): latent
  // decode + the sphere's queries at 33 x us/query + their polygonization.
  int64_t preview_queries = 0;
  double preview_ms = 0;
  double total_s() const {
    return (prefill_ms + decode_ms + latent_ms + extraction_ms + polygonize_ms) / 1e3;
  }
};

// One model's results.
struct ShapeLengthResult {
  int64_t length = 0;
  Timing kv;  // KV-cache decode step at this length
  double kv_p50 = 0, kv_p99 = 0;
  Timing no_kv;         // uncached step (recomputes condition + `length` tokens)
  double read_gbs = 0;  // median of the read-bandwidth probes interleaved with the steps
  double weight_floor_ms = 0, kv_floor_ms = 0;  // weights only; weights + K/V of both rows
  // Medians over the steps of (step time / floor at the probe taken just before that step).
  double floor_ratio = 0, kv_floor_ratio = 0;
  // Device-resident loop at this length (GptSession::decode_at + Backend::choose_token, greedy):
  // eager launches with a synchronisation per step, and the step recorded once and replayed
  // (CUDA graphs; NaN where the backend cannot record), ms per step, medians.
  double resident_ms = std::nan(""), graph_ms = std::nan("");
};

// The device-resident loop (ShapeGenerator's on backends that have it) at the session's current
// length: `steps` eager steps (decode_at + greedy choose_token, synchronised per step), then, where
// the backend records, one warm-up, the step recorded, and `steps` replays timed together (the
// host does not wait per token there: that is the point of recording).
Status measure_resident(shape::GptSession& session, kernels::Backend& backend,
                        const shape::GptConfig& c, int64_t steps, ShapeLengthResult* lr) {
  if (backend.decode() == nullptr) return Status();
  TESSERA_ASSIGN_OR_RETURN(kernels::DeviceBuffer step_buf, backend.allocate(sizeof(int64_t)));
  TESSERA_ASSIGN_OR_RETURN(kernels::DeviceBuffer rng_buf, backend.allocate(4 * sizeof(uint64_t)));
  const int64_t ring_size = 2 * steps + 2;
  TESSERA_ASSIGN_OR_RETURN(kernels::DeviceBuffer ring_buf,
                           backend.allocate_host_visible(static_cast<size_t>(ring_size) * 4));
  TESSERA_RETURN_IF_ERROR(
      shape::reset_resident_state(backend, step_buf.data(), rng_buf.data(), session.length(), 1));
  const kernels::TokenChoice choice =
      shape::make_token_choice(c, /*guided=*/true, session.max_shape_tokens(), SamplingSettings());
  auto one_step = [&]() -> Status {
    TESSERA_RETURN_IF_ERROR(session.decode_at(step_buf.as<int64_t>()));
    return backend.decode()->choose_token(session.device_logits(), choice, step_buf.as<int64_t>(),
                                          rng_buf.as<uint64_t>(), session.device_ids(), 2,
                                          ring_buf.as<int32_t>(), ring_size);
  };
  std::vector<double> ms;
  for (int64_t s = 0; s < steps; ++s) {
    const Stopwatch watch;
    TESSERA_RETURN_IF_ERROR(one_step());
    TESSERA_RETURN_IF_ERROR(backend.synchronize());
    ms.push_back(watch.elapsed_ms());
    TESSERA_RETURN_IF_ERROR(session.advance(1));
  }
  lr->resident_ms = percentile(ms, 50);
  if (!backend.can_record()) return Status();
  TESSERA_RETURN_IF_ERROR(backend.begin_recording());
  Status recorded = one_step();
  Expected<int64_t> id = backend.end_recording();
  TESSERA_RETURN_IF_ERROR(recorded);
  if (!id.ok()) return id.status();
  struct Drop {
    kernels::Backend& be;
    int64_t id;
    ~Drop() { be.drop_recording(id); }
  } drop{backend, *id};
  TESSERA_RETURN_IF_ERROR(backend.replay(*id));  // warm-up
  TESSERA_RETURN_IF_ERROR(backend.synchronize());
  TESSERA_RETURN_IF_ERROR(session.advance(1));
  const Stopwatch watch;
  for (int64_t s = 0; s < steps; ++s) TESSERA_RETURN_IF_ERROR(backend.replay(*id));
  TESSERA_RETURN_IF_ERROR(backend.synchronize());
  lr->graph_ms = watch.elapsed_ms() / static_cast<double>(steps);
  return session.advance(steps);
}

// One row of the candidates table: a decode step of C candidates together (2C rows with guidance,
// ShapeGenerator::generate_candidates' layout) at batch_length tokens in the cache.
struct BatchRow {
  int64_t candidates = 0;
  double step_ms = 0;             // median over the steps
  double read_gbs = 0;            // median of the probes taken before each step
  double bandwidth_floor_ms = 0;  // (weights + K/V of all rows) / read bandwidth
  double compute_floor_ms = 0;    // 2 x weight elements x rows / the GEMM rate measured in this run
  double floor_ratio = 0;  // median over the steps of step / max(floors at that step's probe)
};

struct ShapeModelResult {
  std::string name, config;
  std::vector<BatchRow> batch;
  int64_t batch_length = 0;
  double gemm_gflops = 0;  // the compute ceiling's rate: one large layer at m = 64 rows
  int64_t weight_bytes = 0;
  Timing condition;
  double prefill_cold_ms = 0;  // fresh session: both rows' condition streams
  // Prefill from scratch in fresh sessions after the first (median of reps), with the rows'
  // condition streams stacked (the default where it gives the same bits) and one row at a time,
  // alternated in one run; stacked_condition says whether the model stacks at all.
  Timing prefill_scratch, prefill_scratch_unstacked;
  bool stacked_condition = false;
  Timing prefill;  // new prompt row, unconditional row's condition K/V reused
  std::vector<ShapeLengthResult> lengths;
  std::vector<std::pair<std::string, TraceStats>> breakdown;  // per op kind, one decode step
  std::map<std::string, double> breakdown_weight_bytes;       // per op kind with weights, all calls
  // per op kind, one prefill from scratch in a fresh session (both rows' condition streams)
  std::vector<std::pair<std::string, TraceStats>> prefill_breakdown;
  double prefill_traced_ms = 0;  // that prefill's own time
  int64_t breakdown_steps = 0, breakdown_length = 0;
  bool has_object = false;  // full-size model only
  ObjectEstimate object;
};

// Smallest read-bandwidth probe (taken before every timed decode step): far past the caches.
constexpr size_t kMinProbeBytes = size_t{256} << 20;

// The floor's bandwidth on the backend's own memory, over as many bytes as a decode step reads
// (at least kMinProbeBytes): on this shared VM a short read (256 MiB, ~5 ms) caught bursts of up
// to 57 GB/s that a 50-70 ms step never sustains (same run: 1.86 GB steps at 35 GB/s), so the
// probe reads the step's volume. On the CPU a ReadProbe; on a device a copy between two device
// buffers (bytes read + written / time, the STREAM convention; a device's read-only rate is not
// measurable through the Backend interface), synchronized.
class BandwidthProbe {
 public:
  static Expected<BandwidthProbe> create(kernels::Backend& backend, size_t step_bytes) {
    BandwidthProbe p;
    p.backend_ = &backend;
    p.bytes_ = std::max(kMinProbeBytes, step_bytes / 64 * 64);
    if (backend.device() == Device::kCpu) {
      TESSERA_ASSIGN_OR_RETURN(ReadProbe read, ReadProbe::create(p.bytes_));
      p.read_ = std::make_unique<ReadProbe>(std::move(read));
    } else {
      p.bytes_ /= 2;  // read + written = the step's bytes
      TESSERA_ASSIGN_OR_RETURN(p.src_, backend.allocate(p.bytes_));
      TESSERA_ASSIGN_OR_RETURN(p.dst_, backend.allocate(p.bytes_));
      TESSERA_RETURN_IF_ERROR(backend.fill_zero(p.src_.data(), p.bytes_));
    }
    return p;
  }
  Expected<double> measure_gbs() {
    if (read_) return read_->measure_gbs();
    TESSERA_RETURN_IF_ERROR(backend_->synchronize());
    const Stopwatch watch;
    TESSERA_RETURN_IF_ERROR(backend_->copy(dst_.data(), src_.data(), bytes_));
    TESSERA_RETURN_IF_ERROR(backend_->synchronize());
    const double seconds = std::max(watch.elapsed_ms() / 1e3, 1e-9);
    return 2.0 * static_cast<double>(bytes_) / seconds / 1e9;
  }

 private:
  kernels::Backend* backend_ = nullptr;
  size_t bytes_ = 0;
  std::unique_ptr<ReadProbe> read_;
  kernels::DeviceBuffer src_, dst_;
};

// The batch table (BatchRow): a session of 16 rows; both rows of one generation run
// forward_full to `len` tokens and are copied to every other candidate's rows (copy_row, as
// generate_candidates does after its prefill), then `steps` decode steps of 2C rows are timed, each
// after a read-bandwidth probe. The compute ceiling's rate comes from the model's largest layer at
// m = 64 rows, timed in the same run.
Status bench_candidates(const shape::CubeGpt& model, kernels::Backend& backend,
                        BandwidthProbe& probe, int64_t len, int64_t steps, ShapeModelResult* res) {
  const shape::GptConfig& c = model.config();
  constexpr int64_t kMaxCandidates = 8;
  TESSERA_ASSIGN_OR_RETURN(auto session,
                           shape::GptSession::create(model, 2 * kMaxCandidates, len + steps + 1));
  std::vector<float> hidden(static_cast<size_t>(2 * c.text_len * c.text_embed_dim));
  fill_floats(hidden.data(), hidden.size(), 77);
  std::vector<float> logits(static_cast<size_t>(2 * kMaxCandidates * c.vocab_size));
  std::vector<int32_t> full(static_cast<size_t>(2 * len));
  for (size_t i = 0; i < full.size(); ++i) {
    full[i] = static_cast<int32_t>((i * 2654435761u >> 9) % static_cast<uint64_t>(c.codebook_size));
  }
  full[0] = full[static_cast<size_t>(len)] = c.bos_id();
  // The compute ceiling's rate: the largest decode layer (the MLP's up projection) at m = 64.
  {
    const kernels::Weight& w = model.weights().dual.front().post_1.up.w;
    std::vector<float> x(static_cast<size_t>(64 * w.cols)), y(static_cast<size_t>(64 * w.rows));
    fill_floats(x.data(), x.size(), 5);
    TESSERA_ASSIGN_OR_RETURN(kernels::DeviceBuffer xb, backend.allocate(x.size() * 4));
    TESSERA_ASSIGN_OR_RETURN(kernels::DeviceBuffer yb, backend.allocate(y.size() * 4));
    TESSERA_RETURN_IF_ERROR(backend.upload(xb.data(), x.data(), x.size() * 4));
    std::vector<double> ms;
    for (int r = 0; r < 5; ++r) {
      TESSERA_RETURN_IF_ERROR(backend.synchronize());
      const Stopwatch watch;
      TESSERA_RETURN_IF_ERROR(backend.linear(xb.as<float>(), 64, w, nullptr, yb.as<float>()));
      TESSERA_RETURN_IF_ERROR(backend.synchronize());
      ms.push_back(watch.elapsed_ms());
    }
    const double flops = 2.0 * 64.0 * static_cast<double>(w.rows) * static_cast<double>(w.cols);
    res->gemm_gflops = flops / (percentile(ms, 50) / 1e3) / 1e9;
  }
  const double weight_bytes = static_cast<double>(model.decode_weight_bytes());
  const double weight_elements = static_cast<double>(c.decode_weight_elements());
  res->batch_length = len;
  for (int64_t cands : {1, 2, 4, 8}) {
    const int64_t rows = 2 * cands;
    TESSERA_RETURN_IF_ERROR(session->set_condition(2, hidden.data(), nullptr));
    TESSERA_RETURN_IF_ERROR(session->forward_full(full.data(), len, logits.data(), nullptr));
    for (int64_t r = 2; r < rows; ++r) TESSERA_RETURN_IF_ERROR(session->copy_row(r % 2, r));
    TESSERA_RETURN_IF_ERROR(session->set_rows(rows));
    const double kv_bytes =
        2.0 * static_cast<double>(rows) * static_cast<double>(dtype_size(session->kv_dtype())) *
        static_cast<double>(c.n_embd) *
        (static_cast<double>(c.n_dual) * static_cast<double>(c.cond_len() + len) +
         static_cast<double>(c.n_single) * static_cast<double>(len));
    const double compute_ms =
        2.0 * weight_elements * static_cast<double>(rows) / (res->gemm_gflops * 1e9) * 1e3;
    std::vector<double> ms, gbs, ratio;
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (int64_t s = 0; s < steps; ++s) {
      for (int64_t r = 0; r < rows; ++r) {
        ids[static_cast<size_t>(r)] = static_cast<int32_t>((s * 31 + r / 2 * 7) % c.codebook_size);
      }
      TESSERA_ASSIGN_OR_RETURN(const double probe_gbs, probe.measure_gbs());
      const Stopwatch watch;
      TESSERA_RETURN_IF_ERROR(session->decode(ids.data(), logits.data()));
      const double t = watch.elapsed_ms();
      ms.push_back(t);
      gbs.push_back(probe_gbs);
      const double floor_ms =
          std::max((weight_bytes + kv_bytes) / (probe_gbs * 1e9) * 1e3, compute_ms);
      ratio.push_back(t / floor_ms);
    }
    BatchRow row;
    row.candidates = cands;
    row.step_ms = percentile(ms, 50);
    row.read_gbs = percentile(gbs, 50);
    row.bandwidth_floor_ms = (weight_bytes + kv_bytes) / (row.read_gbs * 1e9) * 1e3;
    row.compute_floor_ms = compute_ms;
    row.floor_ratio = percentile(ratio, 50);
    std::printf("  candidates %lld: decode step %.2f ms (%.2fx of 1), %.0f tokens/s\n",
                static_cast<long long>(cands), row.step_ms,
                res->batch.empty() ? 1.0 : row.step_ms / res->batch.front().step_ms,
                1000.0 * static_cast<double>(cands) / row.step_ms);
    std::fflush(stdout);
    res->batch.push_back(row);
  }
  return Status();
}

Expected<ShapeModelResult> bench_shape_model(const std::string& name, const SafeTensors& file,
                                             const shape::NormalizedCodebook& codebook,
                                             TimedBackend& backend,
                                             const std::vector<int64_t>& lengths, int64_t steps,
                                             bool quick, bool int8 = false) {
  ShapeModelResult res;
  res.name = name;
  shape::GptLoadOptions load_options;
  load_options.int8 = int8;
  TESSERA_ASSIGN_OR_RETURN(auto model, shape::CubeGpt::load(file, codebook, backend, load_options));
  const shape::GptConfig& c = model->config();
  res.config = c.summary() + ", " +
               (int8 ? std::string("int8 (from bf16, a scale per 128)")
                     : std::string(dtype_name(model->weight_dtype()))) +
               " weights";
  res.weight_bytes = model->decode_weight_bytes();
  // Room for the KV steps, the device-resident eager steps and the recorded ones (+ 2 warm-ups).
  const int64_t max_len = lengths.back() + 3 * steps + 3;
  TESSERA_ASSIGN_OR_RETURN(auto session, shape::GptSession::create(*model, 2, max_len));
  // [cond ; uncond] CLIP states: random prompt row, a different random "empty prompt" row.
  std::vector<float> hidden(static_cast<size_t>(2 * c.text_len * c.text_embed_dim));
  fill_floats(hidden.data(), hidden.size(), 31);
  std::vector<float> logits(static_cast<size_t>(2 * c.vocab_size));
  std::vector<int32_t> ids(static_cast<size_t>(2 * max_len));
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 2654435761u >> 7) % static_cast<uint64_t>(c.codebook_size));
  }
  const int32_t bos[2] = {c.bos_id(), c.bos_id()};
  const int reps = quick ? 2 : 3;
  TESSERA_ASSIGN_OR_RETURN(
      BandwidthProbe probe,
      BandwidthProbe::create(backend, static_cast<size_t>(model->decode_weight_bytes())));
  TESSERA_RETURN_IF_ERROR(probe.measure_gbs().status());  // warm-up: page tables, TLB
  Status failed;
  res.condition = time_it(reps, 1, [&] {
    const Status st = session->set_condition(2, hidden.data(), nullptr);
    if (!st.ok()) failed = st;
  });
  TESSERA_RETURN_IF_ERROR(failed);
  TESSERA_ASSIGN_OR_RETURN(session, shape::GptSession::create(*model, 2, max_len));
  TESSERA_RETURN_IF_ERROR(session->set_condition(2, hidden.data(), nullptr));
  // Prefill from scratch once (a fresh session: no condition K/V cached), then with a new prompt
  // row each time and the same unconditional row, as in consecutive generations (the session
  // reuses that row's condition K/V, gpt.h).
  {
    const Stopwatch watch;
    TESSERA_RETURN_IF_ERROR(session->prefill(bos, logits.data()));
    res.prefill_cold_ms = watch.elapsed_ms();
  }
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    fill_floats(hidden.data(), hidden.size() / 2, 100 + static_cast<uint32_t>(r));  // row 0 only
    TESSERA_RETURN_IF_ERROR(session->set_condition(2, hidden.data(), nullptr));
    const Stopwatch watch;
    TESSERA_RETURN_IF_ERROR(session->prefill(bos, logits.data()));
    seconds.push_back(watch.elapsed_ms() / 1e3);
  }
  res.prefill = summarize(seconds);
  {
    std::vector<double> on, off;
    for (int r = 0; r < 2 * reps + 2; ++r) {
      const bool stack = r % 2 == 0;
      shape::GptSessionOptions so;
      so.stack_condition_rows = stack;
      TESSERA_ASSIGN_OR_RETURN(auto fresh, shape::GptSession::create(*model, 2, max_len, so));
      if (stack) res.stacked_condition = fresh->stacks_condition_rows();
      TESSERA_RETURN_IF_ERROR(fresh->set_condition(2, hidden.data(), nullptr));
      const Stopwatch watch;
      TESSERA_RETURN_IF_ERROR(fresh->prefill(bos, logits.data()));
      (stack ? on : off).push_back(watch.elapsed_ms() / 1e3);
    }
    res.prefill_scratch = summarize(on);
    res.prefill_scratch_unstacked = summarize(off);
  }
  // Where a prefill from scratch goes: one more fresh session, every op timed.
  {
    TESSERA_ASSIGN_OR_RETURN(auto fresh, shape::GptSession::create(*model, 2, max_len));
    TESSERA_RETURN_IF_ERROR(fresh->set_condition(2, hidden.data(), nullptr));
    Trace trace;
    backend.trace = &trace;
    const Stopwatch watch;
    const Status st = fresh->prefill(bos, logits.data());
    res.prefill_traced_ms = watch.elapsed_ms();
    backend.trace = nullptr;
    TESSERA_RETURN_IF_ERROR(st);
    for (const auto& [kind, stats] : trace.all()) res.prefill_breakdown.push_back({kind, stats});
    std::sort(res.prefill_breakdown.begin(), res.prefill_breakdown.end(),
              [](const auto& a, const auto& b) { return a.second.total_ms > b.second.total_ms; });
  }
  for (int64_t len : lengths) {
    ShapeLengthResult lr;
    lr.length = len;
    // Rows of ids are [batch, len]: row 1 starts at ids + len.
    std::vector<int32_t> full(static_cast<size_t>(2 * len));
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t t = 0; t < len; ++t)
        full[static_cast<size_t>(b * len + t)] = ids[static_cast<size_t>(t)];
      full[static_cast<size_t>(b * len)] = c.bos_id();
    }
    // The uncached step at `len`: 1-2 runs at 1024 (tens of seconds each at full size).
    const int no_kv_reps = len >= 1024 ? 1 : (len >= 256 || quick ? 2 : 3);
    seconds.clear();
    for (int r = 0; r < no_kv_reps; ++r) {
      const Stopwatch watch;
      TESSERA_RETURN_IF_ERROR(session->forward_full(full.data(), len, logits.data(), nullptr));
      seconds.push_back(watch.elapsed_ms() / 1e3);
    }
    lr.no_kv = summarize(seconds);
    // forward_full left `len` tokens in the cache: decode steps continue at position len.
    // K and V of both rows, every layer, read by the decode attention at this length (f32 or
    // bf16 cache).
    const double kv_bytes =
        2.0 * 2.0 * static_cast<double>(dtype_size(session->kv_dtype())) *
        static_cast<double>(c.n_embd) *
        (static_cast<double>(c.n_dual) * static_cast<double>(c.cond_len() + len) +
         static_cast<double>(c.n_single) * static_cast<double>(len));
    const double weight_bytes = static_cast<double>(res.weight_bytes);
    // A read-bandwidth probe before every step: each step is compared with the floor of its own
    // moment, so the machine's swings (other tenants, frequency) cancel in the ratio.
    seconds.clear();
    std::vector<double> ms, gbs, ratio, kv_ratio;
    for (int64_t s = 0; s < steps; ++s) {
      const int32_t step_ids[2] = {ids[static_cast<size_t>(len + s)],
                                   ids[static_cast<size_t>(len + s)]};
      TESSERA_ASSIGN_OR_RETURN(const double probe_gbs, probe.measure_gbs());
      const Stopwatch watch;
      TESSERA_RETURN_IF_ERROR(session->decode(step_ids, logits.data()));
      const double t = watch.elapsed_ms();
      seconds.push_back(t / 1e3);
      ms.push_back(t);
      gbs.push_back(probe_gbs);
      ratio.push_back(t / (weight_bytes / (probe_gbs * 1e9) * 1e3));
      kv_ratio.push_back(t / ((weight_bytes + kv_bytes) / (probe_gbs * 1e9) * 1e3));
    }
    lr.kv = summarize(seconds);
    lr.kv_p50 = percentile(ms, 50);
    lr.kv_p99 = percentile(ms, 99);
    lr.read_gbs = percentile(gbs, 50);
    lr.floor_ratio = percentile(ratio, 50);
    lr.kv_floor_ratio = percentile(kv_ratio, 50);
    lr.weight_floor_ms = weight_bytes / (lr.read_gbs * 1e9) * 1e3;
    lr.kv_floor_ms = (weight_bytes + kv_bytes) / (lr.read_gbs * 1e9) * 1e3;
    TESSERA_RETURN_IF_ERROR(measure_resident(*session, backend, c, steps, &lr));
    std::printf(
        "  %s: length %lld: no-KV step %.1f ms, KV step %.1f ms (p99 %.1f), %.2fx the "
        "weight floor at %.1f GB/s\n",
        name.c_str(), static_cast<long long>(len), lr.no_kv.median * 1e3, lr.kv.median * 1e3,
        lr.kv_p99, lr.floor_ratio, lr.read_gbs);
    std::fflush(stdout);
    res.lengths.push_back(lr);
  }
  // Candidates decoded together (variations): 1, 2, 4, 8 with guidance, at the shortest length.
  TESSERA_RETURN_IF_ERROR(bench_candidates(*model, backend, probe, lengths.front(), steps, &res));
  // Per-op breakdown of a few decode steps at the shortest length.
  {
    const int64_t len = lengths.front();
    std::vector<int32_t> full(static_cast<size_t>(2 * len), c.bos_id());
    TESSERA_RETURN_IF_ERROR(session->forward_full(full.data(), len, logits.data(), nullptr));
    Trace trace;
    backend.weight_bytes.clear();
    backend.trace = &trace;
    const int64_t n = std::min<int64_t>(steps, 4);
    for (int64_t s = 0; s < n; ++s) {
      const int32_t step_ids[2] = {ids[static_cast<size_t>(s)], ids[static_cast<size_t>(s)]};
      const Status st = session->decode(step_ids, logits.data());
      if (!st.ok()) {
        backend.trace = nullptr;
        return st;
      }
    }
    backend.trace = nullptr;
    for (const auto& [kind, stats] : trace.all()) res.breakdown.push_back({kind, stats});
    res.breakdown_weight_bytes = backend.weight_bytes;
    std::sort(res.breakdown.begin(), res.breakdown.end(),
              [](const auto& a, const auto& b) { return a.second.total_ms > b.second.total_ms; });
    res.breakdown_steps = n;
    res.breakdown_length = len;
  }
  return res;
}

// The decode steps 1..tokens-1 of an object (ms) from TPOTs measured at a few lengths
// ({length, ms}, ascending, at least two): piecewise-linear between them, constant before the
// first, the last segment's slope extended past the last (a step's attention grows linearly with
// the length).
double decode_steps_ms(const std::vector<std::pair<double, double>>& pts, int64_t tokens) {
  auto tpot = [&](double len) {
    if (len <= pts.front().first) return pts.front().second;
    for (size_t i = 1; i < pts.size(); ++i) {
      if (len <= pts[i].first) {
        const double f = (len - pts[i - 1].first) / (pts[i].first - pts[i - 1].first);
        return pts[i - 1].second + f * (pts[i].second - pts[i - 1].second);
      }
    }
    const auto& a = pts[pts.size() - 2];
    const auto& b = pts.back();
    return b.second + (len - b.first) * (b.second - a.second) / (b.first - a.first);
  };
  double ms = 0;
  for (int64_t len = 1; len < tokens; ++len) ms += tpot(static_cast<double>(len));
  return ms;
}

// A whole v0.5 object on this machine (the "1024 tokens + extraction at 2^8 + 1"),
// assembled from measured parts because a literal run takes minutes per repetition:
//   prefill (measured above, unconditional row reused) + the sum of the TPOTs of steps 1..1023,
//   interpolated piecewise-linearly between the TPOTs measured above (a step's attention grows
//   linearly with the length; constant before the first measured length) + latent decode of 1024
//   tokens through the full-size v0.5 shape decoder (random bf16 weights, measured) + extraction:
//   the occupancy queries that coarse-to-fine extraction at 2^8 + 1 makes for a sphere of radius
//   0.8 (counted, analytic field: random weights give no surface) x the measured time per query
//   of that decoder (a batch of 16384 random points after a warm-up batch) + marching cubes
//   (measured on the sphere's cells).
Expected<ObjectEstimate> estimate_object(const ShapeModelResult& gpt, bool quick,
                                         kernels::Backend& backend) {
  ObjectEstimate est;
  est.tokens = 1024;  // Cube 3D v0.5: 1024 shape tokens per object
  est.prefill_ms = gpt.prefill.median * 1e3;
  std::vector<std::pair<double, double>> pts;
  for (const ShapeLengthResult& l : gpt.lengths) {
    pts.push_back({static_cast<double>(l.length), l.kv.median * 1e3});
  }
  est.decode_ms = decode_steps_ms(pts, est.tokens);

  const std::string list =
      std::string(TESSERA_BENCH_FIXTURES) + "/cube3d/cube3d-shape_v05-tensors.txt";
  TESSERA_ASSIGN_OR_RETURN(const shape::TensorShapes shapes, read_tensor_list(list));
  TESSERA_ASSIGN_OR_RETURN(RandomCheckpoint ck, make_random_checkpoint(shapes));
  WeightStore store(std::move(ck.file), WeightFormat::kBF16);
  TESSERA_ASSIGN_OR_RETURN(auto decoder, shape::ShapeDecoder::load(store, backend));
  const shape::ShapeDecoderConfig& dc = decoder->config();
  const int64_t n_lat = std::min(est.tokens, dc.num_latents);
  std::vector<int32_t> ids(static_cast<size_t>(n_lat));
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 2654435761u >> 7) % static_cast<uint64_t>(dc.num_codes));
  }
  std::vector<float> latents(static_cast<size_t>(n_lat * dc.width));
  {
    const Stopwatch watch;
    TESSERA_RETURN_IF_ERROR(decoder->decode_tokens(ids.data(), n_lat, latents.data()));
    est.latent_ms = watch.elapsed_ms();
  }
  TESSERA_RETURN_IF_ERROR(decoder->set_latents(latents.data(), n_lat));
  // Two batches of random points (the decoder works in chunks of 8192 whatever the batch); the
  // second is timed, after the first has touched every buffer.
  const int64_t batch = quick ? 8192 : 16384;
  std::vector<float> points(static_cast<size_t>(3 * batch)), logits(static_cast<size_t>(batch));
  // With AVX-512 BF16 the query layers run through the bf16 GEMM; the same batches are also timed
  // with it switched off, alternating (best of 2 each), for the speed-up in one run.
  const bool ab = kernels::cpu::gemm_bf16::available();
  for (uint32_t rep = 0; rep < (ab ? 5u : 2u); ++rep) {
    const bool off = ab && rep % 2 == 0 && rep > 0;
    fill_floats(points.data(), points.size(), 77 + rep);  // in [-1, 1)
    if (off) kernels::cpu::gemm_bf16::set_enabled(false);
    const Stopwatch watch;
    const Status st = decoder->query(points.data(), batch, logits.data());
    const double us = watch.elapsed_ms() * 1e3 / static_cast<double>(batch);
    if (off) kernels::cpu::gemm_bf16::set_enabled(true);
    TESSERA_RETURN_IF_ERROR(st);
    if (rep == 0) continue;  // warm-up: touches every buffer
    double& best = off ? est.query_us_f32x : est.query_us;
    best = best == 0 ? us : std::min(best, us);
  }
  // The query count and polygonization of a smooth closed surface at 2^8 + 1.
  mesh::ExtractionOptions eo;
  eo.resolution_base = 8;
  eo.coarse_base = shape::kDefaultCoarseBase;  // the pipeline's search for a model without a card
  mesh::ExtractionStats stats;
  const mesh::OccupancyFn sphere = [](const float* p, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = 10.0f * (0.8f - std::sqrt(p[3 * i] * p[3 * i] + p[3 * i + 1] * p[3 * i + 1] +
                                         p[3 * i + 2] * p[3 * i + 2]));
    }
    return Status();
  };
  // On a GPU the finest level's cells are polygonized there, as the pipeline does.
  if (backend.extraction() != nullptr) {
    eo.polygonize = [&backend](const kernels::CellGrid& g, const int64_t* c, const float* v,
                               int64_t n, std::vector<float>* p, std::vector<uint32_t>* t) {
      return backend.extraction()->polygonize_cells(g, c, v, n, p, t);
    };
  }
  const Stopwatch watch;
  TESSERA_ASSIGN_OR_RETURN(const mesh::Mesh m, mesh::extract_coarse_to_fine(sphere, eo, &stats));
  est.polygonize_ms = watch.elapsed_ms();  // includes the (cheap) analytic field
  (void)m;
  est.queries = stats.queries;
  est.extraction_ms = static_cast<double>(est.queries) * est.query_us / 1e3;
  // A preview's extraction at 2^5 + 1.
  eo.resolution_base = 5;
  const Stopwatch preview_watch;
  TESSERA_ASSIGN_OR_RETURN(const mesh::Mesh pm, mesh::extract_coarse_to_fine(sphere, eo, &stats));
  (void)pm;
  est.preview_queries = stats.queries;
  est.preview_ms = est.latent_ms + preview_watch.elapsed_ms() +
                   static_cast<double>(stats.queries) * est.query_us / 1e3;
  return est;
}

// Milliseconds with three significant digits or so ("0.123 ms", "12.3 ms", "1234.5 ms").
std::string fmt_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 1 ? "%.3f ms" : (ms < 10 ? "%.2f ms" : "%.1f ms"), ms);
  return buf;
}

// int8 against bf16 in one run (`bench shape --weights int8`): the ratios are "same run",
// and this machine's read bandwidth swings by a third within minutes, so the two formats' decode
// steps alternate, each after its own read-bandwidth probe, in two sessions over one checkpoint.
struct FormatPair {
  int64_t length = 0;
  double bf16_ms = 0, int8_ms = 0;  // medians of the alternated steps
  double pair_ratio = 0;            // median over the pairs of int8 step / bf16 step
  double read_gbs = 0;              // median of the probes
};
struct FormatComparison {
  bool ran = false;
  int64_t pairs = 0;
  std::vector<FormatPair> lengths;
  double bf16_prefill_ms = 0, int8_prefill_ms = 0;  // from scratch, fresh sessions, alternated
  double bf16_object_s = 0, int8_object_s = 0;  // whole-object estimates (after estimate_object)
};

Status compare_formats(const SafeTensors& file, const shape::NormalizedCodebook& codebook,
                       kernels::Backend& backend, const std::vector<int64_t>& lengths,
                       int64_t pairs, FormatComparison* out) {
  shape::GptLoadOptions lo_bf16, lo_int8;
  lo_int8.int8 = true;
  TESSERA_ASSIGN_OR_RETURN(auto bf16, shape::CubeGpt::load(file, codebook, backend, lo_bf16));
  TESSERA_ASSIGN_OR_RETURN(auto int8, shape::CubeGpt::load(file, codebook, backend, lo_int8));
  const shape::CubeGpt* models[2] = {bf16.get(), int8.get()};
  const shape::GptConfig& c = bf16->config();
  const int64_t max_len = lengths.back() + pairs + 2;
  std::vector<float> hidden(static_cast<size_t>(2 * c.text_len * c.text_embed_dim));
  fill_floats(hidden.data(), hidden.size(), 31);
  std::vector<float> logits(static_cast<size_t>(2 * c.vocab_size));
  const int32_t bos[2] = {c.bos_id(), c.bos_id()};
  TESSERA_ASSIGN_OR_RETURN(
      BandwidthProbe probe,
      BandwidthProbe::create(backend, static_cast<size_t>(bf16->decode_weight_bytes())));
  TESSERA_RETURN_IF_ERROR(probe.measure_gbs().status());
  // Prefill from scratch: a fresh session per run, the formats alternated, the first of each cold.
  {
    std::vector<double> ms[2];
    for (int r = 0; r < 8; ++r) {
      const int f = r % 2;
      TESSERA_ASSIGN_OR_RETURN(auto fresh, shape::GptSession::create(*models[f], 2, max_len));
      TESSERA_RETURN_IF_ERROR(fresh->set_condition(2, hidden.data(), nullptr));
      const Stopwatch watch;
      TESSERA_RETURN_IF_ERROR(fresh->prefill(bos, logits.data()));
      if (r >= 2) ms[f].push_back(watch.elapsed_ms());
    }
    out->bf16_prefill_ms = percentile(ms[0], 50);
    out->int8_prefill_ms = percentile(ms[1], 50);
  }
  for (int64_t len : lengths) {
    std::unique_ptr<shape::GptSession> sessions[2];
    std::vector<int32_t> full(static_cast<size_t>(2 * len));
    for (size_t i = 0; i < full.size(); ++i) {
      full[i] =
          static_cast<int32_t>((i * 2654435761u >> 7) % static_cast<uint64_t>(c.codebook_size));
    }
    full[0] = full[static_cast<size_t>(len)] = c.bos_id();
    for (int f = 0; f < 2; ++f) {
      TESSERA_ASSIGN_OR_RETURN(sessions[f], shape::GptSession::create(*models[f], 2, max_len));
      TESSERA_RETURN_IF_ERROR(sessions[f]->set_condition(2, hidden.data(), nullptr));
      TESSERA_RETURN_IF_ERROR(sessions[f]->forward_full(full.data(), len, logits.data(), nullptr));
    }
    std::vector<double> ms[2], ratio, gbs;
    for (int64_t s = -1; s < pairs; ++s) {  // s = -1: one warm-up step of each
      double t[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        const int f = (s + k) % 2 == 0 ? 0 : 1;  // which format goes first alternates
        const int32_t ids[2] = {static_cast<int32_t>((s + 2) * 37 % c.codebook_size),
                                static_cast<int32_t>((s + 2) * 37 % c.codebook_size)};
        TESSERA_ASSIGN_OR_RETURN(const double probe_gbs, probe.measure_gbs());
        const Stopwatch watch;
        TESSERA_RETURN_IF_ERROR(sessions[f]->decode(ids, logits.data()));
        t[f] = watch.elapsed_ms();
        if (s >= 0) gbs.push_back(probe_gbs);
      }
      if (s < 0) continue;
      ms[0].push_back(t[0]);
      ms[1].push_back(t[1]);
      ratio.push_back(t[1] / t[0]);
    }
    FormatPair row;
    row.length = len;
    row.bf16_ms = percentile(ms[0], 50);
    row.int8_ms = percentile(ms[1], 50);
    row.pair_ratio = percentile(ratio, 50);
    row.read_gbs = percentile(gbs, 50);
    std::printf("  int8 vs bf16 at %lld tokens: %.1f / %.1f ms (ratio of medians %.3f)\n",
                static_cast<long long>(len), row.int8_ms, row.bf16_ms, row.int8_ms / row.bf16_ms);
    std::fflush(stdout);
    out->lengths.push_back(row);
  }
  out->pairs = pairs;
  out->ran = true;
  return Status();
}

// The whole-object estimates of both formats (after estimate_object): this comparison's prefill
// and TPOTs, and the parts both formats share (the shape decoder runs in bf16 under --weights
// int8: latent decode, queries, polygonization) from the object estimate of the same run.
void estimate_format_objects(const ObjectEstimate& o, FormatComparison* fc) {
  std::vector<std::pair<double, double>> b, i;
  for (const FormatPair& p : fc->lengths) {
    b.push_back({static_cast<double>(p.length), p.bf16_ms});
    i.push_back({static_cast<double>(p.length), p.int8_ms});
  }
  const double shared_ms = o.latent_ms + o.extraction_ms + o.polygonize_ms;
  fc->bf16_object_s = (fc->bf16_prefill_ms + decode_steps_ms(b, o.tokens) + shared_ms) / 1e3;
  fc->int8_object_s = (fc->int8_prefill_ms + decode_steps_ms(i, o.tokens) + shared_ms) / 1e3;
}

std::string formats_markdown(const FormatComparison& fc, const ObjectEstimate& o) {
  if (!fc.ran) return "";
  std::ostringstream md;
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "\nint8 against bf16 in one run (full-size v0.5, batch 2, both quantized from the "
                "same random checkpoint): at each length the two formats' decode steps alternate "
                "(%lld pairs, which goes first alternating), each after a read-bandwidth probe; "
                "the ratio is int8 / bf16 of the medians, and beside it the median of the pairs' "
                "ratios.\n\n",
                static_cast<long long>(fc.pairs));
  md << buf;
  md << "| tokens | bf16 TPOT | int8 TPOT | int8 / bf16 (medians) | median of pair ratios | read "
        "GB/s |\n|---|---|---|---|---|---|\n";
  for (const FormatPair& p : fc.lengths) {
    std::snprintf(buf, sizeof buf, "| %lld | %s | %s | **%.3f** | %.3f | %.1f |\n",
                  static_cast<long long>(p.length), fmt_ms(p.bf16_ms).c_str(),
                  fmt_ms(p.int8_ms).c_str(), p.int8_ms / p.bf16_ms, p.pair_ratio, p.read_gbs);
    md << buf;
  }
  std::snprintf(buf, sizeof buf, "| prefill from scratch | %s | %s | %.3f | | |\n",
                fmt_ms(fc.bf16_prefill_ms).c_str(), fmt_ms(fc.int8_prefill_ms).c_str(),
                fc.int8_prefill_ms / fc.bf16_prefill_ms);
  md << buf;
  std::snprintf(
      buf, sizeof buf,
      "\nWhole object (%lld tokens + extraction at 2^8 + 1) from these figures: bf16 %.1f s, "
      "int8 %.1f s, **%.3f**; the shape decoder's part (latent decode + %lld queries + "
      "polygonization, %.1f s) runs in bf16 for both.\n",
      static_cast<long long>(o.tokens), fc.bf16_object_s, fc.int8_object_s,
      fc.int8_object_s / fc.bf16_object_s, static_cast<long long>(o.queries),
      (o.latent_ms + o.extraction_ms + o.polygonize_ms) / 1e3);
  md << buf;
  return md.str();
}

std::string shape_markdown(const Machine& machine, const std::vector<ShapeModelResult>& models,
                           bool for_terminal, const std::string& section,
                           const std::string& backend_name) {
  std::ostringstream md;
  char buf[256];
  if (!for_terminal) {
    md << section << "\n" << machine_markdown(machine) << "Backend: " << backend_name << "\n\n";
    md << "Cube 3D GPT with random bf16 weights built in memory, batch 2 ([cond ; uncond], "
          "guidance). Prefill = condition stream + BOS through every block (after the text/bbox "
          "projection, listed separately): from scratch, and with a new prompt row while the "
          "unconditional row's condition K/V are reused (consecutive generations). TPOT = one "
          "KV-cache decode step at the given number "
          "of tokens in the cache (median of the steps, p50/p99 nearest rank); no-KV = one "
          "uncached step at that length (recomputes the condition and every token). Floor = "
          "bf16 weight bytes read per step (once for both rows) / read bandwidth, probed by "
          "reading "
          "as many bytes (at least 256 MiB) just before every timed step; \"read GB/s\" and "
          "\"floor\" are the probes' "
          "median, \"TPOT / floor\" the median over the steps of each step's time over the floor "
          "of its own probe (the VM's bandwidth swings cancel). \"+KV\" adds the K/V of both "
          "rows that the step's attention reads (bf16 cache for bf16 weights, f32 for f32 "
          "weights).\n\n";
  }
  for (const ShapeModelResult& m : models) {
    md << (for_terminal ? "" : "**") << m.name << (for_terminal ? "" : "**") << " (" << m.config
       << "): ";
    std::snprintf(buf, sizeof buf, "%.4g GB of weights per step; condition projection %s, ",
                  static_cast<double>(m.weight_bytes) / 1e9,
                  fmt_ms(m.condition.median * 1e3).c_str());
    md << buf;
    std::snprintf(buf, sizeof buf,
                  "prefill from scratch %s (the first, cold); prefill with a new prompt and the "
                  "unconditional row reused %s (median of %d, %s - %s)",
                  fmt_ms(m.prefill_cold_ms).c_str(), fmt_ms(m.prefill.median * 1e3).c_str(),
                  m.prefill.reps, fmt_ms(m.prefill.min * 1e3).c_str(),
                  fmt_ms(m.prefill.max * 1e3).c_str());
    md << buf;
    if (m.prefill_scratch.reps > 0) {
      std::snprintf(
          buf, sizeof buf, "; prefill from scratch in fresh sessions %s (median of %d, %s - %s)",
          fmt_ms(m.prefill_scratch.median * 1e3).c_str(), m.prefill_scratch.reps,
          fmt_ms(m.prefill_scratch.min * 1e3).c_str(), fmt_ms(m.prefill_scratch.max * 1e3).c_str());
      md << buf;
      if (m.stacked_condition) {
        std::snprintf(buf, sizeof buf,
                      " with the two rows' condition streams stacked in one call per layer, %s "
                      "one row at a time (alternated): %.2fx",
                      fmt_ms(m.prefill_scratch_unstacked.median * 1e3).c_str(),
                      m.prefill_scratch_unstacked.median / m.prefill_scratch.median);
        md << buf;
      }
    }
    md << "\n\n";
    md << "| tokens | TPOT (KV) | p50 / p99 | steps | read GB/s | floor | TPOT / floor | floor +KV "
          "| TPOT / floor+KV | no-KV step | KV speed-up |\n";
    md << "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const ShapeLengthResult& l : m.lengths) {
      std::snprintf(
          buf, sizeof buf,
          "| %lld | %s | %s / %s | %d | %.1f | %s | %.2fx | %s | %.2fx | %s (%d) | %.1fx |\n",
          static_cast<long long>(l.length), fmt_ms(l.kv.median * 1e3).c_str(),
          fmt_ms(l.kv_p50).c_str(), fmt_ms(l.kv_p99).c_str(), l.kv.reps, l.read_gbs,
          fmt_ms(l.weight_floor_ms).c_str(), l.floor_ratio, fmt_ms(l.kv_floor_ms).c_str(),
          l.kv_floor_ratio, fmt_ms(l.no_kv.median * 1e3).c_str(), l.no_kv.reps,
          l.no_kv.median / l.kv.median);
      md << buf;
    }
    md << "\n";
    if (!m.batch.empty()) {
      char intro[1024];
      std::snprintf(intro, sizeof intro,
                    "Candidates decoded together (variations, guidance on: 2 rows each) at %lld "
                    "tokens in the cache: decode step (median of %d), its ratio to 1 candidate's "
                    "in this run, tokens/s over all candidates; bandwidth floor = (weights + every "
                    "row's K/V) / read bandwidth (probe before each step), compute floor = 2 x "
                    "weight elements x rows / %.0f GFLOP/s (the largest layer at m = 64, timed in "
                    "this run); \"step / floor\" = median over the steps of the step over the "
                    "larger floor at its probe.\n\n",
                    static_cast<long long>(m.batch_length),
                    m.lengths.empty() ? 0 : m.lengths.front().kv.reps, m.gemm_gflops);
      md << intro;
      md << "| candidates | decode step | vs 1 candidate | tokens/s | read GB/s | bandwidth floor "
            "| compute floor | step / floor |\n|---|---|---|---|---|---|---|---|\n";
      for (const BatchRow& b : m.batch) {
        std::snprintf(buf, sizeof buf, "| %lld | %s | %.2fx | %.0f | %.1f | %s | %s | %.2fx |\n",
                      static_cast<long long>(b.candidates), fmt_ms(b.step_ms).c_str(),
                      b.step_ms / m.batch.front().step_ms,
                      1000.0 * static_cast<double>(b.candidates) / b.step_ms, b.read_gbs,
                      fmt_ms(b.bandwidth_floor_ms).c_str(), fmt_ms(b.compute_floor_ms).c_str(),
                      b.floor_ratio);
        md << buf;
      }
      md << "\n";
    }
    if (!m.lengths.empty() && !std::isnan(m.lengths.front().resident_ms)) {
      md << "Device-resident decode loop (the generator's: GptSession::decode_at + "
            "Backend::choose_token, step and ids in backend memory), ms per step: eager = every "
            "op launched each step, synchronised per step; recorded = the step recorded once and "
            "replayed (CUDA graphs), no host wait per token. The host-loop TPOT follows a "
            "cache-flushing bandwidth probe, the resident steps run back to back: for a model "
            "that fits in cache the columns are not comparable.\n\n";
      md << "| tokens | host loop (TPOT above) | device-resident, eager | device-resident, "
            "recorded "
            "| recorded vs host loop |\n|---|---|---|---|---|\n";
      for (const ShapeLengthResult& l : m.lengths) {
        const bool rec = !std::isnan(l.graph_ms);
        char ratio[32] = "-";
        if (rec) std::snprintf(ratio, sizeof ratio, "%.2fx", l.kv.median * 1e3 / l.graph_ms);
        std::snprintf(buf, sizeof buf, "| %lld | %s | %s | %s | %s |\n",
                      static_cast<long long>(l.length), fmt_ms(l.kv.median * 1e3).c_str(),
                      fmt_ms(l.resident_ms).c_str(),
                      rec ? fmt_ms(l.graph_ms).c_str() : "- (cannot record)", ratio);
        md << buf;
      }
      md << "\n";
    }
    if (m.has_object) {
      const ObjectEstimate& o = m.object;
      std::snprintf(buf, sizeof buf,
                    "Whole object (%lld tokens + coarse-to-fine extraction at 2^8 + 1), from "
                    "measured parts: prefill %s + decode steps 1..%lld %.1f s (TPOT interpolated "
                    "between the lengths above) + latent decode %.2f s + ",
                    static_cast<long long>(o.tokens), fmt_ms(o.prefill_ms).c_str(),
                    static_cast<long long>(o.tokens - 1), o.decode_ms / 1e3, o.latent_ms / 1e3);
      md << buf;
      std::snprintf(buf, sizeof buf,
                    "extraction %lld queries (radius-0.8 sphere) x %.1f us/query = %.1f s + "
                    "polygonization %s = **%.0f s** (issue target: <= 150 s).",
                    static_cast<long long>(o.queries), o.query_us, o.extraction_ms / 1e3,
                    fmt_ms(o.polygonize_ms).c_str(), o.total_s());
      md << buf;
      if (o.query_us_f32x > 0) {
        std::snprintf(buf, sizeof buf,
                      " Queries run through the AVX-512 BF16 GEMM; without it (f32 activations, "
                      "same run) %.1f us/query: %.2fx.",
                      o.query_us_f32x, o.query_us_f32x / o.query_us);
        md << buf;
      }
      md << "\n\n";
      const double object_ms = o.total_s() * 1e3;
      const int64_t due = (o.tokens - 1) / 16;
      const double budget = runtime::kDefaultPreviewBudget;
      char preview_buf[1024];
      std::snprintf(preview_buf, sizeof preview_buf,
                    "Live previews on this object (estimated from the parts above): one preview "
                    "(latent decode of the prefix filled to %lld tokens + %lld queries at 2^5 + "
                    "1) takes %.2f s. Every 16 tokens (%lld previews) meshed in the token loop, "
                    "as before issue 23, would add %.0f s (+%.0f %%). The runtime meshes them "
                    "beside the decode within a budget of %.0f %% of the job's time "
                    "(JobOptions::preview_budget): about %.0f previews over the object, one every "
                    "~%.0f s.\n\n",
                    static_cast<long long>(o.tokens), static_cast<long long>(o.preview_queries),
                    o.preview_ms / 1e3, static_cast<long long>(due),
                    static_cast<double>(due) * o.preview_ms / 1e3,
                    100.0 * static_cast<double>(due) * o.preview_ms / object_ms, 100.0 * budget,
                    std::floor(budget * object_ms / o.preview_ms), o.preview_ms / budget / 1e3);
      md << preview_buf;
    }
    std::snprintf(
        buf, sizeof buf, "Per-op time of a decode step at %lld tokens (mean over %lld steps):\n\n",
        static_cast<long long>(m.breakdown_length), static_cast<long long>(m.breakdown_steps));
    md << buf;
    md << "| op | calls/step | ms/step | per call | share | weights read |\n"
          "|---|---|---|---|---|---|\n";
    double total = 0;
    for (const auto& [kind, s] : m.breakdown) total += s.total_ms;
    for (const auto& [kind, s] : m.breakdown) {
      const double steps = static_cast<double>(std::max<int64_t>(1, m.breakdown_steps));
      // Weight bytes per second of the op's own time (each op synchronised: small ops include
      // the wait).
      std::string gbs = "-";
      const auto bytes = m.breakdown_weight_bytes.find(kind);
      if (bytes != m.breakdown_weight_bytes.end() && s.total_ms > 0) {
        char g[32];
        std::snprintf(g, sizeof g, "%.0f GB/s", bytes->second / (s.total_ms * 1e-3) / 1e9);
        gbs = g;
      }
      std::snprintf(buf, sizeof buf, "| %s | %.0f | %.3f | %.1f us | %.1f%% | %s |\n", kind.c_str(),
                    static_cast<double>(s.count) / steps, s.total_ms / steps,
                    1e3 * s.total_ms / std::max<double>(1.0, static_cast<double>(s.count)),
                    100.0 * s.total_ms / std::max(total, 1e-9), gbs.c_str());
      md << buf;
    }
    md << "\n";
    if (!m.prefill_breakdown.empty()) {
      double ops_ms = 0;
      for (const auto& [kind, s] : m.prefill_breakdown) ops_ms += s.total_ms;
      std::snprintf(buf, sizeof buf,
                    "Per-op time of a prefill from scratch (a fresh session, both rows' condition "
                    "streams; %s in all, %s of it in the ops below):\n\n",
                    fmt_ms(m.prefill_traced_ms).c_str(), fmt_ms(ops_ms).c_str());
      md << buf << "| op | calls | ms | share |\n|---|---|---|---|\n";
      for (const auto& [kind, s] : m.prefill_breakdown) {
        if (s.total_ms < 0.005 * ops_ms) continue;  // the long tail of tiny ops
        std::snprintf(buf, sizeof buf, "| %s | %lld | %.2f | %.1f%% |\n", kind.c_str(),
                      static_cast<long long>(s.count), s.total_ms,
                      100.0 * s.total_ms / std::max(ops_ms, 1e-9));
        md << buf;
      }
      md << "\n";
    }
  }
  return md.str();
}

nlohmann::json shape_json(const Machine& machine, const std::vector<ShapeModelResult>& models) {
  nlohmann::json j;
  j["machine"] = machine_json(machine);
  nlohmann::json list = nlohmann::json::array();
  for (const ShapeModelResult& m : models) {
    nlohmann::json e = {
        {"model", m.name},
        {"config", m.config},
        {"decode_weight_bytes", m.weight_bytes},
        {"condition_ms", m.condition.median * 1e3},
        {"prefill_from_scratch_ms", m.prefill_cold_ms},
        {"prefill_from_scratch_fresh_ms", m.prefill_scratch.median * 1e3},
        {"prefill_from_scratch_unstacked_ms", m.prefill_scratch_unstacked.median * 1e3},
        {"condition_rows_stacked", m.stacked_condition},
        {"prefill_uncond_reused_ms",
         {{"median", m.prefill.median * 1e3},
          {"min", m.prefill.min * 1e3},
          {"max", m.prefill.max * 1e3}}}};
    nlohmann::json lengths = nlohmann::json::array();
    for (const ShapeLengthResult& l : m.lengths) {
      lengths.push_back(
          {{"tokens", l.length},
           {"tpot_ms",
            {{"median", l.kv.median * 1e3},
             {"p50", l.kv_p50},
             {"p99", l.kv_p99},
             {"min", l.kv.min * 1e3},
             {"max", l.kv.max * 1e3},
             {"steps", l.kv.reps}}},
           {"read_bandwidth_gbs", l.read_gbs},
           {"weight_floor_ms", l.weight_floor_ms},
           {"tpot_over_floor", l.floor_ratio},
           {"weight_kv_floor_ms", l.kv_floor_ms},
           {"tpot_over_weight_kv_floor", l.kv_floor_ratio},
           {"no_kv_step_ms", {{"median", l.no_kv.median * 1e3}, {"runs", l.no_kv.reps}}},
           {"kv_speedup", l.no_kv.median / l.kv.median},
           {"resident_eager_ms",
            std::isnan(l.resident_ms) ? nlohmann::json() : nlohmann::json(l.resident_ms)},
           {"resident_recorded_ms",
            std::isnan(l.graph_ms) ? nlohmann::json() : nlohmann::json(l.graph_ms)}});
    }
    e["lengths"] = lengths;
    nlohmann::json batch = nlohmann::json::array();
    for (const BatchRow& b : m.batch) {
      batch.push_back({{"candidates", b.candidates},
                       {"step_ms", b.step_ms},
                       {"vs_one_candidate", b.step_ms / m.batch.front().step_ms},
                       {"tokens_per_s", 1000.0 * static_cast<double>(b.candidates) / b.step_ms},
                       {"read_bandwidth_gbs", b.read_gbs},
                       {"bandwidth_floor_ms", b.bandwidth_floor_ms},
                       {"compute_floor_ms", b.compute_floor_ms},
                       {"step_over_floor", b.floor_ratio}});
    }
    e["candidates"] = {{"tokens", m.batch_length}, {"gemm_gflops", m.gemm_gflops}, {"rows", batch}};
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [kind, s] : m.breakdown) {
      ops[kind] = {{"calls", s.count}, {"total_ms", s.total_ms}};
      const auto bytes = m.breakdown_weight_bytes.find(kind);
      if (bytes != m.breakdown_weight_bytes.end() && s.count > 0) {
        ops[kind]["weight_bytes_per_call"] = bytes->second / static_cast<double>(s.count);
      }
    }
    if (m.has_object) {
      const ObjectEstimate& o = m.object;
      e["whole_object_estimate"] = {{"tokens", o.tokens},
                                    {"prefill_ms", o.prefill_ms},
                                    {"decode_steps_ms", o.decode_ms},
                                    {"latent_decode_ms", o.latent_ms},
                                    {"queries", o.queries},
                                    {"us_per_query", o.query_us},
                                    {"us_per_query_without_bf16_gemm", o.query_us_f32x},
                                    {"extraction_ms", o.extraction_ms},
                                    {"polygonize_ms", o.polygonize_ms},
                                    {"preview_queries", o.preview_queries},
                                    {"preview_ms", o.preview_ms},
                                    {"total_s", o.total_s()}};
    }
    e["decode_breakdown"] = {
        {"steps", m.breakdown_steps}, {"tokens", m.breakdown_length}, {"ops", ops}};
    list.push_back(e);
  }
  j["models"] = list;
  return j;
}

Status run_bench_shape(const Options& opt) {
  if (opt.write_results && opt.weights != "bf16") {
    return invalid_argument("--write-results records the bf16 run; run --weights int8 without it");
  }
  const Machine machine = describe_machine();
  std::printf("tessera-bench shape: %s\n", machine_line(machine).c_str());
  warn_if_busy(machine);
  std::vector<int64_t> lengths = {64, 256, 1024};
  if (opt.quick) lengths = {64, 256};
  const int64_t steps = opt.tokens > 0 ? opt.tokens : (opt.quick ? 6 : 16);
  TESSERA_ASSIGN_OR_RETURN(const kernels::DeviceChoice choice,
                           kernels::parse_device_choice(opt.device));
  TESSERA_ASSIGN_OR_RETURN(kernels::BackendSelection selection, kernels::make_backend(choice));
  TimedBackend backend(std::move(selection.backend));
  const bool on_cpu = backend.device() == Device::kCpu;
  const std::string section = on_cpu ? "## Shape engine (CPU)\n" : "## Shape engine (CUDA)\n";
  std::printf("backend: %s\n", backend.name().c_str());
  std::vector<ShapeModelResult> models;
  FormatComparison formats;
  {
    const std::string list =
        std::string(TESSERA_BENCH_FIXTURES) + "/cube3d/cube3d-gpt_v05-tensors.txt";
    TESSERA_ASSIGN_OR_RETURN(const shape::TensorShapes shapes, read_tensor_list(list));
    TESSERA_ASSIGN_OR_RETURN(const shape::GptConfig config, shape::infer_gpt_config(shapes, list));
    const Stopwatch watch;
    TESSERA_ASSIGN_OR_RETURN(RandomCheckpoint ck, make_random_checkpoint(shapes));
    shape::NormalizedCodebook codebook;
    codebook.rows = config.codebook_size;
    codebook.dim = config.shape_embed_dim;
    codebook.values.resize(static_cast<size_t>(codebook.rows * codebook.dim));
    fill_floats(codebook.values.data(), codebook.values.size(), 41);
    std::printf("full-size v0.5: %s; random bf16 checkpoint (%.2f GB) built in %.1f s\n",
                config.summary().c_str(), static_cast<double>(ck.data_bytes) / 1e9,
                watch.elapsed_ms() / 1e3);
    std::fflush(stdout);
    TESSERA_ASSIGN_OR_RETURN(
        ShapeModelResult r,
        bench_shape_model("Cube 3D v0.5 full size, random weights", ck.file, codebook, backend,
                          lengths, steps, opt.quick, opt.weights == "int8"));
    models.push_back(std::move(r));
    if (opt.weights == "int8") {
      std::printf("int8 against bf16: decode steps alternated in one run\n");
      std::fflush(stdout);
      TESSERA_RETURN_IF_ERROR(
          compare_formats(ck.file, codebook, backend, lengths, opt.quick ? 16 : 24, &formats));
    }
  }
  {
    const std::string dir = std::string(TESSERA_BENCH_FIXTURES) + "/parity/";
    TESSERA_ASSIGN_OR_RETURN(SafeTensors gpt,
                             SafeTensors::open(dir + "gpt_v05/shape_gpt.safetensors"));
    TESSERA_ASSIGN_OR_RETURN(SafeTensors tok,
                             SafeTensors::open(dir + "shape_tokenizer.safetensors"));
    TESSERA_ASSIGN_OR_RETURN(shape::NormalizedCodebook codebook,
                             shape::load_normalized_codebook(tok));
    TESSERA_ASSIGN_OR_RETURN(ShapeModelResult r,
                             bench_shape_model("parity fixture gpt_v05", gpt, codebook, backend,
                                               lengths, steps, opt.quick));
    models.push_back(std::move(r));
  }
  // Last, so that the shape decoder's allocations cannot disturb the TPOT rows above.
  std::printf("whole object: timing the full-size shape decoder (random bf16 weights)\n");
  std::fflush(stdout);
  TESSERA_ASSIGN_OR_RETURN(models.front().object,
                           estimate_object(models.front(), opt.quick, backend));
  models.front().has_object = true;
  if (formats.ran) estimate_format_objects(models.front().object, &formats);
  // Live previews' cost on a whole object, measured on tessera-tiny (CPU: where they are meshed
  // beside the decode).
  PreviewBench previews;
  if (on_cpu) {
    std::printf("previews: whole tessera-tiny objects with previews off / on\n");
    std::fflush(stdout);
    TESSERA_ASSIGN_OR_RETURN(previews, bench_previews(opt.quick));
  }
  std::printf("\n%s%s%s", shape_markdown(machine, models, true, section, backend.name()).c_str(),
              formats_markdown(formats, models.front().object).c_str(),
              previews_markdown(previews).c_str());
  if (!opt.json_path.empty()) {
    nlohmann::json j = shape_json(machine, models);
    nlohmann::json rows = nlohmann::json::array();
    for (const PreviewRow& r : previews.rows) {
      nlohmann::json modes = nlohmann::json::array();
      for (const PreviewMode& m : r.modes) {
        modes.push_back({{"mode", m.name},
                         {"budget", m.budget},
                         {"job_ms", m.job_ms},
                         {"previews", m.previews},
                         {"ms_per_preview", m.preview_ms}});
      }
      rows.push_back({{"prompt", r.prompt}, {"modes", modes}});
    }
    if (formats.ran) {
      nlohmann::json rows_f = nlohmann::json::array();
      for (const FormatPair& p : formats.lengths) {
        rows_f.push_back({{"tokens", p.length},
                          {"bf16_tpot_ms", p.bf16_ms},
                          {"int8_tpot_ms", p.int8_ms},
                          {"int8_over_bf16", p.int8_ms / p.bf16_ms},
                          {"median_pair_ratio", p.pair_ratio},
                          {"read_bandwidth_gbs", p.read_gbs}});
      }
      j["int8_vs_bf16"] = {{"pairs", formats.pairs},
                           {"lengths", rows_f},
                           {"bf16_prefill_ms", formats.bf16_prefill_ms},
                           {"int8_prefill_ms", formats.int8_prefill_ms},
                           {"bf16_object_s", formats.bf16_object_s},
                           {"int8_object_s", formats.int8_object_s}};
    }
    j["previews"] = {{"model", previews.model},
                     {"preview_every", previews.preview_every},
                     {"preview_resolution", previews.preview_resolution},
                     {"jobs_per_mode", previews.repeat},
                     {"rows", rows}};
    const std::string json = j.dump(2) + "\n";
    TESSERA_RETURN_IF_ERROR(
        write_file_atomic(opt.json_path, json.data(), json.size()).with_context("bench: --json"));
  }
  if (opt.write_results) {
    const std::string path = results_path(opt);
    TESSERA_RETURN_IF_ERROR(
        write_results_section(path, section,
                              shape_markdown(machine, models, false, section, backend.name()) +
                                  previews_markdown(previews)));
    std::printf("wrote the \"%s\" section of %s\n", section.substr(3, section.size() - 4).c_str(),
                path.c_str());
  }
  return Status::ok_status();
}

}  // namespace

void register_shape_bench(CLI::App* bench, int* exit_code) {
  auto opt = std::make_shared<Options>();
  CLI::App* shape = bench->add_subcommand(
      "shape",
      "Cube 3D GPT on the CPU: prefill, TPOT with/without KV cache vs. the bandwidth floor");
  shape->add_option("--json", opt->json_path, "Also write the results as JSON to FILE");
  shape->add_flag("--quick", opt->quick, "Lengths 64 and 256 only, fewer repetitions");
  shape
      ->add_option("--device", opt->device,
                   "Backend: cpu (default) or cuda (fails, saying why, without a usable GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  shape
      ->add_option("--tokens", opt->tokens,
                   "KV-cache decode steps timed per length (default 16, --quick 6)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  shape
      ->add_option("--weights", opt->weights,
                   "Full-size GPT linear layers: bf16 (default) or int8 (quantized at load from "
                   "the bf16 weights), with the two alternated in one run; --write-results records "
                   "bf16 only")
      ->check(CLI::IsMember({"bf16", "int8"}));
  shape->add_flag("--write-results", opt->write_results,
                  "Replace the \"## Shape engine (CPU)\" section of bench/RESULTS.md");
  shape->add_option("--results", opt->results_path,
                    "Results file for --write-results (default: the source tree's "
                    "bench/RESULTS.md)");
  shape->callback([opt, exit_code] {
    const Status st = run_bench_shape(*opt);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera-bench: %s\n", st.to_string().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tessera::bench
