// The studio and its library: a studio killed with SIGKILL at many points loses at most
// the job that was running, the next start says what was interrupted, and the results made before
// are in the gallery and in `tessera library list`, exported byte-identical; the Library dock's
// search, favourites, rename and trash, and what another process adds seen without a restart;
// replays scrubbed, played and followed by the token strip and the timing plot.
#include <gtest/gtest.h>
#include <signal.h>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QThread>
#include <QToolButton>
#include <QLineEdit>
#include <QSlider>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/runtime/library.h"
#include "tests/support/file_size_limit.h"
#include "tests/ui/studio/event_loop.h"
#include "ui/studio/gallery.h"
#include "ui/studio/library_panel.h"
#include "ui/studio/replay_bar.h"
#include "ui/studio/replay_controller.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/token_strip.h"

namespace tessera::studio {
namespace {

// TESSERA_LIBRARY pointed at `dir` for this scope (the test binary's own temporary one after).
class LibraryEnv {
 public:
  explicit LibraryEnv(const QString& dir) : before_(qgetenv("TESSERA_LIBRARY")) {
    qputenv("TESSERA_LIBRARY", dir.toLocal8Bit());
  }
  ~LibraryEnv() { qputenv("TESSERA_LIBRARY", before_); }

 private:
  QByteArray before_;
};

QStringList scripted(const QString& prompt, int variations, int resolution) {
  return {"--prompt",     prompt,
          "--generate",   "--quit-when-done",
          "--variations", QString::number(variations),
          "--seed",       "1",
          "--resolution", QString::number(resolution)};
}

std::string bytes_of(const std::string& path) {
  QFile f(QString::fromStdString(path));
  if (!f.open(QIODevice::ReadOnly)) return {};
  return f.readAll().toStdString();
}

// With TESSERA_SCREENSHOT_DIR set, the whole window as the README shows it.
void save_screenshot(MainWindow& window, const char* name) {
  const char* dir = std::getenv("TESSERA_SCREENSHOT_DIR");
  if (dir == nullptr) return;
  const int64_t frames = window.viewport()->frames();
  window.viewport()->update();
  wait_until([&] { return window.viewport()->frames() > frames + 1; }, 5000);
  window.grab().save(QDir(dir).filePath(name));
}

TEST(LibraryStudio, KilledAtManyPointsLosesAtMostTheRunningJob) {
  QTemporaryDir tmp;
  const QString lib = tmp.filePath("library");
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("TESSERA_LIBRARY", lib);

  // A run to its end: two results kept; their files as they were made.
  QProcess first;
  first.setProcessEnvironment(env);
  first.start(TESSERA_STUDIO_PATH, scripted("a chair", 2, 33));
  ASSERT_TRUE(first.waitForFinished(90000));
  ASSERT_EQ(first.exitCode(), 0) << first.readAllStandardError().toStdString();
  std::map<int64_t, std::string> made;
  {
    auto kept = runtime::Library::open(lib.toStdString());
    ASSERT_TRUE(kept.ok()) << kept.status().message();
    auto entries = (*kept)->list();
    ASSERT_TRUE(entries.ok());
    ASSERT_EQ(entries->size(), 2u);
    for (const auto& e : *entries) made[e.id] = bytes_of(e.mesh_file());
  }

  // Killed at many points: before any job, as a job starts, while it generates and while its
  // candidates are meshed and kept. Each next start is also the check of the one before: it says
  // what the kill interrupted (and is then killed itself).
  enum From { kProcessStart, kJobStart, kFirstNewResult };
  struct Kill {
    From from;
    int delay_ms;
  };
  const Kill kills[] = {{kProcessStart, 300}, {kJobStart, 0},        {kJobStart, 30},
                        {kJobStart, 250},     {kJobStart, 900},      {kFirstNewResult, 0},
                        {kFirstNewResult, 3}, {kFirstNewResult, 15}, {kFirstNewResult, 60}};
  size_t results = made.size();
  bool expect_interrupted = false;
  int interrupted_reported = 0;
  for (const Kill& kill : kills) {
    const int delay = kill.delay_ms;
    // The jobs journalled so far (the one a kill left is there until this start takes it).
    int64_t last_journalled = 0;
    {
      auto before = runtime::Library::open(lib.toStdString());
      ASSERT_TRUE(before.ok());
      auto journalled = (*before)->journal();
      ASSERT_TRUE(journalled.ok());
      for (const runtime::JournalJob& j : journalled.value()) {
        last_journalled = std::max(last_journalled, j.id);
      }
    }
    QProcess studio;
    studio.setProcessEnvironment(env);
    studio.start(TESSERA_STUDIO_PATH, scripted("a lamp", 4, 129));
    ASSERT_TRUE(studio.waitForStarted());
    bool job_running = false;
    if (kill.from == kProcessStart) {
      QThread::msleep(static_cast<unsigned long>(delay));  // the window, the model: being set up
    } else {
      auto watch = runtime::Library::open(lib.toStdString());
      ASSERT_TRUE(watch.ok());
      QElapsedTimer waited;
      waited.start();
      while (!job_running && waited.elapsed() < 60000 && studio.state() == QProcess::Running) {
        auto running = (*watch)->journal();
        job_running = running.ok() && !running->empty() && running->back().id > last_journalled;
        if (!job_running) QThread::msleep(5);
      }
      ASSERT_TRUE(job_running) << "the job never started";
      // ... or until its first result is kept, to land among the library writes of the others.
      while (kill.from == kFirstNewResult && waited.elapsed() < 60000 &&
             studio.state() == QProcess::Running) {
        auto listed = (*watch)->list();
        if (listed.ok() && listed->size() > results) break;
        QThread::msleep(1);
      }
      QThread::msleep(static_cast<unsigned long>(delay));
    }
    ::kill(static_cast<pid_t>(studio.processId()), SIGKILL);
    ASSERT_TRUE(studio.waitForFinished(10000));
    const QString out = QString::fromLocal8Bit(studio.readAllStandardOutput());
    // What the previous kill interrupted, said once by this start.
    if (expect_interrupted) {
      EXPECT_TRUE(out.contains("interrupted: \"a lamp\" (4 variations)")) << out.toStdString();
      ++interrupted_reported;
    } else {
      EXPECT_FALSE(out.contains("interrupted")) << out.toStdString();
    }
    // The catalogue is sound, every row's files exist, nothing kept before is gone.
    auto after = runtime::Library::open(lib.toStdString());
    ASSERT_TRUE(after.ok()) << after.status().message();
    EXPECT_TRUE((*after)->check().ok()) << (*after)->check().message() << " (kill " << delay << ")";
    auto entries = (*after)->list();
    ASSERT_TRUE(entries.ok());
    EXPECT_GE(entries->size(), results);
    results = entries->size();
    for (const auto& [id, bytes] : made) EXPECT_EQ(bytes_of((*after)->get(id)->mesh_file()), bytes);
    // A job left in the journal by this kill is what the next start reports.
    auto journal = (*after)->journal();
    ASSERT_TRUE(journal.ok());
    expect_interrupted = !journal->empty();
    static const char* const kFrom[] = {"the process started", "the job started",
                                        "its first result was kept"};
    std::printf("killed %d ms after %s: %zu results kept, job %s\n", delay, kFrom[kill.from],
                results, expect_interrupted ? "interrupted" : "not running");
  }
  EXPECT_GE(interrupted_reported, 5) << "too few kills landed during a job";

  // The next studio: the results in its gallery; the command line lists them and exports the ones
  // made before the kills byte-identical.
  LibraryEnv use(lib);
  auto window = open_window(LaunchOptions{});
  auto kept = runtime::Library::open(lib.toStdString());
  auto entries = (*kept)->list();
  ASSERT_TRUE(entries.ok());
  std::set<int64_t> in_library, in_gallery, in_cli;
  for (const auto& e : *entries) in_library.insert(e.id);
  for (const GalleryEntry& e : window->gallery()->kept()) in_gallery.insert(e.id);
  EXPECT_EQ(in_gallery, in_library);
  QProcess cli;
  cli.setProcessEnvironment(env);
  cli.start(TESSERA_CLI_PATH, {"library", "list", "--json"});
  ASSERT_TRUE(cli.waitForFinished(30000));
  const auto listed =
      nlohmann::json::parse(cli.readAllStandardOutput().toStdString(), nullptr, false);
  ASSERT_TRUE(listed.is_array());
  for (const auto& e : listed) in_cli.insert(e.value("id", int64_t{0}));
  EXPECT_EQ(in_cli, in_library);
  for (const auto& [id, bytes] : made) {
    const QString out = tmp.filePath(QStringLiteral("export-%1.glb").arg(id));
    cli.start(TESSERA_CLI_PATH, {"library", "export", QString::number(id), "-o", out});
    ASSERT_TRUE(cli.waitForFinished(30000));
    ASSERT_EQ(cli.exitCode(), 0) << cli.readAllStandardError().toStdString();
    EXPECT_EQ(bytes_of(out.toStdString()), bytes) << "result " << id;
  }
  if (expect_interrupted) {
    // What the last kill interrupted is offered again: its prompt and settings, generating.
    ASSERT_FALSE(window->library().interrupted().empty());
    EXPECT_TRUE(window->library().run_interrupted());
    EXPECT_EQ(window->prompt_edit()->toPlainText(), QStringLiteral("a lamp"));
    EXPECT_EQ(window->engine().stats().candidates, 4);
    EXPECT_TRUE(window->engine().busy());
    window->generation().cancel();
    ASSERT_TRUE(wait_job(*window));
  }
}

TEST(LibraryStudio, SearchFavouritesRenameTrashAndWhatOthersAdd) {
  QTemporaryDir tmp;
  LibraryEnv use(tmp.path());
  auto window = open_window(LaunchOptions{});
  LibraryPanel* panel = window->library_panel();
  ASSERT_NE(panel->library(), nullptr) << panel->unavailable().toStdString();
  window->settings_panel()->set_final_resolution(33);
  for (const char* prompt : {"a chair", "a mug", "a red chair"}) {
    window->prompt_edit()->setPlainText(prompt);
    window->generation().generate();
    ASSERT_TRUE(wait_job(*window));
  }
  ASSERT_EQ(window->gallery()->kept().size(), 3u);
  // Search by prompt.
  panel->search()->setText("chair");
  ASSERT_EQ(window->gallery()->kept().size(), 2u);
  // Favourite, rename: the tile shows both; "favourites only" keeps it alone.
  const int64_t red = window->gallery()->kept().back().id;
  ASSERT_TRUE(panel->set_favourite(red, true).ok());
  ASSERT_TRUE(panel->rename(red, "throne").ok());
  panel->search()->clear();
  panel->favourites_only()->setChecked(true);
  ASSERT_EQ(window->gallery()->count(), 1);
  EXPECT_EQ(window->gallery()->item(0)->text(), QStringLiteral("★ throne"));
  panel->favourites_only()->setChecked(false);
  panel->search()->setText("throne");  // the title is searched too
  EXPECT_EQ(window->gallery()->kept().size(), 1u);
  panel->search()->clear();
  // Trash: gone from the gallery, in the trash view, restored, then trashed and emptied.
  const int64_t mug = window->gallery()->kept()[1].id;
  ASSERT_TRUE(panel->move_to_trash(mug).ok());
  EXPECT_EQ(window->gallery()->kept().size(), 2u);
  panel->trash_button()->setChecked(true);
  ASSERT_EQ(window->gallery()->kept().size(), 1u);
  EXPECT_EQ(window->gallery()->kept().front().prompt, QStringLiteral("a mug"));
  EXPECT_TRUE(panel->empty_trash_button()->isVisible());
  ASSERT_TRUE(panel->restore(mug).ok());
  EXPECT_TRUE(window->gallery()->kept().empty());
  panel->trash_button()->setChecked(false);
  EXPECT_EQ(window->gallery()->kept().size(), 3u);
  ASSERT_TRUE(panel->move_to_trash(mug).ok());
  ASSERT_TRUE(panel->empty_trash().ok());
  EXPECT_FALSE(panel->library()->get(mug).ok());
  // Another process adds a result: the gallery shows it without a restart.
  QProcess cli;
  cli.start(TESSERA_CLI_PATH, {"generate", "-p", "a lamp", "--library", "--resolution", "33", "-o",
                               tmp.filePath("lamp.glb")});
  ASSERT_TRUE(cli.waitForFinished(60000));
  ASSERT_EQ(cli.exitCode(), 0) << cli.readAllStandardError().toStdString();
  ASSERT_TRUE(wait_until([&] { return window->gallery()->kept().size() == 3u; }, 10000));
  EXPECT_EQ(window->gallery()->kept().back().prompt, QStringLiteral("a lamp"));
  save_screenshot(*window, "library.png");
}

TEST(LibraryStudio, TheLibraryFolderIsASettingAndTheEnvironmentWins) {
  QTemporaryDir tmp;
  const QByteArray before = qgetenv("TESSERA_LIBRARY");
  qunsetenv("TESSERA_LIBRARY");
  auto window = open_window(LaunchOptions{});
  const QString chosen = tmp.filePath("mine");
  window->library().set_library_dir(chosen);
  ASSERT_NE(window->library_panel()->library(), nullptr);
  EXPECT_EQ(QString::fromStdString(window->library_panel()->library()->dir()), chosen);
  window->settings_panel()->set_final_resolution(17);
  window->prompt_edit()->setPlainText("a cube");
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  auto kept = runtime::Library::open(chosen.toStdString());
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ((*kept)->list()->size(), 1u);
  window->library().set_library_dir(
      QString());  // back to the default (in the test's own XDG folders)
  qputenv("TESSERA_LIBRARY", before);
  EXPECT_EQ(runtime::library_dir(chosen.toStdString()), before.toStdString());
}

TEST(LibraryStudio, AFullDiskIsSaidAndTheStudioGoesOnWithoutKeeping) {
  QTemporaryDir tmp;
  LibraryEnv use(tmp.path());
  auto window = open_window(LaunchOptions{});
  window->settings_panel()->set_final_resolution(33);
  window->prompt_edit()->setPlainText("a chair");
  bool finished = false;
  {
    testing::FileSizeLimit full_disk(8 * 1024);  // a full disk
    ASSERT_TRUE(full_disk.ok());
    window->generation().generate();
    finished = wait_job(*window);
  }
  ASSERT_TRUE(finished);
  EXPECT_EQ(window->engine().stats().state, JobState::kDone);
  EXPECT_TRUE(window->status_text().contains("Not kept in the library"))
      << window->status_text().toStdString();
  // The result is still in the gallery for this session, and shown; nothing half-kept.
  ASSERT_EQ(window->gallery()->count(), 1);
  EXPECT_TRUE(window->gallery()->kept().empty());
  EXPECT_NE(window->viewport()->mesh(), nullptr);
  EXPECT_TRUE(window->library_panel()->library()->check().ok());
  // Room again: the next result is kept.
  window->prompt_edit()->setPlainText("a mug");
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->gallery()->kept().size(), 1u);
  EXPECT_EQ(window->gallery()->count(), 2);
}

TEST(LibraryStudio, ReplayScrubsPlaysAndTheStripAndPlotFollow) {
  QTemporaryDir tmp;
  LibraryEnv use(tmp.path());
  {
    auto maker = open_window(LaunchOptions{});
    maker->settings_panel()->set_final_resolution(33);
    maker->prompt_edit()->setPlainText("a chair");
    maker->generation().generate();
    ASSERT_TRUE(wait_job(*maker));
  }
  // A later studio replays the kept result.
  auto window = open_window(LaunchOptions{});
  Gallery* gallery = window->gallery();
  ASSERT_EQ(gallery->count(), 1);
  Q_EMIT gallery->itemClicked(gallery->item(0));
  const auto result = window->viewport()->mesh();
  ASSERT_NE(result, nullptr);
  ASSERT_TRUE(window->library().replay_shown());
  ReplayController& replay = window->library().replay();
  ASSERT_TRUE(replay.active());
  const int64_t n = replay.length();
  ASSERT_GT(n, 8);
  EXPECT_TRUE(window->replay_bar()->isVisible());
  EXPECT_EQ(window->replay_bar()->slider()->maximum(), n);
  // Scrub to the middle: the mesh of the first n/2 tokens, the strip holds n/2 tokens, the plot's
  // cursor is there.
  window->replay_bar()->slider()->setValue(static_cast<int>(n / 2));
  ASSERT_TRUE(wait_until([&] { return replay.is_cached(n / 2); }, 30000));
  ASSERT_TRUE(wait_until([&] { return window->viewport()->mesh() != result; }, 5000));
  const auto half = window->viewport()->mesh();
  save_screenshot(*window, "replay.png");
  EXPECT_EQ(window->token_strip()->token_count(), n / 2);
  EXPECT_EQ(window->library().overlay_stats().cursor, n / 2);
  // Everything gets meshed in the background; back and forth is then served from the cache.
  ASSERT_TRUE(wait_until([&] { return replay.cached() == n - 1; }, 60000));
  replay.seek(1);
  replay.seek(n / 2);
  EXPECT_EQ(window->viewport()->mesh(), half);
  // Play from the start at the fastest speed: it ends on the result itself.
  replay.seek(0);
  EXPECT_EQ(window->viewport()->mesh(), nullptr);
  replay.set_speed(1000);
  replay.play();
  ASSERT_TRUE(wait_until([&] { return !replay.playing(); }, 30000));
  EXPECT_EQ(replay.position(), n);
  EXPECT_EQ(window->viewport()->mesh(), result);
  EXPECT_EQ(window->token_strip()->token_count(), n);
  // Closing the replay shows the result again; re-mesh and export work on a library entry.
  Q_EMIT window->replay_bar()->closeRequested();
  EXPECT_FALSE(replay.active());
  EXPECT_EQ(window->viewport()->mesh(), result);
  ASSERT_TRUE(window->generation().remesh_current(65).ok());
  ASSERT_TRUE(wait_job(*window));
  ASSERT_NE(window->viewport()->mesh(), nullptr);
  EXPECT_GT(window->viewport()->mesh()->triangle_count(), result->triangle_count());
  ASSERT_TRUE(window->files().export_mesh(tmp.filePath("again.obj"), mesh::ExportOptions{}).ok());
  EXPECT_TRUE(QFile::exists(tmp.filePath("again.obj")));
  EXPECT_TRUE(window->library().replay_shown());  // the finer mesh replays too
  // A new job ends the replay.
  window->prompt_edit()->setPlainText("a mug");
  window->generation().generate();
  EXPECT_FALSE(replay.active());
  EXPECT_FALSE(window->replay_bar()->isVisible());
  ASSERT_TRUE(wait_job(*window));
}

}  // namespace
}  // namespace tessera::studio
