#include "ui/studio/diffusion_bridge.h"

#include "engine/runtime/image_inputs.h"

#include <utility>
#include <variant>

#include "ui/studio/engine_bridge.h"

namespace tessera::studio {

DiffusionBridge::DiffusionBridge(EngineBridge& engine, QObject* parent)
    : QObject(parent), engine_(engine) {
  model_message_ = QStringLiteral("no diffusion model loaded");
  engine_.set_lane_listener(runtime::Lane::kImage,
                            [this](const runtime::Event& event) { on_event(event); });
}

DiffusionBridge::~DiffusionBridge() {
  engine_.set_lane_listener(runtime::Lane::kImage, {});
  engine_.session().set_image_step_hook({});
}

void DiffusionBridge::load_model(const QString& path, runtime::DeviceChoice device) {
  // The runtime checks the path (a missing one is kNotFound: kMissing here) and loads it.
  runtime::ImageModelOptions options;
  options.path = path.toStdString();
  options.device = device;
  model_path_ =
      path.isEmpty() ? QString::fromStdString(runtime::default_diffusion_model_dir()) : path;
  model_state_ = DiffusionModelState::kLoading;
  model_message_ = QStringLiteral("loading %1 ...").arg(model_path_);
  load_job_ = engine_.session().load_image_model(std::move(options));
  Q_EMIT modelStateChanged();
}

uint64_t DiffusionBridge::submit(const QString& prompt, const ImageSettings& settings,
                                 std::shared_ptr<const mesh::TextureImage> init,
                                 std::shared_ptr<const mesh::TextureImage> mask,
                                 std::shared_ptr<const mesh::TextureImage> control,
                                 QString* error) {
  if (model_state_ != DiffusionModelState::kReady) {
    if (error != nullptr) *error = model_message_;
    return 0;
  }
  const uint64_t previous = state_.job;
  const bool previous_open = state_.state == JobState::kRunning;
  runtime::ImageJobOptions job;
  job.prompt = prompt.toStdString();
  job.width = job.height = image_size_;
  job.steps = settings.steps;
  job.guidance = settings.guidance;
  job.sampler = settings.sampler;
  job.seed = settings.seed;
  job.loras = settings.loras;
  const bool from_image = init != nullptr;
  if (from_image) {
    job.init_image = std::move(init);
    job.strength = settings.strength;
    job.mask = std::move(mask);
  }
  if (settings.fast) {
    if (Status st = runtime::apply_fast_choice(&job, runtime::default_lora_dir()); !st.ok()) {
      if (error != nullptr) *error = QString::fromStdString(st.message());
      return 0;
    }
  }
  if (control != nullptr) {
    job.control_image = std::move(control);
    job.control_model = settings.control_model;
    job.control_scale = settings.control_scale;
    job.control_guess_mode = settings.control_guess;
  }
  const uint64_t id = engine_.session().submit_image(std::move(job));
  start_state(id, previous, previous_open, QStringLiteral("replaced by a new image"), prompt,
              settings);
  state_.from_image = from_image;
  Q_EMIT imageChanged();
  return id;
}

void DiffusionBridge::start_state(uint64_t id, uint64_t previous, bool previous_open,
                                  const QString& why, const QString& prompt,
                                  const ImageSettings& settings) {
  if (previous_open) Q_EMIT imageFinished(previous, static_cast<int>(JobState::kCancelled), why);
  state_ = ImageJobState{};
  state_.job = id;
  state_.state = JobState::kRunning;
  state_.prompt = prompt;
  state_.seed = settings.seed;
  state_.steps = settings.steps;
}

uint64_t DiffusionBridge::submit_paint(std::shared_ptr<const mesh::Mesh> mesh,
                                       const QString& prompt, const ImageSettings& settings,
                                       QString* error) {
  if (model_state_ != DiffusionModelState::kReady) {
    if (error != nullptr) *error = model_message_;
    return 0;
  }
  runtime::PaintJobOptions job;
  job.mesh = std::move(mesh);
  job.image.prompt = prompt.toStdString();
  job.image.steps = settings.steps;
  job.image.guidance = settings.guidance;
  job.image.sampler = settings.sampler;
  job.image.seed = settings.seed;
  job.image.loras = settings.loras;
  job.image.control_model = settings.control_model;
  job.image.control_scale = settings.control_scale;
  if (settings.fast) {
    if (Status st = runtime::apply_fast_choice(&job.image, runtime::default_lora_dir()); !st.ok()) {
      if (error != nullptr) *error = QString::fromStdString(st.message());
      return 0;
    }
  }
  job.views.ring = settings.paint_views;
  if (Status st = runtime::check_paint_job(job); !st.ok()) {
    if (error != nullptr) *error = QString::fromStdString(st.message());
    return 0;
  }
  const uint64_t previous = state_.job;
  const bool previous_open = state_.state == JobState::kRunning;
  const uint64_t id = engine_.session().submit_paint(std::move(job));
  start_state(id, previous, previous_open, QStringLiteral("replaced by a paint"), prompt, settings);
  state_.paint = true;
  Q_EMIT imageChanged();
  return id;
}

void DiffusionBridge::cancel() {
  if (state_.state != JobState::kRunning) return;
  engine_.session().cancel(runtime::Lane::kImage);  // its Cancelled event ends the job here
}

void DiffusionBridge::set_worker_step_hook(StepHook hook) {
  engine_.session().set_image_step_hook(std::move(hook));
}

void DiffusionBridge::on_event(const runtime::Event& event) {
  if (const auto* loaded = std::get_if<runtime::ModelLoadedEvent>(&event.payload)) {
    if (event.job != load_job_) return;
    const auto info = engine_.session().image_model();
    model_state_ = DiffusionModelState::kReady;
    model_message_ = QStringLiteral("model %1").arg(QString::fromStdString(loaded->description));
    image_size_ = info ? info->default_size : 0;
    Q_EMIT modelStateChanged();
    return;
  }
  if (event.job != 0 && event.job == load_job_) {
    if (const auto* e = std::get_if<runtime::ErrorEvent>(&event.payload)) {
      const QString message = QString::fromStdString(e->status.message());
      if (e->status.code() == ErrorCode::kNotFound) {
        model_state_ = DiffusionModelState::kMissing;
        model_message_ = QStringLiteral(
                             "%1. Start with --diffusion-model <diffusers folder or SD 1.x "
                             ".safetensors> to use another.")
                             .arg(message);
      } else {
        model_state_ = DiffusionModelState::kFailed;
        model_message_ =
            QStringLiteral("Diffusion model %1 did not load: %2").arg(model_path_, message);
      }
      Q_EMIT modelStateChanged();
    }
    return;
  }
  if (event.job != state_.job || state_.state != JobState::kRunning) return;
  if (const auto* w = std::get_if<runtime::WaitingEvent>(&event.payload)) {
    state_.waiting_for_shape = w->waiting;
  } else if (const auto* p = std::get_if<runtime::ImageStepEvent>(&event.payload)) {
    state_.waiting_for_shape = false;
    state_.steps = p->steps;  // image-to-image runs fewer than asked
    state_.step_ms.push_back(static_cast<float>(p->ms));
    state_.step_sigma.push_back(static_cast<float>(p->sigma));
    if (p->preview) {
      state_.image_width = p->preview->width;
      state_.image_height = p->preview->height;
      state_.image_rgb = p->preview->rgb;
      state_.image_final = false;
      ++state_.image_version;
    }
  } else if (const auto* image = std::get_if<runtime::ImageEvent>(&event.payload)) {
    state_.image_width = image->image->width;
    state_.image_height = image->image->height;
    state_.image_rgb = image->image->rgb;
    state_.image_final = true;
    ++state_.image_version;
    state_.text_ms = image->text_ms;
    state_.denoise_ms = image->denoise_ms;
    state_.vae_ms = image->vae_ms;
    state_.encode_ms = image->encode_ms;
    if (image->steps_run > 0) state_.steps = image->steps_run;
    for (const std::string& note : image->notes) {
      state_.message += (state_.message.isEmpty() ? QString() : QStringLiteral("; ")) +
                        QString::fromStdString(note);
    }
  } else if (const auto* v = std::get_if<runtime::PaintViewEvent>(&event.payload)) {
    state_.paint_views = v->views;
    state_.views.push_back({QString::fromStdString(v->name), v->generated_share, v->render_ms,
                            v->generate_ms, v->bake_ms + v->fill_ms});
    if (v->image != nullptr) {
      state_.image_width = v->image->width;
      state_.image_height = v->image->height;
      state_.image_rgb = v->image->rgb;
      state_.image_final = false;  // a view, not a concept image to apply
      ++state_.image_version;
    }
    state_.denoise_ms += v->denoise_ms;
    state_.text_ms += v->text_ms;
    state_.encode_ms += v->encode_ms;
    state_.vae_ms += v->decode_ms;
    if (v->painted != nullptr) Q_EMIT paintView(v->painted);
  } else if (const auto* r = std::get_if<runtime::PaintedMeshEvent>(&event.payload)) {
    state_.painted = r->mesh;
    state_.coverage = r->coverage;
    state_.seam_mean = r->seam_mean;
    for (const std::string& note : r->notes) {
      state_.message += (state_.message.isEmpty() ? QString() : QStringLiteral("; ")) +
                        QString::fromStdString(note);
    }
    Q_EMIT painted(r->mesh);
  } else if (const auto* done = std::get_if<runtime::DoneEvent>(&event.payload)) {
    state_.state = JobState::kDone;
    state_.total_ms = done->total_ms;
  } else if (const auto* c = std::get_if<runtime::CancelledEvent>(&event.payload)) {
    state_.state = JobState::kCancelled;
    state_.message = QString::fromStdString(c->reason);
  } else if (const auto* e = std::get_if<runtime::ErrorEvent>(&event.payload)) {
    state_.state = JobState::kFailed;
    state_.message = QString::fromStdString(e->status.message());
  }
  state_.waiting_for_shape = state_.waiting_for_shape && state_.state == JobState::kRunning;
  Q_EMIT imageChanged();
  if (event.terminal()) {
    Q_EMIT imageFinished(event.job, static_cast<int>(state_.state),
                         state_.state == JobState::kDone ? QString() : state_.message);
  }
}

}  // namespace tessera::studio
