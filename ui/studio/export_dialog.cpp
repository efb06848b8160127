#include "ui/studio/export_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>

namespace tessera::studio {
namespace {

// Display names of the presets, in asset_presets() order.
QString preset_title(const std::string& name) {
  if (name == "roblox") return QObject::tr("Roblox");
  if (name == "unity") return QObject::tr("Unity");
  if (name == "unreal") return QObject::tr("Unreal Engine");
  if (name == "blender") return QObject::tr("Blender");
  if (name == "godot") return QObject::tr("Godot");
  if (name == "print") return QObject::tr("3D printing");
  return QString::fromStdString(name);
}

QString extension_of(const QString& path) {
  return QStringLiteral(".") + QFileInfo(path).suffix().toLower();
}

}  // namespace

ExportDialog::ExportDialog(QWidget* parent, int64_t triangles, BudgetPreview preview)
    : QDialog(parent), triangles_(triangles), preview_(std::move(preview)) {
  setWindowTitle(tr("Export mesh"));
  auto* form = new QFormLayout(this);
  QSettings s;

  auto* path_row = new QHBoxLayout;
  path_ = new QLineEdit(this);
  path_->setText(
      s.value(QStringLiteral("export/path"), QDir::home().filePath("tessera.obj")).toString());
  auto* browse = new QPushButton(tr("Browse..."), this);
  path_row->addWidget(path_, 1);
  path_row->addWidget(browse);
  form->addRow(tr("File"), path_row);
  format_note_ = new QLabel(this);
  format_note_->setStyleSheet(QStringLiteral("color: #c08000"));
  format_note_->setWordWrap(true);
  form->addRow(QString(), format_note_);

  preset_ = new QComboBox(this);
  preset_->addItem(tr("None (set each field)"), QString());
  for (const mesh::AssetPreset& p : mesh::asset_presets()) {
    preset_->addItem(preset_title(p.name), QString::fromStdString(p.name));
  }
  form->addRow(tr("Preset"), preset_);
  preset_note_ = new QLabel(this);
  preset_note_->setWordWrap(true);
  form->addRow(QString(), preset_note_);

  up_ = new QComboBox(this);
  up_->addItem(tr("Y up (glTF, Maya, Unity, Roblox, Godot)"), static_cast<int>(mesh::UpAxis::kY));
  up_->addItem(tr("Z up (Blender, 3ds Max, Unreal, slicers)"), static_cast<int>(mesh::UpAxis::kZ));
  form->addRow(tr("Up axis"), up_);
  front_x_ = new QCheckBox(tr("Front faces +X (Unreal's forward; Z up only)"), this);
  form->addRow(tr("Front"), front_x_);
  unit_ = new QComboBox(this);
  for (mesh::LengthUnit u : {mesh::LengthUnit::kMetre, mesh::LengthUnit::kCentimetre,
                             mesh::LengthUnit::kMillimetre, mesh::LengthUnit::kStud}) {
    unit_->addItem(QString::fromUtf8(mesh::unit_name(u)), static_cast<int>(u));
  }
  unit_->setToolTip(
      tr("Unit of the numbers in the file; FBX and 3MF declare it, so importers "
         "show the same size (GLB is always metres)"));
  form->addRow(tr("Unit"), unit_);

  auto* size_row = new QHBoxLayout;
  size_ = new QDoubleSpinBox(this);
  size_->setDecimals(3);
  size_->setRange(0.0, 100000.0);
  size_->setSuffix(tr(" m"));
  size_->setSpecialValueText(tr("as generated"));
  size_->setValue(s.value(QStringLiteral("export/size"), 0.0).toDouble());
  size_mode_ = new QComboBox(this);
  size_mode_->addItem(tr("largest extent"));
  size_mode_->addItem(tr("height"));
  size_mode_->setCurrentIndex(s.value(QStringLiteral("export/size_is_height"), false).toBool() ? 1
                                                                                               : 0);
  size_row->addWidget(size_, 1);
  size_row->addWidget(size_mode_);
  form->addRow(tr("Size"), size_row);
  pivot_ = new QComboBox(this);
  pivot_->addItem(tr("Origin (as generated)"), static_cast<int>(mesh::Pivot::kOrigin));
  pivot_->addItem(tr("Base (bottom centre at the origin)"), static_cast<int>(mesh::Pivot::kBase));
  pivot_->addItem(tr("Centre"), static_cast<int>(mesh::Pivot::kCenter));
  pivot_->setCurrentIndex(s.value(QStringLiteral("export/pivot"), 0).toInt());
  form->addRow(tr("Pivot"), pivot_);

  budget_ = new QSpinBox(this);
  budget_->setRange(0, 100000000);
  budget_->setSingleStep(1000);
  budget_->setSpecialValueText(tr("keep all"));
  budget_->setToolTip(
      tr("Decimate to at most this many triangles (quadric error); the viewport "
         "shows the result while the dialog is open"));
  form->addRow(tr("Triangle budget"), budget_);
  budget_note_ = new QLabel(this);
  form->addRow(QString(), budget_note_);
  lods_ = new QSpinBox(this);
  lods_->setRange(0, mesh::kMaxLods);
  lods_->setSpecialValueText(tr("none"));
  lods_->setToolTip(
      tr("LOD1..LODn at halving budgets, as meshes named TesseraMesh_LOD0.. in one "
         ".glb or .fbx (Unity and Unreal group them)"));
  form->addRow(tr("Levels of detail"), lods_);
  texture_limit_ = new QComboBox(this);
  texture_limit_->addItem(tr("Keep its size"), 0);
  for (int side : {1024, 2048, 4096}) {
    texture_limit_->addItem(tr("At most %1 px").arg(side), side);
  }
  texture_limit_->setToolTip(
      tr("A larger texture (a painted mesh's atlas, an applied image) is shrunk to this side"));
  form->addRow(tr("Texture"), texture_limit_);
  closed_ = new QCheckBox(tr("Close small holes (closed, manifold mesh)"), this);
  form->addRow(tr("Closed"), closed_);
  write_settings_ = new QCheckBox(tr("Write the prompt, seed and settings into the file"), this);
  write_settings_->setToolTip(
      tr("Off for privacy: the file then says nothing about how it was "
         "made (and cannot be made again from it)"));
  write_settings_->setChecked(s.value(QStringLiteral("privacy/write_settings"), true).toBool());
  form->addRow(tr("Settings"), write_settings_);

  auto* box = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  box->button(QDialogButtonBox::Ok)->setText(tr("Export"));
  form->addRow(box);
  connect(box, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(box, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString chosen = QFileDialog::getSaveFileName(
        this, tr("Export mesh"), path_->text(),
        tr("Wavefront OBJ (*.obj);;glTF binary (*.glb);;FBX binary (*.fbx);;"
           "STL for printing (*.stl);;3MF for printing (*.3mf)"));
    if (!chosen.isEmpty()) path_->setText(chosen);
  });

  // The last choice, then the preset it used (which fills the fields it sets).
  up_->setCurrentIndex(s.value(QStringLiteral("export/up_z"), false).toBool() ? 1 : 0);
  front_x_->setChecked(s.value(QStringLiteral("export/front_x"), false).toBool());
  unit_->setCurrentIndex(s.value(QStringLiteral("export/unit"), 0).toInt());
  budget_->setValue(s.value(QStringLiteral("export/max_faces"), 0).toInt());
  lods_->setValue(s.value(QStringLiteral("export/lods"), 0).toInt());
  {
    const int i =
        texture_limit_->findData(s.value(QStringLiteral("export/max_texture"), 0).toInt());
    texture_limit_->setCurrentIndex(i < 0 ? 0 : i);
  }
  closed_->setChecked(s.value(QStringLiteral("export/closed"), false).toBool());
  const int preset_index =
      preset_->findData(s.value(QStringLiteral("export/preset"), QString()).toString());
  preset_->setCurrentIndex(preset_index < 0 ? 0 : preset_index);
  connect(preset_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int) {
    apply_preset(mesh::find_preset(preset_->currentData().toString().toStdString()));
  });
  connect(path_, &QLineEdit::textChanged, this, [this] { update_notes(); });
  connect(up_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] { update_notes(); });
  connect(front_x_, &QCheckBox::toggled, this, [this] { update_notes(); });
  connect(unit_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] { update_notes(); });
  connect(lods_, qOverload<int>(&QSpinBox::valueChanged), this, [this] { update_notes(); });
  connect(closed_, &QCheckBox::toggled, this, [this] { update_notes(); });
  connect(texture_limit_, qOverload<int>(&QComboBox::currentIndexChanged), this,
          [this] { update_notes(); });
  connect(budget_, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
    update_notes();
    schedule_preview();
  });
  preview_timer_.setSingleShot(true);
  preview_timer_.setInterval(250);
  connect(&preview_timer_, &QTimer::timeout, this, [this] { flush_preview(); });
  update_notes();
  budget_note_->setText(tr("%1 triangles").arg(triangles_));
  if (budget_->value() > 0) schedule_preview();
}

void ExportDialog::apply_preset(const mesh::AssetPreset* p) {
  if (p == nullptr) {
    update_notes();
    return;
  }
  const mesh::ExportOptions o = mesh::preset_export_options(*p, p->formats.front());
  up_->setCurrentIndex(o.up_axis == mesh::UpAxis::kZ ? 1 : 0);
  front_x_->setChecked(o.front_x);
  unit_->setCurrentIndex(unit_->findData(static_cast<int>(o.unit)));
  budget_->setValue(static_cast<int>(p->max_triangles));
  closed_->setChecked(p->closed);
  {
    const int i = texture_limit_->findData(static_cast<int>(p->max_texture_size));
    texture_limit_->setCurrentIndex(i < 0 ? 0 : i);
  }
  // The preset's first format when the file's is not one it takes.
  const QString ext = extension_of(path_->text());
  bool accepted = false;
  for (const std::string& f : p->formats) accepted = accepted || ext == QString::fromStdString(f);
  if (!accepted) {
    QFileInfo info(path_->text());
    path_->setText(
        info.dir().filePath(info.completeBaseName() + QString::fromStdString(p->formats.front())));
  }
  update_notes();
}

void ExportDialog::select_preset(const QString& name) {
  const int i = preset_->findData(name);
  preset_->setCurrentIndex(i < 0 ? 0 : i);
  apply_preset(mesh::find_preset(name.toStdString()));
}

void ExportDialog::set_path(const QString& path) {
  path_->setText(path);
}
void ExportDialog::set_budget(int64_t budget) {
  budget_->setValue(static_cast<int>(budget));
}
QString ExportDialog::preview_text() const {
  return budget_note_->text();
}

void ExportDialog::update_notes() {
  const mesh::AssetPreset* p = mesh::find_preset(preset_->currentData().toString().toStdString());
  QString note;
  if (p != nullptr) {
    note = tr("Sets: %1").arg(QString::fromStdString(mesh::describe_preset(*p)));
    QStringList overrides;
    const mesh::ExportOptions o =
        mesh::preset_export_options(*p, extension_of(path_->text()).toStdString());
    if ((up_->currentIndex() == 1) != (o.up_axis == mesh::UpAxis::kZ)) overrides << tr("up axis");
    if (front_x_->isChecked() != o.front_x) overrides << tr("front");
    if (unit_->currentData().toInt() != static_cast<int>(o.unit)) overrides << tr("unit");
    if (budget_->value() != p->max_triangles) overrides << tr("budget");
    if (closed_->isChecked() != p->closed) overrides << tr("closing");
    if (texture_limit_->currentData().toInt() != p->max_texture_size) overrides << tr("texture");
    if (!overrides.isEmpty())
      note += tr(" (overridden: %1)").arg(overrides.join(QStringLiteral(", ")));
  }
  preset_note_->setText(note);
  preset_note_->setVisible(!note.isEmpty());
  QString format;
  const QString ext = extension_of(path_->text());
  if (p != nullptr) {
    bool accepted = false;
    QStringList formats;
    for (const std::string& f : p->formats) {
      accepted = accepted || ext == QString::fromStdString(f);
      formats << QString::fromStdString(f);
    }
    if (!accepted) {
      format = tr("%1 expects %2").arg(preset_title(p->name), formats.join(tr(" or ")));
    }
  }
  if (ext == QStringLiteral(".glb") && unit_->currentData().toInt() != 0) {
    format = tr("A .glb file is in metres by definition: the unit is ignored");
  }
  if (lods_->value() > 0 && ext != QStringLiteral(".glb") && ext != QStringLiteral(".fbx")) {
    format = tr("Levels of detail are written to .glb or .fbx files");
  }
  format_note_->setText(format);
  format_note_->setVisible(!format.isEmpty());
}

void ExportDialog::schedule_preview() {
  if (preview_) preview_timer_.start();
}

void ExportDialog::flush_preview() {
  preview_timer_.stop();
  if (!preview_) return;
  const int64_t budget = budget_->value();
  const int64_t reached = preview_(budget);
  if (budget <= 0 || budget >= triangles_) {
    budget_note_->setText(tr("%1 triangles (all kept)").arg(triangles_));
  } else if (reached < 0) {
    budget_note_->setText(tr("%1 triangles: the preview failed").arg(triangles_));
  } else {
    budget_note_->setText(
        tr("%1 \u2192 %2 triangles (shown in the viewport)").arg(triangles_).arg(reached));
  }
}

ExportChoice ExportDialog::choice() const {
  ExportChoice c;
  c.path = path_->text().trimmed();
  c.preset = preset_->currentData().toString();
  const QString ext = extension_of(c.path);
  c.options.up_axis = static_cast<mesh::UpAxis>(up_->currentData().toInt());
  c.options.front_x = front_x_->isChecked() && c.options.up_axis == mesh::UpAxis::kZ;
  c.options.unit = ext == QStringLiteral(".glb")
                       ? mesh::LengthUnit::kMetre
                       : static_cast<mesh::LengthUnit>(unit_->currentData().toInt());
  if (size_->value() > 0.0) {
    (size_mode_->currentIndex() == 1 ? c.options.height_m : c.options.size_m) = size_->value();
  }
  c.options.pivot = static_cast<mesh::Pivot>(pivot_->currentData().toInt());
  c.asset.max_triangles = budget_->value();
  c.asset.lods = lods_->value();
  c.asset.closed = closed_->isChecked();
  c.asset.max_texture_size = texture_limit_->currentData().toInt();
  c.write_settings = write_settings_->isChecked();
  return c;
}

std::optional<ExportChoice> ask_export_options(QWidget* parent, int64_t triangles,
                                               const BudgetPreview& preview,
                                               const QString& preset) {
  ExportDialog dialog(parent, triangles, preview);
  if (!preset.isEmpty()) dialog.select_preset(preset);
  const bool accepted = dialog.exec() == QDialog::Accepted;
  if (preview) preview(0);  // the viewport shows the full mesh again
  if (!accepted) return std::nullopt;
  return dialog.choice();
}

void remember_export_choice(const ExportChoice& c) {
  QSettings s;
  s.setValue(QStringLiteral("export/path"), c.path);
  s.setValue(QStringLiteral("export/preset"), c.preset);
  s.setValue(QStringLiteral("export/up_z"), c.options.up_axis == mesh::UpAxis::kZ);
  s.setValue(QStringLiteral("export/front_x"), c.options.front_x);
  s.setValue(QStringLiteral("export/unit"), static_cast<int>(c.options.unit));
  s.setValue(QStringLiteral("export/size"),
             c.options.size_m > 0 ? c.options.size_m : c.options.height_m);
  s.setValue(QStringLiteral("export/size_is_height"), c.options.height_m > 0);
  s.setValue(QStringLiteral("export/pivot"), static_cast<int>(c.options.pivot));
  s.setValue(QStringLiteral("export/max_faces"), static_cast<qlonglong>(c.asset.max_triangles));
  s.setValue(QStringLiteral("export/lods"), c.asset.lods);
  s.setValue(QStringLiteral("export/closed"), c.asset.closed);
  s.setValue(QStringLiteral("export/max_texture"), static_cast<int>(c.asset.max_texture_size));
  s.setValue(QStringLiteral("privacy/write_settings"), c.write_settings);
}

}  // namespace tessera::studio
