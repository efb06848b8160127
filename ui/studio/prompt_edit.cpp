#include "ui/studio/prompt_edit.h"

#include <QKeyEvent>
#include <QTextBlock>

namespace tessera::studio {

void PromptEdit::set_example(const QString& example) {
  setPlaceholderText(
      example.isEmpty()
          ? tr("Describe a shape, e.g. \"a wooden chair\"  (Ctrl+Enter generates, Esc cancels, "
               "Up/Down: history)")
          : tr("Describe a shape, e.g. \"%1\"  (Examples: what this model knows; Ctrl+Enter "
               "generates, Esc cancels, Up/Down: history)")
                .arg(example));
}

PromptEdit::PromptEdit(QWidget* parent) : QPlainTextEdit(parent) {
  set_example(QString());
  setTabChangesFocus(true);
  const int line = fontMetrics().lineSpacing();
  setFixedHeight(line * 3 + 12);
}

void PromptEdit::remember(const QString& prompt) {
  if (!prompt.isEmpty()) {
    history_.removeAll(prompt);
    history_.prepend(prompt);
    while (history_.size() > kMaxHistory) history_.removeLast();
  }
  history_index_ = -1;
  draft_.clear();
}

void PromptEdit::set_history(const QStringList& history) {
  history_ = history.mid(0, kMaxHistory);
  history_index_ = -1;
}

void PromptEdit::show_history(int index) {
  if (history_index_ == -1) draft_ = toPlainText();
  history_index_ = index;
  setPlainText(index < 0 ? draft_ : history_[index]);
  moveCursor(QTextCursor::End);
}

void PromptEdit::keyPressEvent(QKeyEvent* event) {
  const bool ctrl = event->modifiers() & Qt::ControlModifier;
  if ((event->key() == Qt::Key_Return || event->key() == Qt::Key_Enter) && ctrl) {
    Q_EMIT generateRequested();
    event->accept();
    return;
  }
  if (event->key() == Qt::Key_Escape) {
    Q_EMIT cancelRequested();
    event->accept();
    return;
  }
  const QTextCursor cursor = textCursor();
  if (event->key() == Qt::Key_Up && !ctrl && cursor.block() == document()->firstBlock() &&
      history_index_ + 1 < history_.size()) {
    show_history(history_index_ + 1);
    event->accept();
    return;
  }
  if (event->key() == Qt::Key_Down && !ctrl && cursor.block() == document()->lastBlock() &&
      history_index_ >= 0) {
    show_history(history_index_ - 1);
    event->accept();
    return;
  }
  QPlainTextEdit::keyPressEvent(event);
}

}  // namespace tessera::studio
