// MainWindow, part: Files: import, export, frame recording, the gallery. (ui/studio/main_window.h).
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
#include <optional>
#include <variant>

#include "engine/mesh/cleanup.h"
#include "engine/mesh/texture.h"
#include "ui/render/renderer.h"
#include "ui/studio/export_dialog.h"
#include "ui/studio/gallery.h"
#include "ui/studio/main_window_text.h"
#include "engine/mesh/import.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/token_strip.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {


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
  gallery_->add(current_prompt_, std::move(mesh), shot);
}

void MainWindow::add_to_gallery(const QString& label, std::shared_ptr<const mesh::Mesh> mesh,
                                const QImage& shot) {
  gallery_->add(label, std::move(mesh), shot);
}

void MainWindow::show_gallery_item(const QString& prompt, std::shared_ptr<const mesh::Mesh> mesh) {
  current_tokens_.clear();  // the gallery keeps meshes, not tokens: nothing to re-mesh
  viewport_->set_mesh(std::move(mesh), true);
  show_status(tr("Showing \"%1\"").arg(one_line(prompt)));
  update_buttons();
}

bool MainWindow::open_mesh_file(const QString& path) {
  std::vector<std::string> warnings;
  auto imported = mesh::import_mesh_file(path.toStdString(), &warnings);
  if (!imported.ok()) {
    const QString message = QString::fromStdString(imported.status().message());
    show_status(tr("Cannot open %1").arg(message), true);
    if (!launch_.scripted()) show_message(QMessageBox::Warning, tr("Not a mesh"), message);
    return false;
  }
  current_tokens_.clear();  // a file has no shape tokens
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
  // A reduced copy (the same decimation step as the engine's clean-up): the viewport keeps the
  // full mesh.
  mesh::Mesh reduced = *mesh;
  TESSERA_RETURN_IF_ERROR(mesh::reduce_triangles(reduced, max_faces));
  return mesh::write_mesh(reduced, path.toStdString(), options);
}

void MainWindow::run_export_dialog() {
  if (!viewport_->mesh()) {
    QMessageBox::information(this, tr("Export"), tr("There is no mesh to export yet."));
    return;
  }
  const std::optional<ExportChoice> choice = ask_export_options(this);
  if (!choice) return;
  const QString target = choice->path;
  if (Status st = export_mesh(target, choice->options, choice->max_faces); !st.ok()) {
    const QString message = QString::fromStdString(st.message());
    show_status(tr("Export failed: %1").arg(one_line(message, 160)), true);
    show_message(QMessageBox::Critical, tr("Export failed"), message);
    return;
  }
  remember_export_choice(*choice);
  show_status(tr("Exported %1").arg(target));
}

}  // namespace tessera::studio
