// ModelController: the studio's models. It loads the shape model (Settings > Model's directory or a
// name from File > Models), says how loading went (the Model box's line, the status bar's model
// name, the Settings panel's model facts), moves both engines when the device or the weights
// change, keeps the overlay's engine switches (KV cache, CUDA graphs) and device line in step with
// the Settings panel and the loaded model, and opens File > Models. The engine is reached through
// EngineBridge (shape model) and DiffusionBridge (image model); the window lays out the widgets it
// writes to and wires its signals. UI thread only.
#pragma once

#include <QObject>
#include <QString>

#include "engine/runtime/capabilities.h"
#include "ui/studio/imgui_overlay.h"

class QLabel;
class QLineEdit;
class QWidget;

namespace tessera::studio {

class DiffusionBridge;
class EngineBridge;
class ModelsDialog;
class SettingsPanel;

// The widgets the controller writes to; all outlive it.
struct ModelViews {
  QLineEdit* path = nullptr;      // Settings > Model: the directory or name (Enter loads it)
  QLabel* state = nullptr;        // Settings > Model: loading, loaded (the model's facts), failed
  QLabel* status_name = nullptr;  // the status bar's "Model: NAME"
  SettingsPanel* settings = nullptr;
  QWidget* dialog_parent = nullptr;  // File > Models and the directory chooser open over it
};

class ModelController : public QObject {
  Q_OBJECT

 public:
  ModelController(EngineBridge& engine, DiffusionBridge& diffusion, ModelViews views,
                  QObject* parent = nullptr);

  // Loads the shape model in `dir` (a directory or a known model's name) in the background; the
  // current one stays in use until it has loaded.
  void load_model(const QString& dir);
  // Settings > Model > Browse and File > Choose model directory.
  void choose_model_dir();
  // No model to load at all (the embedded one is not installed): says so where loading would.
  void report_missing(const QString& dir, const QString& message);
  // Settings > Engine: both engines move to `device` (the models reload; the current shape model
  // stays in use until then); new weights reload the shape model.
  void set_device(runtime::DeviceChoice device);
  void set_weights(const QString& weights);
  // The overlay's switches and device line from the Settings panel and the loaded model.
  void sync_overlay_controls();
  OverlayControls& overlay_controls() { return overlay_controls_; }
  // File > Models: the models by name (created on first use, refreshed at every call).
  ModelsDialog& models_dialog();
  // What the status bar says once `dir` has loaded (a first run with only the embedded model is
  // told where the real ones are).
  QString ready_text(const QString& dir) const;
  QString state_text() const;

 Q_SIGNALS:
  void status(const QString& text, bool error);
  // The shape model in `dir` is ready (its example prompts, facts and backend can be read).
  void loaded(const QString& dir);
  // Loading began, ended or failed: what can be done changed.
  void changed();

 private:
  void on_loading(const QString& dir);
  void on_loaded(const QString& dir);
  void on_failed(const QString& dir, const QString& message);

  EngineBridge& engine_;
  DiffusionBridge& diffusion_;
  ModelViews views_;
  OverlayControls overlay_controls_;
  ModelsDialog* models_ = nullptr;  // File > Models, once opened
};

}  // namespace tessera::studio
