// LibraryPanel: the "Library" dock. The results kept in the library (engine/runtime/library.h) as
// the gallery strip, with a search over prompts and titles, filters by model, by date and for
// favourites, and the trash (restore, empty). A tile's context menu replays it, marks it a
// favourite, renames it, shows or folds its variations, and moves it to the trash (Delete does
// too). The panel owns the library: it keeps every result the window hands it, and it notices what
// other processes (another studio, `tessera generate --library`) add, every two seconds, without a
// restart. Without a library (it could not be opened) the gallery still holds this session's
// results, and the panel says why in its place.
//
// UI thread only.
#pragma once

#include <QLabel>
#include <QString>
#include <QTimer>
#include <QWidget>
#include <memory>
#include <optional>
#include <vector>

#include "engine/mesh/mesh.h"
#include "engine/runtime/library.h"
#include "ui/studio/gallery.h"

class QComboBox;
class QLineEdit;
class QToolButton;

namespace tessera::studio {

class LibraryPanel : public QWidget {
  Q_OBJECT

 public:
  explicit LibraryPanel(QWidget* parent = nullptr);

  // Opens the library in `dir` and shows it; an error (kept, and shown in the panel) otherwise.
  Status open(const std::string& dir);
  runtime::Library* library() const { return library_.get(); }
  // Why there is no library ("": there is one).
  QString unavailable() const { return unavailable_; }
  // Keeps `result` (its mesh is `mesh`) and shows it; the error when it could not be kept (the
  // gallery then holds it for this session, labelled `label`).
  Expected<int64_t> keep(const runtime::NewResult& result, std::shared_ptr<const mesh::Mesh> mesh,
                         const QString& label, const QImage& shot);
  // Re-reads the catalogue with the current search and filters.
  void refresh();
  Gallery* gallery() const { return gallery_; }
  QLineEdit* search() const { return search_; }
  QComboBox* model_filter() const { return model_; }
  QComboBox* date_filter() const { return date_; }
  QToolButton* favourites_only() const { return favourites_; }
  QToolButton* trash_button() const { return trash_; }
  QToolButton* empty_trash_button() const { return empty_trash_; }

  // The context menu's actions, for kept result `id` (public for tests).
  Status set_favourite(int64_t id, bool favourite);
  Status rename(int64_t id, const QString& name);
  Status move_to_trash(int64_t id);
  Status restore(int64_t id);
  Status empty_trash();
  // Gives kept result `id` the thumbnail cut from `shot` (results kept without one).
  Status set_thumbnail(int64_t id, const QImage& shot);

 Q_SIGNALS:
  // A result was chosen (its mesh read).
  void chosen(const tessera::studio::GalleryEntry& entry);
  void replayRequested(const tessera::studio::GalleryEntry& entry);
  // Something went wrong (a file, the catalogue): for the status bar.
  void failed(const QString& message);
  void message(const QString& text);

 private:
  void context_menu(const QPoint& at);
  void poll();
  GalleryEntry to_entry(const runtime::LibraryEntry& e) const;
  Status report(Status status);

  std::unique_ptr<runtime::Library> library_;
  QString unavailable_;
  int64_t data_version_ = -1;
  QLineEdit* search_ = nullptr;
  QComboBox* model_ = nullptr;
  QComboBox* date_ = nullptr;
  QToolButton* favourites_ = nullptr;
  QToolButton* trash_ = nullptr;
  QToolButton* empty_trash_ = nullptr;
  QLabel* note_ = nullptr;
  Gallery* gallery_ = nullptr;
  QTimer poll_timer_;
};

}  // namespace tessera::studio
