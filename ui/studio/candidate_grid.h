// CandidateGrid: the variations of one job side by side: a tile per candidate, each a
// small Viewport (tile mode: no overlay, repainted when its mesh changes) that shows the
// candidate's partial meshes as they form and then its final mesh, with a caption "2 · seed 43".
// Clicking a tile chooses it (candidateChosen): the main window makes that candidate's mesh the
// current one (export, texture and the gallery act on it). Hidden when the job has one candidate.
// UI thread only.
#pragma once

#include <QFrame>
#include <QLabel>
#include <QWidget>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/mesh/mesh.h"

class QGridLayout;

namespace tessera::studio {

class Viewport;

class CandidateGrid : public QWidget {
  Q_OBJECT

 public:
  explicit CandidateGrid(QWidget* parent = nullptr);

  // A new job: `count` tiles (<= 1 hides the grid), candidate i with seed first_seed + i, empty,
  // candidate 0 selected.
  void reset(int count, uint64_t first_seed);
  // Candidate `i`'s newest mesh (final: its finished one). Out-of-range i is ignored.
  void set_mesh(int i, std::shared_ptr<const mesh::Mesh> mesh, bool final);
  // Highlights tile i (no signal).
  void select(int i);
  int count() const { return static_cast<int>(tiles_.size()); }
  int selected() const { return selected_; }
  std::shared_ptr<const mesh::Mesh> mesh(int i) const;
  bool is_final(int i) const;
  uint64_t seed(int i) const;
  // Tile i's view (thumbnails for the gallery); null when out of range.
  Viewport* view(int i) const;

 Q_SIGNALS:
  void candidateChosen(int candidate);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  struct Tile {
    QFrame* frame = nullptr;
    Viewport* view = nullptr;
    QLabel* caption = nullptr;
    std::shared_ptr<const mesh::Mesh> mesh;
    bool final = false;
    uint64_t seed = 0;
  };
  void update_caption(int i);
  QGridLayout* layout_ = nullptr;
  std::vector<Tile> tiles_;
  int selected_ = 0;
};

}  // namespace tessera::studio
