#include "ui/studio/import_export_controller.h"

#include <QEventLoop>
#include <QFileInfo>
#include <QMessageBox>
#include <QPushButton>
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/mesh/asset.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/import.h"
#include "engine/mesh/metadata.h"
#include "engine/runtime/export_asset.h"
#include "engine/runtime/provenance.h"
#include "ui/studio/engine_bridge.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/shape_controller.h"
#include "ui/studio/studio_text.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

ImportExportController::ImportExportController(EngineBridge& engine, ShapeController& shape,
                                               ImportExportViews views, bool scripted,
                                               QObject* parent)
    : QObject(parent), engine_(engine), shape_(shape), views_(views), scripted_(scripted) {
  connect(views_.viewport, &Viewport::meshDropped, this, &ImportExportController::open_mesh_file);
}

bool ImportExportController::open_mesh_file(const QString& path) {
  // A file read through Assimp runs in a child process that may take seconds (a hostile one up to
  // its time limit): the read runs on a thread while the window keeps painting; input waits.
  Q_EMIT status(tr("Opening %1...").arg(QFileInfo(path).fileName()), false);
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
    Q_EMIT status(tr("Cannot open %1").arg(message), true);
    if (!scripted_)
      show_message_box(views_.dialog_parent, QMessageBox::Warning, tr("Not a mesh"), message);
    return false;
  }
  auto mesh = std::make_shared<const mesh::Mesh>(std::move(imported).value());
  QString text = tr("Opened %1: %2 vertices, %3 triangles")
                     .arg(QFileInfo(path).fileName())
                     .arg(mesh->vertex_count())
                     .arg(mesh->triangle_count());
  const bool textured = !mesh->texture.empty();
  if (textured) {
    text += tr(", texture %1x%2").arg(mesh->texture.width).arg(mesh->texture.height);
  }
  // A texture problem does not stop the geometry from opening; say what was dropped.
  if (!warnings.empty())
    text += QStringLiteral(" (") + QString::fromStdString(warnings.front()) + QStringLiteral(")");
  Q_EMIT status(text, !warnings.empty());
  views_.viewport->set_mesh(std::move(mesh), true);
  shape_.show_other();  // a file has no shape tokens
  // A file Tessera wrote carries its prompt and settings: offer them (not in scripted runs).
  if (auto metadata = mesh::read_metadata(path.toStdString()); metadata.ok() && !scripted_) {
    auto restored = runtime::restored_settings(*metadata, path.toStdString());
    if (restored.ok()) {
      auto* box = new QMessageBox(QMessageBox::Question, tr("Restore settings?"),
                                  tr("%1 was made by Tessera from the prompt \"%2\". Restore its "
                                     "prompt and settings, so that Generate makes it again?")
                                      .arg(QFileInfo(path).fileName(),
                                           one_line(QString::fromStdString(restored->prompt), 80)),
                                  QMessageBox::Yes | QMessageBox::No, views_.dialog_parent);
      box->button(QMessageBox::Yes)->setText(tr("Restore"));
      box->button(QMessageBox::No)->setText(tr("Keep mine"));
      box->setAttribute(Qt::WA_DeleteOnClose);
      connect(box, &QMessageBox::accepted, this, [this, path] { restore_settings_from(path); });
      box->open();
    }
  }
  if (textured) Q_EMIT texturedOpened();  // show what the file carries
  Q_EMIT changed();
  return true;
}

Status ImportExportController::export_mesh(const QString& path, const mesh::ExportOptions& options,
                                           int64_t max_faces) {
  const auto mesh = views_.viewport->mesh();
  if (!mesh) return invalid_argument("there is no mesh to export yet");
  // The viewport keeps the full mesh; the export decimates its own copy.
  runtime::AssetExport request;
  request.options = options;
  request.asset.max_triangles = std::max<int64_t>(max_faces, 0);
  return runtime::export_asset(*mesh, path.toStdString(), request).status();
}

Status ImportExportController::export_asset(const ExportChoice& choice, QString* summary) {
  const auto shown = views_.viewport->mesh();
  if (!shown) return invalid_argument("there is no mesh to export yet");
  runtime::AssetExport request;
  request.options = choice.options;
  request.asset = choice.asset;
  request.preset = choice.preset.toStdString();
  if (choice.write_settings) request.settings = shape_.shown_settings_json();
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
    if (report.texture_shrunk()) {
      text += tr(", texture %1x%2 (from %3x%4)")
                  .arg(report.texture_width)
                  .arg(report.texture_height)
                  .arg(report.texture_width_before)
                  .arg(report.texture_height_before);
    }
    *summary = text;
  }
  return Status();
}

void ImportExportController::run_export_dialog(const QString& preset) {
  Viewport* viewport = views_.viewport;
  const auto full = viewport->mesh();
  if (!full) {
    QMessageBox::information(views_.dialog_parent, tr("Export"),
                             tr("There is no mesh to export yet."));
    return;
  }
  // The live budget preview: a decimated copy in the viewport while the dialog is open.
  BudgetPreview preview = [viewport, full](int64_t budget) -> int64_t {
    if (budget <= 0 || budget >= full->triangle_count()) {
      viewport->set_mesh(full, false);
      return full->triangle_count();
    }
    auto reduced = std::make_shared<mesh::Mesh>(*full);
    if (!mesh::reduce_triangles(*reduced, budget).ok()) return -1;
    const int64_t reached = reduced->triangle_count();
    viewport->set_mesh(std::move(reduced), false);
    return reached;
  };
  const std::optional<ExportChoice> choice =
      ask_export_options(views_.dialog_parent, full->triangle_count(), preview, preset);
  if (!choice) return;
  QString summary;
  if (Status st = export_asset(*choice, &summary); !st.ok()) {
    const QString message = QString::fromStdString(st.message());
    Q_EMIT status(tr("Export failed: %1").arg(one_line(message, 160)), true);
    show_message_box(views_.dialog_parent, QMessageBox::Critical, tr("Export failed"), message);
    return;
  }
  remember_export_choice(*choice);
  Q_EMIT status(summary, summary.contains(QStringLiteral("NOT closed")));
}

bool ImportExportController::restore_settings_from(const QString& path) {
  auto metadata = mesh::read_metadata(path.toStdString());
  if (!metadata.ok()) {
    Q_EMIT status(QString::fromStdString(metadata.status().message()), true);
    return false;
  }
  auto restored = runtime::restored_settings(*metadata, path.toStdString());
  if (!restored.ok()) {
    Q_EMIT status(QString::fromStdString(restored.status().message()), true);
    return false;
  }
  views_.prompt->setPlainText(QString::fromStdString(restored->prompt));
  views_.settings->restore(*restored);
  QString text = tr("Restored the prompt and settings of %1").arg(QFileInfo(path).fileName());
  if (restored->has_seed) text += tr(" (seed %1, locked)").arg(restored->sampling.seed);
  for (const std::string& note : restored->notes)
    text += tr("; %1").arg(QString::fromStdString(note));
  if (!restored->model_name.empty() &&
      QString::fromStdString(restored->model_name) != QFileInfo(engine_.model_dir()).fileName()) {
    text += tr("; it was made with %1, not the loaded model")
                .arg(QString::fromStdString(restored->model_name));
  }
  Q_EMIT status(text, false);
  return true;
}

}  // namespace tessera::studio
