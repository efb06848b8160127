// MainWindow, part: The concept image and "apply as texture" (runtime image and texture lanes).
// (ui/studio/main_window.h).
#include "ui/studio/main_window.h"

#include <imgui.h>

#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <variant>

#include "engine/mesh/cleanup.h"
#include "engine/mesh/texture.h"
#include "ui/render/renderer.h"
#include "ui/studio/export_dialog.h"
#include "ui/studio/gallery.h"
#include "ui/studio/main_window_text.h"
#include "engine/mesh/import.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/token_strip.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

bool MainWindow::generate_image() {
  if (diffusion_->model_state() != DiffusionModelState::kReady) {
    show_status(tr("Concept image: %1").arg(one_line(diffusion_->model_message(), 160)), true);
    refresh_diffusion_panel();
    return false;
  }
  if (!image_settings_.lock_seed) image_settings_.seed = next_random_seed();
  image_settings_.steps = std::clamp(image_settings_.steps, 1, 200);
  diffusion_->submit(prompt_->prompt(), image_settings_);
  refresh_diffusion_panel();
  return true;
}

void MainWindow::cancel_image() {
  diffusion_->cancel();
}

void MainWindow::on_diffusion_action(DiffusionAction action) {
  switch (action) {
    case DiffusionAction::kGenerate:
      generate_image();
      break;
    case DiffusionAction::kCancel:
      cancel_image();
      break;
    case DiffusionAction::kApplyTexture:
      if (Status st = apply_image_as_texture(); !st.ok()) {
        show_status(tr("Apply as texture failed: %1")
                        .arg(one_line(QString::fromStdString(st.message()), 160)),
                    true);
      }
      break;
  }
}

void MainWindow::on_image_finished(quint64, int state, const QString& message) {
  const ImageJobState& s = diffusion_->state();
  const auto job_state = static_cast<JobState>(state);
  if (job_state == JobState::kDone) {
    keep_concept_image();
    show_status(tr("Concept image done: %1 steps, %2 ms/step, %3 ms in all")
                    .arg(s.step_ms.size())
                    .arg(s.denoise_ms / std::max<size_t>(1, s.step_ms.size()), 0, 'f', 1)
                    .arg(s.total_ms, 0, 'f', 0));
  } else if (job_state == JobState::kFailed) {
    show_status(tr("Concept image failed: %1").arg(one_line(message, 160)), true);
  }
  refresh_diffusion_panel();
}

void MainWindow::select_textured_shading() {
  viewport_->render_options().shading = render::ShadingMode::kTextured;
  for (QAction* a : findChildren<QAction*>()) {
    if (a->objectName() == QStringLiteral("shading_textured")) a->setChecked(true);
  }
}

Status MainWindow::apply_image_as_texture() {
  const ImageJobState& s = diffusion_->state();
  if (!s.image_final || s.image_rgb.empty()) {
    return invalid_argument("apply as texture: there is no finished concept image yet");
  }
  const auto shown = viewport_->mesh();
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
  show_status(tr("Applying the concept image as a texture ..."));
  return Status();
}

void MainWindow::on_textured(const std::shared_ptr<const mesh::Mesh>& source,
                             const std::shared_ptr<const mesh::Mesh>& textured,
                             const std::optional<mesh::ImageRect>& object) {
  viewport_->set_mesh(textured, false);
  select_textured_shading();
  // The library entry of this mesh keeps the textured copy beside it, and the gallery shows it.
  keep_textured(source, textured);
  gallery()->replace_mesh(source, textured);
  const QString fit =
      object ? tr("the image's object (%1x%2 px at %3,%4) fitted to the mesh")
                   .arg(object->width())
                   .arg(object->height())
                   .arg(object->x0)
                   .arg(object->y0)
             : tr("no distinct object in the image: the whole frame fitted to the mesh");
  show_status(tr("Applied the concept image as a texture: %1; %2 vertices after seam splits; "
                 "File > Export writes it with the mesh")
                  .arg(fit)
                  .arg(textured->vertex_count()));
  update_buttons();
}

void MainWindow::refresh_diffusion_panel() {
  if (diffusion_ == nullptr) return;
  const ImageJobState& s = diffusion_->state();
  panel_data_.model_state = diffusion_->model_state();
  panel_data_.model_message = diffusion_->model_message().toStdString();
  panel_data_.job = &s;
  panel_data_.settings = &image_settings_;
  panel_data_.can_generate = diffusion_->model_state() == DiffusionModelState::kReady;
  const auto mesh = viewport_->mesh();
  const bool have_mesh = mesh && !mesh->empty();
  panel_data_.can_apply = s.image_final && have_mesh && !engine_->busy() && !texture_->busy();
  if (have_mesh && !mesh->texture.empty()) {
    panel_data_.apply_note = "textured: File > Export writes the texture with the mesh";
  } else if (s.image_final && !have_mesh) {
    panel_data_.apply_note = "generate a shape to apply the image to";
  } else if (s.image_final && engine_->busy()) {
    panel_data_.apply_note = "apply once the shape is finished";
  } else {
    panel_data_.apply_note.clear();
  }
}

}  // namespace tessera::studio
