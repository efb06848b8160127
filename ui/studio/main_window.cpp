#include "ui/studio/main_window.h"

#include <imgui.h>

#include <QActionGroup>
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
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
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
#include <QVBoxLayout>
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "engine/mesh/cleanup.h"
#include "engine/mesh/texture.h"
#include "ui/render/renderer.h"
#include "ui/studio/mesh_import.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/token_strip.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

namespace {

constexpr int kThumbnailSize = 96;
// The shape decoder's object cube (engine/mesh/mesh.h conventions), slightly shrunk: shapes rarely
// touch its corners, and a tighter frame shows them larger.
const mesh::Bounds kDecoderCube{{-0.8f, -0.8f, -0.8f}, {0.8f, 0.8f, 0.8f}};

QString one_line(const QString& text, int max_chars = 60) {
  QString s = text.simplified();
  return s.size() > max_chars ? s.left(max_chars - 1) + QChar(0x2026) : s;
}

}  // namespace

MainWindow::MainWindow(LaunchOptions options, QWidget* parent)
    : QMainWindow(parent), launch_(std::move(options)) {
  setWindowTitle(tr("Tessera Studio"));
  setObjectName(QStringLiteral("TesseraStudioMainWindow"));
  engine_ = new EngineBridge(launch_.assets_dir.toStdString(), this);
  engine_->set_device(launch_.device);
  build_ui();
  build_menus();
  connect(engine_, &EngineBridge::modelLoading, this, &MainWindow::on_model_loading);
  connect(engine_, &EngineBridge::modelLoaded, this, &MainWindow::on_model_loaded);
  connect(engine_, &EngineBridge::modelFailed, this, &MainWindow::on_model_failed);
  connect(engine_, &EngineBridge::partialMesh, this, &MainWindow::on_partial_mesh);
  connect(engine_, &EngineBridge::finalMesh, this, &MainWindow::on_final_mesh);
  connect(engine_, &EngineBridge::jobFinished, this, &MainWindow::on_job_finished);
  connect(engine_, &EngineBridge::statsChanged, this, &MainWindow::on_stats_changed);

  // Concept image: its own worker and model; the panel reads panel_data_ at every paint.
  diffusion_ = new DiffusionBridge(launch_.assets_dir.toStdString(), this);
  connect(diffusion_, &DiffusionBridge::modelStateChanged, this, [this] {
    refresh_diffusion_panel();
    advance_script_image();
  });
  connect(diffusion_, &DiffusionBridge::imageChanged, this, &MainWindow::refresh_diffusion_panel);
  connect(diffusion_, &DiffusionBridge::imageFinished, this, &MainWindow::on_image_finished);
  panel_data_.on_action = [this](DiffusionAction action) {
    // Called inside the viewport's paintGL: act after the frame.
    QTimer::singleShot(0, this, [this, action] { on_diffusion_action(action); });
  };
  viewport_->set_diffusion_panel(&panel_data_);
  if (launch_.scripted()) {
    // Reproducible scripted runs (the interactive ones load image settings with the others below):
    // a fixed seed, and an image only when asked for.
    image_settings_.auto_after_shape = launch_.image || launch_.apply_texture;
    image_settings_.lock_seed = true;
    image_settings_.seed = launch_.image_seed;
  }
  if (launch_.image_steps > 0) image_settings_.steps = launch_.image_steps;
  diffusion::DiffusionLoadOptions diffusion_options;
  diffusion_options.device = launch_.device;
  diffusion_->load_model(
      launch_.diffusion_model.isEmpty()
          ? QString::fromStdString(default_diffusion_model_path(launch_.assets_dir.toStdString()))
          : launch_.diffusion_model,
      diffusion_options);

  if (!launch_.scripted()) load_settings();
  if (launch_.resolution > 0) settings_->set_final_resolution(launch_.resolution);
  if (launch_.preview_resolution > 0) settings_->set_preview_resolution(launch_.preview_resolution);
  if (launch_.preview_every >= 0) settings_->set_preview_every(launch_.preview_every);
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
    dir = QString::fromStdString(default_model_dir(launch_.assets_dir.toStdString()));
    if (!QFileInfo(dir).isDir()) {
      model_path_->setText(dir);
      const QString message =
          tr("No model: the embedded tessera-tiny model is not installed (%1). Choose a model "
             "directory in Settings > Model.")
              .arg(dir);
      model_status_->setText(message);
      model_status_->setStyleSheet(QStringLiteral("color: #d05050;"));
      show_status(message, true);
      if (launch_.scripted()) {
        QTimer::singleShot(0, this, [this, message] { finish_script(1, message); });
      }
      update_buttons();
      return;
    }
  }
  load_model(dir);
  update_buttons();
}

MainWindow::~MainWindow() {
  // The viewport must not read the stats of a bridge being torn down.
  viewport_->set_stats(nullptr);
  viewport_->set_diffusion_panel(nullptr);
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
  auto* buttons = new QVBoxLayout;
  generate_button_ = new QPushButton(tr("Generate"), central);
  generate_button_->setToolTip(tr("Generate the prompt (Ctrl+Enter)"));
  cancel_button_ = new QPushButton(tr("Cancel"), central);
  cancel_button_->setToolTip(tr("Cancel the running generation (Esc)"));
  buttons->addWidget(generate_button_);
  buttons->addWidget(cancel_button_);
  prompt_row->addLayout(buttons);
  layout->addLayout(prompt_row);
  viewport_ = new Viewport(central);
  viewport_->set_stats(&engine_->stats());
  layout->addWidget(viewport_, 1);
  token_strip_ = new TokenStrip(central);
  layout->addWidget(token_strip_);
  setCentralWidget(central);
  connect(prompt_, &PromptEdit::generateRequested, this, &MainWindow::generate);
  connect(prompt_, &PromptEdit::cancelRequested, this, &MainWindow::cancel);
  connect(generate_button_, &QPushButton::clicked, this, &MainWindow::generate);
  connect(cancel_button_, &QPushButton::clicked, this, &MainWindow::cancel);
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
  model_path_->setPlaceholderText(tr("Model directory"));
  model_path_->setToolTip(
      tr("A Cube 3D compatible model directory (shape_gpt.safetensors, "
         "shape_tokenizer.safetensors, text_encoder/); Enter loads it"));
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
  auto* scroll = new QScrollArea(settings_dock);
  scroll->setWidget(settings_widget);
  scroll->setWidgetResizable(true);
  settings_dock->setWidget(scroll);
  addDockWidget(Qt::RightDockWidgetArea, settings_dock);

  // Gallery dock.
  auto* gallery_dock = new QDockWidget(tr("Gallery"), this);
  gallery_dock->setObjectName(QStringLiteral("GalleryDock"));
  gallery_ = new QListWidget(gallery_dock);
  gallery_->setViewMode(QListView::IconMode);
  gallery_->setIconSize(QSize(kThumbnailSize, kThumbnailSize));
  gallery_->setResizeMode(QListView::Adjust);
  gallery_->setMovement(QListView::Static);
  gallery_->setWordWrap(true);
  gallery_->setMinimumHeight(kThumbnailSize + 40);
  gallery_dock->setWidget(gallery_);
  addDockWidget(Qt::BottomDockWidgetArea, gallery_dock);
  connect(gallery_, &QListWidget::itemClicked, this, &MainWindow::show_gallery_item);
  connect(gallery_, &QListWidget::itemActivated, this, &MainWindow::show_gallery_item);

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

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open mesh..."));
  open->setShortcut(QKeySequence::Open);
  connect(open, &QAction::triggered, this, [this] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open mesh"), QString(), tr(kImportFilter));
    if (!path.isEmpty()) open_mesh_file(path);
  });
  export_action_ = file->addAction(tr("&Export..."));
  export_action_->setShortcut(QKeySequence(tr("Ctrl+E")));
  connect(export_action_, &QAction::triggered, this, &MainWindow::run_export_dialog);
  QAction* model = file->addAction(tr("Choose &model directory..."));
  connect(model, &QAction::triggered, this, &MainWindow::choose_model_dir);
  record_action_ = file->addAction(tr("&Record generation..."));
  record_action_->setCheckable(true);
  record_action_->setToolTip(tr("Save a viewport frame at every partial-mesh update"));
  connect(record_action_, &QAction::triggered, this, [this](bool on) {
    if (!on) {
      set_record_dir(QString());
      return;
    }
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Record frames into"));
    set_record_dir(dir);
  });
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"));
  quit->setShortcut(QKeySequence::Quit);
  connect(quit, &QAction::triggered, this, &QWidget::close);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  auto* shading = new QActionGroup(this);
  const std::pair<QString, render::ShadingMode> modes[] = {
      {tr("&Lit"), render::ShadingMode::kLit},
      {tr("&Normals"), render::ShadingMode::kNormals},
      {tr("&Matcap"), render::ShadingMode::kMatcap},
      {tr("&Textured"), render::ShadingMode::kTextured}};
  QMenu* shading_menu = view->addMenu(tr("&Shading"));
  for (const auto& [name, mode] : modes) {
    QAction* a = shading_menu->addAction(name);
    a->setCheckable(true);
    a->setChecked(viewport_->render_options().shading == mode);
    a->setObjectName(QStringLiteral("shading_%1").arg(render::shading_mode_name(mode)));
    shading->addAction(a);
    connect(a, &QAction::triggered, this,
            [this, m = mode] { viewport_->render_options().shading = m; });
  }
  auto add_toggle = [this, view](const QString& name, const QString& id, bool initial,
                                 std::function<void(bool)> apply) {
    QAction* a = view->addAction(name);
    a->setCheckable(true);
    a->setChecked(initial);
    a->setObjectName(id);
    connect(a, &QAction::toggled, this, std::move(apply));
    return a;
  };
  add_toggle(tr("&Wireframe overlay"), "view_wireframe", viewport_->render_options().wireframe,
             [this](bool on) { viewport_->render_options().wireframe = on; })
      ->setShortcut(QKeySequence(tr("W")));
  add_toggle(tr("&Grid and axes"), "view_grid", viewport_->render_options().grid, [this](bool on) {
    viewport_->render_options().grid = on;
    viewport_->render_options().axes = on;
  });
  add_toggle(tr("&Turntable"), "view_turntable", false, [this](bool on) {
    viewport_->set_turntable(on);
  })->setShortcut(QKeySequence(tr("T")));
  view->addAction(viewport_->frame_action());
  view->addSeparator();
  QMenu* panels = view->addMenu(tr("&Overlay panels"));
  QAction* overlay = panels->addAction(tr("Show &overlay"));
  overlay->setCheckable(true);
  overlay->setChecked(true);
  overlay->setObjectName(QStringLiteral("view_overlay"));
  connect(overlay, &QAction::toggled, this,
          [this](bool on) { viewport_->set_overlay_visible(on); });
  panels->addSeparator();
  const std::pair<QString, bool OverlayPanels::*> panel_list[] = {
      {tr("&Timing"), &OverlayPanels::timing},
      {tr("&Stages"), &OverlayPanels::stages},
      {tr("S&ystem"), &OverlayPanels::system},
      {tr("&Diffusion"), &OverlayPanels::diffusion}};
  for (const auto& [name, member] : panel_list) {
    QAction* a = panels->addAction(name);
    a->setCheckable(true);
    a->setChecked(viewport_->panels().*member);
    a->setObjectName(QStringLiteral("panel_%1").arg(QString(name).remove('&').toLower()));
    connect(a, &QAction::toggled, this,
            [this, m = member](bool on) { viewport_->panels().*m = on; });
  }
  // The shortcuts of the toggles above (W, T) only make sense while the viewport has focus.
  for (QAction* a : view->actions()) {
    if (a != viewport_->frame_action() && !a->shortcut().isEmpty()) {
      viewport_->addAction(a);
      a->setShortcutContext(Qt::WidgetShortcut);
    }
  }

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  connect(help->addAction(tr("&About Tessera Studio")), &QAction::triggered, this,
          &MainWindow::show_about);
}

void MainWindow::load_settings() {
  QSettings s;
  restoreGeometry(s.value(QStringLiteral("window/geometry")).toByteArray());
  restoreState(s.value(QStringLiteral("window/state")).toByteArray());
  prompt_->set_history(s.value(QStringLiteral("prompt/history")).toStringList());
  if (prompt_->toPlainText().isEmpty()) prompt_->setPlainText(s.value("prompt/last").toString());
  settings_->load(s);
  s.beginGroup(QStringLiteral("view"));
  auto& o = viewport_->render_options();
  if (auto mode =
          render::parse_shading_mode(s.value("shading", "lit").toString().toStdString().c_str());
      mode.ok()) {
    o.shading = *mode;
  }
  o.wireframe = s.value("wireframe", false).toBool();
  o.grid = o.axes = s.value("grid", true).toBool();
  auto& p = viewport_->panels();
  p.timing = s.value("panel_timing", true).toBool();
  p.stages = s.value("panel_stages", true).toBool();
  p.system = s.value("panel_system", true).toBool();
  p.diffusion = s.value("panel_diffusion", true).toBool();
  s.endGroup();
  s.beginGroup(QStringLiteral("image"));
  ImageSettings& im = image_settings_;
  im.steps = std::clamp(s.value("steps", im.steps).toInt(), 1, 200);
  im.guidance =
      std::clamp(s.value("guidance", static_cast<double>(im.guidance)).toFloat(), 1.0f, 30.0f);
  const QString sampler = s.value("sampler", diffusion::sampler_kind_name(im.sampler)).toString();
  for (auto kind : {diffusion::SamplerKind::kEuler, diffusion::SamplerKind::kEulerAncestral,
                    diffusion::SamplerKind::kDpmpp2m}) {
    if (sampler == QLatin1String(diffusion::sampler_kind_name(kind))) im.sampler = kind;
  }
  im.seed = s.value("seed", static_cast<qulonglong>(im.seed)).toULongLong();
  im.lock_seed = s.value("lock_seed", im.lock_seed).toBool();
  im.auto_after_shape = s.value("auto_after_shape", im.auto_after_shape).toBool();
  s.endGroup();
  // Reflect the loaded values in the View menu.
  for (QAction* a : findChildren<QAction*>()) {
    const QString id = a->objectName();
    if (id.startsWith("shading_"))
      a->setChecked(id == QStringLiteral("shading_%1").arg(render::shading_mode_name(o.shading)));
    if (id == "view_wireframe") a->setChecked(o.wireframe);
    if (id == "view_grid") a->setChecked(o.grid);
    if (id == "panel_timing") a->setChecked(p.timing);
    if (id == "panel_stages") a->setChecked(p.stages);
    if (id == "panel_system") a->setChecked(p.system);
    if (id == "panel_diffusion") a->setChecked(p.diffusion);
  }
}

void MainWindow::save_settings() {
  if (launch_.scripted()) return;
  QSettings s;
  s.setValue(QStringLiteral("window/geometry"), saveGeometry());
  s.setValue(QStringLiteral("window/state"), saveState());
  s.setValue(QStringLiteral("prompt/history"), prompt_->history());
  s.setValue(QStringLiteral("prompt/last"), prompt_->toPlainText());
  if (engine_ && engine_->has_model())
    s.setValue(QStringLiteral("model/dir"), engine_->model_dir());
  settings_->save(s);
  s.beginGroup(QStringLiteral("view"));
  const auto& o = viewport_->render_options();
  s.setValue("shading", render::shading_mode_name(o.shading));
  s.setValue("wireframe", o.wireframe);
  s.setValue("grid", o.grid);
  const auto& p = viewport_->panels();
  s.setValue("panel_timing", p.timing);
  s.setValue("panel_stages", p.stages);
  s.setValue("panel_system", p.system);
  s.setValue("panel_diffusion", p.diffusion);
  s.endGroup();
  s.beginGroup(QStringLiteral("image"));
  const ImageSettings& im = image_settings_;
  s.setValue("steps", im.steps);
  s.setValue("guidance", static_cast<double>(im.guidance));
  s.setValue("sampler", diffusion::sampler_kind_name(im.sampler));
  s.setValue("seed", static_cast<qulonglong>(im.seed));
  s.setValue("lock_seed", im.lock_seed);
  s.setValue("auto_after_shape", im.auto_after_shape);
  s.endGroup();
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
  export_action_->setEnabled(viewport_->mesh() != nullptr);
  refresh_diffusion_panel();
}

void MainWindow::choose_model_dir() {
  const QString dir =
      QFileDialog::getExistingDirectory(this, tr("Model directory"), model_path_->text());
  if (!dir.isEmpty()) load_model(dir);
}

void MainWindow::load_model(const QString& dir) {
  model_path_->setText(dir);
  engine_->load_model(dir);
}

void MainWindow::on_model_loading(const QString& dir) {
  model_status_->setStyleSheet(QString());
  model_status_->setText(tr("Loading %1 ...").arg(dir));
  show_status(tr("Loading model %1 ...").arg(dir));
}

void MainWindow::on_model_loaded(const QString& dir) {
  model_status_->setStyleSheet(QStringLiteral("color: #40a040;"));
  model_status_->setText(tr("Loaded: %1 tokens per shape, codebook %2, %3 bounding box; %4")
                             .arg(engine_->num_latents())
                             .arg(engine_->codebook_size())
                             .arg(engine_->model_uses_bbox() ? tr("with") : tr("no"))
                             .arg(engine_->backend_name()));
  model_label_->setText(tr("Model: %1").arg(QFileInfo(dir).fileName()));
  model_label_->setToolTip(dir);
  settings_->set_model_facts(engine_->num_latents(), engine_->codebook_size(),
                             engine_->model_uses_bbox());
  show_status(tr("Model ready. Type a prompt and press Ctrl+Enter."));
  update_buttons();
  if (launch_.generate && !script_started_) {
    script_started_ = true;
    // Start once the window is up and the viewport has drawn a few frames (GL set-up and the
    // first composition are slow on software GL and are not the generation's cost).
    auto* waiter = new QObject(this);
    connect(viewport_, &Viewport::frameRendered, waiter, [this, waiter] {
      if (viewport_->frames() < 3 || waiter->property("fired").toBool()) return;
      waiter->setProperty("fired", true);
      waiter->deleteLater();
      QTimer::singleShot(0, this, &MainWindow::generate);
    });
  } else if (launch_.scripted() && !launch_.generate && !script_started_) {
    script_started_ = true;
    QTimer::singleShot(100, this, [this] { finish_script(0, QString()); });
  }
}

void MainWindow::on_model_failed(const QString& dir, const QString& message) {
  model_status_->setStyleSheet(QStringLiteral("color: #d05050;"));
  model_status_->setText(tr("Not a usable model directory: %1").arg(message));
  show_status(tr("Model %1 failed to load: %2%3")
                  .arg(dir, one_line(message, 120),
                       engine_->has_model() ? tr(" (still using %1)").arg(engine_->model_dir())
                                            : QString()),
              true);
  update_buttons();
  if (launch_.scripted() && !script_started_) {
    script_started_ = true;
    finish_script(1, tr("model %1: %2").arg(dir, message));
  }
}

void MainWindow::generate() {
  if (!engine_->has_model()) {
    show_status(engine_->loading() ? tr("The model is still loading.")
                                   : tr("No model loaded: choose a model directory first."),
                true);
    return;
  }
  current_prompt_ = prompt_->prompt();
  prompt_->remember(current_prompt_);
  const runtime::JobOptions job = settings_->make_job(current_prompt_);
  engine_->submit(job);
  // The image waits for the shape (ui/studio/diffusion_bridge.h); the old prompt's image goes.
  diffusion_->set_shape_busy(true);
  if (image_settings_.auto_after_shape &&
      diffusion_->model_state() == DiffusionModelState::kReady) {
    generate_image();
  } else {
    diffusion_->cancel();
  }
  mesh_framed_for_job_ = false;
  record_frame_ = 0;
  viewport_->reset_frame_stats();
  progress_->setRange(0, static_cast<int>(engine_->stats().expected_tokens));
  progress_->setValue(0);
  progress_->setVisible(true);
  token_strip_->set_tokens({}, engine_->stats().expected_tokens);
  show_status(tr("Generating \"%1\" ...").arg(one_line(current_prompt_)));
  update_buttons();
}

void MainWindow::cancel() {
  // An image still waiting for this shape goes with it; a running one has its own Cancel.
  if (diffusion_->state().waiting_for_shape) diffusion_->cancel();
  if (!engine_->busy()) return;
  engine_->cancel();
  show_status(tr("Cancelling ..."));
}

void MainWindow::on_stats_changed() {
  const GenerationStats& s = engine_->stats();
  progress_->setValue(static_cast<int>(s.token_ms.size()));
  token_strip_->set_tokens(s.token_ids, s.expected_tokens);
}

void MainWindow::on_partial_mesh(std::shared_ptr<const mesh::Mesh> mesh, qint64 tokens) {
  // Generated shapes live in the decoder's cube: frame that once per job, so the camera stays
  // still while previews grow into the final shape.
  viewport_->set_mesh(std::move(mesh), false);
  if (!mesh_framed_for_job_) viewport_->frame_bounds(kDecoderCube);
  mesh_framed_for_job_ = true;
  show_status(
      tr("Generating \"%1\": preview from %2 tokens").arg(one_line(current_prompt_)).arg(tokens));
  record_frame();
  update_buttons();
}

void MainWindow::on_final_mesh(std::shared_ptr<const mesh::Mesh> mesh) {
  viewport_->set_mesh(mesh, false);
  if (!mesh_framed_for_job_) viewport_->frame_bounds(kDecoderCube);
  mesh_framed_for_job_ = true;
  record_frame();
  add_to_gallery(std::move(mesh));
  update_buttons();
}

void MainWindow::on_job_finished(quint64, int state, const QString& message) {
  diffusion_->set_shape_busy(engine_->busy());
  last_job_frames_ = viewport_->frames();
  last_job_max_gap_ms_ = viewport_->max_frame_gap_ms();
  progress_->setVisible(false);
  const GenerationStats& s = engine_->stats();
  const auto job_state = static_cast<JobState>(state);
  if (job_state == JobState::kDone) {
    show_status(tr("Done: \"%1\", %2 vertices, %3 triangles in %4 s (%5 tokens/s)")
                    .arg(one_line(current_prompt_))
                    .arg(s.final_vertices)
                    .arg(s.final_triangles)
                    .arg(s.total_ms / 1000.0, 0, 'f', 2)
                    .arg(s.tokens_per_second(), 0, 'f', 1));
  } else if (job_state == JobState::kCancelled) {
    show_status(tr("Cancelled (%1)").arg(message));
  } else {
    show_status(tr("Generation failed: %1").arg(one_line(message, 160)), true);
  }
  update_buttons();
  if (launch_.scripted() && script_started_ && !script_done_ && !engine_->busy()) {
    if (job_state == JobState::kDone && (launch_.image || launch_.apply_texture)) {
      shape_done_for_script_ = true;
      advance_script_image();
    } else {
      finish_script(job_state == JobState::kDone ? 0 : 1,
                    job_state == JobState::kDone ? QString() : message);
    }
  }
}

bool MainWindow::generate_image() {
  if (diffusion_->model_state() != DiffusionModelState::kReady) {
    show_status(tr("Concept image: %1").arg(one_line(diffusion_->model_message(), 160)), true);
    refresh_diffusion_panel();
    return false;
  }
  if (!image_settings_.lock_seed) image_settings_.seed = next_random_seed();
  image_settings_.steps = std::clamp(image_settings_.steps, 1, 200);
  diffusion_->submit(prompt_->prompt(), image_settings_);
  if (launch_.scripted()) image_submitted_for_script_ = true;
  refresh_diffusion_panel();
  return true;
}

void MainWindow::cancel_image() {
  diffusion_->cancel();
}

void MainWindow::on_diffusion_action(DiffusionAction action) {
  switch (action) {
    case DiffusionAction::kGenerate:
      generate_image();
      break;
    case DiffusionAction::kCancel:
      cancel_image();
      break;
    case DiffusionAction::kApplyTexture:
      if (Status st = apply_image_as_texture(); !st.ok()) {
        show_status(tr("Apply as texture failed: %1")
                        .arg(one_line(QString::fromStdString(st.message()), 160)),
                    true);
      }
      break;
  }
}

void MainWindow::on_image_finished(quint64, int state, const QString& message) {
  const ImageJobState& s = diffusion_->state();
  const auto job_state = static_cast<JobState>(state);
  if (job_state == JobState::kDone) {
    show_status(tr("Concept image done: %1 steps, %2 ms/step, %3 ms in all")
                    .arg(s.step_ms.size())
                    .arg(s.denoise_ms / std::max<size_t>(1, s.step_ms.size()), 0, 'f', 1)
                    .arg(s.total_ms, 0, 'f', 0));
  } else if (job_state == JobState::kFailed) {
    show_status(tr("Concept image failed: %1").arg(one_line(message, 160)), true);
  }
  refresh_diffusion_panel();
  advance_script_image();
}

void MainWindow::advance_script_image() {
  if (!launch_.scripted() || script_done_ || !shape_done_for_script_) return;
  switch (diffusion_->model_state()) {
    case DiffusionModelState::kLoading:
      return;  // modelStateChanged calls again
    case DiffusionModelState::kMissing:
    case DiffusionModelState::kFailed:
      finish_script(1, tr("concept image: %1").arg(diffusion_->model_message()));
      return;
    case DiffusionModelState::kReady:
      break;
  }
  if (!image_submitted_for_script_) {
    generate_image();
    return;
  }
  const ImageJobState& s = diffusion_->state();
  if (s.state == JobState::kRunning) return;  // on_image_finished calls again
  if (s.state != JobState::kDone) {
    finish_script(
        1, tr("concept image %1: %2").arg(QString::fromLatin1(job_state_name(s.state)), s.message));
    return;
  }
  if (launch_.apply_texture) {
    if (Status st = apply_image_as_texture(); !st.ok()) {
      finish_script(1, tr("apply texture: %1").arg(QString::fromStdString(st.message())));
      return;
    }
  }
  finish_script(0, QString());
}

void MainWindow::select_textured_shading() {
  viewport_->render_options().shading = render::ShadingMode::kTextured;
  for (QAction* a : findChildren<QAction*>()) {
    if (a->objectName() == QStringLiteral("shading_textured")) a->setChecked(true);
  }
}

Status MainWindow::apply_image_as_texture() {
  const ImageJobState& s = diffusion_->state();
  if (!s.image_final || s.image_rgb.empty()) {
    return invalid_argument("apply as texture: there is no finished concept image yet");
  }
  const auto shown = viewport_->mesh();
  if (!shown || shown->empty()) {
    return invalid_argument("apply as texture: there is no mesh to texture yet");
  }
  mesh::TextureImage image;
  image.width = s.image_width;
  image.height = s.image_height;
  image.rgb = s.image_rgb;
  mesh::ProjectionOptions options;
  // A concept image shows the object on a background, at whatever size the model drew it: the
  // object's own rectangle in the image is stretched onto the mesh (texture.h, ImageFit::kObject),
  // so its colours land on the mesh rather than the background's. An image without a distinct
  // background falls back to the frame fit with a small margin.
  options.fit = mesh::ImageFit::kObject;
  options.margin = 0.08f;
  std::optional<mesh::ImageRect> object;
  auto textured = std::make_shared<mesh::Mesh>(*shown);
  TESSERA_RETURN_IF_ERROR(mesh::project_texture_front(image, options, textured.get(), &object));
  viewport_->set_mesh(textured, false);
  select_textured_shading();
  // The gallery entry of this prompt now holds the textured mesh too.
  if (!results_.empty() && results_.back().mesh == shown) results_.back().mesh = textured;
  const QString fit =
      object ? tr("the image's object (%1x%2 px at %3,%4) fitted to the mesh")
                   .arg(object->width())
                   .arg(object->height())
                   .arg(object->x0)
                   .arg(object->y0)
             : tr("no distinct object in the image: the whole frame fitted to the mesh");
  show_status(tr("Applied the concept image as a texture: %1; %2 vertices after seam splits; "
                 "File > Export writes it with the mesh")
                  .arg(fit)
                  .arg(textured->vertex_count()));
  update_buttons();
  return Status();
}

void MainWindow::refresh_diffusion_panel() {
  if (diffusion_ == nullptr) return;
  const ImageJobState& s = diffusion_->state();
  panel_data_.model_state = diffusion_->model_state();
  panel_data_.model_message = diffusion_->model_message().toStdString();
  panel_data_.job = &s;
  panel_data_.settings = &image_settings_;
  panel_data_.can_generate = diffusion_->model_state() == DiffusionModelState::kReady;
  const auto mesh = viewport_->mesh();
  const bool have_mesh = mesh && !mesh->empty();
  panel_data_.can_apply = s.image_final && have_mesh && !engine_->busy();
  if (have_mesh && !mesh->texture.empty()) {
    panel_data_.apply_note = "textured: File > Export writes the texture with the mesh";
  } else if (s.image_final && !have_mesh) {
    panel_data_.apply_note = "generate a shape to apply the image to";
  } else if (s.image_final && engine_->busy()) {
    panel_data_.apply_note = "apply once the shape is finished";
  } else {
    panel_data_.apply_note.clear();
  }
}

void MainWindow::set_record_dir(const QString& dir) {
  record_dir_ = dir;
  if (!dir.isEmpty() && !QDir().mkpath(dir)) {
    show_status(tr("Cannot create the recording directory %1").arg(dir), true);
    record_dir_.clear();
  }
  if (record_action_) {
    const QSignalBlocker block(record_action_);
    record_action_->setChecked(!record_dir_.isEmpty());
  }
  if (engine_ != nullptr) engine_->set_emit_every_partial(!record_dir_.isEmpty());
  if (!record_dir_.isEmpty()) show_status(tr("Recording frames into %1").arg(record_dir_));
}

void MainWindow::record_frame() {
  if (record_dir_.isEmpty()) return;
  const QImage frame = viewport_->grabFramebuffer();
  const QString path =
      QDir(record_dir_)
          .filePath(QStringLiteral("frame_%1.png").arg(record_frame_++, 5, 10, QChar('0')));
  if (!frame.save(path)) {
    show_status(tr("Recording: cannot write %1; recording stopped").arg(path), true);
    set_record_dir(QString());
  }
}

void MainWindow::add_to_gallery(std::shared_ptr<const mesh::Mesh> mesh) {
  // Thumbnail: the viewport without the overlay, framed on this mesh.
  const bool overlay = viewport_->overlay_visible();
  viewport_->set_overlay_visible(false);
  const QImage shot = viewport_->grabFramebuffer();
  viewport_->set_overlay_visible(overlay);
  const int side = std::min(shot.width(), shot.height());
  const QImage square =
      shot.copy((shot.width() - side) / 2, (shot.height() - side) / 2, side, side)
          .scaled(kThumbnailSize, kThumbnailSize, Qt::KeepAspectRatio, Qt::SmoothTransformation);
  results_.push_back({current_prompt_, std::move(mesh)});
  auto* item = new QListWidgetItem(
      QIcon(QPixmap::fromImage(square)),
      one_line(current_prompt_.isEmpty() ? tr("(empty prompt)") : current_prompt_, 24), gallery_);
  item->setData(Qt::UserRole, static_cast<int>(results_.size() - 1));
  item->setToolTip(current_prompt_);
  gallery_->scrollToItem(item);
}

void MainWindow::show_gallery_item(QListWidgetItem* item) {
  if (item == nullptr) return;
  const int index = item->data(Qt::UserRole).toInt();
  if (index < 0 || index >= static_cast<int>(results_.size())) return;
  viewport_->set_mesh(results_[static_cast<size_t>(index)].mesh, true);
  show_status(tr("Showing \"%1\"").arg(one_line(results_[static_cast<size_t>(index)].prompt)));
  update_buttons();
}

bool MainWindow::open_mesh_file(const QString& path) {
  std::vector<std::string> warnings;
  auto imported = import_mesh_file(path.toStdString(), &warnings);
  if (!imported.ok()) {
    const QString message = QString::fromStdString(imported.status().message());
    show_status(tr("Cannot open %1").arg(message), true);
    if (!launch_.scripted()) show_message(QMessageBox::Warning, tr("Not a mesh"), message);
    return false;
  }
  auto mesh = std::make_shared<const mesh::Mesh>(std::move(imported).value());
  QString status = tr("Opened %1: %2 vertices, %3 triangles")
                       .arg(QFileInfo(path).fileName())
                       .arg(mesh->vertex_count())
                       .arg(mesh->triangle_count());
  const bool textured = !mesh->texture.empty();
  if (textured) {
    status += tr(", texture %1x%2").arg(mesh->texture.width).arg(mesh->texture.height);
  }
  // A texture problem does not stop the geometry from opening; say what was dropped.
  if (!warnings.empty())
    status += QStringLiteral(" (") + QString::fromStdString(warnings.front()) + QStringLiteral(")");
  show_status(status, !warnings.empty());
  viewport_->set_mesh(std::move(mesh), true);
  if (textured) {
    select_textured_shading();  // show what the file carries
  }
  update_buttons();
  return true;
}

Status MainWindow::export_mesh(const QString& path, const mesh::ExportOptions& options,
                               int64_t max_faces) {
  const auto mesh = viewport_->mesh();
  if (!mesh) return invalid_argument("there is no mesh to export yet");
  if (max_faces <= 0 || mesh->triangle_count() <= max_faces) {
    return mesh::write_mesh(*mesh, path.toStdString(), options);
  }
  // Decimate a copy: the viewport keeps the full mesh; normals are recomputed for the new faces.
  mesh::Mesh reduced = *mesh;
  TESSERA_RETURN_IF_ERROR(mesh::decimate(reduced, max_faces));
  mesh::compact_vertices(reduced);
  mesh::compute_vertex_normals(reduced);
  return mesh::write_mesh(reduced, path.toStdString(), options);
}

void MainWindow::run_export_dialog() {
  if (!viewport_->mesh()) {
    QMessageBox::information(this, tr("Export"), tr("There is no mesh to export yet."));
    return;
  }
  QDialog dialog(this);
  dialog.setWindowTitle(tr("Export mesh"));
  auto* form = new QFormLayout(&dialog);
  auto* path_row = new QHBoxLayout;
  auto* path = new QLineEdit(&dialog);
  QSettings s;
  path->setText(
      s.value(QStringLiteral("export/path"), QDir::home().filePath("tessera.obj")).toString());
  auto* browse = new QPushButton(tr("Browse..."), &dialog);
  path_row->addWidget(path, 1);
  path_row->addWidget(browse);
  form->addRow(tr("File"), path_row);
  auto* up = new QComboBox(&dialog);
  up->addItem(tr("Y up (glTF, Maya, Unity, Roblox)"), static_cast<int>(mesh::UpAxis::kY));
  up->addItem(tr("Z up (Blender, 3ds Max)"), static_cast<int>(mesh::UpAxis::kZ));
  up->setCurrentIndex(s.value(QStringLiteral("export/up_z"), false).toBool() ? 1 : 0);
  form->addRow(tr("Up axis"), up);
  auto* scale = new QDoubleSpinBox(&dialog);
  scale->setDecimals(4);
  scale->setRange(0.0001, 10000.0);
  scale->setValue(s.value(QStringLiteral("export/scale"), 1.0).toDouble());
  scale->setToolTip(tr("File units per model unit (the model spans about 2 units)"));
  form->addRow(tr("Scale"), scale);
  auto* max_faces = new QSpinBox(&dialog);
  max_faces->setRange(0, 100000000);
  max_faces->setSingleStep(1000);
  max_faces->setSpecialValueText(tr("keep all"));
  max_faces->setValue(s.value(QStringLiteral("export/max_faces"), 0).toInt());
  max_faces->setToolTip(
      tr("Decimate to at most this many triangles (quadric error); the viewport "
         "keeps the full mesh"));
  form->addRow(tr("Max faces"), max_faces);
  auto* box = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
  form->addRow(box);
  connect(box, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
  connect(box, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  connect(browse, &QPushButton::clicked, &dialog, [&] {
    const QString chosen = QFileDialog::getSaveFileName(
        &dialog, tr("Export mesh"), path->text(),
        tr("Wavefront OBJ (*.obj);;glTF binary (*.glb);;FBX binary (*.fbx)"));
    if (!chosen.isEmpty()) path->setText(chosen);
  });
  if (dialog.exec() != QDialog::Accepted) return;
  mesh::ExportOptions options;
  options.up_axis = static_cast<mesh::UpAxis>(up->currentData().toInt());
  options.scale = static_cast<float>(scale->value());
  const QString target = path->text().trimmed();
  if (Status st = export_mesh(target, options, max_faces->value()); !st.ok()) {
    const QString message = QString::fromStdString(st.message());
    show_status(tr("Export failed: %1").arg(one_line(message, 160)), true);
    show_message(QMessageBox::Critical, tr("Export failed"), message);
    return;
  }
  s.setValue(QStringLiteral("export/path"), target);
  s.setValue(QStringLiteral("export/up_z"), options.up_axis == mesh::UpAxis::kZ);
  s.setValue(QStringLiteral("export/scale"), scale->value());
  s.setValue(QStringLiteral("export/max_faces"), max_faces->value());
  show_status(tr("Exported %1").arg(target));
}

void MainWindow::show_about() {
  std::string gpu_why;
  const bool gpu = gpu_available(&gpu_why);
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
         "<tr><td>Assimp</td><td>%9</td></tr>"
         "</table>")
          .arg(QStringLiteral(TESSERA_VERSION), QStringLiteral(TESSERA_BUILD_TYPE),
               engine_->has_model() ? engine_->backend_name() : tr("(no model loaded)"),
               gpu ? tr("available") : tr("not used: %1").arg(QString::fromStdString(gpu_why)),
               engine_->has_model() ? engine_->model_dir() : tr("none"),
               viewport_->gl_description(), QString::fromLatin1(qVersion()),
               QStringLiteral(IMGUI_VERSION), QString::fromStdString(assimp_version())));
}

QImage MainWindow::screenshot_image() {
  if (launch_.screenshot_window) return grab().toImage();
  return viewport_->grabFramebuffer();
}

void MainWindow::finish_script(int code, const QString& message) {
  if (script_done_) return;
  script_done_ = true;
  if (!message.isEmpty()) std::fprintf(stderr, "tessera-studio: %s\n", qPrintable(message));
  if (!launch_.export_path.isEmpty() && code == 0) {
    if (Status st = export_mesh(launch_.export_path, {}); !st.ok()) {
      std::fprintf(stderr, "tessera-studio: export: %s\n", st.message().c_str());
      code = 1;
    }
  }
  if (!launch_.screenshot.isEmpty()) {
    const QImage shot = screenshot_image();
    if (shot.isNull() || !shot.save(launch_.screenshot)) {
      std::fprintf(stderr, "tessera-studio: cannot write the screenshot %s\n",
                   qPrintable(launch_.screenshot));
      code = 1;
    }
  }
  if (launch_.image || launch_.apply_texture) {
    const ImageJobState& img = diffusion_->state();
    const auto shown = viewport_->mesh();
    std::printf(
        "image %s: %zu steps, %.1f ms total, denoise %.1f ms, %lldx%lld, seed %llu; "
        "mesh uvs %zu, texture %lldx%lld\n",
        job_state_name(img.state), img.step_ms.size(), img.total_ms, img.denoise_ms,
        static_cast<long long>(img.image_final ? img.image_width : 0),
        static_cast<long long>(img.image_final ? img.image_height : 0),
        static_cast<unsigned long long>(img.seed), shown ? shown->uvs.size() / 2 : 0,
        static_cast<long long>(shown ? shown->texture.width : 0),
        static_cast<long long>(shown ? shown->texture.height : 0));
  }
  if (launch_.generate) {
    const GenerationStats& s = engine_->stats();
    std::printf(
        "job %s: %lld tokens, %lld vertices, %lld triangles, first preview %.0f ms, "
        "%lld viewport frames, max frame gap %.1f ms\n",
        job_state_name(s.state), static_cast<long long>(s.token_ms.size()),
        static_cast<long long>(s.final_vertices), static_cast<long long>(s.final_triangles),
        s.first_partial_ms, static_cast<long long>(last_job_frames_), last_job_max_gap_ms_);
    std::fflush(stdout);
  }
  exit_code_ = code;
  Q_EMIT scriptFinished(code);
  if (launch_.quit_when_done) {
    QTimer::singleShot(0, qApp, [code] { QCoreApplication::exit(code); });
  }
}

}  // namespace tessera::studio
