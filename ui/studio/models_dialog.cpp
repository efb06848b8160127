#include "ui/studio/models_dialog.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QMetaObject>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <string>

#include "engine/runtime/model_pull.h"
#include "engine/runtime/models.h"

namespace tessera::studio {

namespace {

QString size_text(int64_t bytes) {
  return bytes >= 1'000'000'000
             ? QStringLiteral("%1 GB").arg(static_cast<double>(bytes) / 1e9, 0, 'f', 2)
             : QStringLiteral("%1 MB").arg(static_cast<double>(bytes) / 1e6, 0, 'f', 1);
}

}  // namespace

ModelsDialog::ModelsDialog(QWidget* parent) : QDialog(parent) {
  setWindowTitle(tr("Models"));
  auto* layout = new QVBoxLayout(this);
  auto* intro = new QLabel(
      tr("Models by name, kept in the Hugging Face cache (%1): files other tools fetched are "
         "used as they are.")
          .arg(QString::fromStdString(runtime::hf_hub_cache_dir())),
      this);
  intro->setWordWrap(true);
  layout->addWidget(intro);
  table_ = new QTableWidget(0, 5, this);
  table_->setHorizontalHeaderLabels({tr("Model"), tr("Kind"), tr("Size"), tr("Here"), QString()});
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  table_->horizontalHeader()->setSectionResizeMode(3, QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(4, QHeaderView::ResizeToContents);
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  layout->addWidget(table_, 1);
  auto* row = new QHBoxLayout();
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 100);
  progress_->setVisible(false);
  cancel_ = new QPushButton(tr("Cancel download"), this);
  cancel_->setVisible(false);
  connect(cancel_, &QPushButton::clicked, this, &ModelsDialog::cancel_download);
  row->addWidget(progress_, 1);
  row->addWidget(cancel_);
  layout->addLayout(row);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  layout->addWidget(status_);
  resize(760, 320);
  build_rows();
  refresh();
}

ModelsDialog::~ModelsDialog() {
  cancel_flag_.store(true);
  join_worker();
}

void ModelsDialog::join_worker() {
  if (worker_.joinable()) worker_.join();
}

void ModelsDialog::build_rows() {
  const auto& models = runtime::known_models();
  table_->setRowCount(static_cast<int>(models.size()));
  for (int i = 0; i < static_cast<int>(models.size()); ++i) {
    const runtime::KnownModel& m = models[static_cast<size_t>(i)];
    const QString name = QString::fromStdString(m.name);
    table_->setItem(i, 0, new QTableWidgetItem(name));
    table_->item(i, 0)->setToolTip(QString::fromStdString(m.summary));
    table_->setItem(i, 1, new QTableWidgetItem(QString(runtime::model_kind_name(m.kind))));
    table_->setItem(i, 2, new QTableWidgetItem(size_text(m.bytes())));
    table_->setItem(i, 3, new QTableWidgetItem());
    Row row;
    auto* buttons = new QWidget;
    auto* h = new QHBoxLayout(buttons);
    h->setContentsMargins(2, 0, 2, 0);
    if (m.kind != runtime::ModelKind::kTextEncoder) {
      row.use = new QPushButton(tr("Use"), buttons);
      connect(row.use, &QPushButton::clicked, this, [this, name] { Q_EMIT useModel(name); });
      h->addWidget(row.use);
    }
    row.get = new QPushButton(tr("Download"), buttons);
    connect(row.get, &QPushButton::clicked, this, [this, name] { download(name); });
    h->addWidget(row.get);
    row.remove = new QPushButton(tr("Remove"), buttons);
    connect(row.remove, &QPushButton::clicked, this, [this, name] {
      if (Status st = runtime::remove_cached_model(name.toStdString()); !st.ok()) {
        status_->setText(QString::fromStdString(st.message()));
      } else {
        status_->setText(tr("Removed %1").arg(name));
      }
      refresh();
    });
    h->addWidget(row.remove);
    table_->setCellWidget(i, 4, buttons);
    rows_.push_back(row);
  }
}

void ModelsDialog::refresh() {
  const auto& models = runtime::known_models();
  for (int i = 0; i < static_cast<int>(models.size()); ++i) {
    const runtime::KnownModel& m = models[static_cast<size_t>(i)];
    const QString name = QString::fromStdString(m.name);
    auto cached = runtime::find_cached_model(m.name);
    const bool here = cached.ok() && cached->complete();
    QString state = here ? tr("yes") : tr("no");
    if (cached.ok() && !here && !cached->commit.empty()) state = tr("partial");
    if (downloading() && downloading_ == name) state = tr("downloading");
    table_->item(i, 3)->setText(state);
    table_->item(i, 3)->setToolTip(here ? QString::fromStdString(cached->snapshot_dir) : QString());
    const Row& row = rows_[static_cast<size_t>(i)];
    if (row.use != nullptr) row.use->setEnabled(here);
    row.get->setText(here ? tr("Check") : tr("Download"));
    row.get->setEnabled(!downloading());
    row.remove->setEnabled(cached.ok() && !cached->commit.empty() && !downloading());
  }
  table_->resizeRowsToContents();
}

bool ModelsDialog::download(const QString& name) {
  if (downloading() || runtime::find_known_model(name.toStdString()) == nullptr) return false;
  join_worker();
  finished_ = false;
  downloading_ = name;
  cancel_flag_.store(false);
  progress_->setValue(0);
  progress_->setVisible(true);
  cancel_->setVisible(true);
  status_->setText(tr("Asking the Hub for %1 ...").arg(name));
  refresh();
  QPointer<ModelsDialog> self(this);
  worker_ = std::thread([this, self, name] {
    runtime::PullOptions options;
    options.cancel = &cancel_flag_;
    options.on_progress = [self](const runtime::PullProgress& p) {
      const int percent = p.total > 0 ? static_cast<int>(100 * p.done / p.total) : 100;
      QString text = QStringLiteral("%1/%2: %3 of %4, %5 MB/s")
                         .arg(QString::fromStdString(p.model), QString::fromStdString(p.file),
                              size_text(p.done), size_text(p.total))
                         .arg(p.bytes_per_second / 1e6, 0, 'f', 1);
      if (p.bytes_per_second > 0 && p.done < p.total) {
        const int64_t left = static_cast<int64_t>((p.total - p.done) / p.bytes_per_second);
        text += QStringLiteral(", %1m%2s left").arg(left / 60).arg(left % 60, 2, 10, QChar('0'));
      }
      QMetaObject::invokeMethod(
          self,
          [self, text, percent] {
            if (self) self->on_progress(text, percent);
          },
          Qt::QueuedConnection);
    };
    auto report = runtime::pull_model(name.toStdString(), options);
    const bool ok = report.ok();
    const QString message = ok ? QStringLiteral("%1 is here (%2 downloaded)")
                                     .arg(name, size_text(report->downloaded_bytes))
                               : QString::fromStdString(report.status().message());
    QMetaObject::invokeMethod(
        self,
        [self, name, ok, message] {
          if (self) self->on_finished(name, ok, message);
        },
        Qt::QueuedConnection);
  });
  return true;
}

void ModelsDialog::cancel_download() {
  cancel_flag_.store(true);
}

void ModelsDialog::on_progress(const QString& text, int percent) {
  progress_->setValue(percent);
  status_->setText(text);
}

void ModelsDialog::on_finished(const QString& name, bool ok, const QString& message) {
  finished_ = true;
  join_worker();
  progress_->setVisible(false);
  cancel_->setVisible(false);
  status_->setText(message);
  downloading_.clear();
  refresh();
  Q_EMIT downloadFinished(name, ok, message);
}

QString ModelsDialog::status_text() const {
  return status_->text();
}

int ModelsDialog::progress_percent() const {
  return progress_->value();
}

}  // namespace tessera::studio
