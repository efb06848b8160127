// ReplayBar: the timeline under the viewport while a result is replayed (ReplayController): play /
// pause, a slider over the tokens (dragging it scrubs), the playback speed, where the cursor is
// and how much is meshed, and a button that ends the replay. Hidden when no replay is open.
// UI thread only.
#pragma once

#include <QWidget>

class QComboBox;
class QLabel;
class QSlider;
class QToolButton;

namespace tessera::studio {

class ReplayController;

class ReplayBar : public QWidget {
  Q_OBJECT

 public:
  ReplayBar(ReplayController& replay, QWidget* parent = nullptr);
  QSlider* slider() const { return slider_; }
  QToolButton* play_button() const { return play_; }
  QComboBox* speed() const { return speed_; }
  QLabel* label() const { return label_; }

 Q_SIGNALS:
  // The close button: the window ends the replay (and shows the result again).
  void closeRequested();

 private:
  void sync();
  ReplayController& replay_;
  QToolButton* play_ = nullptr;
  QSlider* slider_ = nullptr;
  QComboBox* speed_ = nullptr;
  QLabel* label_ = nullptr;
};

}  // namespace tessera::studio
