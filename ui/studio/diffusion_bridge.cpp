#include "ui/studio/diffusion_bridge.h"

#include <sys/resource.h>
#include <unistd.h>

#include <QMetaObject>
#include <chrono>
#include <filesystem>
#include <utility>

namespace tessera::studio {

std::string default_diffusion_model_path(const std::string& assets_dir) {
  return assets_dir + "/models/tessera-tiny/diffusion";
}

namespace {

// "parent/name" of a model path (e.g. tessera-tiny/diffusion), short enough for the panel.
std::string short_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  const std::string parent = p.parent_path().filename().string();
  return parent.empty() ? p.filename().string() : parent + "/" + p.filename().string();
}

}  // namespace

DiffusionBridge::DiffusionBridge(std::string assets_dir, QObject* parent)
    : QObject(parent), assets_dir_(std::move(assets_dir)) {
  model_message_ = QStringLiteral("no diffusion model loaded");
  worker_ = std::thread([this] { worker_loop(); });
}

DiffusionBridge::~DiffusionBridge() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    cancel_.store(true);  // generate() returns kCancelled before its next step
    pending_job_.reset();
    pending_load_.reset();
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void DiffusionBridge::load_model(const QString& path,
                                 const diffusion::DiffusionLoadOptions& options) {
  const uint64_t serial = ++load_serial_;
  model_path_ = path;
  std::error_code ec;
  if (path.trimmed().isEmpty() || !std::filesystem::exists(path.toStdString(), ec)) {
    model_state_ = DiffusionModelState::kMissing;
    model_message_ = QStringLiteral(
                         "No diffusion model: %1 does not exist. The embedded tessera-tiny "
                         "diffusion model is not installed; start with --diffusion-model "
                         "<diffusers folder or SD 1.x .safetensors> to use another.")
                         .arg(path.isEmpty() ? QStringLiteral("(no path)") : path);
    Q_EMIT modelStateChanged();
    return;
  }
  model_state_ = DiffusionModelState::kLoading;
  model_message_ = QStringLiteral("loading %1 ...").arg(path);
  diffusion::DiffusionLoadOptions o = options;
  if (o.clip_vocab_fallback.empty()) {
    o.clip_vocab_fallback = assets_dir_ + "/vocab/clip/bpe_simple_vocab_16e6.txt.gz";
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_load_ = LoadRequest{serial, path.toStdString(), std::move(o)};
  }
  wake_.notify_all();
  Q_EMIT modelStateChanged();
}

uint64_t DiffusionBridge::submit(const QString& prompt, const ImageSettings& settings) {
  if (model_state_ != DiffusionModelState::kReady) return 0;
  const uint64_t previous = state_.job;
  const bool previous_open = state_.state == JobState::kRunning;
  Request r;
  r.job = ++next_job_;
  r.request.prompt = prompt.toStdString();
  r.request.width = r.request.height = image_size_;
  r.request.steps = settings.steps;
  r.request.guidance_scale = settings.guidance;
  r.request.sampler = settings.sampler;
  r.request.seed = settings.seed;
  bool held = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_job_ != 0) cancel_.store(true);
    pending_job_ = r;
    held = shape_busy_;
  }
  wake_.notify_all();
  if (previous_open) {
    Q_EMIT imageFinished(previous, static_cast<int>(JobState::kCancelled),
                         QStringLiteral("replaced by a new image"));
  }
  state_ = ImageJobState{};
  state_.job = r.job;
  state_.state = JobState::kRunning;
  state_.waiting_for_shape = held;
  state_.prompt = prompt;
  state_.seed = settings.seed;
  state_.steps = settings.steps;
  Q_EMIT imageChanged();
  return r.job;
}

void DiffusionBridge::cancel() {
  if (state_.state != JobState::kRunning) return;
  bool was_pending = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_job_ && pending_job_->job == state_.job) {
      pending_job_.reset();
      was_pending = true;
    } else if (running_job_ == state_.job) {
      cancel_.store(true);
    }
  }
  if (was_pending) {
    // Never started: finish it here (the worker will not report it).
    state_.state = JobState::kCancelled;
    state_.waiting_for_shape = false;
    state_.message = QStringLiteral("cancelled before it started");
    Q_EMIT imageChanged();
    Q_EMIT imageFinished(state_.job, static_cast<int>(JobState::kCancelled), state_.message);
  }
}

void DiffusionBridge::set_shape_busy(bool busy) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shape_busy_ = busy;
  }
  wake_.notify_all();
}

void DiffusionBridge::set_worker_step_hook(StepHook hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_hook_ = std::move(hook);
}

void DiffusionBridge::worker_loop() {
  // A lower priority for this thread only (Linux: nice applies per thread); see the header.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 5);  // best effort
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] {
      return stop_ || pending_load_.has_value() || (pending_job_.has_value() && !shape_busy_);
    });
    if (stop_) return;
    if (pending_load_) {
      LoadRequest load = std::move(*pending_load_);
      pending_load_.reset();
      lock.unlock();
      auto loaded = diffusion::DiffusionModel::load(load.path, load.options);
      QString description, error;
      int64_t size = 0;
      if (loaded.ok()) {
        model_ = std::move(loaded).value();
        size = model_->default_image_size();
        description =
            QStringLiteral("model %1 (%2), %3x%3 px, %4")
                .arg(QString::fromStdString(short_name(load.path)),
                     QString::fromLatin1(diffusion::model_layout_name(model_->files().layout)))
                .arg(size)
                .arg(QString::fromStdString(model_->backend().name()));
      } else {
        error = QString::fromStdString(loaded.status().message());
      }
      QMetaObject::invokeMethod(
          this,
          [this, serial = load.serial, description, error, size] {
            on_loaded(serial, description, error, size);
          },
          Qt::QueuedConnection);
      lock.lock();
      continue;
    }
    Request job = std::move(*pending_job_);
    pending_job_.reset();
    running_job_ = job.job;
    cancel_.store(false);
    const StepHook hook = step_hook_;
    lock.unlock();
    run_job(job, hook);
    lock.lock();
    running_job_ = 0;
  }
}

void DiffusionBridge::run_job(const Request& job, const StepHook& hook) {
  QMetaObject::invokeMethod(
      this, [this, id = job.job] { on_started(id); }, Qt::QueuedConnection);
  if (model_ == nullptr) {
    QMetaObject::invokeMethod(
        this,
        [this, id = job.job] {
          on_finished(id, static_cast<int>(JobState::kFailed),
                      QStringLiteral("no diffusion model is loaded"), nullptr, 0.0);
        },
        Qt::QueuedConnection);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  diffusion::GenerateCallbacks callbacks;
  callbacks.cancel = &cancel_;
  callbacks.on_step = [this, &hook, id = job.job](const diffusion::StepProgress& p) {
    std::vector<uint8_t> rgb;
    if (p.preview_rgb != nullptr) {
      rgb.assign(p.preview_rgb, p.preview_rgb + p.latent_height * p.latent_width * 3);
    }
    QMetaObject::invokeMethod(
        this,
        [this, id, step = p.step, sigma = p.sigma, ms = p.ms, h = p.latent_height,
         w = p.latent_width, rgb = std::move(rgb)] { on_step(id, step, sigma, ms, w, h, rgb); },
        Qt::QueuedConnection);
    if (hook) hook(p.step, cancel_);
  };
  auto image = model_->generate(job.request, callbacks);
  const double total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  int state = static_cast<int>(JobState::kDone);
  QString message;
  std::shared_ptr<diffusion::GeneratedImage> result;
  if (image.ok()) {
    result = std::make_shared<diffusion::GeneratedImage>(std::move(image).value());
    result->decoded.clear();  // the UI needs the RGB8 image only
    result->latents.clear();
  } else if (image.status().code() == ErrorCode::kCancelled) {
    state = static_cast<int>(JobState::kCancelled);
    message = QStringLiteral("cancelled");
  } else {
    state = static_cast<int>(JobState::kFailed);
    message = QString::fromStdString(image.status().message());
  }
  QMetaObject::invokeMethod(
      this,
      [this, id = job.job, state, message, result, total_ms] {
        on_finished(id, state, message, result, total_ms);
      },
      Qt::QueuedConnection);
}

void DiffusionBridge::on_loaded(uint64_t serial, const QString& description, const QString& error,
                                int64_t image_size) {
  if (serial != load_serial_) return;  // a newer load request supersedes this one
  if (!error.isEmpty()) {
    model_state_ = DiffusionModelState::kFailed;
    model_message_ = QStringLiteral("Diffusion model %1 did not load: %2").arg(model_path_, error);
  } else {
    model_state_ = DiffusionModelState::kReady;
    model_message_ = description;
    image_size_ = image_size;
  }
  Q_EMIT modelStateChanged();
}

void DiffusionBridge::on_started(uint64_t job) {
  if (job != state_.job || state_.state != JobState::kRunning) return;
  state_.waiting_for_shape = false;
  Q_EMIT imageChanged();
}

void DiffusionBridge::on_step(uint64_t job, int step, double sigma, double ms, int64_t w, int64_t h,
                              std::vector<uint8_t> rgb) {
  if (job != state_.job || state_.state != JobState::kRunning) return;
  (void)step;  // steps arrive in order; their index is step_ms.size()
  state_.step_ms.push_back(static_cast<float>(ms));
  state_.step_sigma.push_back(static_cast<float>(sigma));
  if (!rgb.empty()) {
    state_.image_width = w;
    state_.image_height = h;
    state_.image_rgb = std::move(rgb);
    state_.image_final = false;
    ++state_.image_version;
  }
  Q_EMIT imageChanged();
}

void DiffusionBridge::on_finished(uint64_t job, int state, const QString& message,
                                  std::shared_ptr<diffusion::GeneratedImage> image,
                                  double total_ms) {
  if (job != state_.job || state_.state != JobState::kRunning) return;
  state_.state = static_cast<JobState>(state);
  state_.waiting_for_shape = false;
  if (image != nullptr) {
    state_.image_width = image->width;
    state_.image_height = image->height;
    state_.image_rgb = std::move(image->rgb);
    state_.image_final = true;
    ++state_.image_version;
    state_.text_ms = image->text_ms;
    state_.denoise_ms = image->denoise_ms;
    state_.vae_ms = image->vae_ms;
    state_.total_ms = total_ms;
  } else {
    state_.message = message;
  }
  Q_EMIT imageChanged();
  Q_EMIT imageFinished(job, state, image != nullptr ? QString() : message);
}

}  // namespace tessera::studio
