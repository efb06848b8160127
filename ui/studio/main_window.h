// MainWindow: Tessera Studio's window. It composes the lanes' controllers and the panels, lays
// them out and wires them; it decides nothing about jobs, files or the library. The prompt bar over
// the viewport (ImGui overlay), candidate grid, replay bar and token strip; Settings and Library
// docks, menus (main_window_menus.cpp), a status bar saying what the controllers' status() say;
// QSettings for interactive runs (main_window_settings.cpp).
//
// Controllers, one per lane, each reaching the engine only through EngineBridge (the one
// runtime::Session; nothing blocks on it): ModelController (models, device, weights, overlay
// switches), GenerationController (prompt to shape jobs, with ShapeController), ImageController
// (concept image, texture), LibraryController (kept results, journal, replays) and
// ImportExportController (open, export, restored settings). Scripted mode (launch_options.h) is
// ScriptRunner's, which drives the controllers, not the window.
#pragma once

#include <QImage>
#include <QMainWindow>
#include <vector>

#include "ui/studio/launch_options.h"

class QAction;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QToolButton;

namespace tessera::studio {

class CandidateGrid;
class EngineBridge;
class Gallery;
class GenerationController;
class ImageController;
class ImportExportController;
class LibraryController;
class LibraryPanel;
class ModelController;
class PromptEdit;
class ReplayBar;
class ScriptRunner;
class SettingsPanel;
class TokenStrip;
class Viewport;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(LaunchOptions options, QWidget* parent = nullptr);
  ~MainWindow() override;

  // The controllers (tests and scripting act through them).
  EngineBridge& engine() { return *engine_; }
  ModelController& models() { return *models_; }
  GenerationController& generation() { return *generation_; }
  ImageController& image() { return *image_; }
  LibraryController& library() { return *library_; }
  ImportExportController& files() { return *files_; }
  Viewport* viewport() const { return viewport_; }
  PromptEdit* prompt_edit() const { return prompt_; }
  QToolButton* examples_button() const { return examples_button_; }
  QPushButton* more_button() const { return more_button_; }
  CandidateGrid* candidate_grid() const { return candidates_; }
  SettingsPanel* settings_panel() const { return settings_; }
  LibraryPanel* library_panel() const { return library_panel_; }
  Gallery* gallery() const;
  ReplayBar* replay_bar() const { return replay_bar_; }
  TokenStrip* token_strip() const { return token_strip_; }
  QString status_text() const;
  QString model_status_text() const;
  int exit_code() const { return exit_code_; }
  // What a scripted --screenshot saves: the viewport, or the whole window (--screenshot-window).
  QImage screenshot_image();

 Q_SIGNALS:
  // Scripted mode finished (also emitted before quitting when quit_when_done).
  void scriptFinished(int exit_code);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void build_ui();
  void build_menus();
  void make_controllers();
  void apply_launch_options();
  void load_settings();
  void save_settings();
  void show_status(const QString& text, bool error = false);
  void update_buttons();
  void select_textured_shading();
  void show_about();

  LaunchOptions launch_;
  EngineBridge* engine_ = nullptr;
  ModelController* models_ = nullptr;
  GenerationController* generation_ = nullptr;
  ImageController* image_ = nullptr;
  LibraryController* library_ = nullptr;
  ImportExportController* files_ = nullptr;
  ScriptRunner* script_ = nullptr;  // scripted mode (null when interactive)
  Viewport* viewport_ = nullptr;
  TokenStrip* token_strip_ = nullptr;
  PromptEdit* prompt_ = nullptr;
  QPushButton *generate_button_ = nullptr, *cancel_button_ = nullptr, *more_button_ = nullptr;
  QToolButton* examples_button_ = nullptr;
  CandidateGrid* candidates_ = nullptr;
  ReplayBar* replay_bar_ = nullptr;
  SettingsPanel* settings_ = nullptr;
  QLineEdit *model_path_ = nullptr, *library_path_ = nullptr;
  QLabel *model_status_ = nullptr, *status_label_ = nullptr, *model_label_ = nullptr;
  LibraryPanel* library_panel_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QAction *record_action_ = nullptr, *export_action_ = nullptr, *replay_action_ = nullptr;
  std::vector<QAction*> remesh_actions_;
  int exit_code_ = 0;
};

}  // namespace tessera::studio
