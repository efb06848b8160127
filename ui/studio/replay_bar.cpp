#include "ui/studio/replay_bar.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSlider>
#include <QStyle>
#include <QToolButton>

#include "ui/studio/replay_controller.h"

namespace tessera::studio {

namespace {

// Playback speeds as multiples of the controller's default (a shape in about 5 s).
constexpr double kSpeeds[] = {0.25, 0.5, 1.0, 2.0, 4.0};

}  // namespace

ReplayBar::ReplayBar(ReplayController& replay, QWidget* parent) : QWidget(parent), replay_(replay) {
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(4, 2, 4, 2);
  play_ = new QToolButton(this);
  play_->setObjectName(QStringLiteral("ReplayPlay"));
  play_->setToolTip(tr("Play the shape forming again (Space)"));
  row->addWidget(play_);
  slider_ = new QSlider(Qt::Horizontal, this);
  slider_->setObjectName(QStringLiteral("ReplaySlider"));
  slider_->setToolTip(tr("Drag to see the mesh of the first k tokens"));
  row->addWidget(slider_, 1);
  speed_ = new QComboBox(this);
  speed_->setObjectName(QStringLiteral("ReplaySpeed"));
  for (double s : kSpeeds) speed_->addItem(QStringLiteral("%1x").arg(s), s);
  speed_->setCurrentIndex(2);
  speed_->setToolTip(tr("Playback speed (1x: a whole shape in about 5 s)"));
  row->addWidget(speed_);
  label_ = new QLabel(this);
  label_->setMinimumWidth(230);
  row->addWidget(label_);
  auto* close = new QToolButton(this);
  close->setIcon(style()->standardIcon(QStyle::SP_TitleBarCloseButton));
  close->setToolTip(tr("End the replay"));
  row->addWidget(close);

  connect(play_, &QToolButton::clicked, this, [this] {
    if (replay_.playing()) {
      replay_.pause();
    } else {
      replay_.play();
    }
  });
  connect(slider_, &QSlider::valueChanged, this, [this](int k) {
    if (k != replay_.position()) replay_.seek(k);
  });
  connect(slider_, &QSlider::sliderPressed, &replay_, &ReplayController::pause);
  connect(speed_, &QComboBox::currentIndexChanged, this, [this](int i) {
    replay_.set_speed(replay_.default_speed() * speed_->itemData(i).toDouble());
  });
  connect(close, &QToolButton::clicked, this, &ReplayBar::closeRequested);
  connect(&replay_, &ReplayController::changed, this, &ReplayBar::sync);
  sync();
}

void ReplayBar::sync() {
  setVisible(replay_.active());
  if (!replay_.active()) return;
  const QSignalBlocker block(slider_);
  slider_->setRange(0, static_cast<int>(replay_.length()));
  slider_->setValue(static_cast<int>(replay_.position()));
  play_->setIcon(
      style()->standardIcon(replay_.playing() ? QStyle::SP_MediaPause : QStyle::SP_MediaPlay));
  const int64_t meshable = std::max<int64_t>(replay_.length() - 1, 0);
  QString text = tr("token %1 / %2").arg(replay_.position()).arg(replay_.length());
  if (replay_.cached() < meshable) {
    text += tr(" · meshed %1 / %2").arg(replay_.cached()).arg(meshable);
  }
  if (!replay_.is_cached(replay_.position())) text += tr(" · meshing…");
  label_->setText(text);
}

}  // namespace tessera::studio
