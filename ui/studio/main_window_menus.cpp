// MainWindow, part: the menus: File, View (shading, toggles, overlay panels), Mesh, Help. Their
// actions go to the controllers (ui/studio/main_window.h).
#include "ui/studio/main_window.h"

#include <QActionGroup>
#include <QFileDialog>
#include <QMenu>
#include <QMenuBar>
#include <functional>
#include <utility>

#include "engine/mesh/asset.h"
#include "engine/mesh/import.h"
#include "ui/render/renderer.h"
#include "ui/studio/generation_controller.h"
#include "ui/studio/import_export_controller.h"
#include "ui/studio/library_controller.h"
#include "ui/studio/model_controller.h"
#include "ui/studio/models_dialog.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open mesh..."));
  open->setShortcut(QKeySequence::Open);
  connect(open, &QAction::triggered, this, [this] {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open mesh"), QString(), QString::fromStdString(mesh::import_filter()));
    if (!path.isEmpty()) files_->open_mesh_file(path);
  });
  export_action_ = file->addAction(tr("&Export..."));
  export_action_->setShortcut(QKeySequence(tr("Ctrl+E")));
  connect(export_action_, &QAction::triggered, this, [this] { files_->run_export_dialog(); });
  // One entry per platform preset: the dialog opens with it chosen (and shows what it sets).
  QMenu* export_for = file->addMenu(tr("Export &for"));
  for (const mesh::AssetPreset& p : mesh::asset_presets()) {
    const QString name = QString::fromStdString(p.name);
    QAction* a =
        export_for->addAction(name.left(1).toUpper() + name.mid(1) + QStringLiteral("..."));
    a->setToolTip(QString::fromStdString(mesh::describe_preset(p)));
    a->setStatusTip(QString::fromStdString(mesh::describe_preset(p)));
    connect(a, &QAction::triggered, this, [this, name] { files_->run_export_dialog(name); });
  }
  export_for->setToolTipsVisible(true);
  QAction* models = file->addAction(tr("&Models..."));
  connect(models, &QAction::triggered, this, [this] { models_->models_dialog().show(); });
  QAction* model = file->addAction(tr("Choose &model directory..."));
  connect(model, &QAction::triggered, models_, &ModelController::choose_model_dir);
  record_action_ = file->addAction(tr("&Record generation..."));
  record_action_->setCheckable(true);
  record_action_->setToolTip(tr("Save a viewport frame at every partial-mesh update"));
  connect(record_action_, &QAction::triggered, this, [this](bool on) {
    if (!on) {
      generation_->set_record_dir(QString());
      return;
    }
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Record frames into"));
    generation_->set_record_dir(dir);
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

  // Mesh: the current shape (a chosen candidate too) again from its tokens at a finer lattice.
  QMenu* mesh_menu = menuBar()->addMenu(tr("&Mesh"));
  for (int resolution : {65, 129, 257}) {
    QAction* a = mesh_menu->addAction((tr("Re-mesh at %1").arg(resolution) + QChar(0x00b3)));
    a->setToolTip(tr("Extract the current shape again from its tokens at resolution %1 (finer "
                     "detail, more triangles; export and texture then act on it)")
                      .arg(resolution));
    connect(a, &QAction::triggered, this, [this, resolution] {
      if (Status st = generation_->remesh_current(resolution); !st.ok()) {
        show_status(QString::fromStdString(st.message()), true);
      }
    });
    remesh_actions_.push_back(a);
  }
  mesh_menu->addSeparator();
  replay_action_ = mesh_menu->addAction(tr("&Replay how it formed"));
  replay_action_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  replay_action_->setToolTip(
      tr("Watch the current shape form again, token by token (a timeline "
         "under the viewport)"));
  connect(replay_action_, &QAction::triggered, this, [this] {
    if (!library_->replay_shown())
      show_status(tr("Nothing to replay: the shown mesh has no shape tokens"), true);
  });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  connect(help->addAction(tr("&About Tessera Studio")), &QAction::triggered, this,
          &MainWindow::show_about);
}

}  // namespace tessera::studio
