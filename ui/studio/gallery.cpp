#include "ui/studio/gallery.h"

#include "engine/mesh/import.h"

#include <QIcon>
#include <QPixmap>
#include <algorithm>

namespace tessera::studio {

namespace {

QString one_line(const QString& text, int max_chars) {
  QString s = text.simplified();
  return s.size() > max_chars ? s.left(max_chars - 1) + QChar(0x2026) : s;
}

}  // namespace

Gallery::Gallery(QWidget* parent) : QListWidget(parent) {
  setViewMode(QListView::IconMode);
  setIconSize(QSize(kThumbnailSize, kThumbnailSize));
  setResizeMode(QListView::Adjust);
  setMovement(QListView::Static);
  // A strip: one row of thumbnails that scrolls sideways, as tall as a thumbnail and its label.
  setFlow(QListView::LeftToRight);
  setWrapping(false);
  setWordWrap(false);
  setTextElideMode(Qt::ElideRight);
  setGridSize(QSize(kThumbnailSize + 24, kThumbnailSize + 24));
  setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  setFixedHeight(kThumbnailSize + 48);
  connect(this, &QListWidget::itemClicked, this, &Gallery::choose);
  connect(this, &QListWidget::itemActivated, this, &Gallery::choose);
}

QImage Gallery::thumbnail(const QImage& shot) {
  const int side = std::min(shot.width(), shot.height());
  return shot.copy((shot.width() - side) / 2, (shot.height() - side) / 2, side, side)
      .scaled(kThumbnailSize, kThumbnailSize, Qt::KeepAspectRatio, Qt::SmoothTransformation);
}

void Gallery::add_kept(const QString& prompt, const QString& mesh_file,
                       const QString& thumbnail_file) {
  results_.push_back({prompt, nullptr, mesh_file});
  auto* item = new QListWidgetItem(
      QIcon(thumbnail_file), one_line(prompt.isEmpty() ? tr("(empty prompt)") : prompt, 24), this);
  item->setData(Qt::UserRole, static_cast<int>(results_.size() - 1));
  item->setToolTip(prompt);
}

void Gallery::add(const QString& prompt, std::shared_ptr<const mesh::Mesh> mesh,
                  const QImage& shot) {
  results_.push_back({prompt, std::move(mesh), QString()});
  auto* item =
      new QListWidgetItem(QIcon(QPixmap::fromImage(thumbnail(shot))),
                          one_line(prompt.isEmpty() ? tr("(empty prompt)") : prompt, 24), this);
  item->setData(Qt::UserRole, static_cast<int>(results_.size() - 1));
  item->setToolTip(prompt);
  scrollToItem(item);
}

void Gallery::replace_mesh(const std::shared_ptr<const mesh::Mesh>& before,
                           std::shared_ptr<const mesh::Mesh> after) {
  for (Result& r : results_) {
    if (r.mesh == before) r.mesh = after;
  }
}

void Gallery::choose(QListWidgetItem* item) {
  if (item == nullptr) return;
  const int index = item->data(Qt::UserRole).toInt();
  if (index < 0 || index >= static_cast<int>(results_.size())) return;
  Result& r = results_[static_cast<size_t>(index)];
  if (!r.mesh) {
    auto read = mesh::import_mesh_file(r.mesh_file.toStdString());
    if (!read.ok()) {
      Q_EMIT failed(QString::fromStdString(read.status().message()));
      return;
    }
    r.mesh = std::make_shared<const mesh::Mesh>(std::move(read).value());
  }
  Q_EMIT meshChosen(r.prompt, r.mesh);
}

}  // namespace tessera::studio
