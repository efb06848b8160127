// ModelsDialog (File > Models...): the models Tessera knows by name (engine/runtime/models.h), one
// row each with its kind, size and whether it is here (the Hugging Face cache), and Download
// (progress with rate and time left; Cancel keeps the part fetched for the next Download), Use
// (loads it: no path to type) and Remove. A download runs runtime::pull_model on a thread of its
// own; its progress reaches the dialog through queued calls, so the window never waits. One
// download at a time. Closing the dialog hides it; the download goes on; destroying it cancels and
// waits for the download to stop (at the next transfer callback, lock poll or file boundary; a
// metadata request in flight can take up to its 60 s timeout).
#pragma once

#include <QDialog>
#include <QString>
#include <atomic>
#include <thread>
#include <vector>

class QLabel;
class QProgressBar;
class QPushButton;
class QTableWidget;

namespace tessera::studio {

class ModelsDialog : public QDialog {
  Q_OBJECT

 public:
  explicit ModelsDialog(QWidget* parent = nullptr);
  ~ModelsDialog() override;

  // Re-reads the cache into the table.
  void refresh();
  // Starts fetching `name` (false when a download is running or the name is unknown).
  bool download(const QString& name);
  void cancel_download();
  bool downloading() const { return !finished_; }
  QTableWidget* table() const { return table_; }
  QString status_text() const;
  int progress_percent() const;

 Q_SIGNALS:
  // Use: the window loads the model by name.
  void useModel(const QString& name);
  void downloadFinished(const QString& name, bool ok, const QString& message);

 private:
  void on_progress(const QString& text, int percent);
  void on_finished(const QString& name, bool ok, const QString& message);
  void join_worker();
  void build_rows();

  struct Row {
    QPushButton* use = nullptr;  // null for text encoders (not used on their own)
    QPushButton* get = nullptr;
    QPushButton* remove = nullptr;
  };
  std::vector<Row> rows_;

  QTableWidget* table_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QPushButton* cancel_ = nullptr;
  std::thread worker_;
  std::atomic<bool> cancel_flag_{false};
  bool finished_ = true;
  QString downloading_;
};

}  // namespace tessera::studio
