// ScriptRunner: the studio's scripted mode (tessera-studio --prompt P --generate [--image
// --apply-texture] [--export F] --screenshot S --quit-when-done), a part of its own. It drives the
// window only through its public actions (generate, generate_image, apply_image_as_texture,
// export_mesh, screenshot_image) and follows the lane bridges' signals (EngineBridge: model
// loaded / failed, job finished; DiffusionBridge: model state, image finished; TextureBridge:
// finished). The run ends once: the export and the screenshot are written, a summary line per
// stage goes to stdout, and finished(exit code) is emitted (0: every step done).
//
// Order: the runner is made after the window's own connections, so its slots run after the
// window's and see the window's state updated.
// Threads: UI thread only.
#pragma once

#include <QObject>
#include <QString>

namespace tessera::studio {

class MainWindow;
struct LaunchOptions;

class ScriptRunner : public QObject {
  Q_OBJECT

 public:
  // `window` must outlive the runner (it is its parent). `launch` must be scripted().
  ScriptRunner(MainWindow& window, const LaunchOptions& launch);
  bool done() const { return done_; }
  // Ends the run now (a failure the window found before any job, e.g. no model at all).
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

  MainWindow& window_;
  const LaunchOptions& launch_;
  bool started_ = false;     // the scripted job was started (or the run decided without one)
  bool shape_done_ = false;  // the shape job ended well and an image step follows
  bool texture_submitted_ = false;
  bool done_ = false;
};

}  // namespace tessera::studio
