// PromptEdit: the prompt text box. Ctrl+Enter (or Ctrl+Return) asks to generate, Esc asks to
// cancel, Up on the first line / Down on the last line walk the history of submitted prompts
// (newest first; the text being typed is kept and comes back after the newest entry).
#pragma once

#include <QPlainTextEdit>
#include <QStringList>

namespace tessera::studio {

class PromptEdit : public QPlainTextEdit {
  Q_OBJECT

 public:
  static constexpr int kMaxHistory = 100;

  explicit PromptEdit(QWidget* parent = nullptr);

  QString prompt() const { return toPlainText().trimmed(); }
  // The placeholder's example prompt (empty: a generic one).
  void set_example(const QString& example);
  // Records `prompt` as the newest history entry (duplicates move to the front) and resets the
  // history cursor.
  void remember(const QString& prompt);
  const QStringList& history() const { return history_; }  // newest first
  void set_history(const QStringList& history);

 Q_SIGNALS:
  void generateRequested();
  void cancelRequested();

 protected:
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void show_history(int index);

  QStringList history_;
  int history_index_ = -1;  // -1: the draft, not a history entry
  QString draft_;
};

}  // namespace tessera::studio
