#include "ui/studio/gallery.h"

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

void Gallery::add(const QString& prompt, std::shared_ptr<const mesh::Mesh> mesh,
                  const QImage& shot) {
  const int side = std::min(shot.width(), shot.height());
  const QImage square =
      shot.copy((shot.width() - side) / 2, (shot.height() - side) / 2, side, side)
          .scaled(kThumbnailSize, kThumbnailSize, Qt::KeepAspectRatio, Qt::SmoothTransformation);
  results_.push_back({prompt, std::move(mesh)});
  auto* item =
      new QListWidgetItem(QIcon(QPixmap::fromImage(square)),
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
  const Result& r = results_[static_cast<size_t>(index)];
  Q_EMIT meshChosen(r.prompt, r.mesh);
}

}  // namespace tessera::studio
