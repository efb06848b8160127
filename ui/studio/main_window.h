// MainWindow: Tessera Studio's window. Prompt bar (PromptEdit + Generate / Cancel), the viewport
// with its ImGui overlay and the token strip, a Settings dock (model picker + SettingsPanel), a
// Gallery dock of this session's results, menus (File, View, Help), a status bar, and QSettings
// persistence (window layout, prompt history, model directory, settings, view options).
//
// The engine is reached only through EngineBridge, which owns the one runtime::Session (signals on
// the UI thread). Nothing here blocks on the engine: model loading runs in the background and every
// job (shape, image, texture projection) streams its events. The device (Settings > Engine) and
// the overlay's KV cache / CUDA graph switches come from and go to the runtime.
//
// The window lays out the parts and draws what they say; each lane has its controller: shapes
// (shape_controller.h: jobs, candidates, More like this, re-mesh, the shown shape's settings),
// the concept image (diffusion_bridge.h) and projection (texture_bridge.h), all through
// EngineBridge. Scripted mode is ScriptRunner's (script_runner.h). The window's own code is split
// over main_window*.cpp: main_window.cpp (construction, layout, device), _menus, _settings
// (QSettings), _shape (the shape controller's view), _image (concept image, texture), _files
// (import, export, recording, gallery).
//
// Scripted mode (LaunchOptions, from the command line of tessera-studio; run by ScriptRunner): load
// a model, generate
// one prompt, save a screenshot / the recorded frames / an export, and quit with exit code 0 on
// success or 1 when the model or the job failed (the reason goes to stderr). Scripted runs neither
// read nor write QSettings, so they are reproducible. With `image` the concept image is generated
// after the shape (seed locked to image_seed) and the script ends when it is done; with
// `apply_texture` it is then projected onto the mesh (textured view, textured export).
//
// Concept image: DiffusionBridge (ui/studio/diffusion_bridge.h) shows the runtime's image lane; the
// Diffusion overlay panel (ui/studio/diffusion_panel.h) shows it. The runtime holds an image job
// while a shape job runs on the same device; a new shape generation cancels the old prompt's image
// and, when "image after each shape" is on, queues the new prompt's image behind the shape.
#pragma once

#include <QImage>
#include <QMainWindow>
#include <optional>
#include <QString>
#include <memory>
#include <vector>

#include "engine/mesh/export.h"
#include "engine/runtime/library.h"
#include "engine/runtime/provenance.h"
#include "ui/studio/export_dialog.h"
#include "ui/studio/generation_stats.h"
#include "engine/mesh/mesh.h"
#include "ui/studio/diffusion_bridge.h"
#include "ui/studio/diffusion_panel.h"
#include "ui/studio/engine_bridge.h"
#include "ui/studio/imgui_overlay.h"
#include "ui/studio/script_runner.h"
#include "ui/studio/texture_bridge.h"

class QAction;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QToolButton;

namespace tessera::studio {

class Gallery;
struct GalleryEntry;
class LibraryPanel;
class ReplayBar;
class ReplayController;
class ShapeController;
class ModelsDialog;
class PromptEdit;
class SettingsPanel;
class TokenStrip;
class Viewport;
class CandidateGrid;

struct LaunchOptions {
  QString model_dir;  // empty: the saved one, else the embedded default (runtime capabilities.h)
  QString prompt;
  bool generate = false;           // generate `prompt` once the model has loaded
  QString screenshot;              // PNG of the viewport (overlay included) when the job ends
  bool screenshot_window = false;  // ... of the whole window instead
  bool quit_when_done = false;     // exit after the scripted job (0: done, 1: failed)
  QString record_dir;              // a viewport frame per partial mesh (and the final one)
  QString export_path;             // write the final mesh (.obj/.glb/.fbx) when the job ends
  int resolution = 0;              // > 0: final resolution override
  int preview_resolution = 0;      // > 0: preview resolution override
  int preview_every = -1;          // >= 0: preview interval override
  int variations = 0;              // > 0: the Variations setting (candidates per Generate)
  int64_t seed = -1;               // >= 0: the seed, locked (sampling on)
  bool no_grid = false;            // hide grid and axes (plain background, for screenshot checks)
  QString diffusion_model;         // empty: <assets>/models/tessera-tiny/diffusion
  bool image = false;              // scripted: generate the concept image after the shape
  bool apply_texture = false;      // scripted: then project it onto the mesh (implies image)
  int image_steps = 0;             // > 0: denoising steps override
  uint64_t image_seed = 0;         // scripted runs lock the seed to this
  // Where both engines run (--device): cpu (default), cuda, or auto.
  runtime::DeviceChoice device = runtime::DeviceChoice::kCpu;
  // The shape model's weights (--weights): "auto", "f32", "bf16", "int8"; empty: the Settings'.
  QString weights;
  bool scripted() const { return generate || quit_when_done || !screenshot.isEmpty(); }
};

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(LaunchOptions options, QWidget* parent = nullptr);
  ~MainWindow() override;

  // Actions (also reachable from the UI; public for tests and scripting).
  void generate();  // submits the prompt with the current settings (replacing a running job)
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
  void cancel();
  void load_model(const QString& dir);
  // Shows a mesh file (OBJ / GLB / FBX); false with a message box (and status bar) on failure.
  bool open_mesh_file(const QString& path);
  // Writes the shown mesh; the error message is returned (and not shown) for scripted use.
  // Writes the viewport's mesh (format from the extension); max_faces > 0 decimates a copy first.
  Status export_mesh(const QString& path, const mesh::ExportOptions& options,
                     int64_t max_faces = 0);
  // Writes the viewport's mesh as an asset (export_dialog.h): budget, closing and LODs
  // (engine/mesh/asset.h), placement and axes, and, with the privacy switch on, the settings of
  // the shown shape when it was generated in this session. The message says what was written.
  Status export_asset(const ExportChoice& choice, QString* summary = nullptr);
  // Applies the prompt and settings a Tessera file carries to the prompt bar and the Settings
  // panel (the seed locked, so Generate makes that shape again). False, with the reason in the
  // status bar, when the file carries none or they are malformed.
  bool restore_settings_from(const QString& path);
  // File > Export (preset "": the last choice) and File > Export for > PRESET.
  void run_export_dialog(const QString& preset = QString());
  // Starts / stops saving a viewport frame per partial mesh into `dir` (empty: stop).
  void set_record_dir(const QString& dir);
  // Concept image of the prompt bar's text with the panel's settings (a new random seed unless the
  // seed is locked); replaces a running image job. Returns false (message in the panel and the
  // status bar) when no diffusion model is ready.
  bool generate_image();
  void cancel_image();
  // Projects the finished concept image onto the shown mesh (a runtime texture job: front view,
  // engine/mesh/texture.h) and, when it is done, shows the textured copy (shading switches to
  // textured); exports then carry the texture. What can be checked now (no final image, no mesh)
  // comes back as an error; a projection failure goes to the status bar.
  Status apply_image_as_texture();

  EngineBridge& engine() { return *engine_; }
  ShapeController& shape() { return *shape_; }
  // File > Models: the models by name (created on first use).
  ModelsDialog& models_dialog();
  DiffusionBridge& diffusion() { return *diffusion_; }
  TextureBridge& texture() { return *texture_; }
  ImageSettings& image_settings() { return image_settings_; }
  Viewport* viewport() const { return viewport_; }
  PromptEdit* prompt_edit() const { return prompt_; }
  QToolButton* examples_button() const { return examples_button_; }
  QPushButton* more_button() const { return more_button_; }
  CandidateGrid* candidate_grid() const { return candidates_; }
  SettingsPanel* settings_panel() const { return settings_; }
  Gallery* gallery() const;
  TokenStrip* token_strip() const { return token_strip_; }
  // What the overlay draws: the job's stats, or a replay's (the result's timings, its cursor).
  const GenerationStats& overlay_stats() const;
  LibraryPanel* library_panel() const { return library_panel_; }
  ReplayController& replay() { return *replay_; }
  ReplayBar* replay_bar() const { return replay_bar_; }
  // Replays the shown shape (a result of this session or the library's): false when it has no
  // tokens or no model is loaded.
  bool replay_shown();
  // The jobs a killed or crashed studio left unfinished, found at start (runtime::Library's
  // journal); run_interrupted() runs the first again with its settings.
  const std::vector<runtime::JournalJob>& interrupted() const { return interrupted_; }
  bool run_interrupted();
  // Settings > Library: keep results in `dir` from now on ("": the default folder); the library
  // there is opened and shown (TESSERA_LIBRARY, when set, still decides).
  void set_library_dir(const QString& dir);
  // The running texture job (0: none).
  uint64_t texture_job() const { return texture_->job(); }
  QString status_text() const;
  QString model_status_text() const;
  // Viewport frame statistics of the last finished job (frames drawn, largest gap in ms).
  int64_t last_job_frames() const { return last_job_frames_; }
  double last_job_max_frame_gap_ms() const { return last_job_max_gap_ms_; }
  int exit_code() const { return exit_code_; }
  // What a scripted --screenshot saves: the viewport, or the whole window (--screenshot-window).
  QImage screenshot_image();

 Q_SIGNALS:
  // Scripted mode finished (also emitted before quitting when quit_when_done).
  void scriptFinished(int exit_code);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  // Textured shading in the viewport and its View menu entry checked.
  void select_textured_shading();

  void build_ui();
  void build_menus();
  void load_settings();
  void save_settings();
  void show_status(const QString& text, bool error = false);
  // A QMessageBox::Icon message box, shown without blocking (open(), deleted on close).
  void show_message(int icon, const QString& title, const QString& text);
  void update_buttons();
  void on_model_loading(const QString& dir);
  void on_model_loaded(const QString& dir);
  void on_model_failed(const QString& dir, const QString& message);
  // Submits `job` through the shape controller (the text rule first: a refused prompt is an
  // error in the status bar and nothing starts).
  void start_shape_job(runtime::JobOptions job);
  // The shape controller's signals: a job started (grid, progress, image after the shape),
  // candidate 0 moved on (framing, status, recording), a finished result (the gallery).
  void on_shape_started(int variations, quint64 first_seed, const QStringList& notes);
  void on_shape_previewed(qint64 tokens, bool final);
  void on_shape_result(const QString& label, std::shared_ptr<const mesh::Mesh> mesh, int candidate,
                       bool generated);
  // The library (engine/runtime/library.h, main_window_library.cpp): opened at start (the gallery
  // restored from it), every generated candidate kept with its thumbnail and timings, and each
  // generation journalled while it runs, so that the next start can say what a kill interrupted.
  // Without it (an unwritable folder) the studio works and says results are not kept.
  void open_library();
  void keep_result(const QString& label, int candidate,
                   const std::shared_ptr<const mesh::Mesh>& mesh, const QImage& shot);
  void journal_started();
  // The concept image of the last job's prompt and a textured result, kept beside the results.
  void keep_concept_image();
  void keep_textured(const std::shared_ptr<const mesh::Mesh>& source,
                     const std::shared_ptr<const mesh::Mesh>& textured);
  void journal_ended();
  void report_interrupted();
  // Replays (ReplayController): of a library entry, of the shown shape; ended by a new job.
  void start_replay(std::vector<int32_t> tokens, std::shared_ptr<const mesh::Mesh> result,
                    const QString& timings_file, const QString& prompt);
  void end_replay();
  void on_replay_frame(qint64 k, std::shared_ptr<const mesh::Mesh> mesh);
  void on_job_finished(quint64 job, int state, const QString& message);
  void on_stats_changed();
  void on_diffusion_action(DiffusionAction action);
  void on_image_finished(quint64 job, int state, const QString& message);
  void refresh_diffusion_panel();
  void record_frame();
  void show_gallery_item(const GalleryEntry& entry);
  void on_textured(const std::shared_ptr<const mesh::Mesh>& source,
                   const std::shared_ptr<const mesh::Mesh>& textured,
                   const std::optional<mesh::ImageRect>& fitted);
  void on_device_changed(runtime::DeviceChoice device);
  void on_weights_changed(const QString& weights);
  // The overlay's switches and device line from the Settings panel and the loaded model.
  void sync_overlay_controls();
  void choose_model_dir();
  void show_about();

  LaunchOptions launch_;
  EngineBridge* engine_ = nullptr;
  ShapeController* shape_ = nullptr;  // the shape lane
  ModelsDialog* models_ = nullptr;    // File > Models, once opened
  QString library_status_;            // why results are not kept ("": they are)
  QString job_group_;                 // the running job's library group
  int64_t journal_job_ = 0;           // the running generation's journal entry (0: none)
  QString keep_failure_;              // why a result of the running job was not kept ("": all were)
  std::vector<int64_t> job_kept_;     // the library ids of the last job's results
  std::vector<runtime::JournalJob> interrupted_;
  ReplayController* replay_ = nullptr;
  ReplayBar* replay_bar_ = nullptr;
  GenerationStats replay_stats_;                     // what the overlay shows during a replay
  std::shared_ptr<const mesh::Mesh> replay_result_;  // the shown result (what a replay ends on)
  QString replay_timings_;                           // its timings.json ("": none)
  QAction* replay_action_ = nullptr;
  DiffusionBridge* diffusion_ = nullptr;
  TextureBridge* texture_ = nullptr;  // the texture lane
  ScriptRunner* script_ = nullptr;    // scripted mode (null when interactive)
  ImageSettings image_settings_;
  DiffusionPanelData panel_data_;
  Viewport* viewport_ = nullptr;
  TokenStrip* token_strip_ = nullptr;
  PromptEdit* prompt_ = nullptr;
  QPushButton* generate_button_ = nullptr;
  QPushButton* cancel_button_ = nullptr;
  QToolButton* examples_button_ = nullptr;  // the loaded model's example prompts
  QPushButton* more_button_ = nullptr;      // "More like this"
  CandidateGrid* candidates_ = nullptr;     // the variations of the current job
  std::vector<QAction*> remesh_actions_;
  SettingsPanel* settings_ = nullptr;
  QLineEdit* model_path_ = nullptr;
  QLabel* model_status_ = nullptr;
  LibraryPanel* library_panel_ = nullptr;
  QLineEdit* library_path_ = nullptr;  // Settings > Library
  QLabel* status_label_ = nullptr;
  QLabel* model_label_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QAction* record_action_ = nullptr;
  QAction* export_action_ = nullptr;

  OverlayControls overlay_controls_;
  bool mesh_framed_for_job_ = false;
  QString record_dir_;
  int record_frame_ = 0;
  int exit_code_ = 0;
  int64_t last_job_frames_ = 0;
  double last_job_max_gap_ms_ = 0;
};

}  // namespace tessera::studio
