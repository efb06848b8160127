#include "ui/studio/engine_bridge.h"

#include <utility>
#include <variant>

namespace tessera::studio {

EngineBridge::EngineBridge(QObject* parent)
    : QObject(parent), capabilities_(runtime::probe_capabilities()) {
  runtime::SessionOptions options;
  options.on_event = [queue = queue_](const runtime::Event& event) {
    std::lock_guard<std::mutex> lock(queue->mutex);
    queue->events.push_back(event);
  };
  session_ = runtime::Session::create(std::move(options));
  drain_timer_.setInterval(16);  // ~60 Hz, the same as the viewport's repaint timer
  connect(&drain_timer_, &QTimer::timeout, this, &EngineBridge::drain);
  drain_timer_.start();
}

EngineBridge::~EngineBridge() {
  drain_timer_.stop();
  // Cancels the running jobs and joins the workers (within one token / denoising step).
  session_.reset();
}

void EngineBridge::set_lane_listener(runtime::Lane lane,
                                     std::function<void(const runtime::Event&)> listener) {
  if (lane == runtime::Lane::kImage) {
    image_listener_ = std::move(listener);
  } else if (lane == runtime::Lane::kTexture) {
    texture_listener_ = std::move(listener);
  }
}

void EngineBridge::load_model(const QString& dir) {
  loading_ = true;
  loading_dir_ = dir;
  Q_EMIT modelLoading(dir);
  if (dir.trimmed().isEmpty()) {
    loading_ = false;
    load_job_ = 0;
    Q_EMIT modelFailed(dir, QStringLiteral("no model directory given"));
    return;
  }
  runtime::ShapeModelOptions options;
  options.path = dir.toStdString();
  options.device = device_;
  const auto weights = runtime::parse_shape_weights(weights_.toStdString());
  options.weights = weights.ok() ? *weights : runtime::ShapeWeights::kAuto;
  load_job_ = session_->load_shape_model(std::move(options));
}

std::optional<runtime::ModelIdentity> EngineBridge::model_identity() {
  if (!model_identity_) {
    const std::optional<runtime::ShapeModelInfo> model = session_->shape_model();
    if (!model) return std::nullopt;
    auto identity = runtime::model_identity(*model);
    if (!identity.ok()) return std::nullopt;
    model_identity_ = *identity;
  }
  return model_identity_;
}

uint64_t EngineBridge::submit(const runtime::JobOptions& request) {
  if (!has_model_) return 0;
  runtime::JobOptions job = request;
  // A frame recording wants every step of the shape forming: the previews' time budget is lifted
  // while recording (the job takes longer; that is what a recording is for).
  if (emit_every_partial_) job.preview_budget = 1.0;
  replay_job_ = 0;  // a generation replaces a replay
  const uint64_t id = session_->submit(job);
  if (busy()) {
    // The previous job is being cancelled by submit(); the UI moves on to the new one now.
    Q_EMIT jobFinished(stats_.job, static_cast<int>(JobState::kCancelled), "replaced by a new job");
  }
  stats_.start(id, runtime::tokens_to_generate(job.generation.num_tokens, num_latents_),
               std::chrono::steady_clock::now(), job.tokens ? 1 : job.variations);
  stats_.backend = backend_name_.toStdString();
  stats_.weights = weights_label_.toStdString();
  stats_.kv_cache = job.generation.use_kv_cache;
  Q_EMIT statsChanged();
  return id;
}

void EngineBridge::cancel() {
  session_->cancel(runtime::Lane::kShape);
}

uint64_t EngineBridge::submit_replay(const std::vector<int32_t>& tokens,
                                     std::vector<int64_t> prefixes, int resolution) {
  if (!has_model_) return 0;
  runtime::JobOptions job;
  job.tokens = tokens;
  job.replay_prefixes = std::move(prefixes);
  job.preview_resolution = resolution;
  if (busy()) {
    Q_EMIT jobFinished(stats_.job, static_cast<int>(JobState::kCancelled), "replaced by a replay");
    stats_.state = JobState::kCancelled;
    stats_.message = "replaced by a replay";
  }
  replay_job_ = session_->submit(job);
  return replay_job_;
}

void EngineBridge::cancel_replay() {
  if (replay_job_ == 0) return;
  replay_job_ = 0;  // its remaining events are dropped
  session_->cancel(runtime::Lane::kShape);
}

void EngineBridge::on_shape_event(const runtime::Event& event, bool* changed,
                                  const runtime::PartialMeshEvent** newest_partial) {
  // Model loads.
  if (event.job == load_job_ && load_job_ != 0) {
    if (std::holds_alternative<runtime::ModelLoadedEvent>(event.payload)) {
      const auto info = session_->shape_model();
      loading_ = false;
      has_model_ = true;
      model_dir_ = loading_dir_;
      backend_name_ = QString::fromStdString(info->backend);
      weights_label_ = QStringLiteral("%1, %2 MB read per token")
                           .arg(QString::fromStdString(info->weights))
                           .arg(static_cast<double>(info->gpt_weight_bytes) / 1e6, 0, 'f', 1);
      num_latents_ = info->num_latents;
      codebook_size_ = info->codebook_size;
      use_bbox_ = info->uses_bbox;
      on_gpu_ = info->on_gpu;
      can_record_graphs_ = info->can_record_graphs;
      model_identity_.reset();  // the new model's, on the next export
      example_prompts_.clear();
      for (const std::string& e : info->example_prompts)
        example_prompts_ << QString::fromStdString(e);
      if (busy()) {
        // A job of the previous model that was cancelled by the load.
        stats_.state = JobState::kCancelled;
        stats_.message = "model changed";
        Q_EMIT jobFinished(stats_.job, static_cast<int>(JobState::kCancelled), "model changed");
      }
      Q_EMIT modelLoaded(model_dir_);
    } else if (const auto* e = std::get_if<runtime::ErrorEvent>(&event.payload)) {
      loading_ = false;
      Q_EMIT modelFailed(loading_dir_, QString::fromStdString(e->status.message()));
    }
    return;
  }
  if (event.job == replay_job_ && replay_job_ != 0) {
    if (const auto* p = std::get_if<runtime::PartialMeshEvent>(&event.payload)) {
      Q_EMIT replayMesh(event.job, p->tokens, p->mesh);
    } else if (event.terminal()) {
      replay_job_ = 0;
      const auto* error = std::get_if<runtime::ErrorEvent>(&event.payload);
      Q_EMIT replayEnded(
          event.job, std::holds_alternative<runtime::DoneEvent>(event.payload),
          error != nullptr ? QString::fromStdString(error->status.message()) : QString());
    }
    return;
  }
  if (event.job != stats_.job || stats_.state != JobState::kRunning) return;
  const auto now = std::chrono::steady_clock::now();
  *changed |= stats_.apply(event, now);
  if (const auto* p = std::get_if<runtime::PartialMeshEvent>(&event.payload)) {
    if (stats_.candidates > 1) Q_EMIT candidatePartialMesh(p->candidate, p->mesh, p->tokens);
    if (p->candidate != 0) return;
    if (emit_every_partial_) {
      Q_EMIT partialMesh(p->mesh, p->tokens);
    } else {
      *newest_partial = p;
    }
  } else if (const auto* f = std::get_if<runtime::FinalMeshEvent>(&event.payload)) {
    if (stats_.candidates > 1) {
      Q_EMIT candidateFinalMesh(f->candidate, f->seed, f->mesh, f->tokens);
    }
    if (f->candidate != 0) return;
    *newest_partial = nullptr;
    Q_EMIT finalMesh(f->mesh, f->tokens);
  } else if (event.terminal()) {
    if (*newest_partial) Q_EMIT partialMesh((*newest_partial)->mesh, (*newest_partial)->tokens);
    *newest_partial = nullptr;
    Q_EMIT statsChanged();
    Q_EMIT jobFinished(event.job, static_cast<int>(stats_.state),
                       QString::fromStdString(stats_.message));
    *changed = false;
  }
}

void EngineBridge::drain() {
  std::deque<runtime::Event> events;
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    events.swap(queue_->events);
  }
  if (events.empty()) return;
  // Only the newest partial mesh of this batch is worth uploading.
  const runtime::PartialMeshEvent* newest_partial = nullptr;
  bool changed = false;
  for (const runtime::Event& event : events) {
    switch (event.lane) {
      case runtime::Lane::kShape:
        on_shape_event(event, &changed, &newest_partial);
        break;
      case runtime::Lane::kImage:
        if (image_listener_) image_listener_(event);
        break;
      case runtime::Lane::kTexture:
        if (texture_listener_) texture_listener_(event);
        break;
    }
  }
  if (newest_partial) Q_EMIT partialMesh(newest_partial->mesh, newest_partial->tokens);
  if (changed) Q_EMIT statsChanged();
}

}  // namespace tessera::studio
