#include "ui/studio/library_panel.h"

#include <QBuffer>
#include <QComboBox>
#include <QDateTime>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QKeyEvent>
#include <QLineEdit>
#include <QMenu>
#include <QSet>
#include <QShortcut>
#include <QToolButton>
#include <QVBoxLayout>

namespace tessera::studio {

namespace {

// The gallery shows at most this many kept results (the newest); search and filters reach the rest.
constexpr int64_t kShownResults = 2000;

enum DateFilter { kAnyTime, kToday, kThisWeek, kThisMonth };

int64_t since_ms(int filter) {
  const QDateTime now = QDateTime::currentDateTime();
  const QDateTime midnight(now.date(), QTime(0, 0));
  switch (filter) {
    case kToday:
      return midnight.toMSecsSinceEpoch();
    case kThisWeek:
      return midnight.addDays(-6).toMSecsSinceEpoch();
    case kThisMonth:
      return midnight.addDays(-29).toMSecsSinceEpoch();
    default:
      return 0;
  }
}

QString q(const std::string& s) {
  return QString::fromStdString(s);
}

}  // namespace

LibraryPanel::LibraryPanel(QWidget* parent) : QWidget(parent) {
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(2, 2, 2, 2);
  column->setSpacing(2);
  auto* row = new QHBoxLayout();
  search_ = new QLineEdit(this);
  search_->setObjectName(QStringLiteral("LibrarySearch"));
  search_->setPlaceholderText(tr("Search prompts and titles"));
  search_->setClearButtonEnabled(true);
  row->addWidget(search_, 2);
  model_ = new QComboBox(this);
  model_->setObjectName(QStringLiteral("LibraryModel"));
  model_->addItem(tr("All models"), QString());
  model_->setToolTip(tr("Only the results of one model"));
  row->addWidget(model_, 1);
  date_ = new QComboBox(this);
  date_->setObjectName(QStringLiteral("LibraryDate"));
  date_->addItem(tr("Any time"), kAnyTime);
  date_->addItem(tr("Today"), kToday);
  date_->addItem(tr("Last 7 days"), kThisWeek);
  date_->addItem(tr("Last 30 days"), kThisMonth);
  row->addWidget(date_);
  favourites_ = new QToolButton(this);
  favourites_->setText(QStringLiteral("★"));
  favourites_->setCheckable(true);
  favourites_->setToolTip(tr("Favourites only"));
  row->addWidget(favourites_);
  trash_ = new QToolButton(this);
  trash_->setText(tr("Trash"));
  trash_->setCheckable(true);
  trash_->setToolTip(tr("Show the trash: results removed from the library, until it is emptied"));
  row->addWidget(trash_);
  empty_trash_ = new QToolButton(this);
  empty_trash_->setText(tr("Empty trash"));
  empty_trash_->setVisible(false);
  row->addWidget(empty_trash_);
  column->addLayout(row);
  note_ = new QLabel(this);
  note_->setWordWrap(true);
  note_->setVisible(false);
  column->addWidget(note_);
  gallery_ = new Gallery(this);
  gallery_->setContextMenuPolicy(Qt::CustomContextMenu);
  column->addWidget(gallery_);

  connect(search_, &QLineEdit::textChanged, this, &LibraryPanel::refresh);
  connect(model_, &QComboBox::currentIndexChanged, this, &LibraryPanel::refresh);
  connect(date_, &QComboBox::currentIndexChanged, this, &LibraryPanel::refresh);
  connect(favourites_, &QToolButton::toggled, this, &LibraryPanel::refresh);
  connect(trash_, &QToolButton::toggled, this, [this](bool on) {
    empty_trash_->setVisible(on);
    refresh();
  });
  connect(empty_trash_, &QToolButton::clicked, this, [this] { (void)empty_trash(); });
  connect(gallery_, &Gallery::chosen, this, &LibraryPanel::chosen);
  connect(gallery_, &Gallery::failed, this, &LibraryPanel::failed);
  connect(gallery_, &QWidget::customContextMenuRequested, this, &LibraryPanel::context_menu);
  auto* remove =
      new QShortcut(QKeySequence::Delete, gallery_, nullptr, nullptr, Qt::WidgetShortcut);
  connect(remove, &QShortcut::activated, this, [this] {
    const GalleryEntry* e = gallery_->entry(gallery_->currentItem());
    if (e != nullptr && e->id != 0) (void)(e->trashed ? restore(e->id) : move_to_trash(e->id));
  });
  poll_timer_.setInterval(2000);
  connect(&poll_timer_, &QTimer::timeout, this, &LibraryPanel::poll);
}

Status LibraryPanel::open(const std::string& dir) {
  poll_timer_.stop();
  library_.reset();
  gallery_->forget_meshes();  // ids of another catalogue name other results
  gallery_->set_kept({});
  setToolTip(QString::fromStdString(dir));
  auto opened = runtime::Library::open(dir);
  if (!opened.ok()) {
    unavailable_ = q(opened.status().message());
    note_->setText(tr("Results are not kept: %1").arg(unavailable_));
    note_->setVisible(true);
    for (QWidget* w : std::initializer_list<QWidget*>{search_, model_, date_, favourites_, trash_})
      w->setEnabled(false);
    return opened.status();
  }
  library_ = std::move(opened).value();
  unavailable_.clear();
  note_->setVisible(false);
  for (QWidget* w : std::initializer_list<QWidget*>{search_, model_, date_, favourites_, trash_})
    w->setEnabled(true);
  refresh();
  gallery_->show_newest();
  poll_timer_.start();
  return Status();
}

GalleryEntry LibraryPanel::to_entry(const runtime::LibraryEntry& e) const {
  GalleryEntry g;
  g.id = e.id;
  g.created_ms = e.created_ms;
  g.prompt = q(e.prompt);
  g.name = q(e.name);
  g.model = q(e.model);
  g.group = q(e.group);
  g.candidate = e.candidate;
  g.seed = e.seed;
  g.favourite = e.favourite;
  g.trashed = e.trashed_ms.has_value();
  g.mesh_file = q(e.mesh_file());
  g.thumbnail_file = q(e.thumbnail_file());
  g.tokens_file = q(e.tokens_file());
  g.timings_file = q(e.timings_file());
  return g;
}

void LibraryPanel::refresh() {
  if (!library_) return;
  runtime::LibraryQuery query;
  query.text = search_->text().trimmed().toStdString();
  query.model = model_->currentData().toString().toStdString();
  query.trash = trash_->isChecked();
  query.since_ms = since_ms(date_->currentData().toInt());
  query.favourites = favourites_->isChecked();
  query.limit = kShownResults;
  auto listed = library_->list(query);
  if (!listed.ok()) {
    Q_EMIT failed(q(listed.status().message()));
    return;
  }
  std::vector<GalleryEntry> kept;
  kept.reserve(listed->size());
  for (auto it = listed->rbegin(); it != listed->rend(); ++it) kept.push_back(to_entry(*it));
  // Session results (not kept) follow the search too, and are not in the trash.
  gallery_->set_kept(std::move(kept), !query.trash && !query.favourites && query.model.empty());
  // The model filter offers every model the library has results of.
  auto all = library_->list({});
  if (all.ok()) {
    QSet<QString> models;
    for (const runtime::LibraryEntry& e : *all) models.insert(q(e.model));
    for (int i = 1; i < model_->count(); ++i) models.remove(model_->itemData(i).toString());
    for (const QString& m : models) {
      if (!m.isEmpty()) model_->addItem(m, m);
    }
  }
  if (auto v = library_->data_version(); v.ok()) data_version_ = *v;
}

void LibraryPanel::poll() {
  if (!library_) return;
  auto v = library_->data_version();
  if (v.ok() && *v != data_version_) {
    const int before = gallery_->count();
    refresh();
    if (gallery_->count() > before) gallery_->show_newest();
  }
}

Expected<int64_t> LibraryPanel::keep(const runtime::NewResult& result,
                                     std::shared_ptr<const mesh::Mesh> mesh, const QString& label,
                                     const QImage& shot) {
  if (!library_) {
    gallery_->add(label, std::move(mesh), shot);
    return io_error("the library could not be opened: " + unavailable_.toStdString());
  }
  auto id = library_->add(result);
  if (!id.ok()) {
    gallery_->add(label, std::move(mesh), shot);
    return id;
  }
  gallery_->attach_mesh(*id, std::move(mesh));
  refresh();
  gallery_->show_newest();
  return id;
}

Status LibraryPanel::report(Status status) {
  if (!status.ok()) Q_EMIT failed(q(status.message()));
  refresh();
  return status;
}

Status LibraryPanel::set_favourite(int64_t id, bool favourite) {
  if (!library_) return io_error("no library is open");
  return report(library_->set_favourite(id, favourite));
}

Status LibraryPanel::rename(int64_t id, const QString& name) {
  if (!library_) return io_error("no library is open");
  return report(library_->rename(id, name.simplified().toStdString()));
}

Status LibraryPanel::move_to_trash(int64_t id) {
  if (!library_) return io_error("no library is open");
  Status st = report(library_->trash(id));
  if (st.ok()) Q_EMIT message(tr("Moved to the trash (the Trash button shows it; Restore undoes)"));
  return st;
}

Status LibraryPanel::restore(int64_t id) {
  if (!library_) return io_error("no library is open");
  return report(library_->restore(id));
}

Status LibraryPanel::set_thumbnail(int64_t id, const QImage& shot) {
  if (!library_) return io_error("no library is open");
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  Gallery::thumbnail(shot).save(&buffer, "PNG");
  return report(library_->set_thumbnail(id, std::vector<uint8_t>(png.begin(), png.end())));
}

Status LibraryPanel::empty_trash() {
  if (!library_) return io_error("no library is open");
  auto removed = library_->empty_trash();
  if (!removed.ok()) return report(removed.status());
  Q_EMIT message(
      tr("Emptied the trash: %n result(s) deleted", nullptr, static_cast<int>(*removed)));
  return report(Status());
}

void LibraryPanel::context_menu(const QPoint& at) {
  QListWidgetItem* item = gallery_->itemAt(at);
  const GalleryEntry* found = gallery_->entry(item);
  if (found == nullptr) return;
  const GalleryEntry e = *found;
  QMenu menu(this);
  QAction* replay = menu.addAction(tr("Replay"));
  replay->setEnabled(e.id != 0);
  QAction* favourite =
      menu.addAction(e.favourite ? tr("Remove from favourites") : tr("Add to favourites"));
  QAction* rename_action = menu.addAction(tr("Rename…"));
  QAction* variations = nullptr;
  if (const int n = gallery_->group_size(e.group); e.id != 0 && n > 1) {
    variations = menu.addAction(gallery_->expanded(e.group) ? tr("Fold the %1 variations").arg(n)
                                                            : tr("Show the %1 variations").arg(n));
  }
  menu.addSeparator();
  QAction* trash = menu.addAction(e.trashed ? tr("Restore") : tr("Move to trash"));
  for (QAction* a : {favourite, rename_action, trash}) a->setEnabled(e.id != 0);
  // The menu runs its own event loop: no refresh may rebuild the tiles under it.
  poll_timer_.stop();
  QAction* picked = menu.exec(gallery_->viewport()->mapToGlobal(at));
  if (library_) poll_timer_.start();
  if (picked == nullptr) return;
  if (picked == replay) {
    // The tile again by its id (the list may have been rebuilt meanwhile).
    for (int i = 0; i < gallery_->count(); ++i) {
      const GalleryEntry* now = gallery_->entry(gallery_->item(i));
      if (now == nullptr || now->id != e.id) continue;
      gallery_->setCurrentRow(i);
      Q_EMIT gallery_->itemClicked(gallery_->item(i));  // its mesh read and shown first
      if (const GalleryEntry* shown = gallery_->entry(gallery_->currentItem())) {
        Q_EMIT replayRequested(*shown);
      }
      break;
    }
  } else if (picked == favourite) {
    (void)set_favourite(e.id, !e.favourite);
  } else if (picked == rename_action) {
    bool ok = false;
    const QString name =
        QInputDialog::getText(this, tr("Rename"), tr("Title:"), QLineEdit::Normal, e.title(), &ok);
    if (ok) (void)rename(e.id, name == e.prompt ? QString() : name);
  } else if (picked == variations) {
    gallery_->set_expanded(e.group, !gallery_->expanded(e.group));
  } else if (picked == trash) {
    (void)(e.trashed ? restore(e.id) : move_to_trash(e.id));
  }
}

}  // namespace tessera::studio
