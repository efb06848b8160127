// LibraryController: what outlives a job, and watching it again. The library (runtime::Library,
// held by LibraryPanel): opened at start and when Settings > Library changes (the gallery restored
// from it), every generated candidate kept with its thumbnail, timings and settings, the concept
// image and a textured copy kept beside a job's results, each generation journalled while it runs
// so that the next start can say what a kill interrupted (and run it again). Without a library (an
// unwritable folder) the studio works and says results are not kept. Replays (ReplayController,
// which it owns) of the shown shape or a library entry: the overlay shows the result's own timings
// with the cursor on the shown token, the token strip the tokens so far; a new job or showing
// another result ends a replay.
//
// It reaches the engine through EngineBridge and the shape lane through GenerationController, and
// writes to the panels it is given (LibraryViews); the window lays those out and wires the
// signals. UI thread only.
#pragma once

#include <QImage>
#include <QObject>
#include <QString>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/mesh/mesh.h"
#include "engine/runtime/library.h"
#include "ui/studio/generation_stats.h"

class QLineEdit;

namespace tessera::studio {

class EngineBridge;
class Gallery;
struct GalleryEntry;
class GenerationController;
class LibraryPanel;
class PromptEdit;
class ReplayController;
class SettingsPanel;
class TokenStrip;
class Viewport;
struct ImageJobState;

// The panels the library and replays are shown in; all outlive the controller.
struct LibraryViews {
  LibraryPanel* panel = nullptr;
  QLineEdit* path = nullptr;  // Settings > Library
  Viewport* viewport = nullptr;
  TokenStrip* token_strip = nullptr;
  PromptEdit* prompt = nullptr;       // run_interrupted() restores the prompt ...
  SettingsPanel* settings = nullptr;  // ... and the settings; replays mesh at its preview size
};

class LibraryController : public QObject {
  Q_OBJECT

 public:
  // `scripted`: interrupted jobs are printed to stdout instead of asked about.
  LibraryController(EngineBridge& engine, GenerationController& generation, LibraryViews views,
                    bool scripted, QObject* parent = nullptr);

  Gallery* gallery() const;
  ReplayController& replay() { return *replay_; }
  // Opens the library chosen in QSettings (TESSERA_LIBRARY, when set, decides) and shows it.
  void open();
  // Settings > Library: keep results in `dir` from now on ("": the default folder); the library
  // there is opened and shown. Refused while a job runs (its journal is in the open library).
  void set_library_dir(const QString& dir);
  // Why results are not kept, or what a kill interrupted ("": nothing to say).
  const QString& library_status() const { return library_status_; }
  // Why a result of the last job was not kept ("": all were).
  const QString& keep_failure() const { return keep_failure_; }
  // The jobs a killed or crashed studio left unfinished, found at start (runtime::Library's
  // journal); run_interrupted() runs the first again with its settings.
  const std::vector<runtime::JournalJob>& interrupted() const { return interrupted_; }
  bool run_interrupted();

  // The shape lane's job: journalled from start to end, its results kept (a re-mesh only shown in
  // the gallery), its concept image and a textured copy kept beside them.
  void job_started();
  void job_ended();
  void keep_result(const QString& label, std::shared_ptr<const mesh::Mesh> mesh, int candidate,
                   bool generated, const QImage& shot);
  void keep_concept_image(const ImageJobState& image);
  void keep_textured(const std::shared_ptr<const mesh::Mesh>& source,
                     const std::shared_ptr<const mesh::Mesh>& textured);
  // Shows a gallery item in the viewport: a kept one can be re-meshed and replayed from its
  // tokens, and gets the view's picture when it was kept without one.
  void show_gallery_item(const GalleryEntry& entry);

  // Replays the shown shape (a result of this session or the library's): false when it has no
  // tokens, no model is loaded or a job runs.
  bool replay_shown();
  void end_replay();
  // What the overlay draws: the job's stats, or a replay's (the result's timings, its cursor).
  const GenerationStats& overlay_stats() const;

 Q_SIGNALS:
  void status(const QString& text, bool error);
  void changed();

 private:
  void start_replay(std::vector<int32_t> tokens, std::shared_ptr<const mesh::Mesh> result,
                    const QString& timings_file, const QString& prompt);
  void on_replay_frame(qint64 k, std::shared_ptr<const mesh::Mesh> mesh);
  void report_interrupted();

  EngineBridge& engine_;
  GenerationController& generation_;
  LibraryViews views_;
  bool scripted_ = false;
  QString library_status_;         // why results are not kept ("": they are)
  QString job_group_;              // the running job's library group
  int64_t journal_job_ = 0;        // the running generation's journal entry (0: none)
  QString keep_failure_;           // why a result of the running job was not kept ("": all were)
  std::vector<int64_t> job_kept_;  // the library ids of the last job's results
  std::vector<runtime::JournalJob> interrupted_;
  ReplayController* replay_ = nullptr;
  GenerationStats replay_stats_;                     // what the overlay shows during a replay
  std::shared_ptr<const mesh::Mesh> replay_result_;  // the shown result (what a replay ends on)
  QString replay_timings_;                           // its timings.json ("": none)
};

}  // namespace tessera::studio
