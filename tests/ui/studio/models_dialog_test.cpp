// File > Models against the Hub stand-in (tests/support/hub_server.py): a download shows its
// progress (screenshot mid-download), Cancel keeps what was fetched, Download again finishes it,
// Use loads the model by name and it generates; the window stays usable throughout.
#include "ui/studio/models_dialog.h"

#include <gtest/gtest.h>

#include <QDir>
#include <QImage>
#include <QPushButton>
#include <QTableWidget>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "tests/support/fixture_model_dir.h"
#include "tests/support/hub_server.h"
#include "tests/ui/studio/event_loop.h"
#include "ui/studio/engine_bridge.h"
#include "ui/studio/main_window.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {
namespace {

namespace fs = std::filesystem;

TEST(ModelsDialog, DownloadCancelResumeUseAndGenerate) {
  testing::FixtureModelDir fixture("models-dialog");
  const fs::path root =
      fs::temp_directory_path() / ("tessera-models-dialog-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  testing::HubServer hub(root, testing::parity_hub_spec(fixture.path(), ""));
  ASSERT_GT(hub.port(), 0);
  setenv("HF_ENDPOINT", hub.url().c_str(), 1);
  setenv("HF_HUB_CACHE", (root / "hub").c_str(), 1);
  setenv("XDG_CACHE_HOME", (root / "xdg").c_str(), 1);

  LaunchOptions launch;  // the embedded model
  MainWindow window(launch);
  window.show();
  ASSERT_TRUE(wait_until([&] { return window.engine().has_model(); }));
  EXPECT_TRUE(window.status_text().contains("File > Models")) << window.status_text().toStdString();

  ModelsDialog& dialog = window.models().models_dialog();
  dialog.show();
  ASSERT_EQ(dialog.table()->item(0, 0)->text(), QStringLiteral("Roblox/cube3d-v0.5"));
  EXPECT_EQ(dialog.table()->item(0, 3)->text(), QStringLiteral("no"));
  hub.fault(R"({"trickle_ms": 30})");
  ASSERT_TRUE(dialog.download(QStringLiteral("Roblox/cube3d-v0.5")));
  EXPECT_FALSE(dialog.download(QStringLiteral("Roblox/cube3d-v0.1")));  // one at a time
  ASSERT_TRUE(wait_until(
      [&] { return dialog.progress_percent() > 5 && dialog.status_text().contains("MB/s"); }));
  EXPECT_EQ(dialog.table()->item(0, 3)->text(), QStringLiteral("downloading"));
  // The window keeps drawing while the download runs.
  const int64_t frames = window.viewport()->frames();
  ASSERT_TRUE(wait_until([&] { return window.viewport()->frames() > frames; }));
  const QImage shot = dialog.grab().toImage();
  EXPECT_GT(shot.width(), 300);
  if (const char* dir = std::getenv("TESSERA_SCREENSHOT_DIR")) {
    shot.save(QDir(dir).filePath("models-dialog-downloading.png"));
  }

  bool finished = false, ok = true;
  QObject::connect(&dialog, &ModelsDialog::downloadFinished,
                   [&](const QString&, bool success, const QString&) {
                     finished = true;
                     ok = success;
                   });
  dialog.cancel_download();
  ASSERT_TRUE(wait_until([&] { return finished; }));
  EXPECT_FALSE(ok);
  EXPECT_TRUE(dialog.status_text().contains("cancelled")) << dialog.status_text().toStdString();
  EXPECT_NE(dialog.table()->item(0, 3)->text(), QStringLiteral("yes"));

  hub.fault("{}");
  finished = false;
  ASSERT_TRUE(dialog.download(QStringLiteral("Roblox/cube3d-v0.5")));
  ASSERT_TRUE(wait_until([&] { return finished; }));
  EXPECT_TRUE(ok) << dialog.status_text().toStdString();
  EXPECT_EQ(dialog.table()->item(0, 3)->text(), QStringLiteral("yes"));
  EXPECT_EQ(dialog.table()->item(2, 3)->text(), QStringLiteral("yes"));  // its CLIP came along

  // Use: loaded by name, no path typed; it generates.
  auto* use = dialog.table()->cellWidget(0, 4)->findChild<QPushButton*>();
  ASSERT_NE(use, nullptr);
  ASSERT_TRUE(use->isEnabled());
  use->click();
  ASSERT_TRUE(wait_until([&] {
    return window.engine().has_model() && window.engine().model_dir().contains("cube3d-v0.5");
  })) << window.model_status_text().toStdString();
  window.prompt_edit();
  window.generation().generate();
  ASSERT_TRUE(wait_until([&] { return !window.engine().busy(); }, 120000));
  EXPECT_EQ(window.engine().stats().state, JobState::kDone) << window.engine().stats().message;

  unsetenv("HF_ENDPOINT");
  unsetenv("HF_HUB_CACHE");
  unsetenv("XDG_CACHE_HOME");
  fs::remove_all(root);
}

}  // namespace
}  // namespace tessera::studio
