// Gallery: this session's results (the "Gallery" dock), a thumbnail and the prompt per mesh. Owns
// the meshes it shows; clicking an entry emits meshChosen. UI thread only.
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
  // The entry holding `before` (if any) holds `after` from now on (e.g. the textured copy).
  void replace_mesh(const std::shared_ptr<const mesh::Mesh>& before,
                    std::shared_ptr<const mesh::Mesh> after);

  static constexpr int kThumbnailSize = 96;

 Q_SIGNALS:
  void meshChosen(const QString& prompt, std::shared_ptr<const tessera::mesh::Mesh> mesh);

 private:
  void choose(QListWidgetItem* item);
  struct Result {
    QString prompt;
    std::shared_ptr<const mesh::Mesh> mesh;
  };
  std::vector<Result> results_;
};

}  // namespace tessera::studio
