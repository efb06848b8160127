// GenerationController: the prompt bar's lane, from Generate to a finished shape. It turns the
// prompt and the Settings panel into shape jobs through ShapeController (which it owns: the text
// rule, candidates, More like this, re-mesh), and shows a job as it runs: the progress bar and the
// token strip follow the engine's stats, candidate 0's shape is framed once per job in the
// viewport, the candidate grid shows the variations, recorded frames are saved per partial mesh,
// and the viewport's frame statistics of the last job are kept. The results themselves go out
// through result() (the library keeps them); the job's end through ended() and done().
//
// It reaches the engine through EngineBridge and ShapeController, and writes to the panels it is
// given (GenerationViews); the window lays those out and wires the signals. UI thread only.
#pragma once

#include <QImage>
#include <QObject>
#include <QString>
#include <QStringList>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "engine/mesh/mesh.h"
#include "engine/runtime/session.h"

class QProgressBar;
class QToolButton;

namespace tessera::studio {

class CandidateGrid;
class EngineBridge;
class PromptEdit;
class SettingsPanel;
class ShapeController;
class TokenStrip;
class Viewport;

// The panels a generation is shown in; all outlive the controller.
struct GenerationViews {
  PromptEdit* prompt = nullptr;
  SettingsPanel* settings = nullptr;
  CandidateGrid* candidates = nullptr;  // the variations of the current job
  Viewport* viewport = nullptr;
  TokenStrip* token_strip = nullptr;
  QProgressBar* progress = nullptr;
  QToolButton* examples = nullptr;  // the loaded model's example prompts
};

class GenerationController : public QObject {
  Q_OBJECT

 public:
  GenerationController(EngineBridge& engine, GenerationViews views, QObject* parent = nullptr);

  ShapeController& shape() { return *shape_; }
  // Submits the prompt with the current settings (replacing a running job); without a model it
  // says why in the status bar.
  void generate();
  // The last job's prompt and settings with the next seeds (S + V .. S + 2V - 1 after seeds
  // S .. S + V - 1): more candidates like the ones shown. Nothing before a first job.
  void more_like_this();
  // Makes candidate i of the current variations the current mesh (export, texture, gallery
  // choice act on it); false when it has no mesh yet.
  bool choose_candidate(int i);
  // Meshes the current shape again from its tokens at `resolution` (2^k + 1) through a runtime
  // decode job; the result becomes the current mesh (and the chosen candidate's). Errors: no
  // generated shape shown (an opened file has no tokens), a bad resolution, no model.
  Status remesh_current(int resolution);
  // Cancels the running shape job (cancelling() goes first: an image waiting for it goes too).
  void cancel();
  // The loaded model's example prompts: the Examples menu (one click generates one) and the
  // prompt's placeholder.
  void set_examples(const QStringList& examples);
  // Starts / stops saving a viewport frame per partial mesh into `dir` (empty: stop).
  void set_record_dir(const QString& dir);
  // Viewport frame statistics of the last finished job (frames drawn, largest gap in ms).
  int64_t last_job_frames() const { return last_job_frames_; }
  double last_job_max_frame_gap_ms() const { return last_job_max_gap_ms_; }

 Q_SIGNALS:
  void status(const QString& text, bool error);
  // A shape job started (before its grid, progress and status are reset): a replay ends, the
  // library journals it, the image lane follows it.
  void started();
  // Cancel was asked for (before the shape job is cancelled).
  void cancelling();
  // A finished result for the gallery, with the picture it was shown as (`candidate` >= 0: its
  // tile's). `generated`: a candidate of a job (the library keeps it), not a re-mesh.
  void result(const QString& label, std::shared_ptr<const tessera::mesh::Mesh> mesh, int candidate,
              bool generated, const QImage& shot);
  // The shape job ended (done, cancelled or failed), before its status is said.
  void ended();
  // The job is done: `summary` says what was made (the window adds what the library could not
  // keep). Cancelled and failed jobs say so through status().
  void done(const QString& summary);
  // Recording started or stopped (a failed write stops it).
  void recordingChanged(bool on);
  // What can be done changed (More like this, re-mesh, cancel).
  void changed();

 private:
  void start(runtime::JobOptions job);
  void on_started(int variations, quint64 first_seed, const QStringList& notes);
  void on_previewed(qint64 tokens, bool final);
  void on_result(const QString& label, std::shared_ptr<const mesh::Mesh> mesh, int candidate,
                 bool generated);
  void on_job_finished(quint64 job, int state, const QString& message);
  void on_stats_changed();
  void record_frame();

  EngineBridge& engine_;
  GenerationViews views_;
  ShapeController* shape_ = nullptr;
  bool mesh_framed_for_job_ = false;
  QString record_dir_;
  int record_frame_ = 0;
  int64_t last_job_frames_ = 0;
  double last_job_max_gap_ms_ = 0;
};

}  // namespace tessera::studio
