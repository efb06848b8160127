// TokenStrip: the shape tokens generated so far as small coloured tiles, row by row, sized so the
// whole sequence (num_latents tokens) fits the widget. The colour of a tile is a function of the
// token id alone (golden-ratio hue steps), so the same code always has the same colour.
#pragma once

#include <QColor>
#include <QWidget>
#include <cstdint>
#include <vector>

namespace tessera::studio {

// Colour of shape token `id` (any value; deterministic).
QColor token_color(int32_t id);

class TokenStrip : public QWidget {
  Q_OBJECT

 public:
  explicit TokenStrip(QWidget* parent = nullptr);
  // Shows `ids` out of `total` expected tokens (total < ids.size() is treated as ids.size()).
  void set_tokens(const std::vector<int32_t>& ids, int64_t total);
  QSize sizeHint() const override { return {400, 40}; }
  int64_t token_count() const { return static_cast<int64_t>(ids_.size()); }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  std::vector<int32_t> ids_;
  int64_t total_ = 0;
};

}  // namespace tessera::studio
