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
#include <QEventLoop>
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
#include <thread>
#include <variant>

#include "engine/mesh/cleanup.h"
#include "engine/mesh/texture.h"
#include "ui/render/renderer.h"
#include "ui/studio/export_dialog.h"
#include "ui/studio/gallery.h"
#include "ui/studio/main_window_text.h"
#include "engine/mesh/import.h"
#include "engine/mesh/asset.h"
#include "engine/mesh/metadata.h"
#include "engine/runtime/export_asset.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/shape_controller.h"
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

bool MainWindow::open_mesh_file(const QString& path) {
  // A file read through Assimp runs in a child process that may take seconds (a hostile one up to
  // its time limit): the read runs on a thread while the window keeps painting; input waits.
  show_status(tr("Opening %1...").arg(QFileInfo(path).fileName()));
  std::vector<std::string> warnings;
  std::optional<Expected<mesh::Mesh>> result;
  {
    QEventLoop wait;
    std::thread reader([&, file = path.toStdString()] {
      result.emplace(mesh::import_mesh_file(file, &warnings));
      QMetaObject::invokeMethod(&wait, &QEventLoop::quit, Qt::QueuedConnection);
    });
    wait.exec(QEventLoop::ExcludeUserInputEvents);
    reader.join();
  }
  Expected<mesh::Mesh> imported = std::move(*result);
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
  shape_->show_other();  // a file has no shape tokens
  // A file Tessera wrote carries its prompt and settings: offer them (not in scripted runs).
  if (auto metadata = mesh::read_metadata(path.toStdString());
      metadata.ok() && !launch_.scripted()) {
    auto restored = runtime::restored_settings(*metadata, path.toStdString());
    if (restored.ok()) {
      auto* box = new QMessageBox(QMessageBox::Question, tr("Restore settings?"),
                                  tr("%1 was made by Tessera from the prompt \"%2\". Restore its "
                                     "prompt and settings, so that Generate makes it again?")
                                      .arg(QFileInfo(path).fileName(),
                                           one_line(QString::fromStdString(restored->prompt), 80)),
                                  QMessageBox::Yes | QMessageBox::No, this);
      box->button(QMessageBox::Yes)->setText(tr("Restore"));
      box->button(QMessageBox::No)->setText(tr("Keep mine"));
      box->setAttribute(Qt::WA_DeleteOnClose);
      connect(box, &QMessageBox::accepted, this, [this, path] { restore_settings_from(path); });
      box->open();
    }
  }
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
  // The viewport keeps the full mesh; the export decimates its own copy.
  runtime::AssetExport request;
  request.options = options;
  request.asset.max_triangles = std::max<int64_t>(max_faces, 0);
  return runtime::export_asset(*mesh, path.toStdString(), request).status();
}

Status MainWindow::export_asset(const ExportChoice& choice, QString* summary) {
  const auto shown = viewport_->mesh();
  if (!shown) return invalid_argument("there is no mesh to export yet");
  runtime::AssetExport request;
  request.options = choice.options;
  request.asset = choice.asset;
  request.preset = choice.preset.toStdString();
  if (choice.write_settings) request.settings = shape_->shown_settings_json();
  TESSERA_ASSIGN_OR_RETURN(const mesh::AssetReport report,
                           runtime::export_asset(*shown, choice.path.toStdString(), request));
  if (summary != nullptr) {
    QString text = tr("Exported %1: %2 triangles").arg(choice.path).arg(report.lod_triangles[0]);
    for (size_t i = 1; i < report.lod_triangles.size(); ++i) {
      text += tr(", LOD%1 %2").arg(i).arg(report.lod_triangles[i]);
    }
    if (choice.asset.closed) {
      text += report.closed ? tr(", closed")
                            : tr(", NOT closed (%1 boundary, %2 non-manifold edges left)")
                                  .arg(report.holes.boundary_edges_left)
                                  .arg(report.holes.non_manifold_edges);
    }
    *summary = text;
  }
  return Status();
}

void MainWindow::run_export_dialog(const QString& preset) {
  const auto full = viewport_->mesh();
  if (!full) {
    QMessageBox::information(this, tr("Export"), tr("There is no mesh to export yet."));
    return;
  }
  // The live budget preview: a decimated copy in the viewport while the dialog is open.
  BudgetPreview preview = [this, full](int64_t budget) -> int64_t {
    if (budget <= 0 || budget >= full->triangle_count()) {
      viewport_->set_mesh(full, false);
      return full->triangle_count();
    }
    auto reduced = std::make_shared<mesh::Mesh>(*full);
    if (!mesh::reduce_triangles(*reduced, budget).ok()) return -1;
    const int64_t reached = reduced->triangle_count();
    viewport_->set_mesh(std::move(reduced), false);
    return reached;
  };
  const std::optional<ExportChoice> choice =
      ask_export_options(this, full->triangle_count(), preview, preset);
  if (!choice) return;
  QString summary;
  if (Status st = export_asset(*choice, &summary); !st.ok()) {
    const QString message = QString::fromStdString(st.message());
    show_status(tr("Export failed: %1").arg(one_line(message, 160)), true);
    show_message(QMessageBox::Critical, tr("Export failed"), message);
    return;
  }
  remember_export_choice(*choice);
  show_status(summary, summary.contains(QStringLiteral("NOT closed")));
}

bool MainWindow::restore_settings_from(const QString& path) {
  auto metadata = mesh::read_metadata(path.toStdString());
  if (!metadata.ok()) {
    show_status(QString::fromStdString(metadata.status().message()), true);
    return false;
  }
  auto restored = runtime::restored_settings(*metadata, path.toStdString());
  if (!restored.ok()) {
    show_status(QString::fromStdString(restored.status().message()), true);
    return false;
  }
  prompt_->setPlainText(QString::fromStdString(restored->prompt));
  settings_->restore(*restored);
  QString text = tr("Restored the prompt and settings of %1").arg(QFileInfo(path).fileName());
  if (restored->has_seed) text += tr(" (seed %1, locked)").arg(restored->seed);
  for (const std::string& note : restored->notes)
    text += tr("; %1").arg(QString::fromStdString(note));
  if (!restored->model_name.empty() &&
      QString::fromStdString(restored->model_name) != QFileInfo(engine_->model_dir()).fileName()) {
    text += tr("; it was made with %1, not the loaded model")
                .arg(QString::fromStdString(restored->model_name));
  }
  show_status(text);
  return true;
}

}  // namespace tessera::studio
