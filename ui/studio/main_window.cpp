// MainWindow, part: The window: construction, layout, status bar, device switch, About. The other
// parts: main_window_*.cpp.
#include "ui/studio/main_window.h"

#include "ui/studio/candidate_grid.h"

#include <imgui.h>

#include <QActionGroup>
#include <QBuffer>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <variant>

#include "engine/mesh/cleanup.h"
#include "engine/mesh/texture.h"
#include "ui/render/renderer.h"
#include "ui/studio/export_dialog.h"
#include "ui/studio/gallery.h"
#include "ui/studio/library_panel.h"
#include "ui/studio/replay_bar.h"
#include "ui/studio/replay_controller.h"
#include "ui/studio/main_window_text.h"
#include "engine/mesh/import.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "engine/runtime/library.h"
#include "engine/runtime/models.h"
#include "ui/studio/models_dialog.h"
#include "ui/studio/shape_controller.h"
#include "ui/studio/token_strip.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

MainWindow::MainWindow(LaunchOptions options, QWidget* parent)
    : QMainWindow(parent), launch_(std::move(options)) {
  setWindowTitle(tr("Tessera Studio"));
  setObjectName(QStringLiteral("TesseraStudioMainWindow"));
  engine_ = new EngineBridge(this);
  engine_->set_device(launch_.device);
  build_ui();
  build_menus();
  settings_->set_capabilities(engine_->capabilities());
  settings_->set_device(launch_.device);
  connect(settings_, &SettingsPanel::deviceChanged, this, &MainWindow::on_device_changed);
  connect(settings_, &SettingsPanel::weightsChanged, this, &MainWindow::on_weights_changed);
  connect(settings_, &SettingsPanel::engineSwitchesChanged, this,
          &MainWindow::sync_overlay_controls);
  overlay_controls_.on_change = [this] {
    // Called inside the viewport's paintGL: act after the frame.
    QTimer::singleShot(0, this, [this] {
      settings_->set_kv_cache(overlay_controls_.kv_cache);
      settings_->set_graphs(overlay_controls_.graphs);
    });
  };
  viewport_->set_overlay_controls(&overlay_controls_);
  texture_ = new TextureBridge(*engine_, this);
  connect(texture_, &TextureBridge::textured, this, &MainWindow::on_textured);
  connect(texture_, &TextureBridge::failed, this, [this](const QString& message) {
    show_status(tr("Apply as texture failed: %1").arg(one_line(message, 160)), true);
  });
  connect(texture_, &TextureBridge::finished, this, &MainWindow::update_buttons);
  connect(engine_, &EngineBridge::modelLoading, this, &MainWindow::on_model_loading);
  connect(engine_, &EngineBridge::modelLoaded, this, &MainWindow::on_model_loaded);
  connect(engine_, &EngineBridge::modelFailed, this, &MainWindow::on_model_failed);
  // The shape lane's controller decides what a shape job's events mean; the window draws them.
  shape_ = new ShapeController(*engine_, this);
  connect(shape_, &ShapeController::started, this, &MainWindow::on_shape_started);
  connect(shape_, &ShapeController::showMesh, this, [this](std::shared_ptr<const mesh::Mesh> mesh) {
    viewport_->set_mesh(std::move(mesh), false);
  });
  connect(shape_, &ShapeController::previewed, this, &MainWindow::on_shape_previewed);
  connect(shape_, &ShapeController::candidateMesh, this,
          [this](int i, std::shared_ptr<const mesh::Mesh> mesh, bool final) {
            candidates_->set_mesh(i, std::move(mesh), final);
          });
  connect(shape_, &ShapeController::result, this, &MainWindow::on_shape_result);
  connect(shape_, &ShapeController::changed, this, &MainWindow::update_buttons);
  connect(engine_, &EngineBridge::jobFinished, this, &MainWindow::on_job_finished);
  connect(engine_, &EngineBridge::statsChanged, this, &MainWindow::on_stats_changed);

  // Concept image: its own worker and model; the panel reads panel_data_ at every paint.
  diffusion_ = new DiffusionBridge(*engine_, this);
  connect(diffusion_, &DiffusionBridge::modelStateChanged, this,
          &MainWindow::refresh_diffusion_panel);
  connect(diffusion_, &DiffusionBridge::imageChanged, this, &MainWindow::refresh_diffusion_panel);
  connect(diffusion_, &DiffusionBridge::imageFinished, this, &MainWindow::on_image_finished);
  panel_data_.on_action = [this](DiffusionAction action) {
    // Called inside the viewport's paintGL: act after the frame.
    QTimer::singleShot(0, this, [this, action] { on_diffusion_action(action); });
  };
  viewport_->set_diffusion_panel(&panel_data_);
  if (launch_.scripted()) {
    // After every connection above, so that its slots see the window's state updated.
    script_ = new ScriptRunner(*this, launch_);
    connect(script_, &ScriptRunner::finished, this, [this](int code) {
      exit_code_ = code;
      Q_EMIT scriptFinished(code);
    });
    // Reproducible scripted runs (the interactive ones load image settings with the others below):
    // a fixed seed, and an image only when asked for.
    image_settings_.auto_after_shape = launch_.image || launch_.apply_texture;
    image_settings_.lock_seed = true;
    image_settings_.seed = launch_.image_seed;
  }
  if (launch_.image_steps > 0) image_settings_.steps = launch_.image_steps;
  diffusion_->load_model(launch_.diffusion_model.isEmpty()
                             ? QString::fromStdString(runtime::default_diffusion_model_dir())
                             : launch_.diffusion_model,
                         launch_.device);

  if (!launch_.scripted()) load_settings();
  sync_overlay_controls();
  if (launch_.resolution > 0) settings_->set_final_resolution(launch_.resolution);
  if (launch_.preview_resolution > 0) settings_->set_preview_resolution(launch_.preview_resolution);
  if (launch_.preview_every >= 0) settings_->set_preview_every(launch_.preview_every);
  if (launch_.variations > 0) settings_->set_variations(launch_.variations);
  if (launch_.seed >= 0) {
    settings_->set_seed(static_cast<uint64_t>(launch_.seed), /*locked=*/true);
    settings_->set_sampling(true);
  }
  if (launch_.no_grid) {
    viewport_->render_options().grid = false;
    viewport_->render_options().axes = false;
  }
  if (!launch_.prompt.isEmpty()) prompt_->setPlainText(launch_.prompt);
  if (!launch_.record_dir.isEmpty()) set_record_dir(launch_.record_dir);

  // The model: --model, else the one saved last time, else the embedded default.
  QString dir = launch_.model_dir;
  if (dir.isEmpty() && !launch_.scripted()) {
    dir = QSettings().value(QStringLiteral("model/dir")).toString();
  }
  if (dir.isEmpty()) {
    dir = QString::fromStdString(runtime::default_shape_model_dir());
    if (!QFileInfo(dir).isDir()) {
      model_path_->setText(dir);
      const QString message =
          tr("No model: the embedded tessera-tiny model is not installed (%1). Choose a model "
             "directory in Settings > Model.")
              .arg(dir);
      model_status_->setText(message);
      model_status_->setStyleSheet(QStringLiteral("color: #d05050;"));
      show_status(message, true);
      if (script_ != nullptr) {
        QTimer::singleShot(0, script_, [this, message] { script_->fail(message); });
      }
      update_buttons();
      return;
    }
  }
  if (!launch_.weights.isEmpty()) settings_->set_weights(launch_.weights);
  engine_->set_weights(settings_->weights());
  load_model(dir);
  update_buttons();
}

QImage MainWindow::screenshot_image() {
  if (launch_.screenshot_window) return grab().toImage();
  return viewport_->grabFramebuffer();
}

MainWindow::~MainWindow() {
  // The viewport must not read the stats of a bridge being torn down.
  viewport_->set_stats(nullptr);
  viewport_->set_diffusion_panel(nullptr);
  viewport_->set_overlay_controls(nullptr);
  delete texture_;  // before the engine bridge it listens to
  texture_ = nullptr;
  delete diffusion_;  // cancels a running image job and joins its worker
  diffusion_ = nullptr;
  delete engine_;  // cancels a running job and joins the worker
  engine_ = nullptr;
}

void MainWindow::build_ui() {
  // Centre: prompt bar over the viewport over the token strip.
  auto* central = new QWidget(this);
  auto* layout = new QVBoxLayout(central);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* prompt_row = new QHBoxLayout;
  prompt_ = new PromptEdit(central);
  prompt_row->addWidget(prompt_, 1);
  // Two rows of two buttons: the prompt bar stays two lines tall, the viewport keeps the room.
  auto* buttons = new QGridLayout;
  buttons->setSpacing(4);
  generate_button_ = new QPushButton(tr("Generate"), central);
  generate_button_->setToolTip(tr("Generate the prompt (Ctrl+Enter)"));
  cancel_button_ = new QPushButton(tr("Cancel"), central);
  cancel_button_->setToolTip(tr("Cancel the running generation (Esc)"));
  examples_button_ = new QToolButton(central);
  examples_button_->setText(tr("Examples"));
  examples_button_->setPopupMode(QToolButton::InstantPopup);
  examples_button_->setToolButtonStyle(Qt::ToolButtonTextOnly);
  examples_button_->setMenu(new QMenu(examples_button_));
  examples_button_->setToolTip(tr("Prompts this model knows: pick one to generate it"));
  examples_button_->setEnabled(false);
  more_button_ = new QPushButton(tr("More like this"), central);
  more_button_->setToolTip(
      tr("The same prompt and settings with the next seeds: more candidates like these"));
  more_button_->setEnabled(false);
  buttons->addWidget(generate_button_, 0, 0);
  buttons->addWidget(cancel_button_, 0, 1);
  buttons->addWidget(examples_button_, 1, 0);
  buttons->addWidget(more_button_, 1, 1);
  examples_button_->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);
  prompt_row->addLayout(buttons);
  layout->addLayout(prompt_row);
  // The viewport over the candidate grid (shown for jobs of several variations); the viewport
  // keeps most of the room, the user can move the split.
  auto* split = new QSplitter(Qt::Vertical, central);
  viewport_ = new Viewport(split);
  viewport_->set_stats(&engine_->stats());
  candidates_ = new CandidateGrid(split);
  split->addWidget(viewport_);
  split->addWidget(candidates_);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  candidates_->setMaximumHeight(170);  // a row of tiles; the viewport shows the chosen one large
  split->setChildrenCollapsible(false);
  layout->addWidget(split, 1);
  replay_ = new ReplayController(*engine_, this);
  replay_bar_ = new ReplayBar(*replay_, central);
  layout->addWidget(replay_bar_);
  connect(replay_, &ReplayController::frame, this, &MainWindow::on_replay_frame);
  connect(replay_, &ReplayController::failed, this,
          [this](const QString& message) { show_status(tr("Replay: %1").arg(message), true); });
  connect(replay_bar_, &ReplayBar::closeRequested, this, &MainWindow::end_replay);
  token_strip_ = new TokenStrip(central);
  layout->addWidget(token_strip_);
  setCentralWidget(central);
  connect(prompt_, &PromptEdit::generateRequested, this, &MainWindow::generate);
  connect(prompt_, &PromptEdit::cancelRequested, this, &MainWindow::cancel);
  connect(generate_button_, &QPushButton::clicked, this, &MainWindow::generate);
  connect(cancel_button_, &QPushButton::clicked, this, &MainWindow::cancel);
  connect(more_button_, &QPushButton::clicked, this, &MainWindow::more_like_this);
  connect(candidates_, &CandidateGrid::candidateChosen, this,
          [this](int i) { choose_candidate(i); });
  connect(viewport_, &Viewport::meshDropped, this, &MainWindow::open_mesh_file);
  connect(viewport_, &Viewport::glError, this,
          [this](const QString& message) { show_status(tr("Viewport: %1").arg(message), true); });

  // Settings dock: model picker + generation settings.
  auto* settings_dock = new QDockWidget(tr("Settings"), this);
  settings_dock->setObjectName(QStringLiteral("SettingsDock"));
  auto* settings_widget = new QWidget(settings_dock);
  auto* sl = new QVBoxLayout(settings_widget);
  auto* model_box = new QGroupBox(tr("Model"), settings_widget);
  auto* ml = new QVBoxLayout(model_box);
  auto* model_row = new QHBoxLayout;
  model_path_ = new QLineEdit(model_box);
  model_path_->setPlaceholderText(tr("Model directory or name"));
  model_path_->setToolTip(
      tr("A Cube 3D compatible model directory (shape_gpt.safetensors, "
         "shape_tokenizer.safetensors, text_encoder/), or a model's name from File > Models "
         "(Roblox/cube3d-v0.5); Enter loads it"));
  auto* browse = new QPushButton(tr("Browse..."), model_box);
  model_row->addWidget(model_path_, 1);
  model_row->addWidget(browse);
  ml->addLayout(model_row);
  model_status_ = new QLabel(model_box);
  model_status_->setWordWrap(true);
  model_status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  ml->addWidget(model_status_);
  sl->addWidget(model_box);
  connect(browse, &QPushButton::clicked, this, &MainWindow::choose_model_dir);
  connect(model_path_, &QLineEdit::returnPressed, this,
          [this] { load_model(model_path_->text().trimmed()); });
  settings_ = new SettingsPanel(settings_widget);
  sl->addWidget(settings_);
  auto* library_box = new QGroupBox(tr("Library"), settings_widget);
  auto* library_row = new QHBoxLayout(library_box);
  library_path_ = new QLineEdit(library_box);
  library_path_->setObjectName(QStringLiteral("LibraryPath"));
  auto* library_browse = new QPushButton(tr("Browse..."), library_box);
  library_row->addWidget(library_path_, 1);
  library_row->addWidget(library_browse);
  sl->addWidget(library_box);
  connect(library_path_, &QLineEdit::editingFinished, this, [this] {
    if (library_path_->isModified()) set_library_dir(library_path_->text());
    library_path_->setModified(false);
  });
  connect(library_browse, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Library folder"),
                                                          library_path_->placeholderText());
    if (!dir.isEmpty()) set_library_dir(dir);
  });
  auto* scroll = new QScrollArea(settings_dock);
  scroll->setWidget(settings_widget);
  scroll->setWidgetResizable(true);
  settings_dock->setWidget(scroll);
  addDockWidget(Qt::RightDockWidgetArea, settings_dock);

  // Library dock: the gallery of kept results, searched and filtered.
  auto* library_dock = new QDockWidget(tr("Library"), this);
  library_dock->setObjectName(QStringLiteral("GalleryDock"));
  library_panel_ = new LibraryPanel(library_dock);
  library_dock->setWidget(library_panel_);
  addDockWidget(Qt::BottomDockWidgetArea, library_dock);
  connect(library_panel_, &LibraryPanel::chosen, this, &MainWindow::show_gallery_item);
  connect(library_panel_, &LibraryPanel::replayRequested, this, [this](const GalleryEntry&) {
    if (!replay_shown())
      show_status(tr("This result cannot be replayed: %1").arg(status_text()), true);
  });
  connect(library_panel_, &LibraryPanel::failed, this,
          [this](const QString& message) { show_status(message, true); });
  connect(library_panel_, &LibraryPanel::message, this,
          [this](const QString& message) { show_status(message); });
  open_library();

  // Status bar.
  status_label_ = new QLabel(this);
  model_label_ = new QLabel(this);
  progress_ = new QProgressBar(this);
  progress_->setMaximumWidth(200);
  progress_->setFormat(tr("%v / %m tokens"));
  progress_->setVisible(false);
  statusBar()->addWidget(status_label_, 1);
  statusBar()->addPermanentWidget(progress_);
  statusBar()->addPermanentWidget(model_label_);
  resize(1200, 780);
}

void MainWindow::closeEvent(QCloseEvent* event) {
  save_settings();
  // A running job is cancelled when the bridge goes (within one token step); nothing to ask.
  if (engine_ && engine_->busy()) engine_->cancel();
  event->accept();
}

void MainWindow::show_message(int icon, const QString& title, const QString& text) {
  // Window-modal but not blocking: the engine's events keep flowing while the box is up.
  auto* box =
      new QMessageBox(static_cast<QMessageBox::Icon>(icon), title, text, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

QString MainWindow::status_text() const {
  return status_label_->text();
}
QString MainWindow::model_status_text() const {
  return model_status_->text();
}

void MainWindow::show_status(const QString& text, bool error) {
  status_label_->setText(text);
  status_label_->setStyleSheet(error ? QStringLiteral("color: #d05050;") : QString());
}

void MainWindow::update_buttons() {
  const bool model = engine_->has_model();
  generate_button_->setEnabled(model);
  generate_button_->setToolTip(model ? tr("Generate the prompt (Ctrl+Enter)")
                                     : tr("Load a model first (Settings > Model)"));
  cancel_button_->setEnabled(engine_->busy());
  more_button_->setEnabled(model && shape_->has_last_job());
  export_action_->setEnabled(viewport_->mesh() != nullptr);
  for (QAction* a : remesh_actions_) a->setEnabled(model && !shape_->current_tokens().empty());
  if (replay_action_ != nullptr) {
    replay_action_->setEnabled(model && !engine_->busy() && !shape_->current_tokens().empty());
  }
  refresh_diffusion_panel();
}

void MainWindow::show_about() {
  const runtime::Capabilities& caps = engine_->capabilities();
  QMessageBox::about(
      this, tr("About Tessera Studio"),
      tr("<h3>Tessera Studio %1</h3>"
         "<p>Text prompt to 3D asset.</p>"
         "<table>"
         "<tr><td>Build</td><td>%2</td></tr>"
         "<tr><td>Backend</td><td>%3</td></tr>"
         "<tr><td>GPU</td><td>%4</td></tr>"
         "<tr><td>Model</td><td>%5</td></tr>"
         "<tr><td>Viewport</td><td>%6</td></tr>"
         "<tr><td>Qt</td><td>%7</td></tr>"
         "<tr><td>Dear ImGui</td><td>%8</td></tr>"
         "<tr><td>Decode graphs</td><td>%9</td></tr>"
         "</table>")
          .arg(
              QStringLiteral(TESSERA_VERSION), QStringLiteral(TESSERA_BUILD_TYPE),
              engine_->has_model() ? engine_->backend_name() : tr("(no model loaded)"),
              caps.cuda.usable ? QString::fromStdString(caps.cuda.name)
                               : tr("not usable: %1").arg(QString::fromStdString(caps.cuda.reason)),
              engine_->has_model() ? engine_->model_dir() : tr("none"), viewport_->gl_description(),
              QString::fromLatin1(qVersion()), QStringLiteral(IMGUI_VERSION),
              caps.decode_graphs_available ? tr("available (CUDA)")
                                           : QString::fromStdString(caps.decode_graphs_reason)));
}

void MainWindow::on_device_changed(runtime::DeviceChoice device) {
  // Both engines move: the shape model reloads (the current one stays in use until then) and the
  // image model too.
  engine_->set_device(device);
  if (!model_path_->text().trimmed().isEmpty()) load_model(model_path_->text().trimmed());
  if (diffusion_->model_state() == DiffusionModelState::kReady ||
      diffusion_->model_state() == DiffusionModelState::kFailed) {
    diffusion_->load_model(diffusion_->model_path(), device);
  }
  show_status(tr("Device: %1; reloading the models").arg(runtime::device_name(device)));
}

void MainWindow::on_weights_changed(const QString& weights) {
  engine_->set_weights(weights);
  if (!model_path_->text().trimmed().isEmpty()) load_model(model_path_->text().trimmed());
  show_status(tr("Weights: %1; reloading the shape model").arg(weights));
}

void MainWindow::sync_overlay_controls() {
  const runtime::Capabilities& caps = engine_->capabilities();
  overlay_controls_.kv_cache = settings_->kv_cache();
  overlay_controls_.graphs = settings_->graphs();
  overlay_controls_.graphs_available = engine_->has_model() && engine_->model_can_record_graphs();
  overlay_controls_.graphs_reason =
      engine_->has_model() && !engine_->model_can_record_graphs()
          ? "the model runs on " + engine_->backend_name().toStdString() +
                ": graphs are recorded by the CUDA backend" +
                (caps.cuda.usable ? std::string(" (choose the GPU in Settings)")
                                  : "; " + caps.decode_graphs_reason)
          : caps.decode_graphs_reason;
  overlay_controls_.on_gpu = engine_->model_on_gpu();
  overlay_controls_.device =
      engine_->has_model() ? engine_->backend_name().toStdString() : std::string("(no model)");
  overlay_controls_.model = engine_->has_model()
                                ? runtime::describe_model_path(engine_->model_dir().toStdString())
                                : std::string();
}

ModelsDialog& MainWindow::models_dialog() {
  if (models_ == nullptr) {
    models_ = new ModelsDialog(this);
    connect(models_, &ModelsDialog::useModel, this, [this](const QString& name) {
      load_model(name);
      models_->hide();
    });
    connect(models_, &ModelsDialog::downloadFinished, this,
            [this](const QString&, bool ok, const QString& message) { show_status(message, !ok); });
  }
  models_->refresh();
  return *models_;
}

}  // namespace tessera::studio
