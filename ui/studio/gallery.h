// Gallery: the results as a strip of thumbnails, oldest to newest (the "Library" dock's list,
// LibraryPanel). Two kinds of entry: results kept in the library (an id; thumbnail read when the
// tile is first drawn, mesh when the entry is first chosen) and this session's results that are
// not (re-meshes, and everything when no library could be opened; held in memory).
//
// Variations of one job are grouped: a group shows as one tile ("a chair ×4", its first candidate)
// until it is expanded; the newest group is expanded, so a job's candidates are all in view as
// they finish. Favourites are marked with a star. Choosing an entry emits chosen(). UI thread only.
#pragma once

#include <QImage>
#include <QListWidget>
#include <QSet>
#include <QString>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/mesh/mesh.h"

namespace tessera::studio {

struct GalleryEntry {
  int64_t id = 0;  // the library's row; 0: this session's only
  int64_t created_ms = 0;
  QString prompt;
  QString name;   // the artist's title ("": the prompt)
  QString label;  // caption before grouping ("a chair · seed 3"); "": the title or the prompt
  QString model;
  QString group;  // "": a group of its own
  int candidate = 0;
  uint64_t seed = 0;
  bool favourite = false;
  bool trashed = false;
  QString mesh_file, thumbnail_file, tokens_file, timings_file;  // kept results
  QImage thumbnail;                                              // session results
  std::shared_ptr<const mesh::Mesh> mesh;  // null until a kept result's file is read
  QString title() const { return name.isEmpty() ? prompt : name; }
};

class Gallery : public QListWidget {
  Q_OBJECT

 public:
  explicit Gallery(QWidget* parent = nullptr);

  // Replaces the kept entries (oldest first) with `kept`; meshes already read stay with their ids.
  // Session entries stay unless `show_session` is false (e.g. the trash is shown).
  void set_kept(std::vector<GalleryEntry> kept, bool show_session = true);
  // Adds a session result with a thumbnail cut from `shot` (the centred square, scaled down).
  void add(const QString& label, std::shared_ptr<const mesh::Mesh> mesh, const QImage& shot);
  // Drops the meshes read for kept results (another library is opened: its ids are others).
  void forget_meshes() { meshes_.clear(); }
  // The mesh of kept result `id` is `mesh` (a result just made: no need to read its file).
  void attach_mesh(int64_t id, std::shared_ptr<const mesh::Mesh> mesh);
  // The square thumbnail of `shot` (what add() shows).
  static QImage thumbnail(const QImage& shot);
  // Every entry holding `before` holds `after` from now on (e.g. the textured copy).
  void replace_mesh(const std::shared_ptr<const mesh::Mesh>& before,
                    std::shared_ptr<const mesh::Mesh> after);
  // The entry behind a tile (null: none).
  const GalleryEntry* entry(const QListWidgetItem* item) const;
  // How many results `group` has among the kept entries shown.
  int group_size(const QString& group) const;
  bool expanded(const QString& group) const;
  void set_expanded(const QString& group, bool expanded);
  // The kept entries shown (oldest first), folded groups included.
  const std::vector<GalleryEntry>& kept() const { return kept_; }
  // Scrolls to the newest tile.
  void show_newest();

  static constexpr int kThumbnailSize = 96;

 Q_SIGNALS:
  // An entry was chosen; its mesh is read (kept results) before this is emitted.
  void chosen(const tessera::studio::GalleryEntry& entry);
  // A kept result's mesh file could not be read.
  void failed(const QString& message);

 private:
  void rebuild();
  void choose(QListWidgetItem* item);
  std::vector<GalleryEntry> kept_;
  std::vector<GalleryEntry> session_;
  bool show_session_ = true;
  QSet<QString> expanded_;
  QString newest_group_;
  std::map<int64_t, std::shared_ptr<const mesh::Mesh>> meshes_;  // read or attached, by id
};

}  // namespace tessera::studio
