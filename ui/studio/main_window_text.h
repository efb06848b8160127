// Small helpers shared by the main_window*.cpp parts.
#pragma once

#include <QString>

#include "engine/mesh/mesh.h"

namespace tessera::studio {

// The shape decoder's object cube (engine/mesh/mesh.h conventions), slightly shrunk: shapes rarely
// touch its corners, and a tighter frame shows them larger.
inline const mesh::Bounds kDecoderCube{{-0.8f, -0.8f, -0.8f}, {0.8f, 0.8f, 0.8f}};

// `text` on one line, cut to `max_chars` with an ellipsis (status bar messages).
inline QString one_line(const QString& text, int max_chars = 60) {
  QString s = text.simplified();
  return s.size() > max_chars ? s.left(max_chars - 1) + QChar(0x2026) : s;
}

}  // namespace tessera::studio
