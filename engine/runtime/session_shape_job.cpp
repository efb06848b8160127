// Session's shape jobs: the options checked before any work, the tokens generated (or given) with
// live previews, then every candidate meshed (session_internal.h).
#include <algorithm>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/trace.h"
#include "engine/runtime/engine_types_internal.h"
#include "engine/runtime/preview_mesher.h"
#include "engine/runtime/session_internal.h"

namespace tessera::runtime {

namespace {

double trace_total(const Trace& trace, const char* name) {
  const TraceStats* s = trace.find(name);
  return s != nullptr ? s->total_ms : 0.0;
}

}  // namespace

namespace {

// A shape job's options, checked before any work (a bad resolution should not cost a
// generation): the final lattice and the number of tokens to generate, or what is wrong.
Status check_shape_job(const JobOptions& o, shape::ShapePipeline& pipeline, int* resolution,
                       int64_t* n) {
  *resolution = pipeline.resolve_resolution(o.mesh.resolution);
  if (Status st = shape::resolution_base(*resolution).status(); !st.ok()) {
    return st.with_context("mesh");
  }
  if (o.preview_every < 0) {
    return invalid_argument("preview_every " + std::to_string(o.preview_every) + " must be >= 0");
  }
  if (o.preview_every > 0) {
    if (Status st = shape::resolution_base(o.preview_resolution).status(); !st.ok()) {
      return st.with_context("preview");
    }
    if (!(o.preview_budget > 0.0 && o.preview_budget <= 1.0)) {
      return invalid_argument("preview_budget " + std::to_string(o.preview_budget) +
                              " must be in (0, 1] (a fraction of the job's time)");
    }
  }
  if (!o.replay_prefixes.empty()) {
    if (!o.tokens) return invalid_argument("replay_prefixes need the tokens to replay");
    if (Status st = shape::resolution_base(o.preview_resolution).status(); !st.ok()) {
      return st.with_context("replay");
    }
    for (const int64_t k : o.replay_prefixes) {
      if (k < 1 || k > static_cast<int64_t>(o.tokens->size())) {
        return invalid_argument("replay prefix " + std::to_string(k) + " outside [1, " +
                                std::to_string(o.tokens->size()) + "]");
      }
    }
  }
  const int64_t num_latents = pipeline.num_latents();
  *n = tokens_to_generate(o.generation.num_tokens, num_latents);
  if (!o.tokens && *n > num_latents) {
    return invalid_argument("num_tokens " + std::to_string(*n) + " exceeds the model's " +
                            std::to_string(num_latents) + " tokens per shape");
  }
  if (!o.tokens && (o.variations < 1 || o.variations > kMaxVariations)) {
    return invalid_argument("variations " + std::to_string(o.variations) + " outside [1, " +
                            std::to_string(kMaxVariations) + "]");
  }
  if (!o.tokens && o.variations > 1 && !o.generation.sampling.sample) {
    return invalid_argument("variations " + std::to_string(o.variations) +
                            " need sampling on (greedy decoding would give identical candidates)");
  }
  return Status();
}

// How the job runs (its first event): backend, KV cache, whether decode steps are recorded.
ModeEvent shape_job_mode(const JobOptions& o, shape::ShapePipeline& pipeline) {
  ModeEvent mode;
  mode.backend = pipeline.backend().name();
  mode.kv_cache = o.generation.use_kv_cache;
  if (!pipeline.backend().can_record()) {
    mode.graphs = GraphMode::kUnavailable;
    mode.graphs_reason = "the " +
                         std::string(pipeline.backend().device() == Device::kCpu
                                         ? "CPU backend runs the decode step eagerly"
                                         : "backend cannot record") +
                         " (CUDA graphs need the CUDA backend)";
  } else if (o.tokens) {
    mode.graphs = GraphMode::kOff;
    mode.graphs_reason = "decoding given tokens: no decode steps";
  } else if (!o.generation.use_kv_cache) {
    mode.graphs = GraphMode::kOff;
    mode.graphs_reason = "the recorded step needs the KV cache, which is off";
  } else if (!o.generation.use_graphs) {
    mode.graphs = GraphMode::kOff;
    mode.graphs_reason = "switched off (eager launches)";
  } else {
    mode.graphs = GraphMode::kOn;
  }
  return mode;
}

}  // namespace

// The decode: the prompt encoded, every candidate's tokens generated together, live previews
// meshed beside (CPU) or within (device) the token loop under the job's budget. Fills `out`;
// errors as the job's terminal status. `*preview_failed`: the status is a preview's failure,
// reported as an Error although it set the cancel flag to stop the decode.
Status Session::Impl::generate_shape_tokens(uint64_t id, const JobOptions& o, int64_t n,
                                            std::atomic<bool>& cancel, Trace& trace,
                                            ShapeTokens* out, bool* preview_failed) {
  const Lane lane = Lane::kShape;
  shape::ShapePipeline& pipeline = *shape_;
  const int variations = o.variations;
  const uint64_t base_seed = o.generation.sampling.seed;
  auto prompt = pipeline.encode_prompt(o.prompt, &trace, &cancel);
  if (!prompt.ok()) return prompt.status();
  emit(id, lane, StageEvent{kStageText, trace_total(trace, shape::kTraceText)});

  std::vector<std::vector<int32_t>> prefixes(static_cast<size_t>(variations));
  for (auto& prefix : prefixes) prefix.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::mutex preview_mutex;
  Status preview_error;  // guarded by preview_mutex while the mesher runs
  auto mesh_preview = [&](int cand, const std::vector<int32_t>& prefix,
                          const std::atomic<bool>* stop) -> double {
    Stopwatch watch;
    shape::MeshOptions preview = to_shape(o.mesh);
    preview.resolution = o.preview_resolution;
    const int64_t done = static_cast<int64_t>(prefix.size());
    auto partial = pipeline.tokens_to_mesh(prefix, preview, nullptr, stop);
    const double ms = watch.elapsed_ms();
    if (partial.ok()) {
      emit(id, lane,
           PartialMeshEvent{done, std::make_shared<const mesh::Mesh>(std::move(partial).value()),
                            cand, ms});
    } else if (partial.status().code() != ErrorCode::kNotFound &&
               partial.status().code() != ErrorCode::kCancelled) {
      // A prefix without surface is normal early on (no preview, not an error); anything else
      // stops the job: the generator only listens to the cancel flag.
      std::lock_guard<std::mutex> lock(preview_mutex);
      if (preview_error.ok()) {
        preview_error =
            partial.status().with_context("preview after " + std::to_string(done) + " tokens");
      }
      cancel.store(true);
    }
    return ms;
  };
  // On the CPU backend previews overlap the decode (PreviewMesher); a device backend runs them in
  // the token loop (one stream: a recorded decode step must not capture a preview's work), with
  // the same budget: a preview due while over it is skipped (a candidate's first never is).
  double estimate_ms = 0.0;  // what a preview at this resolution took last (0: not known)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (preview_cost_.resolution == o.preview_resolution) estimate_ms = preview_cost_.ms;
  }
  std::unique_ptr<PreviewMesher> mesher;
  if (o.preview_every > 0 && pipeline.backend().device() == Device::kCpu) {
    mesher = std::make_unique<PreviewMesher>(mesh_preview, &cancel, o.preview_budget, estimate_ms);
  }
  Stopwatch inline_clock;
  double inline_busy_ms = 0.0;
  auto on_token = [&](int64_t candidate, int64_t index, int32_t token, double ms) {
    const int cand = static_cast<int>(candidate);
    if (index == 0 && cand == 0) {
      emit(id, lane,
           StageEvent{kStagePrefill,
                      trace_total(trace, "gpt.condition") + trace_total(trace, "gpt.prefill")});
    }
    emit(id, lane, TokenEvent{index, token, ms, cand});
    std::vector<int32_t>& prefix = prefixes[static_cast<size_t>(cand)];
    prefix.push_back(token);
    const int64_t done = index + 1;
    if (o.preview_every <= 0 || done % o.preview_every != 0 || done >= n) return;
    if (mesher) {
      mesher->submit(cand, prefix);
    } else if (o.preview_budget >= 1.0 ||
               inline_busy_ms + estimate_ms <= o.preview_budget * inline_clock.elapsed_ms()) {
      estimate_ms = mesh_preview(cand, prefix, &cancel);
      inline_busy_ms += estimate_ms;
    }
  };
  std::vector<shape::CandidateSpec> specs;
  for (int j = 0; j < variations; ++j) {
    specs.push_back({0, base_seed + static_cast<uint64_t>(j)});
  }
  const shape::EncodedPrompt& encoded = *prompt;
  auto generated = pipeline.generate_candidates({&encoded}, specs, to_shape(o.generation), on_token,
                                                &trace, &cancel);
  // Every preview event is out before the decode stage; none is meshed after it.
  if (mesher) {
    mesher->finish(generated.ok() && !cancel.load());
    mesher->rethrow_failure();  // a preview's exception is the job's (the lane reports it)
    estimate_ms = mesher->estimate_ms();
  }
  if (o.preview_every > 0 && estimate_ms > 0.0) {
    std::lock_guard<std::mutex> lock(mutex_);
    preview_cost_ = {o.preview_resolution, estimate_ms};
  }
  if (!preview_error.ok()) {
    *preview_failed = true;
    return preview_error;
  }
  if (!generated.ok()) return generated.status();
  emit(id, lane, StageEvent{kStageDecode, trace_total(trace, "gpt.decode")});
  out->tokens = std::move(generated).value();
  out->prompt = std::move(prompt).value();
  return Status();
}

// The final meshes, candidate by candidate, each ending with its FinalMesh event; false after
// the job's terminal event (an error or a cancel) when one failed.
bool Session::Impl::mesh_shape_candidates(uint64_t id, const JobOptions& o, int resolution,
                                          ShapeTokens& generated, std::atomic<bool>& cancel,
                                          const std::function<void(const Status&)>& finish_with) {
  const Lane lane = Lane::kShape;
  shape::ShapePipeline& pipeline = *shape_;
  const int variations = static_cast<int>(generated.tokens.size());
  const uint64_t base_seed = o.generation.sampling.seed;
  std::vector<std::vector<int32_t>>& tokens = generated.tokens;
  const shape::EncodedPrompt& prompt_info = generated.prompt;
  // Final meshes, candidate by candidate. With several, a candidate's clean-up (single-threaded)
  // runs on a helper thread while the decoder decodes and extracts the next candidate
  // (extraction of finished candidates overlaps the next work where the cores allow); the next
  // candidate's stage events are held until the previous FinalMesh is out, so the events keep
  // their documented order.
  struct Extracted {
    int candidate = 0;
    mesh::Mesh mesh;
    mesh::ExtractionStats stats;
    Status status;  // of the clean-up
    double cleanup_ms = 0.0;
  };
  auto clean = [&o](Extracted e) {
    Stopwatch watch;
    e.status = mesh::cleanup(e.mesh, o.mesh.cleanup);
    e.cleanup_ms = watch.elapsed_ms();
    return e;
  };
  auto with_candidate = [variations](const Status& st, int cand) {
    return variations > 1 ? st.with_context("candidate " + std::to_string(cand + 1)) : st;
  };
  // Emits a cleaned candidate's last stage and its FinalMesh; false (after the job's error event)
  // when its clean-up failed.
  auto publish = [&](Extracted e) {
    if (!e.status.ok()) {
      finish_with(with_candidate(e.status, e.candidate));
      return false;
    }
    emit(id, lane, StageEvent{kStageCleanup, e.cleanup_ms, e.candidate});
    FinalMeshEvent final_event;
    final_event.candidate = e.candidate;
    final_event.seed = base_seed + static_cast<uint64_t>(e.candidate);
    final_event.mesh = std::make_shared<const mesh::Mesh>(std::move(e.mesh));
    final_event.tokens = std::move(tokens[static_cast<size_t>(e.candidate)]);
    final_event.extraction = e.stats;
    final_event.resolution = resolution;
    final_event.prompt_tokens = prompt_info.prompt_tokens;
    final_event.prompt_truncated = prompt_info.truncated;
    final_event.image_only_tokens = prompt_info.image_only_tokens;
    emit(id, lane, std::move(final_event));
    return true;
  };
  std::future<Extracted> cleaning;  // the previous candidate's clean-up (its destructor waits)
  for (int cand = 0; cand < variations; ++cand) {
    Trace mesh_trace;
    if (cancel.load()) {
      finish_with(cancelled("cancelled before latent decoding"));
      return false;
    }
    const std::vector<int32_t>& ids = tokens[static_cast<size_t>(cand)];
    if (Status st = pipeline.decode_latents(ids, &mesh_trace); !st.ok()) {
      finish_with(st);
      return false;
    }
    const StageEvent latent{kStageLatentDecode, trace_total(mesh_trace, shape::kTraceLatentDecode),
                            cand};
    const bool hold = cleaning.valid();  // the previous candidate's FinalMesh is not out yet
    if (!hold) emit(id, lane, latent);
    Extracted e;
    e.candidate = cand;
    auto surface = pipeline.extract_surface(to_shape(o.mesh), &mesh_trace, &cancel, &e.stats);
    if (!surface.ok()) {
      finish_with(with_candidate(surface.status(), cand));
      return false;
    }
    e.mesh = std::move(surface).value();
    if (hold) {
      if (!publish(cleaning.get())) return false;
      emit(id, lane, latent);
    }
    emit(id, lane,
         StageEvent{kStageExtraction, trace_total(mesh_trace, shape::kTraceExtraction), cand});
    if (cand + 1 < variations) {
      cleaning = std::async(std::launch::async, clean, std::move(e));
    } else if (!publish(clean(std::move(e)))) {
      return false;
    }
  }
  return true;
}

void Session::Impl::run_shape_job(uint64_t id, const JobOptions& o, std::atomic<bool>& cancel) {
  const Lane lane = Lane::kShape;
  Stopwatch total;
  Trace trace;
  // The terminal event of a failed job: Cancelled when the job was cancelled (whatever stage
  // noticed it), else Error.
  auto finish_with = [&](const Status& status) {
    if (status.code() == ErrorCode::kCancelled || cancel.load()) {
      emit(id, lane, CancelledEvent{status.message()});
    } else {
      emit(id, lane, ErrorEvent{status});
    }
  };
  if (shape_ == nullptr) return finish_with(not_found("no shape model is loaded"));
  int resolution = 0;
  int64_t n = 0;
  if (Status st = check_shape_job(o, *shape_, &resolution, &n); !st.ok()) return finish_with(st);
  emit(id, lane, shape_job_mode(o, *shape_));
  if (!o.replay_prefixes.empty()) {
    shape::MeshOptions preview = to_shape(o.mesh);
    preview.resolution = o.preview_resolution;
    for (const int64_t k : o.replay_prefixes) {
      if (cancel.load()) return finish_with(cancelled("replay cancelled"));
      Stopwatch watch;
      const std::vector<int32_t> prefix(o.tokens->begin(), o.tokens->begin() + k);
      auto meshed = shape_->tokens_to_mesh(prefix, preview, nullptr, &cancel);
      if (!meshed.ok() && meshed.status().code() != ErrorCode::kNotFound) {
        return finish_with(
            meshed.status().with_context("replay of " + std::to_string(k) + " tokens"));
      }
      emit(id, lane,
           PartialMeshEvent{k,
                            std::make_shared<const mesh::Mesh>(
                                meshed.ok() ? std::move(meshed).value() : mesh::Mesh()),
                            0, watch.elapsed_ms()});
    }
    return emit(id, lane, DoneEvent{total.elapsed_ms()});
  }
  ShapeTokens generated;
  if (o.tokens) {
    generated.tokens.push_back(*o.tokens);
  } else {
    bool preview_failed = false;
    Status st = generate_shape_tokens(id, o, n, cancel, trace, &generated, &preview_failed);
    if (preview_failed) return emit(id, lane, ErrorEvent{st});
    if (!st.ok()) return finish_with(st);
  }
  if (!mesh_shape_candidates(id, o, resolution, generated, cancel, finish_with)) return;
  emit(id, lane, DoneEvent{total.elapsed_ms()});
}

}  // namespace tessera::runtime
