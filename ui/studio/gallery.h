// Gallery: the results (the "Gallery" dock), a thumbnail and the prompt per mesh: those kept in
// the library, restored at start, then this session's. Owns the meshes it shows; clicking an entry
// emits meshChosen. UI thread only.
#pragma once

#include <QImage>
#include <QListWidget>
#include <QString>
#include <memory>
#include <vector>

#include "engine/mesh/mesh.h"

namespace tessera::studio {

class Gallery : public QListWidget {
  Q_OBJECT

 public:
  explicit Gallery(QWidget* parent = nullptr);

  // Adds `mesh` with a thumbnail cut from `shot` (the centred square, scaled down).
  void add(const QString& prompt, std::shared_ptr<const mesh::Mesh> mesh, const QImage& shot);
  // Adds a result kept in the library: its thumbnail file is read when the entry is first drawn,
  // its mesh file when the entry is first chosen.
  void add_kept(const QString& prompt, const QString& mesh_file, const QString& thumbnail_file);
  // The square thumbnail of `shot` (what add() shows).
  static QImage thumbnail(const QImage& shot);
  // The entry holding `before` (if any) holds `after` from now on (e.g. the textured copy).
  void replace_mesh(const std::shared_ptr<const mesh::Mesh>& before,
                    std::shared_ptr<const mesh::Mesh> after);

  static constexpr int kThumbnailSize = 96;

 Q_SIGNALS:
  void meshChosen(const QString& prompt, std::shared_ptr<const tessera::mesh::Mesh> mesh);
  // A kept result's mesh file could not be read.
  void failed(const QString& message);

 private:
  void choose(QListWidgetItem* item);
  struct Result {
    QString prompt;
    std::shared_ptr<const mesh::Mesh> mesh;  // null until a kept result's file is read
    QString mesh_file;
  };
  std::vector<Result> results_;
};

}  // namespace tessera::studio
