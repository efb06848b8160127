#include "ui/studio/token_strip.h"

#include <QPainter>
#include <algorithm>
#include <cmath>

namespace tessera::studio {

QColor token_color(int32_t id) {
  // Golden-ratio hue steps spread neighbouring codes far apart on the colour wheel.
  const double hue = std::fmod(static_cast<double>(static_cast<uint32_t>(id)) * 0.6180339887, 1.0);
  const double value = 0.65 + 0.3 * static_cast<double>((static_cast<uint32_t>(id) >> 3) % 2);
  return QColor::fromHsvF(static_cast<float>(hue), 0.65f, static_cast<float>(value));
}

TokenStrip::TokenStrip(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(24);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  setToolTip(tr("Shape tokens generated so far (colour = token id)"));
}

void TokenStrip::set_tokens(const std::vector<int32_t>& ids, int64_t total) {
  ids_ = ids;
  total_ = std::max<int64_t>(total, static_cast<int64_t>(ids.size()));
  update();
}

void TokenStrip::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  painter.fillRect(rect(), palette().window());
  if (total_ <= 0) return;
  // Largest tile (up to 12 px) such that every expected token has a slot.
  const int w = std::max(1, width() - 4), h = std::max(1, height() - 4);
  int tile = 12;
  while (tile > 1 && static_cast<int64_t>(w / tile) * (h / tile) < total_) --tile;
  const int cols = std::max(1, w / tile);
  const int gap = tile >= 4 ? 1 : 0;
  const QColor empty = palette().mid().color();
  for (int64_t i = 0; i < total_; ++i) {
    const int x = 2 + static_cast<int>(i % cols) * tile;
    const int y = 2 + static_cast<int>(i / cols) * tile;
    if (y + tile > height()) break;
    const QColor c =
        i < static_cast<int64_t>(ids_.size()) ? token_color(ids_[static_cast<size_t>(i)]) : empty;
    painter.fillRect(x, y, tile - gap, tile - gap, c);
  }
}

}  // namespace tessera::studio
