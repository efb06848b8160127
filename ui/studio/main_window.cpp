// MainWindow, part: construction, layout, the controllers and their wires, the status bar, About.
// The other parts: main_window_menus.cpp, main_window_settings.cpp.
#include "ui/studio/main_window.h"

#include <imgui.h>

#include <QCloseEvent>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QSignalBlocker>
#include <QSplitter>
#include <QStatusBar>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include "engine/runtime/models.h"
#include "ui/render/renderer.h"
#include "ui/studio/candidate_grid.h"
#include "ui/studio/engine_bridge.h"
#include "ui/studio/gallery.h"
#include "ui/studio/generation_controller.h"
#include "ui/studio/image_controller.h"
#include "ui/studio/import_export_controller.h"
#include "ui/studio/library_controller.h"
#include "ui/studio/library_panel.h"
#include "ui/studio/model_controller.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/replay_bar.h"
#include "ui/studio/replay_controller.h"
#include "ui/studio/script_runner.h"
#include "ui/studio/settings_panel.h"
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
  settings_->set_capabilities(engine_->capabilities());
  settings_->set_device(launch_.device);
  make_controllers();
  build_menus();
  apply_launch_options();
}

MainWindow::~MainWindow() {
  delete script_;  // it reads the controllers below
  script_ = nullptr;
  // The viewport must not read the stats or the switches of parts being torn down.
  viewport_->set_stats(nullptr);
  viewport_->set_overlay_controls(nullptr);
  delete image_;  // its bridges go before the engine bridge they listen to
  image_ = nullptr;
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
  layout->addWidget(split, 1);  // the replay bar goes under it (make_controllers)
  token_strip_ = new TokenStrip(central);
  layout->addWidget(token_strip_);
  setCentralWidget(central);
  connect(prompt_, &PromptEdit::generateRequested, this, [this] { generation_->generate(); });
  connect(prompt_, &PromptEdit::cancelRequested, this, [this] { generation_->cancel(); });
  connect(generate_button_, &QPushButton::clicked, this, [this] { generation_->generate(); });
  connect(cancel_button_, &QPushButton::clicked, this, [this] { generation_->cancel(); });
  connect(more_button_, &QPushButton::clicked, this, [this] { generation_->more_like_this(); });
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
  // The panels' requests go to the controllers (made after the panels, before any request).
  connect(browse, &QPushButton::clicked, this, [this] { models_->choose_model_dir(); });
  connect(model_path_, &QLineEdit::returnPressed, this,
          [this] { models_->load_model(model_path_->text().trimmed()); });
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
    if (library_path_->isModified()) library_->set_library_dir(library_path_->text());
    library_path_->setModified(false);
  });
  connect(library_browse, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Library folder"),
                                                          library_path_->placeholderText());
    if (!dir.isEmpty()) library_->set_library_dir(dir);
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
  connect(library_panel_, &LibraryPanel::replayRequested, this, [this](const GalleryEntry&) {
    if (!library_->replay_shown())
      show_status(tr("This result cannot be replayed: %1").arg(status_text()), true);
  });

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

void MainWindow::make_controllers() {
  // Each controller makes its own connections to the engine here, in this order, and the script
  // runner last, so that its slots see every controller's state updated.
  image_ = new ImageController(*engine_, *prompt_, *viewport_, this);
  models_ = new ModelController(*engine_, image_->diffusion(),
                                {model_path_, model_status_, model_label_, settings_, this}, this);
  generation_ = new GenerationController(
      *engine_,
      {prompt_, settings_, candidates_, viewport_, token_strip_, progress_, examples_button_},
      this);
  library_ = new LibraryController(
      *engine_, *generation_,
      {library_panel_, library_path_, viewport_, token_strip_, prompt_, settings_},
      launch_.scripted(), this);
  files_ =
      new ImportExportController(*engine_, generation_->shape(),
                                 {viewport_, prompt_, settings_, this}, launch_.scripted(), this);
  replay_bar_ = new ReplayBar(library_->replay(), centralWidget());
  static_cast<QVBoxLayout*>(centralWidget()->layout())->insertWidget(2, replay_bar_);
  connect(replay_bar_, &ReplayBar::closeRequested, library_, &LibraryController::end_replay);

  // What they say goes to the status bar; what they change, to the buttons.
  const auto status = [this](const QString& text, bool error) { show_status(text, error); };
  connect(image_, &ImageController::status, this, status);
  connect(models_, &ModelController::status, this, status);
  connect(generation_, &GenerationController::status, this, status);
  connect(library_, &LibraryController::status, this, status);
  connect(files_, &ImportExportController::status, this, status);
  connect(image_, &ImageController::changed, this, &MainWindow::update_buttons);
  connect(models_, &ModelController::changed, this, &MainWindow::update_buttons);
  connect(generation_, &GenerationController::changed, this, &MainWindow::update_buttons);
  connect(library_, &LibraryController::changed, this, &MainWindow::update_buttons);
  connect(files_, &ImportExportController::changed, this, &MainWindow::update_buttons);

  // Models: the Settings panel's engine choices, the overlay's switches, a loaded model.
  connect(settings_, &SettingsPanel::deviceChanged, models_, &ModelController::set_device);
  connect(settings_, &SettingsPanel::weightsChanged, models_, &ModelController::set_weights);
  connect(settings_, &SettingsPanel::engineSwitchesChanged, models_,
          &ModelController::sync_overlay_controls);
  viewport_->set_overlay_controls(&models_->overlay_controls());
  connect(models_, &ModelController::loaded, this, [this](const QString& dir) {
    // The model's example prompts: a newcomer sees what it can make, one click generates one.
    generation_->set_examples(engine_->example_prompts());
    QString ready = models_->ready_text(dir);
    const QString& library_status = library_->library_status();
    if (!library_status.isEmpty()) ready += QStringLiteral(" ") + library_status;
    show_status(ready, !library_status.isEmpty());
    update_buttons();
  });

  // A shape job: a replay ends and the library journals it, the image lane follows it; its
  // results are kept; its end closes the journal and is said with what could not be kept.
  connect(generation_, &GenerationController::started, library_, &LibraryController::job_started);
  connect(generation_, &GenerationController::started, image_,
          &ImageController::follow_shape_started);
  connect(generation_, &GenerationController::cancelling, image_,
          &ImageController::follow_shape_cancelled);
  connect(generation_, &GenerationController::done, image_, &ImageController::follow_shape_done);
  connect(generation_, &GenerationController::result, library_, &LibraryController::keep_result);
  connect(generation_, &GenerationController::ended, library_, &LibraryController::job_ended);
  connect(generation_, &GenerationController::done, this, [this](QString summary) {
    // A result that could not be kept (a full disk...) stays said after the job.
    const QString& unkept = library_->keep_failure();
    if (!unkept.isEmpty()) summary += QStringLiteral(". ") + unkept;
    show_status(summary, !unkept.isEmpty());
  });
  connect(generation_, &GenerationController::recordingChanged, this, [this](bool on) {
    if (record_action_ == nullptr) return;
    const QSignalBlocker block(record_action_);
    record_action_->setChecked(on);
  });

  // The image lane: a finished image and a textured mesh are kept beside the job's results.
  // The image settings that made it (start from, strength, mask, LoRAs) are saved with it, so a
  // killed studio comes back with them.
  connect(image_, &ImageController::imageDone, this, [this] {
    library_->keep_concept_image(image_->diffusion().state());
    save_settings();
  });
  connect(image_, &ImageController::textured, this,
          [this](const std::shared_ptr<const mesh::Mesh>& source,
                 const std::shared_ptr<const mesh::Mesh>& textured) {
            select_textured_shading();
            library_->keep_textured(source, textured);
          });
  connect(files_, &ImportExportController::texturedOpened, this,
          &MainWindow::select_textured_shading);
  library_->open();

  if (launch_.scripted()) {
    script_ = new ScriptRunner(
        {engine_, generation_, image_, files_, viewport_, [this] { return screenshot_image(); }},
        launch_, this);
    connect(script_, &ScriptRunner::finished, this, [this](int code) {
      exit_code_ = code;
      Q_EMIT scriptFinished(code);
    });
  }
}

void MainWindow::apply_launch_options() {
  ImageSettings& image_settings = image_->settings();
  if (launch_.scripted()) {
    // Reproducible scripted runs (the interactive ones load image settings with the others below):
    // a fixed seed, and an image only when asked for.
    image_settings.auto_after_shape = launch_.image || launch_.apply_texture;
    image_settings.lock_seed = true;
    image_settings.seed = launch_.image_seed;
  }
  if (launch_.image_steps > 0) image_settings.steps = launch_.image_steps;
  if (launch_.image_from_viewport) {
    image_settings.init_source = ImageSettings::InitSource::kViewport;
  } else if (!launch_.image_init.isEmpty()) {
    image_settings.init_source = ImageSettings::InitSource::kFile;
    image_settings.init_file = launch_.image_init.toStdString();
  }
  if (launch_.image_strength > 0) image_settings.strength = launch_.image_strength;
  if (!launch_.image_mask.isEmpty()) image_settings.mask_file = launch_.image_mask.toStdString();
  if (launch_.image_control_depth) {
    image_settings.control_source = ImageSettings::ControlSource::kViewportDepth;
  } else if (!launch_.image_control.isEmpty()) {
    image_settings.control_source = ImageSettings::ControlSource::kFile;
    image_settings.control_file = launch_.image_control.toStdString();
  }
  if (!launch_.image_control_model.isEmpty()) {
    image_settings.control_model = launch_.image_control_model.toStdString();
  }
  if (launch_.image_control_scale >= 0) {
    image_settings.control_scale = launch_.image_control_scale;
  }
  image_->diffusion().load_model(
      launch_.diffusion_model.isEmpty()
          ? QString::fromStdString(runtime::default_diffusion_model_dir())
          : launch_.diffusion_model,
      launch_.device);

  if (!launch_.scripted()) load_settings();
  models_->sync_overlay_controls();
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
  if (!launch_.record_dir.isEmpty()) generation_->set_record_dir(launch_.record_dir);

  // The model: --model, else the one saved last time, else the embedded default.
  QString dir = launch_.model_dir;
  if (dir.isEmpty() && !launch_.scripted()) {
    dir = QSettings().value(QStringLiteral("model/dir")).toString();
  }
  if (dir.isEmpty()) {
    dir = QString::fromStdString(runtime::default_shape_model_dir());
    if (!QFileInfo(dir).isDir()) {
      const QString message =
          tr("No model: the embedded tessera-tiny model is not installed (%1). Choose a model "
             "directory in Settings > Model.")
              .arg(dir);
      models_->report_missing(dir, message);
      if (script_ != nullptr) {
        QTimer::singleShot(0, script_, [this, message] { script_->fail(message); });
      }
      update_buttons();
      return;
    }
  }
  if (!launch_.weights.isEmpty()) settings_->set_weights(launch_.weights);
  engine_->set_weights(settings_->weights());
  models_->load_model(dir);
  update_buttons();
}

QImage MainWindow::screenshot_image() {
  if (launch_.screenshot_window) return grab().toImage();
  return viewport_->grabFramebuffer();
}

Gallery* MainWindow::gallery() const {
  return library_panel_->gallery();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  save_settings();
  // A running job is cancelled when the bridge goes (within one token step); nothing to ask.
  if (engine_ && engine_->busy()) engine_->cancel();
  event->accept();
}

QString MainWindow::status_text() const {
  return status_label_->text();
}

QString MainWindow::model_status_text() const {
  return models_->state_text();
}

void MainWindow::show_status(const QString& text, bool error) {
  status_label_->setText(text);
  status_label_->setStyleSheet(error ? QStringLiteral("color: #d05050;") : QString());
}

void MainWindow::update_buttons() {
  // Controllers say "changed" from the start (and while the window is torn down): only once all
  // of them and the menus are there.
  if (image_ == nullptr || files_ == nullptr || export_action_ == nullptr) return;
  const bool model = engine_->has_model();
  generate_button_->setEnabled(model);
  generate_button_->setToolTip(model ? tr("Generate the prompt (Ctrl+Enter)")
                                     : tr("Load a model first (Settings > Model)"));
  cancel_button_->setEnabled(engine_->busy());
  const ShapeController& shape = generation_->shape();
  more_button_->setEnabled(model && shape.has_last_job());
  export_action_->setEnabled(viewport_->mesh() != nullptr);
  for (QAction* a : remesh_actions_) a->setEnabled(model && !shape.current_tokens().empty());
  replay_action_->setEnabled(model && !engine_->busy() && !shape.current_tokens().empty());
  image_->refresh_panel();
}

// Textured shading in the viewport and its View menu entry checked.
void MainWindow::select_textured_shading() {
  viewport_->render_options().shading = render::ShadingMode::kTextured;
  for (QAction* a : findChildren<QAction*>()) {
    if (a->objectName() == QStringLiteral("shading_textured")) a->setChecked(true);
  }
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

}  // namespace tessera::studio
