// ScriptRunner: the studio's scripted mode (tessera-studio --prompt P --generate [--image
// --apply-texture] [--export F] --screenshot S --quit-when-done), a part of its own. It drives the
// controllers, never the window (ScriptedParts: GenerationController::generate,
// ImageController::generate / apply_as_texture, ImportExportController::export_mesh, and the
// screenshot it is given) and follows the lane bridges' signals (EngineBridge: model loaded /
// failed, job finished; DiffusionBridge: model state, image finished; TextureBridge: finished).
// The run ends once: the export and the screenshot are written, a summary line per stage goes to
// stdout, and finished(exit code) is emitted (0: every step done).
//
// Order: the runner is made after the controllers' connections, so its slots run after theirs and
// see their state updated.
// Threads: UI thread only.
#pragma once

#include <QImage>
#include <QObject>
#include <QString>
#include <functional>

namespace tessera::studio {

class EngineBridge;
class GenerationController;
class ImageController;
class ImportExportController;
class Viewport;
struct LaunchOptions;

// What a scripted run drives and reads; all outlive the runner.
struct ScriptedParts {
  EngineBridge* engine = nullptr;
  GenerationController* generation = nullptr;
  ImageController* image = nullptr;
  ImportExportController* files = nullptr;
  Viewport* viewport = nullptr;        // frames drawn (the job waits for a few), the shown mesh
  std::function<QImage()> screenshot;  // what --screenshot saves
};

class ScriptRunner : public QObject {
  Q_OBJECT

 public:
  // `launch` must be scripted() and outlive the runner.
  ScriptRunner(ScriptedParts parts, const LaunchOptions& launch, QObject* parent = nullptr);
  bool done() const { return done_; }
  // Ends the run now (a failure found before any job, e.g. no model at all).
  void fail(const QString& message) { finish(1, message); }

 Q_SIGNALS:
  void finished(int exit_code);

 private:
  void on_model_loaded();
  void on_model_failed(const QString& dir, const QString& message);
  void on_job_finished(int state, const QString& message);
  // --image / --apply-texture: moves on once the shape, the model and the image allow.
  void advance_image();
  void finish(int code, const QString& message);

  ScriptedParts parts_;
  const LaunchOptions& launch_;
  bool started_ = false;     // the scripted job was started (or the run decided without one)
  bool shape_done_ = false;  // the shape job ended well and an image step follows
  bool texture_submitted_ = false;
  bool paint_submitted_ = false;
  bool done_ = false;
};

}  // namespace tessera::studio
