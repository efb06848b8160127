// The Export dialog (File > Export): file, up axis, scale and a triangle budget, pre-filled with the
// last choice (QSettings "export/..."). Modal; the caller writes the file.
#pragma once

#include <QString>
#include <QWidget>
#include <cstdint>
#include <optional>

#include "engine/mesh/export.h"

namespace tessera::studio {

struct ExportChoice {
  QString path;                // .obj / .glb / .fbx
  mesh::ExportOptions options;  // up axis, scale
  int64_t max_faces = 0;        // 0: keep all triangles
};

// Shows the dialog; nullopt when cancelled.
std::optional<ExportChoice> ask_export_options(QWidget* parent);
// Saves the choice as the next dialog's defaults (after a successful export).
void remember_export_choice(const ExportChoice& choice);

}  // namespace tessera::studio
