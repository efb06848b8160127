// Small helpers the studio's controllers and panels share: how a message fits the status bar, a
// message box that does not block, and the frame generated shapes are shown in.
#pragma once

#include <QMessageBox>
#include <QString>
#include <QWidget>

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

// A message box over `parent`, window-modal but not blocking (open(), deleted on close): the
// engine's events keep flowing while it is up.
inline void show_message_box(QWidget* parent, QMessageBox::Icon icon, const QString& title,
                             const QString& text) {
  auto* box = new QMessageBox(icon, title, text, QMessageBox::Ok, parent);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

}  // namespace tessera::studio
