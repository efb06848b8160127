#include "ui/studio/engine_bridge.h"

#include <filesystem>
#include <utility>

#include "kernels/cuda/device.h"

namespace tessera::studio {

std::string default_model_dir(const std::string& assets_dir) {
  return assets_dir + "/models/tessera-tiny";
}

bool gpu_available(std::string* why) {
  if (!kernels::cuda::built_with_cuda()) {
    if (why) *why = "this build has no CUDA backend";
    return false;
  }
  auto device = kernels::cuda::probe_device();
  if (!device.ok()) {
    if (why) *why = device.status().message();
    return false;
  }
  // The shape pipeline has no CUDA backend factory yet: a device alone is not enough.
  if (why) *why = "the shape engine runs on the CPU backend only in this version";
  return false;
}

EngineBridge::EngineBridge(std::string assets_dir, QObject* parent)
    : QObject(parent), assets_dir_(std::move(assets_dir)) {
  drain_timer_.setInterval(16);  // ~60 Hz, the same as the viewport's repaint timer
  connect(&drain_timer_, &QTimer::timeout, this, &EngineBridge::drain);
  drain_timer_.start();
}

EngineBridge::~EngineBridge() {
  drain_timer_.stop();
  // Cancels the running job and joins the worker (within one token step / one query batch).
  session_.reset();
  for (std::thread& t : loaders_) {
    if (t.joinable()) t.join();
  }
}

void EngineBridge::load_model(const QString& dir) {
  const uint64_t serial = ++load_serial_;
  loading_ = true;
  Q_EMIT modelLoading(dir);
  if (dir.trimmed().isEmpty()) {
    on_model_loaded(serial, dir, nullptr, QStringLiteral("no model directory given"));
    return;
  }
  shape::PipelineOptions options;
  options.device = device_;
  // Real CLIP checkpoints usually come without the vocabulary: use the bundled one (as the CLI).
  options.clip_vocab_fallback = assets_dir_ + "/vocab/clip/bpe_simple_vocab_16e6.txt.gz";
  const std::string path = dir.toStdString();
  loaders_.emplace_back([this, serial, dir, path, options] {
    auto holder = std::make_shared<std::unique_ptr<shape::ShapePipeline>>();
    QString error;
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
      error = QStringLiteral("'%1' is not a directory").arg(dir);
    } else {
      auto pipeline = shape::ShapePipeline::load(path, options);
      if (pipeline.ok()) {
        *holder = std::move(pipeline).value();
      } else {
        error = QString::fromStdString(pipeline.status().message());
      }
    }
    // Delivered on the UI thread; dropped by Qt if the bridge is gone by then (the destructor
    // joins this thread first, so `this` is alive while we post).
    QMetaObject::invokeMethod(
        this, [this, serial, dir, holder, error] { on_model_loaded(serial, dir, holder, error); },
        Qt::QueuedConnection);
  });
}

void EngineBridge::on_model_loaded(uint64_t serial, const QString& dir,
                                   std::shared_ptr<std::unique_ptr<shape::ShapePipeline>> pipeline,
                                   const QString& error) {
  if (serial != load_serial_) return;  // a newer request supersedes this one
  loading_ = false;
  if (!error.isEmpty() || pipeline == nullptr || *pipeline == nullptr) {
    Q_EMIT modelFailed(dir, error.isEmpty() ? QStringLiteral("the model did not load") : error);
    return;
  }
  // Replace the session: the old one's job (if any) is cancelled; its late events are dropped by
  // their generation tag.
  if (busy()) {
    stats_.state = JobState::kCancelled;
    stats_.message = "model changed";
    Q_EMIT jobFinished(stats_.job, static_cast<int>(JobState::kCancelled), "model changed");
  }
  session_.reset();
  shape::ShapePipeline& p = **pipeline;
  backend_name_ = QString::fromStdString(p.backend().name());
  num_latents_ = p.num_latents();
  codebook_size_ = p.codebook_size();
  use_bbox_ = p.gpt_config().use_bbox;
  const uint64_t generation = ++session_generation_;
  runtime::SessionOptions options;
  options.on_event = [queue = queue_, generation](const runtime::Event& event) {
    std::lock_guard<std::mutex> lock(queue->mutex);
    queue->events.emplace_back(generation, event);
  };
  session_ = runtime::Session::create(std::move(*pipeline), std::move(options));
  model_dir_ = dir;
  Q_EMIT modelLoaded(dir);
}

uint64_t EngineBridge::submit(const runtime::JobOptions& job) {
  if (!session_) return 0;
  const uint64_t id = session_->submit(job);
  if (busy()) {
    // The previous job is being cancelled by submit(); the UI moves on to the new one now.
    Q_EMIT jobFinished(stats_.job, static_cast<int>(JobState::kCancelled), "replaced by a new job");
  }
  const int64_t tokens =
      job.generation.num_tokens > 0 ? job.generation.num_tokens : session_->num_latents();
  stats_.start(id, tokens, std::chrono::steady_clock::now());
  stats_.backend = backend_name_.toStdString();
  stats_.kv_cache = job.generation.use_kv_cache;
  stats_.cuda_graph_available = false;
  Q_EMIT statsChanged();
  return id;
}

void EngineBridge::cancel() {
  if (session_) session_->cancel();
}

void EngineBridge::drain() {
  std::deque<std::pair<uint64_t, runtime::Event>> events;
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    events.swap(queue_->events);
  }
  if (events.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  // Only the newest partial mesh of this batch is worth uploading.
  const runtime::PartialMeshEvent* newest_partial = nullptr;
  bool changed = false;
  for (const auto& [generation, event] : events) {
    if (generation != session_generation_ || event.job != stats_.job) continue;
    if (stats_.state != JobState::kRunning) continue;  // already finished (e.g. model changed)
    changed |= stats_.apply(event, now);
    if (const auto* p = std::get_if<runtime::PartialMeshEvent>(&event.payload)) {
      if (emit_every_partial_) {
        Q_EMIT partialMesh(p->mesh, p->tokens);
      } else {
        newest_partial = p;
      }
    } else if (const auto* f = std::get_if<runtime::FinalMeshEvent>(&event.payload)) {
      newest_partial = nullptr;
      Q_EMIT finalMesh(f->mesh);
    } else if (event.terminal()) {
      if (newest_partial) Q_EMIT partialMesh(newest_partial->mesh, newest_partial->tokens);
      newest_partial = nullptr;
      Q_EMIT statsChanged();
      Q_EMIT jobFinished(event.job, static_cast<int>(stats_.state),
                         QString::fromStdString(stats_.message));
      changed = false;
    }
  }
  if (newest_partial) Q_EMIT partialMesh(newest_partial->mesh, newest_partial->tokens);
  if (changed) Q_EMIT statsChanged();
}

}  // namespace tessera::studio
