// MainWindow, part: the library (keeping results, the journal of running jobs, what a kill
// interrupted) and replays (ui/studio/main_window.h).
#include "ui/studio/main_window.h"

#include <QBuffer>
#include <QDateTime>
#include <QFile>
#include <QMessageBox>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/runtime/tokens_file.h"
#include "ui/studio/gallery.h"
#include "ui/studio/library_panel.h"
#include "ui/studio/main_window_text.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/replay_controller.h"
#include "ui/studio/shape_controller.h"
#include "ui/studio/token_strip.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

namespace {

nlohmann::json timings_json(const GenerationStats& s) {
  nlohmann::json stages = nlohmann::json::object();
  for (size_t i = 0; i < kStageNames.size(); ++i) {
    if (s.stage_ms[i] >= 0) stages[kStageNames[i]] = s.stage_ms[i];
  }
  return {{"token_ms", s.token_ms}, {"stage_ms", stages},         {"backend", s.backend},
          {"weights", s.weights},   {"candidates", s.candidates}, {"kv_cache", s.kv_cache}};
}

}  // namespace

Gallery* MainWindow::gallery() const {
  return library_panel_->gallery();
}

const GenerationStats& MainWindow::overlay_stats() const {
  return replay_->active() ? replay_stats_ : engine_->stats();
}

void MainWindow::open_library() {
  const std::string chosen =
      QSettings().value(QStringLiteral("library/dir")).toString().toStdString();
  const std::string dir = runtime::library_dir(chosen);
  if (library_path_ != nullptr) {
    library_path_->setText(chosen.empty() || runtime::library_dir_from_environment()
                               ? QString()
                               : QString::fromStdString(chosen));
    library_path_->setPlaceholderText(QString::fromStdString(dir));
    library_path_->setEnabled(!runtime::library_dir_from_environment());
    library_path_->setToolTip(
        runtime::library_dir_from_environment()
            ? tr("Set by TESSERA_LIBRARY")
            : tr("Where results are kept (empty: %1)")
                  .arg(QString::fromStdString(runtime::default_library_dir())));
  }
  library_status_.clear();
  if (Status st = library_panel_->open(dir); !st.ok()) {
    library_status_ = tr("Results are not kept: %1").arg(QString::fromStdString(st.message()));
    return;
  }
  report_interrupted();
}

void MainWindow::set_library_dir(const QString& dir) {
  if (engine_->busy()) {
    // The running job is journalled and kept in the open library: switch once it has ended.
    show_status(tr("The library folder can change once the running job has ended"), true);
    return;
  }
  job_kept_.clear();
  QSettings().setValue(QStringLiteral("library/dir"), dir.trimmed());
  open_library();
  show_status(
      library_status_.isEmpty()
          ? tr("Library: %1")
                .arg(QString::fromStdString(runtime::library_dir(dir.trimmed().toStdString())))
          : library_status_,
      !library_status_.isEmpty());
}

void MainWindow::keep_result(const QString& label, int candidate,
                             const std::shared_ptr<const mesh::Mesh>& mesh, const QImage& shot) {
  const ShapeController::Candidate& c = shape_->candidate(candidate);
  runtime::NewResult kept;
  kept.prompt = shape_->prompt().toStdString();
  kept.settings = shape_->candidate_settings_json(candidate);
  if (kept.settings.is_object()) kept.model = kept.settings["model"].value("name", "");
  kept.group = job_group_.toStdString();
  kept.candidate = candidate;
  kept.seed = c.seed;
  kept.mesh = mesh.get();
  kept.tokens = c.tokens;
  kept.timings = timings_json(engine_->stats());
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  Gallery::thumbnail(shot).save(&buffer, "PNG");
  kept.thumbnail_png.assign(png.begin(), png.end());
  if (auto id = library_panel_->keep(kept, mesh, label, shot); id.ok()) {
    job_kept_.push_back(*id);
  } else {
    // A full disk, a folder gone read-only: say so once per job, and go on without keeping.
    keep_failure_ = tr("Not kept in the library (the studio goes on; export to keep it): %1")
                        .arg(one_line(QString::fromStdString(id.status().message()), 160));
    show_status(keep_failure_, true);
  }
}

void MainWindow::keep_concept_image() {
  runtime::Library* library = library_panel_->library();
  const ImageJobState& s = diffusion_->state();
  if (library == nullptr || job_kept_.empty() || !s.image_final || s.prompt != shape_->prompt() ||
      s.image_rgb.size() != static_cast<size_t>(3 * s.image_width * s.image_height)) {
    return;
  }
  const QImage image(s.image_rgb.data(), static_cast<int>(s.image_width),
                     static_cast<int>(s.image_height), static_cast<int>(3 * s.image_width),
                     QImage::Format_RGB888);
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  image.save(&buffer, "PNG");
  const std::vector<uint8_t> bytes(png.begin(), png.end());
  for (int64_t id : job_kept_) {
    if (Status st = library->set_concept(id, bytes); !st.ok()) {
      show_status(
          tr("The concept image was not kept: %1").arg(QString::fromStdString(st.message())), true);
      return;
    }
  }
}

void MainWindow::keep_textured(const std::shared_ptr<const mesh::Mesh>& source,
                               const std::shared_ptr<const mesh::Mesh>& textured) {
  runtime::Library* library = library_panel_->library();
  if (library == nullptr) return;
  for (const GalleryEntry& e : gallery()->kept()) {
    if (e.mesh != source || e.id == 0) continue;
    if (Status st = library->set_textured(e.id, *textured); !st.ok()) {
      show_status(
          tr("The textured mesh was not kept: %1").arg(QString::fromStdString(st.message())), true);
    }
    return;
  }
}

void MainWindow::journal_started() {
  journal_ended();
  runtime::Library* library = library_panel_->library();
  if (library == nullptr) return;
  auto id = library->begin_job(shape_->prompt().toStdString(), shape_->candidate_settings_json(0),
                               shape_->variations());
  journal_job_ = id.ok() ? *id : 0;
}

void MainWindow::journal_ended() {
  if (journal_job_ == 0) return;
  if (runtime::Library* library = library_panel_->library()) (void)library->end_job(journal_job_);
  journal_job_ = 0;
}

void MainWindow::report_interrupted() {
  runtime::Library* library = library_panel_->library();
  if (library == nullptr) return;
  auto taken = library->take_interrupted();
  if (!taken.ok() || taken->empty()) return;
  interrupted_ = std::move(taken).value();
  const runtime::JournalJob& job = interrupted_.front();
  const QString when = QDateTime::fromMSecsSinceEpoch(job.started_ms)
                           .toString(QStringLiteral("yyyy-MM-dd hh:mm:ss"));
  const QString what = tr("\"%1\" (%n variation(s), started %2)", nullptr, job.variations)
                           .arg(one_line(QString::fromStdString(job.prompt)), when);
  if (launch_.scripted()) {
    for (const runtime::JournalJob& j : interrupted_) {
      std::printf("interrupted: \"%s\" (%d variations)\n", j.prompt.c_str(), j.variations);
    }
    std::fflush(stdout);
  }
  library_status_ = tr("The last session was interrupted while generating %1.").arg(what);
  if (launch_.scripted()) return;
  auto* box = new QMessageBox(QMessageBox::Information, tr("Interrupted"),
                              tr("The studio was closed while it was generating %1. Results "
                                 "finished before that are in the library. Run it again?")
                                  .arg(what),
                              QMessageBox::Yes | QMessageBox::No, this);
  box->button(QMessageBox::Yes)->setText(tr("Run again"));
  box->button(QMessageBox::No)->setText(tr("Dismiss"));
  box->setAttribute(Qt::WA_DeleteOnClose);
  connect(box, &QMessageBox::accepted, this, [this] {
    if (!run_interrupted()) show_status(tr("Run again: the model is not loaded yet"), true);
  });
  box->open();
}

bool MainWindow::run_interrupted() {
  if (interrupted_.empty() || !engine_->has_model()) return false;
  const runtime::JournalJob job = interrupted_.front();
  auto restored = runtime::restored_settings(job.settings, "the interrupted job");
  prompt_->setPlainText(QString::fromStdString(job.prompt));
  if (restored.ok()) settings_->restore(*restored);
  settings_->set_variations(job.variations);
  interrupted_.erase(interrupted_.begin());
  generate();
  return true;
}

void MainWindow::show_gallery_item(const GalleryEntry& entry) {
  end_replay();
  viewport_->set_mesh(entry.mesh, true);
  // A kept result can be re-meshed and replayed from its tokens; a session-only one cannot.
  std::vector<int32_t> tokens;
  if (entry.id != 0) {
    if (auto read = runtime::read_tokens_file(entry.tokens_file.toStdString()); read.ok()) {
      tokens = std::move(read).value();
    }
  }
  if (!tokens.empty()) {
    nlohmann::json settings;
    if (runtime::Library* library = library_panel_->library()) {
      if (auto kept = library->get(entry.id); kept.ok()) settings = kept->settings;
    }
    shape_->show_kept(entry.prompt, std::move(tokens), std::move(settings));
  } else {
    shape_->show_other();
  }
  replay_result_ = entry.mesh;
  replay_timings_ = entry.timings_file;
  if (entry.id != 0 && !QFile::exists(entry.thumbnail_file)) {
    // Kept without a thumbnail (by the command line): it gets the view's once it has drawn.
    auto* once = new QObject(this);
    const int64_t id = entry.id;
    const int64_t drawn = viewport_->frames();
    const std::shared_ptr<const mesh::Mesh> shown = entry.mesh;
    connect(viewport_, &Viewport::frameRendered, once, [this, once, id, drawn, shown] {
      if (viewport_->frames() >= drawn && viewport_->frames() < drawn + 2) return;
      QObject::disconnect(viewport_, nullptr, once, nullptr);  // one grab (grabbing draws again)
      once->deleteLater();
      // Only this result's picture: not a replay, not another result or a new job shown since.
      if (replay_->active() || viewport_->mesh() != shown) return;
      const bool overlay = viewport_->overlay_visible();
      viewport_->set_overlay_visible(false);
      const QImage shot = viewport_->grabFramebuffer();
      viewport_->set_overlay_visible(overlay);
      (void)library_panel_->set_thumbnail(id, shot);
    });
  }
  show_status(tr("Showing \"%1\"").arg(one_line(entry.title())));
  update_buttons();
}

bool MainWindow::replay_shown() {
  const std::vector<int32_t>& tokens = shape_->current_tokens();
  const auto shown = viewport_->mesh();
  if (tokens.empty() || !shown || !engine_->has_model() || engine_->busy()) return false;
  start_replay(tokens, shown, replay_result_ == shown ? replay_timings_ : QString(),
               shape_->prompt());
  return true;
}

void MainWindow::start_replay(std::vector<int32_t> tokens, std::shared_ptr<const mesh::Mesh> result,
                              const QString& timings_file, const QString& prompt) {
  // The overlay shows the result's own timings (kept beside it), the cursor on the shown token;
  // a result of this session has its timings in the engine's snapshot.
  replay_stats_ = GenerationStats{};
  if (!timings_file.isEmpty()) {
    std::ifstream in(timings_file.toStdString());
    const nlohmann::json t = nlohmann::json::parse(in, nullptr, false);
    // A file of another shape (edited, damaged) only costs the plot.
    if (t.is_object()) try {
        replay_stats_.token_ms = t.value("token_ms", std::vector<float>{});
        replay_stats_.backend = t.value("backend", std::string());
        replay_stats_.weights = t.value("weights", std::string());
        replay_stats_.candidates = t.value("candidates", 1);
        replay_stats_.kv_cache = t.value("kv_cache", true);
        replay_stats_.stage_ms.fill(-1);
        if (const auto s = t.find("stage_ms"); s != t.end() && s->is_object()) {
          for (size_t i = 0; i < kStageNames.size(); ++i) {
            if (const auto v = s->find(kStageNames[i]); v != s->end() && v->is_number())
              replay_stats_.stage_ms[i] = v->get<double>();
          }
        }
      } catch (const nlohmann::json::exception&) {
        replay_stats_ = GenerationStats{};
      }
  } else if (engine_->stats().token_ids == tokens) {
    replay_stats_ = engine_->stats();
  }
  replay_stats_.state = JobState::kDone;
  replay_stats_.token_ids = tokens;
  replay_stats_.expected_tokens = static_cast<int64_t>(tokens.size());
  replay_stats_.cursor = static_cast<int64_t>(tokens.size());
  viewport_->set_stats(&replay_stats_);
  replay_result_ = result;
  replay_->open(std::move(tokens), std::move(result), settings_->preview_resolution());
  show_status(tr("Replaying \"%1\": drag the timeline, or press play").arg(one_line(prompt)));
  update_buttons();
}

void MainWindow::end_replay() {
  if (!replay_->active()) return;
  replay_->close();
  viewport_->set_stats(&engine_->stats());
  if (replay_result_) viewport_->set_mesh(replay_result_, false);
  token_strip_->set_tokens(shape_->current_tokens(), engine_->stats().expected_tokens);
  update_buttons();
}

void MainWindow::on_replay_frame(qint64 k, std::shared_ptr<const mesh::Mesh> mesh) {
  viewport_->set_mesh(std::move(mesh), false);  // null: nothing formed yet
  const std::vector<int32_t>& all = replay_->tokens();
  token_strip_->set_tokens(std::vector<int32_t>(all.begin(), all.begin() + k), replay_->length());
  replay_stats_.cursor = k;
  viewport_->update();
}

}  // namespace tessera::studio
