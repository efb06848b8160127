// The Export dialog (File > Export, File > Export for > PRESET): file, platform preset, up axis,
// front, unit, size (largest extent or height, metres), pivot, triangle budget with a live preview
// of the decimated mesh and its count, LODs, closing holes, and the privacy switch (write the
// prompt and settings into the file or not). Choosing a preset fills the fields and shows what it
// sets; every field can then be changed (an override). Pre-filled with the last choice (QSettings
// "export/..."). Modal; the caller writes the file.
#pragma once

#include <QDialog>
#include <QString>
#include <QTimer>
#include <QWidget>
#include <cstdint>
#include <functional>
#include <optional>

#include "engine/mesh/asset.h"
#include "engine/mesh/export.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace tessera::studio {

struct ExportChoice {
  QString path;                 // .obj / .glb / .fbx / .stl / .3mf
  QString preset;               // "" or a preset name (recorded in the file's settings)
  mesh::ExportOptions options;  // axes, unit, size, pivot (metadata_json left to the caller)
  mesh::AssetOptions asset;     // triangle budget, LODs, closing
  bool write_settings = true;   // the privacy switch: prompt and settings in the file
  int64_t max_faces() const { return asset.max_triangles; }
};

// Decimates a copy of the shown mesh to `budget` triangles (0: the full mesh), shows it, and
// returns the count it reached (-1 when it could not).
using BudgetPreview = std::function<int64_t(int64_t budget)>;

class ExportDialog : public QDialog {
  Q_OBJECT

 public:
  // `triangles`: the shown mesh's count; `preview` (may be empty): the live budget preview.
  ExportDialog(QWidget* parent, int64_t triangles, BudgetPreview preview);

  ExportChoice choice() const;
  // Fills the fields from a preset ("" : none) as choosing it in the combo does.
  void select_preset(const QString& name);
  void set_path(const QString& path);
  void set_budget(int64_t budget);
  // The preview's last count line ("48210 -> 20000 triangles"), for tests.
  QString preview_text() const;
  // Runs a pending preview now (the dialog waits 250 ms after the last change).
  void flush_preview();

 private:
  void apply_preset(const mesh::AssetPreset* preset);
  void update_notes();
  void schedule_preview();

  int64_t triangles_ = 0;
  BudgetPreview preview_;
  QTimer preview_timer_;
  QLineEdit* path_ = nullptr;
  QComboBox* preset_ = nullptr;
  QLabel* preset_note_ = nullptr;
  QComboBox* up_ = nullptr;
  QCheckBox* front_x_ = nullptr;
  QComboBox* unit_ = nullptr;
  QDoubleSpinBox* size_ = nullptr;
  QComboBox* size_mode_ = nullptr;
  QComboBox* pivot_ = nullptr;
  QSpinBox* budget_ = nullptr;
  QLabel* budget_note_ = nullptr;
  QSpinBox* lods_ = nullptr;
  QComboBox* texture_limit_ = nullptr;  // the texture's longest side (data 0: keep)
  QCheckBox* closed_ = nullptr;
  QCheckBox* write_settings_ = nullptr;
  QLabel* format_note_ = nullptr;
};

// Shows the dialog (preset `preset` selected when not empty); nullopt when cancelled.
std::optional<ExportChoice> ask_export_options(QWidget* parent, int64_t triangles,
                                               const BudgetPreview& preview,
                                               const QString& preset = QString());
// Saves the choice as the next dialog's defaults (after a successful export).
void remember_export_choice(const ExportChoice& choice);

}  // namespace tessera::studio
