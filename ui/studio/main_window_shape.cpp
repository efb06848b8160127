// MainWindow, part: Shape jobs: the model, Generate / Cancel, partial and final meshes, the job's
// end. (ui/studio/main_window.h).
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
#include "engine/runtime/user_text.h"
#include "ui/render/renderer.h"
#include "ui/studio/candidate_grid.h"
#include "ui/studio/export_dialog.h"
#include "ui/studio/gallery.h"
#include "ui/studio/main_window_text.h"
#include "engine/mesh/import.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
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
  show_status(
      engine_->example_prompts().isEmpty()
          ? tr("Model ready. Type a prompt and press Ctrl+Enter.")
          : tr("Model ready. Type a prompt and press Ctrl+Enter, or pick one under Examples."));
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
  if (!has_last_job_ || !engine_->has_model()) return;
  runtime::JobOptions job = last_job_;
  auto& sampler = job.generation.sampler;
  if (!sampler.sample) {  // after a greedy job: sample around it with the product's defaults
    const uint64_t seed = sampler.seed;
    sampler = runtime::SamplingOptions{};
    sampler.sample = true;
    sampler.seed = seed;
  }
  sampler.seed += static_cast<uint64_t>(std::max(job.variations, 1));
  start_shape_job(std::move(job));
}

Status MainWindow::remesh_current(int resolution) {
  if (!engine_->has_model()) return not_found("no model loaded");
  if (current_tokens_.empty()) {
    return invalid_argument(
        "the current mesh has no shape tokens (re-mesh works on shapes generated in this session)");
  }
  if (auto k = runtime::resolution_base(resolution); !k.ok()) return k.status();
  runtime::JobOptions job = settings_->make_job(current_prompt_);
  job.tokens = current_tokens_;
  job.variations = 1;
  job.mesh.resolution = resolution;
  job.preview_every = 0;
  remesh_resolution_ = resolution;
  remesh_job_ = engine_->submit(job);
  show_status(tr("Re-meshing at %1 ...").arg(QString::number(resolution) + QChar(0x00b3)));
  update_buttons();
  return Status();
}

bool MainWindow::choose_candidate(int i) {
  if (candidates_->count() == 0 || !candidates_->mesh(i)) return false;
  chosen_candidate_ = i;
  if (static_cast<size_t>(i) < candidate_tokens_.size())
    current_tokens_ = candidate_tokens_[static_cast<size_t>(i)];
  candidates_->select(i);
  viewport_->set_mesh(candidates_->mesh(i), false);
  shown_generated_ = candidates_->is_final(i);
  shown_resolution_ = last_job_.mesh.resolution;
  show_status(tr("Candidate %1 (seed %2) is the current mesh%3")
                  .arg(i + 1)
                  .arg(candidates_->seed(i))
                  .arg(candidates_->is_final(i) ? QString() : tr(" (still forming)")));
  update_buttons();
  return true;
}

void MainWindow::start_shape_job(runtime::JobOptions job) {
  const Expected<runtime::TextNotes> text_notes = runtime::accept_job_text(&job);
  if (!text_notes.ok()) {
    show_status(tr("Not started: %1")
                    .arg(one_line(QString::fromStdString(text_notes.status().message()), 160)),
                true);
    return;
  }
  current_prompt_ = QString::fromStdString(job.prompt);
  last_job_ = job;
  has_last_job_ = true;
  chosen_candidate_ = 0;
  candidates_->reset(job.variations, job.generation.sampler.seed);
  candidate_tokens_.assign(static_cast<size_t>(std::max(job.variations, 1)), {});
  current_tokens_.clear();
  shown_generated_ = false;
  remesh_job_ = 0;
  engine_->submit(job);
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
  QString status = tr("Generating \"%1\" ...").arg(one_line(current_prompt_));
  for (const std::string& note : *text_notes)
    status += tr(" (%1)").arg(QString::fromStdString(note));
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

void MainWindow::on_partial_mesh(std::shared_ptr<const mesh::Mesh> mesh, qint64 tokens) {
  // Generated shapes live in the decoder's cube: frame that once per job, so the camera stays
  // still while previews grow into the final shape. With variations, the viewport follows the
  // chosen candidate (this is candidate 0's).
  if (chosen_candidate_ == 0) viewport_->set_mesh(std::move(mesh), false);
  if (!mesh_framed_for_job_) viewport_->frame_bounds(kDecoderCube);
  mesh_framed_for_job_ = true;
  show_status(
      tr("Generating \"%1\": preview from %2 tokens").arg(one_line(current_prompt_)).arg(tokens));
  record_frame();
  update_buttons();
}

void MainWindow::on_final_mesh(std::shared_ptr<const mesh::Mesh> mesh,
                               std::vector<int32_t> tokens) {
  if (remesh_job_ != 0 && engine_->stats().job == remesh_job_) {
    // A re-mesh: the shown shape at a finer lattice becomes the current mesh (and its tile's).
    remesh_job_ = 0;
    viewport_->set_mesh(mesh, false);
    shown_resolution_ = remesh_resolution_;
    if (candidates_->count() > 0) candidates_->set_mesh(chosen_candidate_, mesh, true);
    add_to_gallery(
        tr("%1 (%2)").arg(current_prompt_, QString::number(remesh_resolution_) + QChar(0x00b3)),
        mesh, viewport_->grabFramebuffer());
    update_buttons();
    return;
  }
  if (candidate_tokens_.empty()) candidate_tokens_.resize(1);
  candidate_tokens_[0] = tokens;
  if (chosen_candidate_ == 0) {
    viewport_->set_mesh(mesh, false);
    current_tokens_ = std::move(tokens);
    shown_generated_ = true;
    shown_resolution_ = last_job_.mesh.resolution;
  }
  if (!mesh_framed_for_job_) viewport_->frame_bounds(kDecoderCube);
  mesh_framed_for_job_ = true;
  record_frame();
  // Variations go to the gallery from their tiles (on_candidate_final), candidate 0 included.
  if (candidates_->count() == 0) add_to_gallery(std::move(mesh));
  update_buttons();
}

void MainWindow::on_candidate_partial(int candidate, std::shared_ptr<const mesh::Mesh> mesh,
                                      qint64) {
  if (candidate == chosen_candidate_ && candidate != 0) viewport_->set_mesh(mesh, false);
  candidates_->set_mesh(candidate, std::move(mesh), false);
}

void MainWindow::on_candidate_final(int candidate, quint64 seed,
                                    std::shared_ptr<const mesh::Mesh> mesh,
                                    std::vector<int32_t> tokens) {
  if (candidate >= 0 && static_cast<size_t>(candidate) < candidate_tokens_.size()) {
    candidate_tokens_[static_cast<size_t>(candidate)] = tokens;
  }
  if (candidate == chosen_candidate_) current_tokens_ = std::move(tokens);
  if (candidate == chosen_candidate_ && candidate != 0) viewport_->set_mesh(mesh, false);
  if (candidate == chosen_candidate_) {
    shown_generated_ = true;
    shown_resolution_ = last_job_.mesh.resolution;
  }
  candidates_->set_mesh(candidate, mesh, true);
  QImage shot;
  if (Viewport* tile = candidates_->view(candidate)) shot = tile->grabFramebuffer();
  add_to_gallery(tr("%1 (seed %2)").arg(current_prompt_).arg(seed), std::move(mesh), shot);
  update_buttons();
}

void MainWindow::on_job_finished(quint64, int state, const QString& message) {
  last_job_frames_ = viewport_->frames();
  last_job_max_gap_ms_ = viewport_->max_frame_gap_ms();
  progress_->setVisible(false);
  const GenerationStats& s = engine_->stats();
  const auto job_state = static_cast<JobState>(state);
  if (job_state == JobState::kDone) {
    show_status(tr("Done: \"%1\", %2 vertices, %3 triangles in %4 s (%5 tokens/s)")
                    .arg(one_line(current_prompt_))
                    .arg(s.final_vertices)
                    .arg(s.final_triangles)
                    .arg(s.total_ms / 1000.0, 0, 'f', 2)
                    .arg(s.tokens_per_second(), 0, 'f', 1));
  } else if (job_state == JobState::kCancelled) {
    show_status(tr("Cancelled (%1)").arg(message));
  } else {
    show_status(tr("Generation failed: %1").arg(one_line(message, 160)), true);
  }
  update_buttons();
}

}  // namespace tessera::studio
