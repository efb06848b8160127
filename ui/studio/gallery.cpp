#include "ui/studio/gallery.h"

#include "engine/mesh/import.h"

#include <QDateTime>
#include <QFile>
#include <QPainter>
#include <QIcon>
#include <QPixmap>
#include <algorithm>

namespace tessera::studio {

namespace {

QString one_line(const QString& text, int max_chars) {
  QString s = text.simplified();
  return s.size() > max_chars ? s.left(max_chars - 1) + QChar(0x2026) : s;
}

constexpr int kCaptionChars = 24;

// The tile of a result kept without a thumbnail (until it is first shown): a plain square.
QIcon placeholder() {
  static const QIcon icon = [] {
    QPixmap square(Gallery::kThumbnailSize, Gallery::kThumbnailSize);
    square.fill(QColor(60, 62, 66));
    QPainter p(&square);
    p.setPen(QColor(150, 150, 150));
    p.drawText(square.rect(), Qt::AlignCenter, Gallery::tr("no preview\nyet"));
    return QIcon(square);
  }();
  return icon;
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

void Gallery::set_kept(std::vector<GalleryEntry> kept, bool show_session) {
  kept_ = std::move(kept);
  show_session_ = show_session;
  for (GalleryEntry& e : kept_) {
    if (auto it = meshes_.find(e.id); it != meshes_.end()) e.mesh = it->second;
  }
  newest_group_.clear();
  if (!kept_.empty() && !kept_.back().trashed) newest_group_ = kept_.back().group;
  rebuild();
}

void Gallery::add(const QString& label, std::shared_ptr<const mesh::Mesh> mesh,
                  const QImage& shot) {
  GalleryEntry e;
  e.created_ms = QDateTime::currentMSecsSinceEpoch();
  e.prompt = label;
  e.label = label;
  e.mesh = std::move(mesh);
  e.thumbnail = thumbnail(shot);
  session_.push_back(std::move(e));
  rebuild();
  show_newest();
}

void Gallery::attach_mesh(int64_t id, std::shared_ptr<const mesh::Mesh> mesh) {
  meshes_[id] = mesh;
  for (GalleryEntry& e : kept_) {
    if (e.id == id) e.mesh = mesh;
  }
}

void Gallery::replace_mesh(const std::shared_ptr<const mesh::Mesh>& before,
                           std::shared_ptr<const mesh::Mesh> after) {
  for (auto* list : {&kept_, &session_}) {
    for (GalleryEntry& e : *list) {
      if (e.mesh == before) e.mesh = after;
    }
  }
  for (auto& [id, m] : meshes_) {
    if (m == before) m = after;
  }
}

const GalleryEntry* Gallery::entry(const QListWidgetItem* item) const {
  if (item == nullptr) return nullptr;
  const int index = item->data(Qt::UserRole).toInt();
  if (index >= 0 && index < static_cast<int>(kept_.size())) {
    return &kept_[static_cast<size_t>(index)];
  }
  const int session = -index - 1;
  if (index < 0 && session < static_cast<int>(session_.size())) {
    return &session_[static_cast<size_t>(session)];
  }
  return nullptr;
}

int Gallery::group_size(const QString& group) const {
  if (group.isEmpty()) return 1;
  return static_cast<int>(std::count_if(kept_.begin(), kept_.end(),
                                        [&](const GalleryEntry& e) { return e.group == group; }));
}

bool Gallery::expanded(const QString& group) const {
  return expanded_.contains(group) || group == newest_group_;
}

void Gallery::set_expanded(const QString& group, bool on) {
  if (on) {
    expanded_.insert(group);
  } else {
    expanded_.remove(group);
    if (group == newest_group_) newest_group_.clear();
  }
  rebuild();
}

void Gallery::show_newest() {
  if (count() > 0) scrollToItem(item(count() - 1));
}

void Gallery::rebuild() {
  const int64_t current =
      currentItem() != nullptr && entry(currentItem()) ? entry(currentItem())->id : -1;
  clear();
  // Kept and session entries merged by time; a collapsed group shows its first entry only.
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(kept_.size()); ++i) order.push_back(i);
  if (show_session_) {
    for (int i = 0; i < static_cast<int>(session_.size()); ++i) order.push_back(-i - 1);
  }
  auto at = [&](int index) -> const GalleryEntry& {
    return index >= 0 ? kept_[static_cast<size_t>(index)]
                      : session_[static_cast<size_t>(-index - 1)];
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return at(a).created_ms < at(b).created_ms; });
  std::map<QString, int> sizes;
  for (const GalleryEntry& e : kept_) {
    if (!e.group.isEmpty()) ++sizes[e.group];
  }
  QSet<QString> shown_groups;
  for (int index : order) {
    const GalleryEntry& e = at(index);
    const int size = e.id != 0 && !e.group.isEmpty() ? sizes[e.group] : 1;
    QString caption;
    if (size > 1 && !expanded(e.group)) {
      if (shown_groups.contains(e.group)) continue;
      shown_groups.insert(e.group);
      caption = QStringLiteral("%1 ×%2").arg(one_line(e.title(), kCaptionChars - 3)).arg(size);
    } else if (size > 1 && e.name.isEmpty()) {
      caption = one_line(tr("%1 (seed %2)").arg(e.prompt).arg(e.seed), kCaptionChars);
    } else {
      caption =
          one_line(e.name.isEmpty() && !e.label.isEmpty() ? e.label : e.title(), kCaptionChars);
    }
    if (caption.isEmpty()) caption = tr("(empty prompt)");
    if (e.favourite) caption = QStringLiteral("★ ") + caption;
    // A kept thumbnail is read from its file when the tile is first drawn.
    const QIcon icon = e.id == 0                         ? QIcon(QPixmap::fromImage(e.thumbnail))
                       : QFile::exists(e.thumbnail_file) ? QIcon(e.thumbnail_file)
                                                         : placeholder();
    auto* item = new QListWidgetItem(icon, caption, this);
    item->setData(Qt::UserRole, index);
    QString tip = e.title();
    if (!e.model.isEmpty()) tip += QStringLiteral("\n") + tr("model %1").arg(e.model);
    if (e.id != 0) {
      tip += QStringLiteral("\n") + tr("seed %1, made %2")
                                        .arg(e.seed)
                                        .arg(QDateTime::fromMSecsSinceEpoch(e.created_ms)
                                                 .toString(QStringLiteral("yyyy-MM-dd hh:mm")));
      if (size > 1) tip += QStringLiteral("\n") + tr("one of %1 variations").arg(size);
    }
    item->setToolTip(tip);
    if (e.id != 0 && e.id == current) setCurrentItem(item);
  }
}

void Gallery::choose(QListWidgetItem* item) {
  if (item == nullptr) return;
  // entry() finds it; the gallery owns it, so it may fill in the mesh it reads.
  auto* e = const_cast<GalleryEntry*>(entry(item));
  if (e == nullptr) return;
  if (!e->mesh) {
    auto read = mesh::import_mesh_file(e->mesh_file.toStdString());
    if (!read.ok()) {
      Q_EMIT failed(QString::fromStdString(read.status().message()));
      return;
    }
    e->mesh = std::make_shared<const mesh::Mesh>(std::move(read).value());
    meshes_[e->id] = e->mesh;
  }
  const GalleryEntry chosen_entry = *e;  // rebuilds in the slots must not pull it away
  Q_EMIT chosen(chosen_entry);
}

}  // namespace tessera::studio
