#include "ui/studio/generation_controller.h"

#include <QDir>
#include <QMenu>
#include <QProgressBar>
#include <QToolButton>
#include <algorithm>

#include "ui/studio/candidate_grid.h"
#include "ui/studio/engine_bridge.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/shape_controller.h"
#include "ui/studio/studio_text.h"
#include "ui/studio/token_strip.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

GenerationController::GenerationController(EngineBridge& engine, GenerationViews views,
                                           QObject* parent)
    : QObject(parent), engine_(engine), views_(views) {
  // The shape lane's controller decides what a shape job's events mean; this one shows them.
  shape_ = new ShapeController(engine_, this);
  connect(shape_, &ShapeController::started, this, &GenerationController::on_started);
  connect(shape_, &ShapeController::showMesh, this, [this](std::shared_ptr<const mesh::Mesh> mesh) {
    views_.viewport->set_mesh(std::move(mesh), false);
  });
  connect(shape_, &ShapeController::previewed, this, &GenerationController::on_previewed);
  connect(shape_, &ShapeController::candidateMesh, this,
          [this](int i, std::shared_ptr<const mesh::Mesh> mesh, bool final) {
            views_.candidates->set_mesh(i, std::move(mesh), final);
          });
  connect(shape_, &ShapeController::result, this, &GenerationController::on_result);
  connect(shape_, &ShapeController::changed, this, &GenerationController::changed);
  connect(&engine_, &EngineBridge::jobFinished, this, &GenerationController::on_job_finished);
  connect(&engine_, &EngineBridge::statsChanged, this, &GenerationController::on_stats_changed);
  connect(views_.candidates, &CandidateGrid::candidateChosen, this,
          [this](int i) { choose_candidate(i); });
}

void GenerationController::generate() {
  if (!engine_.has_model()) {
    Q_EMIT status(engine_.loading() ? tr("The model is still loading.")
                                    : tr("No model loaded: choose a model directory first."),
                  true);
    return;
  }
  const QString prompt = views_.prompt->prompt();
  views_.prompt->remember(prompt);
  start(views_.settings->make_job(prompt));
}

void GenerationController::more_like_this() {
  if (!shape_->has_last_job() || !engine_.has_model()) return;
  if (auto started = shape_->more_like_this(); !started.ok()) {
    Q_EMIT status(tr("Not started: %1")
                      .arg(one_line(QString::fromStdString(started.status().message()), 160)),
                  true);
  }
}

Status GenerationController::remesh_current(int resolution) {
  TESSERA_RETURN_IF_ERROR(shape_->remesh(resolution, views_.settings->make_job(shape_->prompt())));
  Q_EMIT status(tr("Re-meshing at %1 ...").arg(QString::number(resolution) + QChar(0x00b3)), false);
  Q_EMIT changed();
  return Status();
}

bool GenerationController::choose_candidate(int i) {
  if (!shape_->choose(i)) return false;
  views_.candidates->select(i);
  const ShapeController::Candidate& c = shape_->candidate(i);
  Q_EMIT status(tr("Candidate %1 (seed %2) is the current mesh%3")
                    .arg(i + 1)
                    .arg(c.seed)
                    .arg(c.final ? QString() : tr(" (still forming)")),
                false);
  Q_EMIT changed();
  return true;
}

void GenerationController::start(runtime::JobOptions job) {
  if (auto started = shape_->start(std::move(job)); !started.ok()) {
    Q_EMIT status(tr("Not started: %1")
                      .arg(one_line(QString::fromStdString(started.status().message()), 160)),
                  true);
  }
}

void GenerationController::cancel() {
  Q_EMIT cancelling();
  if (!engine_.busy()) return;
  engine_.cancel();
  Q_EMIT status(tr("Cancelling ..."), false);
}

void GenerationController::set_examples(const QStringList& examples) {
  QMenu* menu = views_.examples->menu();
  menu->clear();
  for (const QString& example : examples) {
    menu->addAction(example, this, [this, example] {
      views_.prompt->setPlainText(example);
      generate();
    });
  }
  views_.examples->setEnabled(!examples.isEmpty());
  views_.prompt->set_example(examples.isEmpty() ? QString() : examples.front());
}

void GenerationController::on_started(int variations, quint64 first_seed,
                                      const QStringList& notes) {
  Q_EMIT started();
  views_.candidates->reset(variations, first_seed);
  mesh_framed_for_job_ = false;
  record_frame_ = 0;
  views_.viewport->reset_frame_stats();
  views_.progress->setRange(0, static_cast<int>(engine_.stats().expected_tokens));
  views_.progress->setValue(0);
  views_.progress->setVisible(true);
  views_.token_strip->set_tokens({}, engine_.stats().expected_tokens);
  QString text = tr("Generating \"%1\" ...").arg(one_line(shape_->prompt()));
  for (const QString& note : notes) text += tr(" (%1)").arg(note);
  Q_EMIT status(text, false);
  Q_EMIT changed();
}

void GenerationController::on_stats_changed() {
  const GenerationStats& s = engine_.stats();
  views_.progress->setValue(static_cast<int>(s.token_ms.size()));
  views_.token_strip->set_tokens(s.token_ids, s.expected_tokens);
}

void GenerationController::on_previewed(qint64 tokens, bool final) {
  // Generated shapes live in the decoder's cube: frame that once per job, so the camera stays
  // still while previews grow into the final shape.
  if (!mesh_framed_for_job_) views_.viewport->frame_bounds(kDecoderCube);
  mesh_framed_for_job_ = true;
  if (!final) {
    Q_EMIT status(
        tr("Generating \"%1\": preview from %2 tokens").arg(one_line(shape_->prompt())).arg(tokens),
        false);
  }
  record_frame();
  Q_EMIT changed();
}

void GenerationController::on_result(const QString& label, std::shared_ptr<const mesh::Mesh> mesh,
                                     int candidate, bool generated) {
  QImage shot;
  if (candidate >= 0) {
    if (Viewport* tile = views_.candidates->view(candidate)) shot = tile->grabFramebuffer();
  } else {
    // The viewport without the overlay, showing this mesh.
    Viewport* viewport = views_.viewport;
    const bool overlay = viewport->overlay_visible();
    viewport->set_overlay_visible(false);
    shot = viewport->grabFramebuffer();
    viewport->set_overlay_visible(overlay);
  }
  Q_EMIT result(label, std::move(mesh), candidate, generated, shot);
  Q_EMIT changed();
}

void GenerationController::on_job_finished(quint64, int state, const QString& message) {
  Q_EMIT ended();  // in every way a job ends: done, cancelled, failed
  last_job_frames_ = views_.viewport->frames();
  last_job_max_gap_ms_ = views_.viewport->max_frame_gap_ms();
  views_.progress->setVisible(false);
  const GenerationStats& s = engine_.stats();
  const auto job_state = static_cast<JobState>(state);
  if (job_state == JobState::kDone) {
    Q_EMIT done(tr("Done: \"%1\", %2 vertices, %3 triangles in %4 s (%5 tokens/s)")
                    .arg(one_line(shape_->prompt()))
                    .arg(s.final_vertices)
                    .arg(s.final_triangles)
                    .arg(s.total_ms / 1000.0, 0, 'f', 2)
                    .arg(s.tokens_per_second(), 0, 'f', 1));
  } else if (job_state == JobState::kCancelled) {
    Q_EMIT status(tr("Cancelled (%1)").arg(message), false);
  } else {
    Q_EMIT status(tr("Generation failed: %1").arg(one_line(message, 160)), true);
  }
  Q_EMIT changed();
}

void GenerationController::set_record_dir(const QString& dir) {
  record_dir_ = dir;
  if (!dir.isEmpty() && !QDir().mkpath(dir)) {
    Q_EMIT status(tr("Cannot create the recording directory %1").arg(dir), true);
    record_dir_.clear();
  }
  Q_EMIT recordingChanged(!record_dir_.isEmpty());
  engine_.set_emit_every_partial(!record_dir_.isEmpty());
  if (!record_dir_.isEmpty()) Q_EMIT status(tr("Recording frames into %1").arg(record_dir_), false);
}

void GenerationController::record_frame() {
  if (record_dir_.isEmpty()) return;
  const QImage frame = views_.viewport->grabFramebuffer();
  const QString path =
      QDir(record_dir_)
          .filePath(QStringLiteral("frame_%1.png").arg(record_frame_++, 5, 10, QChar('0')));
  if (!frame.save(path)) {
    Q_EMIT status(tr("Recording: cannot write %1; recording stopped").arg(path), true);
    set_record_dir(QString());
  }
}

}  // namespace tessera::studio
