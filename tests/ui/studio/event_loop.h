// The studio tests' one way to wait: run the Qt event loop (the bridges drain the engine's events
// on it) until a condition holds or a timeout passes.
#pragma once

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QThread>
#include <functional>

namespace tessera::studio {

// Processes events until `condition` holds or `timeout_ms` passes; returns the condition.
inline bool wait_until(const std::function<bool()>& condition, int timeout_ms = 60000) {
  QElapsedTimer timer;
  timer.start();
  while (!condition()) {
    if (timer.elapsed() > timeout_ms) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
    QThread::msleep(1);
  }
  return true;
}

}  // namespace tessera::studio
