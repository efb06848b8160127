// ImportExportController: meshes in and out of files. Export: the shown mesh as an asset
// (export_dialog.h: budget with a live preview in the viewport, closing, LODs, placement and axes,
// and, with the privacy switch on, the settings of the shown shape when it was generated in this
// session), File > Export for > PRESET, and the plain export scripted runs use; every file is
// written by the runtime's one exporter (engine/runtime/export_asset.h). Import: File > Open and a
// mesh dropped on the viewport (OBJ / GLB / FBX / ...), read on a thread while the window keeps
// painting, and the prompt and settings a Tessera file carries offered back (restored into the
// prompt bar and the Settings panel, seed locked, so that Generate makes it again). It writes to
// the panels it is given; the window lays them out and wires its signals. UI thread only.
#pragma once

#include <QObject>
#include <QString>
#include <cstdint>

#include "core/status.h"
#include "engine/mesh/export.h"
#include "ui/studio/export_dialog.h"

class QWidget;

namespace tessera::studio {

class EngineBridge;
class PromptEdit;
class SettingsPanel;
class ShapeController;
class Viewport;

// The panels files are shown in and restored into; all outlive the controller.
struct ImportExportViews {
  Viewport* viewport = nullptr;  // what is exported, where an opened mesh is shown
  PromptEdit* prompt = nullptr;
  SettingsPanel* settings = nullptr;
  QWidget* dialog_parent = nullptr;  // the export dialog and message boxes open over it
};

class ImportExportController : public QObject {
  Q_OBJECT

 public:
  // `scripted`: no dialogs (an opened file's settings are not offered, errors are not boxed).
  ImportExportController(EngineBridge& engine, ShapeController& shape, ImportExportViews views,
                         bool scripted, QObject* parent = nullptr);

  // Shows a mesh file (OBJ / GLB / FBX ...); false with a message box (and status) on failure.
  bool open_mesh_file(const QString& path);
  // Writes the viewport's mesh (format from the extension); max_faces > 0 decimates a copy first.
  // The error is returned (and not shown) for scripted use.
  Status export_mesh(const QString& path, const mesh::ExportOptions& options,
                     int64_t max_faces = 0);
  // Writes the viewport's mesh as an asset (budget, closing and LODs, placement and axes, the
  // shown shape's settings when asked). `summary` says what was written.
  Status export_asset(const ExportChoice& choice, QString* summary = nullptr);
  // File > Export (preset "": the last choice) and File > Export for > PRESET.
  void run_export_dialog(const QString& preset = QString());
  // Applies the prompt and settings a Tessera file carries to the prompt bar and the Settings
  // panel (the seed locked, so Generate makes that shape again). False, with the reason in the
  // status bar, when the file carries none or they are malformed.
  bool restore_settings_from(const QString& path);

 Q_SIGNALS:
  void status(const QString& text, bool error);
  // An opened file carries a texture: the view switches to textured shading.
  void texturedOpened();
  // What can be done changed (a mesh is shown).
  void changed();

 private:
  EngineBridge& engine_;
  ShapeController& shape_;
  ImportExportViews views_;
  bool scripted_ = false;
};

}  // namespace tessera::studio
