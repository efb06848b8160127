// The studio tests' one way to wait: run the Qt event loop (the bridges drain the engine's events
// on it) until a condition holds or a timeout passes; and a window opened with its model loaded.
#pragma once

#include <gtest/gtest.h>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QThread>
#include <functional>
#include <memory>

#include "ui/studio/engine_bridge.h"
#include "ui/studio/generation_controller.h"
#include "ui/studio/image_controller.h"
#include "ui/studio/import_export_controller.h"
#include "ui/studio/library_controller.h"
#include "ui/studio/main_window.h"
#include "ui/studio/model_controller.h"
#include "ui/studio/shape_controller.h"
#include "ui/studio/texture_bridge.h"
#include "ui/studio/viewport.h"

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

// A shown window whose model has loaded and whose viewport has drawn.
inline std::unique_ptr<MainWindow> open_window(const LaunchOptions& launch) {
  auto window = std::make_unique<MainWindow>(launch);
  window->show();
  EXPECT_TRUE(wait_until([&] { return window->engine().has_model(); }))
      << window->model_status_text().toStdString();
  EXPECT_TRUE(wait_until([&] { return window->viewport()->frames() >= 2; }));
  return window;
}

// Until the window's shape job has ended.
inline bool wait_job(MainWindow& window, int timeout_ms = 60000) {
  return wait_until([&] { return !window.engine().busy(); }, timeout_ms);
}

}  // namespace tessera::studio
