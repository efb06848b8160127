#include "ui/studio/export_dialog.h"

#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>

namespace tessera::studio {

std::optional<ExportChoice> ask_export_options(QWidget* parent) {
  QDialog dialog(parent);
  dialog.setWindowTitle(QObject::tr("Export mesh"));
  auto* form = new QFormLayout(&dialog);
  auto* path_row = new QHBoxLayout;
  auto* path = new QLineEdit(&dialog);
  QSettings s;
  path->setText(
      s.value(QStringLiteral("export/path"), QDir::home().filePath("tessera.obj")).toString());
  auto* browse = new QPushButton(QObject::tr("Browse..."), &dialog);
  path_row->addWidget(path, 1);
  path_row->addWidget(browse);
  form->addRow(QObject::tr("File"), path_row);
  auto* up = new QComboBox(&dialog);
  up->addItem(QObject::tr("Y up (glTF, Maya, Unity, Roblox)"), static_cast<int>(mesh::UpAxis::kY));
  up->addItem(QObject::tr("Z up (Blender, 3ds Max)"), static_cast<int>(mesh::UpAxis::kZ));
  up->setCurrentIndex(s.value(QStringLiteral("export/up_z"), false).toBool() ? 1 : 0);
  form->addRow(QObject::tr("Up axis"), up);
  auto* scale = new QDoubleSpinBox(&dialog);
  scale->setDecimals(4);
  scale->setRange(0.0001, 10000.0);
  scale->setValue(s.value(QStringLiteral("export/scale"), 1.0).toDouble());
  scale->setToolTip(QObject::tr("File units per model unit (the model spans about 2 units)"));
  form->addRow(QObject::tr("Scale"), scale);
  auto* max_faces = new QSpinBox(&dialog);
  max_faces->setRange(0, 100000000);
  max_faces->setSingleStep(1000);
  max_faces->setSpecialValueText(QObject::tr("keep all"));
  max_faces->setValue(s.value(QStringLiteral("export/max_faces"), 0).toInt());
  max_faces->setToolTip(
      QObject::tr("Decimate to at most this many triangles (quadric error); the viewport "
         "keeps the full mesh"));
  form->addRow(QObject::tr("Max faces"), max_faces);
  auto* box = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
  form->addRow(box);
  QObject::connect(box, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
  QObject::connect(box, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  QObject::connect(browse, &QPushButton::clicked, &dialog, [&] {
    const QString chosen = QFileDialog::getSaveFileName(
        &dialog, QObject::tr("Export mesh"), path->text(),
        QObject::tr("Wavefront OBJ (*.obj);;glTF binary (*.glb);;FBX binary (*.fbx);;"
                    "STL for printing (*.stl);;3MF for printing (*.3mf)"));
    if (!chosen.isEmpty()) path->setText(chosen);
  });
  if (dialog.exec() != QDialog::Accepted) return std::nullopt;
  ExportChoice choice;
  choice.path = path->text().trimmed();
  choice.options.up_axis = static_cast<mesh::UpAxis>(up->currentData().toInt());
  choice.options.scale = static_cast<float>(scale->value());
  choice.max_faces = max_faces->value();
  return choice;
}

void remember_export_choice(const ExportChoice& choice) {
  QSettings s;
  s.setValue(QStringLiteral("export/path"), choice.path);
  s.setValue(QStringLiteral("export/up_z"), choice.options.up_axis == mesh::UpAxis::kZ);
  s.setValue(QStringLiteral("export/scale"), static_cast<double>(choice.options.scale));
  s.setValue(QStringLiteral("export/max_faces"), static_cast<qlonglong>(choice.max_faces));
}

}  // namespace tessera::studio
