// MainWindow, part: Shape jobs: the model, Generate / Cancel, partial and final meshes, the job's
// end. (ui/studio/main_window.h).
#include "ui/studio/main_window.h"

#include <imgui.h>

#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
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
#include <QMenu>
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
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <variant>

#include "engine/mesh/cleanup.h"
#include "engine/mesh/texture.h"
#include "engine/runtime/models.h"
#include "engine/runtime/user_text.h"
#include "ui/render/renderer.h"
#include "ui/studio/candidate_grid.h"
#include "ui/studio/export_dialog.h"
#include "ui/studio/gallery.h"
#include "ui/studio/main_window_text.h"
#include "engine/mesh/import.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/shape_controller.h"
#include "ui/studio/token_strip.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

void MainWindow::choose_model_dir() {
  const QString dir =
      QFileDialog::getExistingDirectory(this, tr("Model directory"), model_path_->text());
  if (!dir.isEmpty()) load_model(dir);
}

void MainWindow::load_model(const QString& dir) {
  model_path_->setText(dir);
  engine_->load_model(dir);
}

void MainWindow::on_model_loading(const QString& dir) {
  model_status_->setStyleSheet(QString());
  model_status_->setText(tr("Loading %1 ...").arg(dir));
  show_status(tr("Loading model %1 ...").arg(dir));
}

void MainWindow::on_model_loaded(const QString& dir) {
  model_status_->setStyleSheet(QStringLiteral("color: #40a040;"));
  model_status_->setText(tr("Loaded: %1 tokens per shape, codebook %2, %3 bounding box; %4; "
                            "weights %5")
                             .arg(engine_->num_latents())
                             .arg(engine_->codebook_size())
                             .arg(engine_->model_uses_bbox() ? tr("with") : tr("no"))
                             .arg(engine_->backend_name(), engine_->weights_label()));
  model_label_->setText(tr("Model: %1").arg(QFileInfo(dir).fileName()));
  model_label_->setToolTip(dir);
  settings_->set_model_facts(engine_->num_latents(), engine_->codebook_size(),
                             engine_->model_uses_bbox());
  sync_overlay_controls();
  // The model's example prompts: a newcomer sees what it can make, one click generates one.
  QMenu* examples = examples_button_->menu();
  examples->clear();
  for (const QString& example : engine_->example_prompts()) {
    examples->addAction(example, this, [this, example] {
      prompt_->setPlainText(example);
      generate();
    });
  }
  examples_button_->setEnabled(!engine_->example_prompts().isEmpty());
  prompt_->set_example(engine_->example_prompts().isEmpty() ? QString()
                                                            : engine_->example_prompts().front());
  QString ready =
      engine_->example_prompts().isEmpty()
          ? tr("Model ready. Type a prompt and press Ctrl+Enter.")
          : tr("Model ready. Type a prompt and press Ctrl+Enter, or pick one under Examples.");
  // First run with the embedded model only: say where the real ones are.
  if (QFileInfo(dir) == QFileInfo(QString::fromStdString(runtime::default_shape_model_dir()))) {
    bool real_here = false;
    for (const runtime::KnownModel& m : runtime::known_models()) {
      auto cached = runtime::find_cached_model(m.name);
      real_here |= m.kind == runtime::ModelKind::kShape && cached.ok() && cached->complete();
    }
    if (!real_here) ready += tr(" The real Cube 3D models: File > Models.");
  }
  if (!library_status_.isEmpty()) ready += QStringLiteral(" ") + library_status_;
  show_status(ready, !library_status_.isEmpty());
  update_buttons();
}

void MainWindow::on_model_failed(const QString& dir, const QString& message) {
  model_status_->setStyleSheet(QStringLiteral("color: #d05050;"));
  model_status_->setText(tr("Not a usable model directory: %1").arg(message));
  show_status(tr("Model %1 failed to load: %2%3")
                  .arg(dir, one_line(message, 120),
                       engine_->has_model() ? tr(" (still using %1)").arg(engine_->model_dir())
                                            : QString()),
              true);
  update_buttons();
}

void MainWindow::generate() {
  if (!engine_->has_model()) {
    show_status(engine_->loading() ? tr("The model is still loading.")
                                   : tr("No model loaded: choose a model directory first."),
                true);
    return;
  }
  const QString prompt = prompt_->prompt();
  prompt_->remember(prompt);
  start_shape_job(settings_->make_job(prompt));
}

void MainWindow::more_like_this() {
  if (!shape_->has_last_job() || !engine_->has_model()) return;
  if (auto started = shape_->more_like_this(); !started.ok()) {
    show_status(tr("Not started: %1")
                    .arg(one_line(QString::fromStdString(started.status().message()), 160)),
                true);
  }
}

Status MainWindow::remesh_current(int resolution) {
  TESSERA_RETURN_IF_ERROR(shape_->remesh(resolution, settings_->make_job(shape_->prompt())));
  show_status(tr("Re-meshing at %1 ...").arg(QString::number(resolution) + QChar(0x00b3)));
  update_buttons();
  return Status();
}

bool MainWindow::choose_candidate(int i) {
  if (!shape_->choose(i)) return false;
  candidates_->select(i);
  const ShapeController::Candidate& c = shape_->candidate(i);
  show_status(tr("Candidate %1 (seed %2) is the current mesh%3")
                  .arg(i + 1)
                  .arg(c.seed)
                  .arg(c.final ? QString() : tr(" (still forming)")));
  update_buttons();
  return true;
}

void MainWindow::start_shape_job(runtime::JobOptions job) {
  if (auto started = shape_->start(std::move(job)); !started.ok()) {
    show_status(tr("Not started: %1")
                    .arg(one_line(QString::fromStdString(started.status().message()), 160)),
                true);
  }
}

void MainWindow::on_shape_started(int variations, quint64 first_seed, const QStringList& notes) {
  end_replay();
  keep_failure_.clear();
  job_kept_.clear();
  candidates_->reset(variations, first_seed);
  job_group_ = QStringLiteral("studio-%1-%2")
                   .arg(QCoreApplication::applicationPid())
                   .arg(QDateTime::currentMSecsSinceEpoch());
  journal_started();
  // The new prompt's image (the runtime holds it until the shape job ends); the old prompt's
  // image goes.
  if (image_settings_.auto_after_shape &&
      diffusion_->model_state() == DiffusionModelState::kReady) {
    generate_image();
  } else {
    diffusion_->cancel();
  }
  mesh_framed_for_job_ = false;
  record_frame_ = 0;
  viewport_->reset_frame_stats();
  progress_->setRange(0, static_cast<int>(engine_->stats().expected_tokens));
  progress_->setValue(0);
  progress_->setVisible(true);
  token_strip_->set_tokens({}, engine_->stats().expected_tokens);
  QString status = tr("Generating \"%1\" ...").arg(one_line(shape_->prompt()));
  for (const QString& note : notes) status += tr(" (%1)").arg(note);
  show_status(status);
  update_buttons();
}

void MainWindow::cancel() {
  // An image still waiting for this shape goes with it; a running one has its own Cancel.
  if (diffusion_->state().waiting_for_shape) diffusion_->cancel();
  if (!engine_->busy()) return;
  engine_->cancel();
  show_status(tr("Cancelling ..."));
}

void MainWindow::on_stats_changed() {
  const GenerationStats& s = engine_->stats();
  progress_->setValue(static_cast<int>(s.token_ms.size()));
  token_strip_->set_tokens(s.token_ids, s.expected_tokens);
}

void MainWindow::on_shape_previewed(qint64 tokens, bool final) {
  // Generated shapes live in the decoder's cube: frame that once per job, so the camera stays
  // still while previews grow into the final shape.
  if (!mesh_framed_for_job_) viewport_->frame_bounds(kDecoderCube);
  mesh_framed_for_job_ = true;
  if (!final) {
    show_status(tr("Generating \"%1\": preview from %2 tokens")
                    .arg(one_line(shape_->prompt()))
                    .arg(tokens));
  }
  record_frame();
  update_buttons();
}

void MainWindow::on_shape_result(const QString& label, std::shared_ptr<const mesh::Mesh> mesh,
                                 int candidate, bool generated) {
  QImage shot;
  if (candidate >= 0) {
    if (Viewport* tile = candidates_->view(candidate)) shot = tile->grabFramebuffer();
  } else {
    // The viewport without the overlay, showing this mesh.
    const bool overlay = viewport_->overlay_visible();
    viewport_->set_overlay_visible(false);
    shot = viewport_->grabFramebuffer();
    viewport_->set_overlay_visible(overlay);
  }
  if (generated) {
    keep_result(label, std::max(candidate, 0), mesh, shot);
  } else {
    gallery()->add(label, std::move(mesh), shot);  // a re-mesh: this session's only
  }
  update_buttons();
}

void MainWindow::on_job_finished(quint64, int state, const QString& message) {
  journal_ended();  // in every way a job ends: done, cancelled, failed
  last_job_frames_ = viewport_->frames();
  last_job_max_gap_ms_ = viewport_->max_frame_gap_ms();
  progress_->setVisible(false);
  const GenerationStats& s = engine_->stats();
  const auto job_state = static_cast<JobState>(state);
  if (job_state == JobState::kDone) {
    QString done = tr("Done: \"%1\", %2 vertices, %3 triangles in %4 s (%5 tokens/s)")
                       .arg(one_line(shape_->prompt()))
                       .arg(s.final_vertices)
                       .arg(s.final_triangles)
                       .arg(s.total_ms / 1000.0, 0, 'f', 2)
                       .arg(s.tokens_per_second(), 0, 'f', 1);
    // A result that could not be kept (a full disk...) stays said after the job.
    if (!keep_failure_.isEmpty()) done += QStringLiteral(". ") + keep_failure_;
    show_status(done, !keep_failure_.isEmpty());
  } else if (job_state == JobState::kCancelled) {
    show_status(tr("Cancelled (%1)").arg(message));
  } else {
    show_status(tr("Generation failed: %1").arg(one_line(message, 160)), true);
  }
  update_buttons();
}

}  // namespace tessera::studio
