#include "ui/studio/library_controller.h"

#include <QBuffer>
#include <QCoreApplication>
#include <QDateTime>
#include <QFile>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <cstdio>
#include <fstream>

#include "engine/runtime/provenance.h"
#include "engine/runtime/tokens_file.h"
#include "ui/studio/diffusion_bridge.h"
#include "ui/studio/engine_bridge.h"
#include "ui/studio/gallery.h"
#include "ui/studio/generation_controller.h"
#include "ui/studio/library_panel.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/replay_controller.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/shape_controller.h"
#include "ui/studio/studio_text.h"
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

QByteArray png_bytes(const QImage& image) {
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  image.save(&buffer, "PNG");
  return png;
}

}  // namespace

LibraryController::LibraryController(EngineBridge& engine, GenerationController& generation,
                                     LibraryViews views, bool scripted, QObject* parent)
    : QObject(parent),
      engine_(engine),
      generation_(generation),
      views_(views),
      scripted_(scripted) {
  replay_ = new ReplayController(engine_, this);
  connect(replay_, &ReplayController::frame, this, &LibraryController::on_replay_frame);
  connect(replay_, &ReplayController::failed, this,
          [this](const QString& message) { Q_EMIT status(tr("Replay: %1").arg(message), true); });
  connect(views_.panel, &LibraryPanel::chosen, this, &LibraryController::show_gallery_item);
  connect(views_.panel, &LibraryPanel::failed, this,
          [this](const QString& message) { Q_EMIT status(message, true); });
  connect(views_.panel, &LibraryPanel::message, this,
          [this](const QString& message) { Q_EMIT status(message, false); });
}

Gallery* LibraryController::gallery() const {
  return views_.panel->gallery();
}

const GenerationStats& LibraryController::overlay_stats() const {
  return replay_->active() ? replay_stats_ : engine_.stats();
}

void LibraryController::open() {
  const std::string chosen =
      QSettings().value(QStringLiteral("library/dir")).toString().toStdString();
  const std::string dir = runtime::library_dir(chosen);
  const bool from_environment = runtime::library_dir_from_environment();
  views_.path->setText(chosen.empty() || from_environment ? QString()
                                                          : QString::fromStdString(chosen));
  views_.path->setPlaceholderText(QString::fromStdString(dir));
  views_.path->setEnabled(!from_environment);
  views_.path->setToolTip(from_environment
                              ? tr("Set by TESSERA_LIBRARY")
                              : tr("Where results are kept (empty: %1)")
                                    .arg(QString::fromStdString(runtime::default_library_dir())));
  library_status_.clear();
  if (Status st = views_.panel->open(dir); !st.ok()) {
    library_status_ = tr("Results are not kept: %1").arg(QString::fromStdString(st.message()));
    return;
  }
  report_interrupted();
}

void LibraryController::set_library_dir(const QString& dir) {
  if (engine_.busy()) {
    // The running job is journalled and kept in the open library: switch once it has ended.
    Q_EMIT status(tr("The library folder can change once the running job has ended"), true);
    return;
  }
  job_kept_.clear();
  QSettings().setValue(QStringLiteral("library/dir"), dir.trimmed());
  open();
  Q_EMIT status(
      library_status_.isEmpty()
          ? tr("Library: %1")
                .arg(QString::fromStdString(runtime::library_dir(dir.trimmed().toStdString())))
          : library_status_,
      !library_status_.isEmpty());
}

void LibraryController::keep_result(const QString& label, std::shared_ptr<const mesh::Mesh> mesh,
                                    int candidate, bool generated, const QImage& shot) {
  if (!generated) {
    gallery()->add(label, std::move(mesh), shot);  // a re-mesh: this session's only
    return;
  }
  candidate = std::max(candidate, 0);
  ShapeController& shape = generation_.shape();
  const ShapeController::Candidate& c = shape.candidate(candidate);
  runtime::NewResult kept;
  kept.prompt = shape.prompt().toStdString();
  kept.settings = shape.candidate_settings_json(candidate);
  if (kept.settings.is_object()) kept.model = kept.settings["model"].value("name", "");
  kept.group = job_group_.toStdString();
  kept.candidate = candidate;
  kept.seed = c.seed;
  kept.mesh = mesh.get();
  kept.tokens = c.tokens;
  kept.timings = timings_json(engine_.stats());
  const QByteArray png = png_bytes(Gallery::thumbnail(shot));
  kept.thumbnail_png.assign(png.begin(), png.end());
  if (auto id = views_.panel->keep(kept, mesh, label, shot); id.ok()) {
    job_kept_.push_back(*id);
  } else {
    // A full disk, a folder gone read-only: say so once per job, and go on without keeping.
    keep_failure_ = tr("Not kept in the library (the studio goes on; export to keep it): %1")
                        .arg(one_line(QString::fromStdString(id.status().message()), 160));
    Q_EMIT status(keep_failure_, true);
  }
}

void LibraryController::keep_concept_image(const ImageJobState& s) {
  runtime::Library* library = views_.panel->library();
  if (library == nullptr || job_kept_.empty() || !s.image_final ||
      s.prompt != generation_.shape().prompt() ||
      s.image_rgb.size() != static_cast<size_t>(3 * s.image_width * s.image_height)) {
    return;
  }
  const QImage image(s.image_rgb.data(), static_cast<int>(s.image_width),
                     static_cast<int>(s.image_height), static_cast<int>(3 * s.image_width),
                     QImage::Format_RGB888);
  const QByteArray png = png_bytes(image);
  const std::vector<uint8_t> bytes(png.begin(), png.end());
  for (int64_t id : job_kept_) {
    if (Status st = library->set_concept(id, bytes); !st.ok()) {
      Q_EMIT status(
          tr("The concept image was not kept: %1").arg(QString::fromStdString(st.message())), true);
      return;
    }
  }
}

void LibraryController::keep_textured(const std::shared_ptr<const mesh::Mesh>& source,
                                      const std::shared_ptr<const mesh::Mesh>& textured) {
  if (runtime::Library* library = views_.panel->library()) {
    for (const GalleryEntry& e : gallery()->kept()) {
      if (e.mesh != source || e.id == 0) continue;
      if (Status st = library->set_textured(e.id, *textured); !st.ok()) {
        Q_EMIT status(
            tr("The textured mesh was not kept: %1").arg(QString::fromStdString(st.message())),
            true);
      }
      break;
    }
  }
  gallery()->replace_mesh(source, textured);  // the gallery shows the textured copy
}

void LibraryController::job_started() {
  end_replay();
  keep_failure_.clear();
  job_kept_.clear();
  job_group_ = QStringLiteral("studio-%1-%2")
                   .arg(QCoreApplication::applicationPid())
                   .arg(QDateTime::currentMSecsSinceEpoch());
  job_ended();  // a journal entry still open (a job replaced before its end) closes
  runtime::Library* library = views_.panel->library();
  if (library == nullptr) return;
  const ShapeController& shape = generation_.shape();
  auto id = library->begin_job(shape.prompt().toStdString(),
                               generation_.shape().candidate_settings_json(0), shape.variations());
  journal_job_ = id.ok() ? *id : 0;
}

void LibraryController::job_ended() {
  if (journal_job_ == 0) return;
  if (runtime::Library* library = views_.panel->library()) (void)library->end_job(journal_job_);
  journal_job_ = 0;
}

void LibraryController::report_interrupted() {
  runtime::Library* library = views_.panel->library();
  if (library == nullptr) return;
  auto taken = library->take_interrupted();
  if (!taken.ok() || taken->empty()) return;
  interrupted_ = std::move(taken).value();
  const runtime::JournalJob& job = interrupted_.front();
  const QString when = QDateTime::fromMSecsSinceEpoch(job.started_ms)
                           .toString(QStringLiteral("yyyy-MM-dd hh:mm:ss"));
  const QString what = tr("\"%1\" (%n variation(s), started %2)", nullptr, job.variations)
                           .arg(one_line(QString::fromStdString(job.prompt)), when);
  if (scripted_) {
    for (const runtime::JournalJob& j : interrupted_) {
      std::printf("interrupted: \"%s\" (%d variations)\n", j.prompt.c_str(), j.variations);
    }
    std::fflush(stdout);
  }
  library_status_ = tr("The last session was interrupted while generating %1.").arg(what);
  if (scripted_) return;
  auto* box = new QMessageBox(QMessageBox::Information, tr("Interrupted"),
                              tr("The studio was closed while it was generating %1. Results "
                                 "finished before that are in the library. Run it again?")
                                  .arg(what),
                              QMessageBox::Yes | QMessageBox::No, views_.panel->window());
  box->button(QMessageBox::Yes)->setText(tr("Run again"));
  box->button(QMessageBox::No)->setText(tr("Dismiss"));
  box->setAttribute(Qt::WA_DeleteOnClose);
  connect(box, &QMessageBox::accepted, this, [this] {
    if (!run_interrupted()) Q_EMIT status(tr("Run again: the model is not loaded yet"), true);
  });
  box->open();
}

bool LibraryController::run_interrupted() {
  if (interrupted_.empty() || !engine_.has_model()) return false;
  const runtime::JournalJob job = interrupted_.front();
  auto restored = runtime::restored_settings(job.settings, "the interrupted job");
  views_.prompt->setPlainText(QString::fromStdString(job.prompt));
  if (restored.ok()) views_.settings->restore(*restored);
  views_.settings->set_variations(job.variations);
  interrupted_.erase(interrupted_.begin());
  generation_.generate();
  return true;
}

void LibraryController::show_gallery_item(const GalleryEntry& entry) {
  end_replay();
  Viewport* viewport = views_.viewport;
  viewport->set_mesh(entry.mesh, true);
  // A kept result can be re-meshed and replayed from its tokens; a session-only one cannot.
  std::vector<int32_t> tokens;
  if (entry.id != 0) {
    if (auto read = runtime::read_tokens_file(entry.tokens_file.toStdString()); read.ok()) {
      tokens = std::move(read).value();
    }
  }
  if (!tokens.empty()) {
    nlohmann::json settings;
    if (runtime::Library* library = views_.panel->library()) {
      if (auto kept = library->get(entry.id); kept.ok()) settings = kept->settings;
    }
    generation_.shape().show_kept(entry.prompt, std::move(tokens), std::move(settings));
  } else {
    generation_.shape().show_other();
  }
  replay_result_ = entry.mesh;
  replay_timings_ = entry.timings_file;
  if (entry.id != 0 && !QFile::exists(entry.thumbnail_file)) {
    // Kept without a thumbnail (by the command line): it gets the view's once it has drawn.
    auto* once = new QObject(this);
    const int64_t id = entry.id;
    const int64_t drawn = viewport->frames();
    const std::shared_ptr<const mesh::Mesh> shown = entry.mesh;
    connect(viewport, &Viewport::frameRendered, once, [this, viewport, once, id, drawn, shown] {
      if (viewport->frames() >= drawn && viewport->frames() < drawn + 2) return;
      QObject::disconnect(viewport, nullptr, once, nullptr);  // one grab (grabbing draws again)
      once->deleteLater();
      // Only this result's picture: not a replay, not another result or a new job shown since.
      if (replay_->active() || viewport->mesh() != shown) return;
      const bool overlay = viewport->overlay_visible();
      viewport->set_overlay_visible(false);
      const QImage shot = viewport->grabFramebuffer();
      viewport->set_overlay_visible(overlay);
      (void)views_.panel->set_thumbnail(id, shot);
    });
  }
  Q_EMIT status(tr("Showing \"%1\"").arg(one_line(entry.title())), false);
  Q_EMIT changed();
}

bool LibraryController::replay_shown() {
  const std::vector<int32_t>& tokens = generation_.shape().current_tokens();
  const auto shown = views_.viewport->mesh();
  if (tokens.empty() || !shown || !engine_.has_model() || engine_.busy()) return false;
  start_replay(tokens, shown, replay_result_ == shown ? replay_timings_ : QString(),
               generation_.shape().prompt());
  return true;
}

void LibraryController::start_replay(std::vector<int32_t> tokens,
                                     std::shared_ptr<const mesh::Mesh> result,
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
  } else if (engine_.stats().token_ids == tokens) {
    replay_stats_ = engine_.stats();
  }
  replay_stats_.state = JobState::kDone;
  replay_stats_.token_ids = tokens;
  replay_stats_.expected_tokens = static_cast<int64_t>(tokens.size());
  replay_stats_.cursor = static_cast<int64_t>(tokens.size());
  views_.viewport->set_stats(&replay_stats_);
  replay_result_ = result;
  replay_->open(std::move(tokens), std::move(result), views_.settings->preview_resolution());
  Q_EMIT status(tr("Replaying \"%1\": drag the timeline, or press play").arg(one_line(prompt)),
                false);
  Q_EMIT changed();
}

void LibraryController::end_replay() {
  if (!replay_->active()) return;
  replay_->close();
  views_.viewport->set_stats(&engine_.stats());
  if (replay_result_) views_.viewport->set_mesh(replay_result_, false);
  views_.token_strip->set_tokens(generation_.shape().current_tokens(),
                                 engine_.stats().expected_tokens);
  Q_EMIT changed();
}

void LibraryController::on_replay_frame(qint64 k, std::shared_ptr<const mesh::Mesh> mesh) {
  views_.viewport->set_mesh(std::move(mesh), false);  // null: nothing formed yet
  const std::vector<int32_t>& all = replay_->tokens();
  views_.token_strip->set_tokens(std::vector<int32_t>(all.begin(), all.begin() + k),
                                 replay_->length());
  replay_stats_.cursor = k;
  views_.viewport->update();
}

}  // namespace tessera::studio
