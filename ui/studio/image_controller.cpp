#include "ui/studio/image_controller.h"

#include <QFileDialog>
#include <QTimer>
#include <algorithm>

#include "core/mapped_file.h"
#include "core/png.h"

#include "ui/studio/engine_bridge.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/studio_text.h"
#include "ui/studio/texture_bridge.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

ImageController::ImageController(EngineBridge& engine, const PromptEdit& prompt, Viewport& viewport,
                                 QObject* parent)
    : QObject(parent), engine_(engine), prompt_(prompt), viewport_(viewport) {
  texture_ = new TextureBridge(engine_, this);
  connect(texture_, &TextureBridge::textured, this, &ImageController::on_textured);
  connect(texture_, &TextureBridge::failed, this, [this](const QString& message) {
    Q_EMIT status(tr("Apply as texture failed: %1").arg(one_line(message, 160)), true);
  });
  connect(texture_, &TextureBridge::finished, this, &ImageController::changed);
  // Concept image: its own lane and model.
  diffusion_ = new DiffusionBridge(engine_, this);
  connect(diffusion_, &DiffusionBridge::modelStateChanged, this, &ImageController::refresh_panel);
  connect(diffusion_, &DiffusionBridge::imageChanged, this, &ImageController::refresh_panel);
  connect(diffusion_, &DiffusionBridge::imageFinished, this, &ImageController::on_image_finished);
  connect(diffusion_, &DiffusionBridge::paintView, this, &ImageController::on_paint_view);
  connect(diffusion_, &DiffusionBridge::painted, this, &ImageController::on_painted);
  panel_data_.on_action = [this](DiffusionAction action) {
    // Called inside the viewport's paintGL: act after the frame.
    QTimer::singleShot(0, this, [this, action] { on_action(action); });
  };
  viewport_.set_diffusion_panel(&panel_data_);
}

ImageController::~ImageController() {
  viewport_.set_diffusion_panel(nullptr);
  disconnect(diffusion_, nullptr, this, nullptr);  // no panel refresh from a bridge going away
  disconnect(texture_, nullptr, this, nullptr);
  delete texture_;  // before the engine bridge it listens to
  texture_ = nullptr;
  delete diffusion_;  // cancels a running image job
  diffusion_ = nullptr;
}

uint64_t ImageController::texture_job() const {
  return texture_->job();
}

bool ImageController::generate() {
  if (diffusion_->model_state() != DiffusionModelState::kReady) {
    Q_EMIT status(tr("Concept image: %1").arg(one_line(diffusion_->model_message(), 160)), true);
    refresh_panel();
    return false;
  }
  if (!settings_.lock_seed) settings_.seed = next_random_seed();
  settings_.steps = std::clamp(settings_.steps, 1, runtime::kMaxImageSteps);
  std::shared_ptr<const mesh::TextureImage> init, mask, control;
  if (Status st = image_inputs(&init, &control, &mask); !st.ok()) {
    Q_EMIT status(tr("Concept image: %1").arg(one_line(QString::fromStdString(st.message()), 160)),
                  true);
    refresh_panel();
    return false;
  }
  QString error;
  const uint64_t id = diffusion_->submit(prompt_.prompt(), settings_, std::move(init),
                                         std::move(mask), std::move(control), &error);
  refresh_panel();
  if (id == 0) {
    Q_EMIT status(tr("Concept image: %1").arg(one_line(error, 160)), true);
    return false;
  }
  return true;
}

namespace {

Expected<std::shared_ptr<const mesh::TextureImage>> read_png_picture(const std::string& path,
                                                                     const char* what) {
  if (path.empty()) return invalid_argument(std::string("choose the ") + what + " first");
  auto bytes = read_file(path);
  if (!bytes.ok())
    return Status(bytes.status().code(), std::string(what) + ": " + bytes.status().message());
  auto png = decode_png(bytes->data(), bytes->size(), 3, path);
  if (!png.ok())
    return Status(png.status().code(), std::string(what) + ": " + png.status().message());
  auto image = std::make_shared<mesh::TextureImage>();
  image->width = png->width;
  image->height = png->height;
  image->rgb = std::move(png->pixels);
  return std::shared_ptr<const mesh::TextureImage>(std::move(image));
}

}  // namespace

Status ImageController::image_inputs(std::shared_ptr<const mesh::TextureImage>* init,
                                     std::shared_ptr<const mesh::TextureImage>* control,
                                     std::shared_ptr<const mesh::TextureImage>* mask) {
  using Control = ImageSettings::ControlSource;
  const int side = static_cast<int>(std::max<int64_t>(64, diffusion_->image_size()));
  switch (settings_.control_source) {
    case Control::kNone:
      break;
    case Control::kViewportDepth: {
      const auto shown = viewport_.mesh();
      if (!shown || shown->empty()) {
        return invalid_argument("follow the viewport's depth: there is no mesh in the view yet");
      }
      QString error;
      mesh::TextureImage depth = viewport_.capture_depth(side, &error);
      if (depth.empty()) {
        return internal_error("follow the viewport's depth: " + error.toStdString());
      }
      *control = std::make_shared<mesh::TextureImage>(std::move(depth));
      break;
    }
    case Control::kFile: {
      TESSERA_ASSIGN_OR_RETURN(*control,
                               read_png_picture(settings_.control_file, "control picture"));
      break;
    }
  }
  using Source = ImageSettings::InitSource;
  switch (settings_.init_source) {
    case Source::kNone:
      return Status();
    case Source::kViewport: {
      const auto shown = viewport_.mesh();
      if (!shown || shown->empty()) {
        return invalid_argument("start from the viewport: there is no mesh in the view yet");
      }
      QString error;
      mesh::TextureImage view = viewport_.capture_view(side, &error);
      if (view.empty()) {
        return internal_error("start from the viewport: " + error.toStdString());
      }
      *init = std::make_shared<mesh::TextureImage>(std::move(view));
      break;
    }
    case Source::kFile: {
      TESSERA_ASSIGN_OR_RETURN(*init, read_png_picture(settings_.init_file, "picture"));
      break;
    }
  }
  if (!settings_.mask_file.empty()) {
    TESSERA_ASSIGN_OR_RETURN(*mask, read_png_picture(settings_.mask_file, "mask"));
  }
  return Status();
}

void ImageController::cancel() {
  diffusion_->cancel();
}

void ImageController::follow_shape_started() {
  // The new prompt's image (the runtime holds it until the shape job ends); the old prompt's
  // image goes. Starting from the viewport waits for the finished mesh (follow_shape_done).
  const bool from_view = uses_viewport();
  if (settings_.auto_after_shape && !from_view &&
      diffusion_->model_state() == DiffusionModelState::kReady) {
    generate();
  } else {
    diffusion_->cancel();
  }
}

void ImageController::follow_shape_done() {
  if (!uses_viewport() || !settings_.auto_after_shape ||
      diffusion_->model_state() != DiffusionModelState::kReady || diffusion_->busy()) {
    return;
  }
  generate();
}

void ImageController::follow_shape_cancelled() {
  // An image still waiting for this shape goes with it; a running one has its own Cancel.
  if (diffusion_->state().waiting_for_shape) diffusion_->cancel();
}

void ImageController::on_action(DiffusionAction action) {
  switch (action) {
    case DiffusionAction::kGenerate:
      generate();
      break;
    case DiffusionAction::kCancel:
      cancel();
      break;
    case DiffusionAction::kChooseInitFile:
    case DiffusionAction::kChooseMaskFile: {
      const bool is_mask = action == DiffusionAction::kChooseMaskFile;
      const QString path = QFileDialog::getOpenFileName(
          &viewport_, is_mask ? tr("Inpainting mask (white = repaint)") : tr("Start from picture"),
          QString(), tr("PNG images (*.png)"));
      if (!path.isEmpty())
        (is_mask ? settings_.mask_file : settings_.init_file) = path.toStdString();
      refresh_panel();
      break;
    }
    case DiffusionAction::kChooseControlFile: {
      const QString path = QFileDialog::getOpenFileName(
          &viewport_, tr("Control picture (a depth map: near white, far black)"), QString(),
          tr("PNG images (*.png)"));
      if (!path.isEmpty()) settings_.control_file = path.toStdString();
      refresh_panel();
      break;
    }
    case DiffusionAction::kChooseControlModel: {
      const QString path = QFileDialog::getOpenFileName(
          &viewport_, tr("ControlNet (SD 1.5)"), QString(), tr("ControlNet files (*.safetensors)"));
      if (!path.isEmpty()) settings_.control_model = path.toStdString();
      refresh_panel();
      break;
    }
    case DiffusionAction::kAddLora: {
      const QString path = QFileDialog::getOpenFileName(&viewport_, tr("Add a LoRA"), QString(),
                                                        tr("LoRA files (*.safetensors)"));
      if (!path.isEmpty()) settings_.loras.push_back({path.toStdString(), 1.0f});
      refresh_panel();
      break;
    }
    case DiffusionAction::kPaint:
      if (Status st = paint_mesh(); !st.ok()) {
        Q_EMIT status(
            tr("Paint failed: %1").arg(one_line(QString::fromStdString(st.message()), 160)), true);
      }
      break;
    case DiffusionAction::kApplyTexture:
      if (Status st = apply_as_texture(); !st.ok()) {
        Q_EMIT status(tr("Apply as texture failed: %1")
                          .arg(one_line(QString::fromStdString(st.message()), 160)),
                      true);
      }
      break;
  }
}

Status ImageController::paint_mesh() {
  if (diffusion_->model_state() != DiffusionModelState::kReady) {
    return invalid_argument("paint: " + diffusion_->model_message().toStdString());
  }
  const auto shown = viewport_.mesh();
  if (!shown || shown->empty()) return invalid_argument("paint: there is no mesh to paint yet");
  if (engine_.busy()) return invalid_argument("paint: wait for the shape job to finish");
  if (prompt_.prompt().trimmed().isEmpty()) {
    return invalid_argument("paint: type what the object looks like in the prompt bar");
  }
  if (!settings_.lock_seed) settings_.seed = next_random_seed();
  settings_.steps = std::clamp(settings_.steps, 1, runtime::kMaxImageSteps);
  // The shape itself (its uvs or none), not a projected texture on top of it.
  QString error;
  const uint64_t id = diffusion_->submit_paint(shown, prompt_.prompt(), settings_, &error);
  if (id == 0) return invalid_argument("paint: " + error.toStdString());
  paint_source_ = shown;
  refresh_panel();
  Q_EMIT status(tr("Painting the mesh from views around it ..."), false);
  return Status();
}

void ImageController::on_paint_view(const std::shared_ptr<const mesh::Mesh>& painted) {
  viewport_.set_mesh(painted, false);  // the view lands on the mesh (textured shading)
  const ImageJobState& s = diffusion_->state();
  if (!s.views.empty()) {
    const PaintViewRow& v = s.views.back();
    Q_EMIT status(tr("Painted view %1/%2 (%3): %4 % new, %5 ms")
                      .arg(s.views.size())
                      .arg(s.paint_views)
                      .arg(v.name)
                      .arg(100 * v.generated, 0, 'f', 0)
                      .arg(v.render_ms + v.generate_ms + v.bake_ms, 0, 'f', 0),
                  false);
  }
  refresh_panel();
}

void ImageController::on_painted(const std::shared_ptr<const mesh::Mesh>& painted) {
  viewport_.set_mesh(painted, false);
  if (paint_source_ != nullptr) Q_EMIT textured(paint_source_, painted);  // the library keeps it
  const ImageJobState& s = diffusion_->state();
  Q_EMIT status(tr("Painted: %1 % of the surface seen, seams %2 levels; File > Export writes the "
                   "texture with the mesh")
                    .arg(100 * s.coverage, 0, 'f', 1)
                    .arg(s.seam_mean, 0, 'f', 1),
                false);
  paint_source_.reset();
  Q_EMIT changed();
}

void ImageController::on_image_finished(quint64, int state, const QString& message) {
  const ImageJobState& s = diffusion_->state();
  const auto job_state = static_cast<JobState>(state);
  if (s.paint) {
    // A paint that did not finish changes nothing: the mesh as it was before it.
    if (job_state != JobState::kDone && paint_source_ != nullptr) {
      viewport_.set_mesh(paint_source_, false);
    }
    if (job_state == JobState::kFailed) {
      Q_EMIT status(tr("Paint failed: %1 (the mesh is as it was)").arg(one_line(message, 160)),
                    true);
    } else if (job_state == JobState::kCancelled) {
      Q_EMIT status(tr("Paint cancelled: the mesh is as it was"), false);
    }
    paint_source_.reset();
    refresh_panel();
    return;
  }
  if (job_state == JobState::kDone) {
    Q_EMIT imageDone();
    Q_EMIT status(tr("Concept image done: %1 steps, %2 ms/step, %3 ms in all")
                      .arg(s.step_ms.size())
                      .arg(s.denoise_ms / std::max<size_t>(1, s.step_ms.size()), 0, 'f', 1)
                      .arg(s.total_ms, 0, 'f', 0),
                  false);
  } else if (job_state == JobState::kFailed) {
    Q_EMIT status(tr("Concept image failed: %1").arg(one_line(message, 160)), true);
  }
  refresh_panel();
}

Status ImageController::apply_as_texture() {
  const ImageJobState& s = diffusion_->state();
  if (!s.image_final || s.image_rgb.empty()) {
    return invalid_argument("apply as texture: there is no finished concept image yet");
  }
  const auto shown = viewport_.mesh();
  if (!shown || shown->empty()) {
    return invalid_argument("apply as texture: there is no mesh to texture yet");
  }
  mesh::TextureImage image;
  image.width = s.image_width;
  image.height = s.image_height;
  image.rgb = s.image_rgb;
  mesh::ProjectionOptions options;
  // A concept image shows the object on a background, at whatever size the model drew it: the
  // object's own rectangle in the image is stretched onto the mesh (texture.h, ImageFit::kObject),
  // so its colours land on the mesh rather than the background's. An image without a distinct
  // background falls back to the frame fit with a small margin.
  options.fit = mesh::ImageFit::kObject;
  options.margin = 0.08f;
  texture_->apply(shown, std::move(image), options);
  Q_EMIT status(tr("Applying the concept image as a texture ..."), false);
  return Status();
}

void ImageController::on_textured(const std::shared_ptr<const mesh::Mesh>& source,
                                  const std::shared_ptr<const mesh::Mesh>& textured,
                                  const std::optional<mesh::ImageRect>& object) {
  viewport_.set_mesh(textured, false);
  // Textured shading; the library entry of this mesh keeps the textured copy beside it.
  Q_EMIT this->textured(source, textured);
  const QString fit =
      object ? tr("the image's object (%1x%2 px at %3,%4) fitted to the mesh")
                   .arg(object->width())
                   .arg(object->height())
                   .arg(object->x0)
                   .arg(object->y0)
             : tr("no distinct object in the image: the whole frame fitted to the mesh");
  Q_EMIT status(tr("Applied the concept image as a texture: %1; %2 vertices after seam splits; "
                   "File > Export writes it with the mesh")
                    .arg(fit)
                    .arg(textured->vertex_count()),
                false);
  Q_EMIT changed();
}

void ImageController::refresh_panel() {
  const ImageJobState& s = diffusion_->state();
  panel_data_.model_state = diffusion_->model_state();
  panel_data_.model_message = diffusion_->model_message().toStdString();
  panel_data_.job = &s;
  panel_data_.settings = &settings_;
  panel_data_.can_generate = diffusion_->model_state() == DiffusionModelState::kReady;
  const auto mesh = viewport_.mesh();
  const bool have_mesh = mesh && !mesh->empty();
  panel_data_.can_apply =
      s.image_final && !s.paint && have_mesh && !engine_.busy() && !texture_->busy();
  panel_data_.can_paint = diffusion_->model_state() == DiffusionModelState::kReady && have_mesh &&
                          !engine_.busy() && !texture_->busy();
  if (s.paint && s.state == JobState::kDone) {
    panel_data_.paint_note = "painted: " + std::to_string(static_cast<int>(100 * s.coverage)) +
                             " % seen; File > Export writes the texture";
  } else if (!have_mesh) {
    panel_data_.paint_note = "generate or open a mesh to paint it";
  } else {
    panel_data_.paint_note.clear();
  }
  if (have_mesh && !mesh->texture.empty()) {
    panel_data_.apply_note = "textured: File > Export writes the texture with the mesh";
  } else if (s.image_final && !have_mesh) {
    panel_data_.apply_note = "generate a shape to apply the image to";
  } else if (s.image_final && engine_.busy()) {
    panel_data_.apply_note = "apply once the shape is finished";
  } else {
    panel_data_.apply_note.clear();
  }
}

}  // namespace tessera::studio
