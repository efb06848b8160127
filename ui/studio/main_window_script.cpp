// MainWindow, part: Scripted mode (tessera-studio --generate --screenshot ... --quit-when-done).
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

void MainWindow::advance_script_image() {
  if (!launch_.scripted() || script_done_ || !shape_done_for_script_) return;
  switch (diffusion_->model_state()) {
    case DiffusionModelState::kLoading:
      return;  // modelStateChanged calls again
    case DiffusionModelState::kMissing:
    case DiffusionModelState::kFailed:
      finish_script(1, tr("concept image: %1").arg(diffusion_->model_message()));
      return;
    case DiffusionModelState::kReady:
      break;
  }
  if (!image_submitted_for_script_) {
    generate_image();
    return;
  }
  const ImageJobState& s = diffusion_->state();
  if (s.state == JobState::kRunning) return;  // on_image_finished calls again
  if (s.state != JobState::kDone) {
    finish_script(
        1, tr("concept image %1: %2").arg(QString::fromLatin1(job_state_name(s.state)), s.message));
    return;
  }
  if (launch_.apply_texture) {
    if (!texture_submitted_for_script_) {
      texture_submitted_for_script_ = true;
      if (Status st = apply_image_as_texture(); !st.ok()) {
        finish_script(1, tr("apply texture: %1").arg(QString::fromStdString(st.message())));
      }
      return;  // the texture bridge's finished() calls again
    }
    if (texture_->busy()) return;
    if (!texture_->last_error().isEmpty()) {
      finish_script(1, tr("apply texture: %1").arg(texture_->last_error()));
      return;
    }
  }
  finish_script(0, QString());
}

QImage MainWindow::screenshot_image() {
  if (launch_.screenshot_window) return grab().toImage();
  return viewport_->grabFramebuffer();
}

void MainWindow::finish_script(int code, const QString& message) {
  if (script_done_) return;
  script_done_ = true;
  if (!message.isEmpty()) std::fprintf(stderr, "tessera-studio: %s\n", qPrintable(message));
  if (!launch_.export_path.isEmpty() && code == 0) {
    if (Status st = export_mesh(launch_.export_path, {}); !st.ok()) {
      std::fprintf(stderr, "tessera-studio: export: %s\n", st.message().c_str());
      code = 1;
    }
  }
  if (!launch_.screenshot.isEmpty()) {
    const QImage shot = screenshot_image();
    if (shot.isNull() || !shot.save(launch_.screenshot)) {
      std::fprintf(stderr, "tessera-studio: cannot write the screenshot %s\n",
                   qPrintable(launch_.screenshot));
      code = 1;
    }
  }
  if (launch_.image || launch_.apply_texture) {
    const ImageJobState& img = diffusion_->state();
    const auto shown = viewport_->mesh();
    std::printf(
        "image %s: %zu steps, %.1f ms total, denoise %.1f ms, %lldx%lld, seed %llu; "
        "mesh uvs %zu, texture %lldx%lld\n",
        job_state_name(img.state), img.step_ms.size(), img.total_ms, img.denoise_ms,
        static_cast<long long>(img.image_final ? img.image_width : 0),
        static_cast<long long>(img.image_final ? img.image_height : 0),
        static_cast<unsigned long long>(img.seed), shown ? shown->uvs.size() / 2 : 0,
        static_cast<long long>(shown ? shown->texture.width : 0),
        static_cast<long long>(shown ? shown->texture.height : 0));
  }
  if (launch_.generate) {
    const GenerationStats& s = engine_->stats();
    char first_preview[64] = "no preview";  // none fitted the budget (tessera-tiny: common)
    if (s.first_partial_ms >= 0) {
      std::snprintf(first_preview, sizeof first_preview, "first preview %.0f ms",
                    s.first_partial_ms);
    }
    std::printf(
        "job %s: %lld tokens, %lld vertices, %lld triangles, %s, %lld viewport frames, max "
        "frame gap %.1f ms\n",
        job_state_name(s.state), static_cast<long long>(s.token_ms.size()),
        static_cast<long long>(s.final_vertices), static_cast<long long>(s.final_triangles),
        first_preview, static_cast<long long>(last_job_frames_), last_job_max_gap_ms_);
    std::fflush(stdout);
  }
  exit_code_ = code;
  Q_EMIT scriptFinished(code);
  if (launch_.quit_when_done) {
    QTimer::singleShot(0, qApp, [code] { QCoreApplication::exit(code); });
  }
}

}  // namespace tessera::studio
