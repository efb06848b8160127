#include "ui/studio/candidate_grid.h"

#include <QEvent>
#include <QGridLayout>
#include <QMouseEvent>
#include <QVBoxLayout>
#include <algorithm>

#include "ui/studio/studio_text.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

CandidateGrid::CandidateGrid(QWidget* parent) : QWidget(parent) {
  layout_ = new QGridLayout(this);
  layout_->setContentsMargins(0, 2, 0, 2);
  layout_->setSpacing(4);
  setVisible(false);
}

void CandidateGrid::reset(int count, uint64_t first_seed) {
  for (Tile& t : tiles_) {
    layout_->removeWidget(t.frame);
    t.frame->deleteLater();
  }
  tiles_.clear();
  selected_ = 0;
  if (count <= 1) {
    setVisible(false);
    return;
  }
  // One row up to 4 candidates, two rows for 6.
  const int columns = count <= 4 ? count : (count + 1) / 2;
  for (int i = 0; i < count; ++i) {
    Tile t;
    t.seed = first_seed + static_cast<uint64_t>(i);
    t.frame = new QFrame(this);
    t.frame->setFrameShape(QFrame::Box);
    t.frame->setLineWidth(2);
    auto* v = new QVBoxLayout(t.frame);
    v->setContentsMargins(2, 2, 2, 2);
    v->setSpacing(1);
    t.view = new Viewport(t.frame);
    t.view->set_tile_mode(true);
    t.view->setMinimumSize(120, 90);
    t.view->frame_bounds(kDecoderCube);  // a still camera while the shape forms
    t.view->installEventFilter(this);
    t.view->setToolTip(tr("Click to make candidate %1 the current mesh").arg(i + 1));
    t.caption = new QLabel(t.frame);
    t.caption->setAlignment(Qt::AlignCenter);
    v->addWidget(t.view, 1);
    v->addWidget(t.caption);
    layout_->addWidget(t.frame, i / columns, i % columns);
    tiles_.push_back(t);
    update_caption(i);
  }
  select(0);
  setVisible(true);
}

void CandidateGrid::set_mesh(int i, std::shared_ptr<const mesh::Mesh> mesh, bool final) {
  if (i < 0 || i >= count()) return;
  Tile& t = tiles_[static_cast<size_t>(i)];
  t.mesh = mesh;
  t.final = final;
  t.view->set_mesh(std::move(mesh), false);
  update_caption(i);
}

void CandidateGrid::select(int i) {
  if (i < 0 || i >= count()) return;
  selected_ = i;
  for (int j = 0; j < count(); ++j) {
    tiles_[static_cast<size_t>(j)].frame->setStyleSheet(
        j == i ? QStringLiteral("QFrame { border: 2px solid #4a90d9; }")
               : QStringLiteral("QFrame { border: 2px solid transparent; }"));
  }
}

std::shared_ptr<const mesh::Mesh> CandidateGrid::mesh(int i) const {
  return i >= 0 && i < count() ? tiles_[static_cast<size_t>(i)].mesh : nullptr;
}

bool CandidateGrid::is_final(int i) const {
  return i >= 0 && i < count() && tiles_[static_cast<size_t>(i)].final;
}

uint64_t CandidateGrid::seed(int i) const {
  return i >= 0 && i < count() ? tiles_[static_cast<size_t>(i)].seed : 0;
}

Viewport* CandidateGrid::view(int i) const {
  return i >= 0 && i < count() ? tiles_[static_cast<size_t>(i)].view : nullptr;
}

void CandidateGrid::update_caption(int i) {
  Tile& t = tiles_[static_cast<size_t>(i)];
  t.caption->setText(tr("%1 \u00b7 seed %2%3")
                         .arg(i + 1)
                         .arg(t.seed)
                         .arg(t.final ? QString() : (t.mesh ? tr(" \u2026") : tr(" (waiting)"))));
}

bool CandidateGrid::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::MouseButtonPress) {
    const auto* press = static_cast<QMouseEvent*>(event);
    if (press->button() == Qt::LeftButton) {
      for (int i = 0; i < count(); ++i) {
        if (tiles_[static_cast<size_t>(i)].view == watched) {
          select(i);
          Q_EMIT candidateChosen(i);
          break;
        }
      }
    }
  }
  return QWidget::eventFilter(watched, event);  // the tile still orbits on a drag
}

}  // namespace tessera::studio
