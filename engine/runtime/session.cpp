#include "engine/runtime/session.h"

#include <algorithm>
#include <exception>
#include <new>
#include <utility>

#include "engine/core/trace.h"

namespace tessera::runtime {

namespace {

double trace_total(const Trace& trace, const char* name) {
  const TraceStats* s = trace.find(name);
  return s != nullptr ? s->total_ms : 0.0;
}

}  // namespace

std::unique_ptr<Session> Session::create(std::unique_ptr<shape::ShapePipeline> pipeline,
                                         SessionOptions options) {
  return std::unique_ptr<Session>(new Session(std::move(pipeline), std::move(options)));
}

Expected<std::unique_ptr<Session>> Session::open(const std::string& model_dir,
                                                 const shape::PipelineOptions& pipeline_options,
                                                 SessionOptions options) {
  TESSERA_ASSIGN_OR_RETURN(auto pipeline, shape::ShapePipeline::load(model_dir, pipeline_options));
  return create(std::move(pipeline), std::move(options));
}

Session::Session(std::unique_ptr<shape::ShapePipeline> pipeline, SessionOptions options)
    : pipeline_(std::move(pipeline)),
      options_(std::move(options)),
      num_latents_(pipeline_->num_latents()),
      codebook_size_(pipeline_->codebook_size()),
      default_resolution_(pipeline_->default_resolution()) {
  worker_ = std::thread([this] { worker_loop(); });
}

Session::~Session() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    if (running_cancel_) running_cancel_->store(true);
    if (pending_) {
      dropped_.emplace_back(pending_->id, "session closed");
      pending_.reset();
    }
  }
  work_cv_.notify_all();
  worker_.join();
}

uint64_t Session::submit(JobOptions options) {
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_id_++;
    if (running_cancel_) running_cancel_->store(true);
    if (pending_) dropped_.emplace_back(pending_->id, "replaced by job " + std::to_string(id));
    pending_ = Job{id, std::move(options), std::make_shared<std::atomic<bool>>(false)};
  }
  work_cv_.notify_all();
  return id;
}

void Session::cancel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_cancel_) running_cancel_->store(true);
    if (pending_) {
      dropped_.emplace_back(pending_->id, "cancelled before it started");
      pending_.reset();
    }
  }
  work_cv_.notify_all();
}

std::optional<Event> Session::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.empty()) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<Event> Session::wait_event(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!event_cv_.wait_for(lock, timeout, [this] { return !events_.empty(); })) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

bool Session::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !busy_ && !pending_ && dropped_.empty();
}

void Session::emit(uint64_t job, EventPayload payload) {
  Event event{job, std::move(payload)};
  if (options_.on_event) {
    options_.on_event(event);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  event_cv_.notify_all();
}

void Session::worker_loop() {
  for (;;) {
    std::vector<std::pair<uint64_t, std::string>> dropped;
    std::optional<Job> job;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [this] { return stop_ || pending_.has_value() || !dropped_.empty(); });
      dropped.swap(dropped_);
      stop = stop_;
      if (pending_ && !stop) {
        job = std::move(pending_);
        pending_.reset();
        running_cancel_ = job->cancel;
      }
      busy_ = true;
    }
    for (auto& [id, reason] : dropped) emit(id, CancelledEvent{reason});
    if (job) {
      try {
        run_job(*job);
      } catch (const std::bad_alloc&) {
        emit(job->id, ErrorEvent{out_of_memory("out of memory while running the job")});
      } catch (const std::exception& e) {
        emit(job->id, ErrorEvent{internal_error(std::string("unexpected exception: ") + e.what())});
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    running_cancel_.reset();
    busy_ = false;
    if (stop && !pending_ && dropped_.empty()) return;
  }
}

void Session::run_job(const Job& job) {
  const JobOptions& o = job.options;
  const std::atomic<bool>* cancel = job.cancel.get();
  Stopwatch total;
  Trace trace;
  // The terminal event of a failed job: Cancelled when the job was cancelled (whatever stage
  // noticed it), else Error.
  auto finish_with = [&](const Status& status) {
    if (status.code() == ErrorCode::kCancelled || cancel->load()) {
      emit(job.id, CancelledEvent{status.message()});
    } else {
      emit(job.id, ErrorEvent{status});
    }
  };
  auto check_cancel = [&](const char* where) -> Status {
    if (cancel->load()) return cancelled(std::string("cancelled before ") + where);
    return Status();
  };

  // Options first: a bad resolution should not cost a generation.
  if (Status st = shape::resolution_base(pipeline_->resolve_resolution(o.mesh.resolution)).status();
      !st.ok()) {
    return finish_with(st.with_context("mesh"));
  }
  if (o.preview_every < 0) {
    return finish_with(
        invalid_argument("preview_every " + std::to_string(o.preview_every) + " must be >= 0"));
  }
  if (o.preview_every > 0) {
    if (Status st = shape::resolution_base(o.preview_resolution).status(); !st.ok()) {
      return finish_with(st.with_context("preview"));
    }
  }

  auto prompt = pipeline_->encode_prompt(o.prompt, &trace, cancel);
  if (!prompt.ok()) return finish_with(prompt.status());
  emit(job.id, StageEvent{kStageText, trace_total(trace, shape::kTraceText)});

  const int64_t n = o.generation.num_tokens > 0 ? o.generation.num_tokens : num_latents_;
  std::vector<int32_t> prefix;
  prefix.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
  Status preview_error;
  std::atomic<bool>& abort_flag = *job.cancel;  // the preview's way to stop the generator
  auto on_token = [&](int64_t index, int32_t id, double ms) {
    if (index == 0) {
      emit(job.id, StageEvent{kStagePrefill, trace_total(trace, "gpt.condition") +
                                                 trace_total(trace, "gpt.prefill")});
    }
    emit(job.id, TokenEvent{index, id, ms});
    prefix.push_back(id);
    const int64_t done = index + 1;
    if (o.preview_every <= 0 || done % o.preview_every != 0 || done >= n) return;
    shape::MeshOptions preview = o.mesh;
    preview.resolution = o.preview_resolution;
    auto partial = pipeline_->tokens_to_mesh(prefix, preview, nullptr, cancel);
    if (partial.ok()) {
      emit(job.id,
           PartialMeshEvent{done, std::make_shared<const mesh::Mesh>(std::move(partial).value())});
    } else if (partial.status().code() != ErrorCode::kNotFound &&
               partial.status().code() != ErrorCode::kCancelled) {
      // A prefix without surface is normal early on (no preview, not an error); anything else
      // stops the job: the generator only listens to the cancel flag.
      preview_error =
          partial.status().with_context("preview after " + std::to_string(done) + " tokens");
      abort_flag.store(true);
    }
  };
  auto tokens = pipeline_->generate(*prompt, o.generation, on_token, &trace, cancel);
  if (!preview_error.ok()) return emit(job.id, ErrorEvent{preview_error});
  if (!tokens.ok()) return finish_with(tokens.status());
  emit(job.id, StageEvent{kStageDecode, trace_total(trace, "gpt.decode")});

  if (Status st = check_cancel("latent decoding"); !st.ok()) return finish_with(st);
  if (Status st = pipeline_->decode_latents(*tokens, &trace); !st.ok()) return finish_with(st);
  emit(job.id, StageEvent{kStageLatentDecode, trace_total(trace, shape::kTraceLatentDecode)});

  mesh::ExtractionStats stats;
  auto final_mesh = pipeline_->extract_mesh(o.mesh, &trace, cancel, &stats);
  if (!final_mesh.ok()) return finish_with(final_mesh.status());
  emit(job.id, StageEvent{kStageExtraction, trace_total(trace, shape::kTraceExtraction)});
  emit(job.id, StageEvent{kStageCleanup, trace_total(trace, shape::kTraceCleanup)});

  FinalMeshEvent final_event;
  final_event.mesh = std::make_shared<const mesh::Mesh>(std::move(final_mesh).value());
  final_event.tokens = std::move(tokens).value();
  final_event.extraction = stats;
  final_event.prompt_tokens = prompt->prompt_tokens;
  final_event.prompt_truncated = prompt->truncated;
  final_event.image_only_tokens = prompt->image_only_tokens;
  emit(job.id, std::move(final_event));
  emit(job.id, DoneEvent{total.elapsed_ms()});
}

}  // namespace tessera::runtime
