// Tessera Studio under Xvfb: a scripted run's screenshot shows a mesh and the ImGui overlay; the
// viewport keeps drawing while a job runs; bad model directories, non-mesh files, unwritable
// export paths, rapid Generate presses, closing mid-generation and a 1x1 window are all handled
// with a message while the app keeps working. Run each case under xvfb-run (see CMakeLists.txt).
#include <gtest/gtest.h>

#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QElapsedTimer>
#include <QImage>
#include <QListWidget>
#include <QMenu>
#include <QProcess>
#include <QPushButton>
#include <QSurfaceFormat>
#include <QTemporaryDir>
#include <QThread>
#include <QToolButton>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "engine/runtime/capabilities.h"
#include "engine/runtime/library.h"
#include "engine/mesh/export.h"
#include "engine/mesh/import.h"
#include "engine/mesh/isolated_import.h"
#include "engine/mesh/mesh.h"
#include "tests/engine/mesh/import_test_util.h"
#include "tests/support/fixture_model_dir.h"
#include "tests/ui/studio/event_loop.h"
#include "ui/studio/engine_bridge.h"
#include "ui/studio/generation_stats.h"
#include "ui/studio/imgui_overlay.h"
#include "ui/studio/candidate_grid.h"
#include "ui/studio/gallery.h"
#include "ui/studio/main_window.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/metadata.h"
#include "ui/studio/export_dialog.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {
namespace {

using testing::FixtureModelDir;

// Small lattices: the parity fixture's decoder is slow per query and the shape does not matter.
LaunchOptions fixture_launch(const FixtureModelDir& dir) {
  LaunchOptions o;
  o.model_dir = QString::fromStdString(dir.path());
  o.resolution = 17;
  o.preview_resolution = 9;
  o.preview_every = 4;
  return o;
}

// True when the machine is busy enough (load average above the core count) that a frame-time
// measurement says more about the neighbours than about the studio.
bool machine_busy(double* load) {
  std::ifstream in("/proc/loadavg");
  *load = 0;
  in >> *load;
  return *load > static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
}

int channel_distance(QRgb a, QRgb b) {
  return std::max({std::abs(qRed(a) - qRed(b)), std::abs(qGreen(a) - qGreen(b)),
                   std::abs(qBlue(a) - qBlue(b))});
}

TEST(GenerationStats, PercentilesAndRates) {
  EXPECT_EQ(percentile({}, 50), 0.0);
  EXPECT_EQ(percentile({5.0f}, 99), 5.0);
  std::vector<float> v;
  for (int i = 1; i <= 100; ++i) v.push_back(static_cast<float>(i));
  EXPECT_EQ(percentile(v, 50), 50.0);
  EXPECT_EQ(percentile(v, 99), 99.0);
  EXPECT_EQ(percentile(v, 100), 100.0);
  GenerationStats s;
  const auto t0 = std::chrono::steady_clock::now();
  s.start(7, 4, t0);
  const float ms[] = {10, 2, 4, 6};
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(s.apply({7, runtime::Lane::kShape, runtime::TokenEvent{i, 100 + i, ms[i]}}, t0));
  }
  EXPECT_DOUBLE_EQ(s.tpot_mean_ms(), 4.0);  // the first token (prefill) is not a decode step
  EXPECT_DOUBLE_EQ(s.tpot_percentile_ms(50), 4.0);
  EXPECT_DOUBLE_EQ(s.tokens_per_second(), 1000.0 * 4 / 22);
  EXPECT_EQ(s.token_ids, (std::vector<int32_t>{100, 101, 102, 103}));
  EXPECT_TRUE(
      s.apply({7, runtime::Lane::kShape, runtime::StageEvent{runtime::kStageDecode, 12.5}}, t0));
  EXPECT_DOUBLE_EQ(s.stage_ms[2], 12.5);
  EXPECT_TRUE(s.apply({7, runtime::Lane::kShape, runtime::DoneEvent{40}}, t0));
  EXPECT_EQ(s.state, JobState::kDone);
  EXPECT_GT(runtime::memory_use(false).resident_bytes, 0);
}

// The folded Stages panel's title: the time so far (the job's total once done) and its largest
// stage; the extraction's queries add up over the candidates and start again with the next job.
TEST(GenerationStats, StagesSummaryNamesWhereTheTimeWent) {
  GenerationStats s;
  const auto t0 = std::chrono::steady_clock::now();
  s.start(5, 4, t0, 2);
  EXPECT_EQ(s.stages_summary(), "");
  s.apply({5, runtime::Lane::kShape, runtime::StageEvent{runtime::kStagePrefill, 100}}, t0);
  s.apply({5, runtime::Lane::kShape, runtime::StageEvent{runtime::kStageDecode, 500}}, t0);
  EXPECT_EQ(s.stages_summary(), "0.60 s, most in decode (83 %)");
  for (int c = 0; c < 2; ++c) {
    s.apply({5, runtime::Lane::kShape, runtime::StageEvent{runtime::kStageExtraction, 400, c}}, t0);
    runtime::FinalMeshEvent f;
    f.candidate = c;
    f.mesh = std::make_shared<mesh::Mesh>();
    f.extraction.queries = 1000 + c;
    s.apply({5, runtime::Lane::kShape, f}, t0);
  }
  EXPECT_EQ(s.extraction_queries, 2001);
  EXPECT_EQ(s.stages_summary(), "1.40 s, most in extraction (57 %)");
  s.apply({5, runtime::Lane::kShape, runtime::DoneEvent{1600}}, t0);
  EXPECT_EQ(s.stages_summary(), "1.60 s, most in extraction (50 %)");
  s.start(6, 4, t0);
  EXPECT_EQ(s.extraction_queries, 0);
  EXPECT_EQ(s.stages_summary(), "");
}

// Variations: one step serves every candidate, so the per-step curve comes from candidate 0's
// events, the rate counts all candidates, mesh stages add up over candidates, and the status line's
// mesh is candidate 0's.
TEST(GenerationStats, VariationsCountStepsOnceAndRatesOverAll) {
  GenerationStats s;
  const auto t0 = std::chrono::steady_clock::now();
  s.start(9, 3, t0, 4);
  EXPECT_EQ(s.candidates, 4);
  const float ms[] = {10, 2, 4};
  for (int i = 0; i < 3; ++i) {
    for (int c = 0; c < 4; ++c) {
      runtime::TokenEvent t{i, 100 * c + i, ms[i], c};
      EXPECT_TRUE(s.apply({9, runtime::Lane::kShape, t}, t0));
    }
  }
  EXPECT_EQ(s.token_ms.size(), 3u);
  EXPECT_EQ(s.token_ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(s.tpot_mean_ms(), 3.0);
  EXPECT_DOUBLE_EQ(s.tokens_per_second(), 1000.0 * 3 * 4 / 16);
  for (int c = 0; c < 4; ++c) {
    runtime::StageEvent st{runtime::kStageExtraction, 10.0 + c, c};
    EXPECT_TRUE(s.apply({9, runtime::Lane::kShape, st}, t0));
  }
  EXPECT_DOUBLE_EQ(s.stage_ms[4], 10 + 11 + 12 + 13);
  auto big = std::make_shared<mesh::Mesh>(), small = std::make_shared<mesh::Mesh>();
  big->positions.assign(30, 0.0f);
  small->positions.assign(9, 0.0f);
  runtime::FinalMeshEvent first, later;
  first.mesh = small;
  later.candidate = 3;
  later.mesh = big;
  s.apply({9, runtime::Lane::kShape, first}, t0);
  s.apply({9, runtime::Lane::kShape, later}, t0);
  EXPECT_EQ(s.final_vertices, 3);  // candidate 0's
  EXPECT_EQ(s.extraction_queries, 0);
}

TEST(GenerationStats, IgnoresOtherJobs) {
  GenerationStats s;
  s.start(2, 16, std::chrono::steady_clock::now());
  EXPECT_FALSE(s.apply({1, runtime::Lane::kShape, runtime::TokenEvent{0, 5, 1.0}},
                       std::chrono::steady_clock::now()));
  EXPECT_FALSE(
      s.apply({1, runtime::Lane::kShape, runtime::DoneEvent{1}}, std::chrono::steady_clock::now()));
  EXPECT_TRUE(s.token_ms.empty());
  EXPECT_EQ(s.state, JobState::kRunning);
}

TEST(Studio, ScriptedRunShowsMeshAndOverlay) {
  FixtureModelDir dir("studio-scripted");
  QTemporaryDir out;
  ASSERT_TRUE(out.isValid());
  const QString shot = out.filePath("shot.png");
  const QString record = out.filePath("frames");
  const QString exported = out.filePath("mesh.obj");
  QProcess studio;
  studio.setProcessChannelMode(QProcess::ForwardedErrorChannel);
  studio.start(TESSERA_STUDIO_PATH,
               {"--model", QString::fromStdString(dir.path()), "--prompt", testing::kParityPrompt,
                "--generate", "--screenshot", shot, "--quit-when-done", "--record", record,
                "--export", exported, "--resolution", "33", "--preview-resolution", "17",
                "--preview-every", "4", "--no-grid"});
  ASSERT_TRUE(studio.waitForFinished(90000)) << "tessera-studio did not finish";
  const QString output = QString::fromLocal8Bit(studio.readAllStandardOutput());
  ASSERT_EQ(studio.exitCode(), 0) << output.toStdString();
  EXPECT_TRUE(output.contains("job done")) << output.toStdString();

  QImage image(shot);
  ASSERT_FALSE(image.isNull()) << "no screenshot at " << shot.toStdString();
  image = image.convertToFormat(QImage::Format_RGB32);
  ASSERT_GE(image.width(), 400);
  ASSERT_GE(image.height(), 300);
  // Background: the bottom-right corner (no grid, no panel there).
  const QRgb background = image.pixel(image.width() - 3, image.height() - 3);
  // Mesh: the middle of the view (left of the right-hand panels, right of the left-hand ones)
  // holds many pixels that are not background.
  int mesh_pixels = 0, total = 0;
  for (int y = image.height() / 3; y < 2 * image.height() / 3; ++y) {
    for (int x = kTimingPanelX + kTimingPanelWidth + 10; x < image.width() - 280; ++x) {
      ++total;
      if (channel_distance(image.pixel(x, y), background) > 24) ++mesh_pixels;
    }
  }
  ASSERT_GT(total, 0);
  EXPECT_GT(mesh_pixels, total / 20) << mesh_pixels << " of " << total << " pixels differ";
  // Overlay: the timing panel's area is mostly ImGui's dark window background, with light text.
  int dark = 0, text = 0, panel = 0;
  for (int y = kTimingPanelY + 24; y < kTimingPanelY + kTimingPanelHeight - 4; ++y) {
    for (int x = kTimingPanelX + 4; x < kTimingPanelX + kTimingPanelWidth - 4; ++x) {
      const QRgb p = image.pixel(x, y);
      ++panel;
      if (qRed(p) < 36 && qGreen(p) < 36 && qBlue(p) < 40 && channel_distance(p, background) > 8)
        ++dark;
      if (qRed(p) > 170 && qGreen(p) > 170 && qBlue(p) > 170) ++text;
    }
  }
  EXPECT_GT(dark, panel / 3) << "no ImGui panel background in the timing panel's area";
  EXPECT_GT(text, panel / 200) << "no text in the timing panel";
  EXPECT_GE(QDir(record).entryList({"frame_*.png"}).size(), 2) << "recorded frames missing";
  EXPECT_TRUE(QFileInfo(exported).size() > 0) << "export missing";
  EXPECT_TRUE(QFileInfo(out.filePath("mesh.mtl")).exists());
  // Keep a copy for people to look at.
  image.save(QString(TESSERA_BINARY_DIR) + "/studio_scripted_shot.png");
}

// The Weights setting (fast / f32 / bf16 / int8): --weights picks it at launch, changing it reloads
// the shape model in that format, the overlay's stats say which (format and bytes read per token),
// and a job runs on the int8 model.
TEST(Studio, WeightsSettingReloadsAndTheOverlaySaysWhich) {
  FixtureModelDir dir("studio-weights");
  LaunchOptions launch = fixture_launch(dir);
  launch.weights = QStringLiteral("int8");
  auto window = open_window(launch);
  auto* box = window->settings_panel()->findChild<QComboBox*>(QStringLiteral("weights"));
  ASSERT_NE(box, nullptr);
  EXPECT_EQ(box->currentData().toString(), QStringLiteral("int8"));
  EXPECT_TRUE(window->engine().weights_label().startsWith(QStringLiteral("int8, ")))
      << window->engine().weights_label().toStdString();
  window->prompt_edit()->setPlainText(QString::fromLatin1(testing::kParityPrompt));
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->engine().stats().weights.substr(0, 5), "int8,");
  EXPECT_GT(window->engine().stats().final_triangles, 0);
  const QString int8_label = window->engine().weights_label();

  // Choosing bf16 reloads the model in bf16; the bytes per token double or so.
  box->setCurrentIndex(box->findData(QStringLiteral("bf16")));
  Q_EMIT box->activated(box->currentIndex());
  ASSERT_TRUE(wait_until([&] {
    return !window->engine().loading() &&
           window->engine().weights_label().startsWith(QStringLiteral("bf16"));
  })) << window->engine().weights_label().toStdString();
  EXPECT_NE(window->engine().weights_label(), int8_label);
  EXPECT_EQ(window->settings_panel()->weights(), QStringLiteral("bf16"));

  // Fast is int8 on the CPU: the model reloads in int8.
  box->setCurrentIndex(box->findData(QStringLiteral("fast")));
  Q_EMIT box->activated(box->currentIndex());
  ASSERT_TRUE(wait_until([&] {
    return !window->engine().loading() &&
           window->engine().weights_label().startsWith(QStringLiteral("int8"));
  })) << window->engine().weights_label().toStdString();
  EXPECT_EQ(window->settings_panel()->weights(), QStringLiteral("fast"));
}

TEST(Studio, ScriptedRunWithBadModelFails) {
  QProcess studio;
  studio.start(TESSERA_STUDIO_PATH, {"--model", "/nonexistent/model", "--prompt", "x", "--generate",
                                     "--quit-when-done"});
  ASSERT_TRUE(studio.waitForFinished(30000));
  EXPECT_EQ(studio.exitCode(), 1);
  EXPECT_TRUE(QString::fromLocal8Bit(studio.readAllStandardError()).contains("/nonexistent/model"));
}

TEST(Studio, FrameTimeStaysBoundedWhileGenerating) {
  FixtureModelDir dir("studio-frames");
  LaunchOptions launch = fixture_launch(dir);
  launch.resolution = 65;  // a job long enough (a few seconds) to sample many frames
  auto window = open_window(launch);
  // Let the first compositions (shader compiles on software GL) pass.
  ASSERT_TRUE(wait_until([&] { return window->viewport()->frames() >= 10; }));
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->engine().stats().state, JobState::kDone);
  std::printf("frames during the job: %lld, max gap %.1f ms, job %.0f ms\n",
              static_cast<long long>(window->generation().last_job_frames()),
              window->generation().last_job_max_frame_gap_ms(), window->engine().stats().total_ms);
  EXPECT_GE(window->generation().last_job_frames(), 3);
  double load = 0;
  if (machine_busy(&load)) {
    GTEST_SKIP() << "load average " << load << " exceeds the core count: frame times measure "
                 << "the other processes (max gap "
                 << window->generation().last_job_max_frame_gap_ms() << " ms)";
  }
  EXPECT_LT(window->generation().last_job_max_frame_gap_ms(), 100.0);
}

TEST(Studio, InvalidModelDirShowsErrorAndStaysUsable) {
  FixtureModelDir dir("studio-invalid");
  auto window = open_window(fixture_launch(dir));
  window->models().load_model("/nonexistent/tessera-model");
  ASSERT_TRUE(wait_until([&] { return !window->engine().loading(); }));
  EXPECT_TRUE(window->model_status_text().contains("/nonexistent/tessera-model"))
      << window->model_status_text().toStdString();
  EXPECT_TRUE(window->model_status_text().contains("not a directory"));
  // A directory that exists but holds no model: the loader's message names what is missing.
  QTemporaryDir empty;
  window->models().load_model(empty.path());
  ASSERT_TRUE(wait_until([&] { return !window->engine().loading(); }));
  EXPECT_TRUE(window->model_status_text().contains("Not a usable model directory"));
  EXPECT_TRUE(window->model_status_text().contains("safetensors"))
      << window->model_status_text().toStdString();
  // The previous model is still in use and generates.
  ASSERT_TRUE(window->engine().has_model());
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->engine().stats().state, JobState::kDone) << window->engine().stats().message;
  EXPECT_EQ(window->gallery()->count(), 1);
}

// A newcomer on the embedded model: the Examples button lists its families as prompts, one click
// generates one, and what comes out exports as a closed, manifold mesh. A model without a card
// (the parity fixture, like the released Cube 3D folders) has no examples to offer.
TEST(Studio, ExamplePromptsOfTheEmbeddedModel) {
  LaunchOptions launch;  // the embedded default model, the studio's default settings
  auto window = open_window(launch);
  ASSERT_TRUE(window->engine().has_model()) << window->model_status_text().toStdString();
  QToolButton* button = window->examples_button();
  ASSERT_NE(button, nullptr);
  EXPECT_TRUE(button->isEnabled());
  const QList<QAction*> actions = button->menu()->actions();
  ASSERT_EQ(actions.size(), 19);
  QStringList texts;
  for (QAction* a : actions) texts << a->text();
  EXPECT_TRUE(texts.contains("a sphere"));
  EXPECT_TRUE(texts.contains("an arch"));
  EXPECT_TRUE(texts.contains("a mug"));
  EXPECT_TRUE(window->prompt_edit()->placeholderText().contains("a sphere"))
      << window->prompt_edit()->placeholderText().toStdString();
  QAction* box = actions[texts.indexOf("a box")];
  box->trigger();
  EXPECT_EQ(window->prompt_edit()->prompt(), "a box");
  EXPECT_TRUE(window->engine().busy());
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->engine().stats().state, JobState::kDone) << window->engine().stats().message;
  QTemporaryDir out;
  const QString path = out.filePath("box.obj");
  ASSERT_TRUE(window->files().export_mesh(path, mesh::ExportOptions{}).ok());
  auto mesh = mesh::import_mesh_file(path.toStdString());
  ASSERT_TRUE(mesh.ok()) << mesh.status().to_string();
  const mesh::Topology t = mesh::compute_welded_topology(*mesh);
  EXPECT_EQ(t.boundary_edges, 0);
  EXPECT_EQ(t.non_manifold_edges, 0);

  FixtureModelDir dir("studio-examples");
  window->models().load_model(QString::fromStdString(dir.path()));
  ASSERT_TRUE(wait_until([&] { return !window->engine().loading(); }));
  EXPECT_FALSE(button->isEnabled());
  EXPECT_TRUE(button->menu()->actions().isEmpty());
}

// Text a person types or pastes never crashes the studio (runtime/user_text.h): a 100 kB prompt is
// refused in the status bar before any work and the window stays usable; control characters and
// NUL are repaired and said so, and the export carries the repaired prompt; a prompt of only
// emoji makes its shape.
TEST(Studio, BadPromptTextIsRefusedOrRepairedAndTheWindowStaysUsable) {
  LaunchOptions launch;
  launch.resolution = 17;
  auto window = open_window(launch);
  ASSERT_TRUE(window->engine().has_model()) << window->model_status_text().toStdString();

  window->prompt_edit()->setPlainText(QString(100 * 1024, QChar('a')));
  window->generation().generate();
  EXPECT_FALSE(window->engine().busy());
  EXPECT_TRUE(window->status_text().contains("102400 bytes"))
      << window->status_text().toStdString();

  QString controls = QStringLiteral("a mug");
  controls.insert(1, QChar(0));
  controls.append(QChar(0x1b));
  controls.append(QStringLiteral("x"));
  window->prompt_edit()->setPlainText(controls);
  window->generation().generate();
  EXPECT_TRUE(window->status_text().contains("control character"))
      << window->status_text().toStdString();
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->engine().stats().state, JobState::kDone) << window->engine().stats().message;
  QTemporaryDir out;
  ExportChoice choice;
  choice.path = out.filePath("mug.glb");
  QString summary;
  const Status st = window->files().export_asset(choice, &summary);
  ASSERT_TRUE(st.ok()) << st.to_string();
  auto metadata = mesh::read_metadata(choice.path.toStdString());
  ASSERT_TRUE(metadata.ok()) << metadata.status().to_string();
  EXPECT_EQ((*metadata)["prompt"], "a  mug x");

  window->prompt_edit()->setPlainText(QString::fromUtf8("\xf0\x9f\x90\xb1\xf0\x9f\x8d\xa9"));
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->engine().stats().state, JobState::kDone) << window->engine().stats().message;
}

// Variations (issue 23): 4 candidates decoded together form side by side in the candidate grid,
// each final mesh goes to the gallery with its seed, clicking a tile makes it the current mesh
// (what export writes), and "More like this" continues with the next 4 seeds; each candidate's
// mesh is the one a lone job of its seed makes.
TEST(Studio, VariationsGridChooseAndMoreLikeThis) {
  LaunchOptions launch;  // the embedded default model
  auto window = open_window(launch);
  ASSERT_TRUE(window->engine().has_model()) << window->model_status_text().toStdString();
  SettingsPanel* settings = window->settings_panel();
  settings->set_variations(4);
  settings->set_seed(300, /*locked=*/true);
  settings->set_sampling(true);  // the panel's sampling settings, the same for the lone job below
  settings->set_final_resolution(33);
  window->prompt_edit()->setPlainText("a chair");
  window->generation().generate();
  CandidateGrid* grid = window->candidate_grid();
  ASSERT_NE(grid, nullptr);
  EXPECT_EQ(grid->count(), 4);
  EXPECT_TRUE(grid->isVisible());
  ASSERT_TRUE(wait_job(*window));
  ASSERT_EQ(window->engine().stats().state, JobState::kDone) << window->engine().stats().message;
  EXPECT_EQ(window->engine().stats().candidates, 4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(wait_until([&] { return grid->is_final(i); })) << "candidate " << i;
    EXPECT_EQ(grid->seed(i), 300u + static_cast<uint64_t>(i));
  }
  EXPECT_EQ(window->gallery()->count(), 4);
  EXPECT_TRUE(window->gallery()->item(3)->text().contains("seed 303"))
      << window->gallery()->item(3)->text().toStdString();
  EXPECT_EQ(window->viewport()->mesh(), grid->mesh(0));  // candidate 0 is current by default
  ASSERT_TRUE(window->generation().choose_candidate(2));
  EXPECT_EQ(grid->selected(), 2);
  EXPECT_EQ(window->viewport()->mesh(), grid->mesh(2));
  EXPECT_TRUE(window->status_text().contains("seed 302")) << window->status_text().toStdString();
  QTemporaryDir out;
  ASSERT_TRUE(window->files().export_mesh(out.filePath("c3.obj"), mesh::ExportOptions{}).ok());
  auto exported = mesh::import_mesh_file(out.filePath("c3.obj").toStdString());
  ASSERT_TRUE(exported.ok()) << exported.status().to_string();
  EXPECT_EQ(exported->triangle_count(), grid->mesh(2)->triangle_count());
  // Re-mesh the chosen candidate at 65: a finer mesh of the same shape becomes current (and its
  // tile's); the grid stays.
  const auto third = grid->mesh(2);
  ASSERT_TRUE(window->generation().remesh_current(65).ok());
  ASSERT_TRUE(wait_job(*window));
  ASSERT_NE(window->viewport()->mesh(), third);
  EXPECT_GT(window->viewport()->mesh()->triangle_count(), third->triangle_count());
  EXPECT_EQ(grid->mesh(2), window->viewport()->mesh());
  EXPECT_EQ(grid->count(), 4);
  EXPECT_EQ(window->gallery()->count(), 5);
  EXPECT_FALSE(window->generation().remesh_current(64).ok());  // not 2^k + 1
  // Candidate 3 alone (variations 1, seed 302) is the same mesh.
  settings->set_variations(1);
  settings->set_seed(302, true);
  window->generation().generate();
  EXPECT_EQ(grid->count(), 0);
  EXPECT_FALSE(grid->isVisible());
  ASSERT_TRUE(wait_job(*window));
  ASSERT_NE(window->viewport()->mesh(), nullptr);
  EXPECT_EQ(window->viewport()->mesh()->positions, third->positions);
  // The gallery groups variations: the first job's four fold into one tile once a newer job
  // comes; the re-mesh and the lone job have a tile each.
  ASSERT_EQ(window->gallery()->count(), 3);
  EXPECT_TRUE(window->gallery()->item(0)->text().contains(QStringLiteral("×4")))
      << window->gallery()->item(0)->text().toStdString();
  // More like this: the last job (1 candidate, seed 302) continues with seed 303.
  ASSERT_TRUE(window->more_button()->isEnabled());
  settings->set_variations(4);
  settings->set_seed(300, true);
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  const auto fourth = grid->mesh(3);
  window->more_button()->click();
  EXPECT_EQ(grid->count(), 4);
  EXPECT_EQ(grid->seed(0), 304u);
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->engine().stats().state, JobState::kDone);
  // Folded groups of 4 (first and third job), the re-mesh, the lone job, and the newest four.
  EXPECT_EQ(window->gallery()->count(), 1 + 1 + 1 + 1 + 4);
  EXPECT_NE(grid->mesh(0), nullptr);
  EXPECT_NE(grid->mesh(0)->positions, fourth->positions);
}

TEST(Studio, StartsWithoutDefaultModel) {
  QTemporaryDir assets;  // no models/tessera-tiny inside
  // The runtime's default model lives under $TESSERA_ASSETS (core/assets.h).
  const QByteArray saved_assets = qgetenv("TESSERA_ASSETS");
  qputenv("TESSERA_ASSETS", assets.path().toUtf8());
  struct RestoreAssets {
    QByteArray value;
    ~RestoreAssets() {
      if (value.isEmpty())
        qunsetenv("TESSERA_ASSETS");
      else
        qputenv("TESSERA_ASSETS", value);
    }
  } restore{saved_assets};
  LaunchOptions launch;
  launch.resolution = 17;
  launch.preview_resolution = 9;
  MainWindow window(launch);
  window.show();
  ASSERT_TRUE(wait_until([&] { return window.viewport()->frames() >= 2; }));
  EXPECT_TRUE(window.status_text().contains("No model")) << window.status_text().toStdString();
  EXPECT_FALSE(window.engine().has_model());
  window.generation().generate();  // explains instead of failing
  EXPECT_TRUE(window.status_text().contains("No model loaded"));
  FixtureModelDir dir("studio-nodefault");
  window.models().load_model(QString::fromStdString(dir.path()));
  ASSERT_TRUE(wait_until([&] { return window.engine().has_model(); }));
  window.prompt_edit()->setPlainText(testing::kParityPrompt);
  window.generation().generate();
  ASSERT_TRUE(wait_job(window));
  EXPECT_EQ(window.engine().stats().state, JobState::kDone);
}

TEST(Studio, RapidGeneratePresses) {
  FixtureModelDir dir("studio-rapid");
  auto window = open_window(fixture_launch(dir));
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  uint64_t last_job = 0;
  for (int i = 0; i < 25; ++i) {
    window->generation().generate();
    last_job = window->engine().stats().job;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 2);
  }
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->engine().stats().job, last_job);
  EXPECT_EQ(window->engine().stats().state, JobState::kDone) << window->engine().stats().message;
  EXPECT_GE(window->gallery()->count(), 1);
  EXPECT_EQ(window->prompt_edit()->history().size(), 1);  // one prompt, remembered once
  // The session still works afterwards.
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->engine().stats().state, JobState::kDone);
}

TEST(Studio, CloseDuringGeneration) {
  FixtureModelDir dir("studio-close");
  LaunchOptions launch = fixture_launch(dir);
  launch.resolution = 129;  // a long extraction to close in the middle of
  auto window = open_window(launch);
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();
  ASSERT_TRUE(wait_until([&] { return !window->engine().stats().token_ms.empty(); }));
  EXPECT_TRUE(window->engine().busy());
  QElapsedTimer timer;
  timer.start();
  window->close();
  window.reset();  // cancels the job and joins the worker
  EXPECT_LT(timer.elapsed(), 5000) << "closing waited for the job";
}

TEST(Studio, ImportAndExport) {
  FixtureModelDir dir("studio-io");
  auto window = open_window(fixture_launch(dir));
  QTemporaryDir out;
  // Nothing to export yet.
  EXPECT_FALSE(window->files().export_mesh(out.filePath("none.obj"), {}).ok());
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  ASSERT_NE(window->viewport()->mesh(), nullptr);
  const int64_t triangles = window->viewport()->mesh()->triangle_count();
  // Unwritable and unsupported targets fail with a message; nothing is left behind.
  Status st = window->files().export_mesh("/nonexistent-dir/mesh.obj", {});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent-dir"), std::string::npos) << st.message();
  EXPECT_FALSE(window->files().export_mesh(out.filePath("mesh.ply"), {}).ok());
  EXPECT_FALSE(QFileInfo::exists(out.filePath("mesh.ply")));
  for (const char* name : {"mesh.obj", "mesh.glb", "mesh.fbx"}) {
    mesh::ExportOptions options;
    options.up_axis = mesh::UpAxis::kZ;
    Status written = window->files().export_mesh(out.filePath(name), options);
    EXPECT_TRUE(written.ok()) << name << ": " << written.message();
  }
  // Re-import what we wrote (view only).
  for (const char* name : {"mesh.obj", "mesh.glb"}) {
    ASSERT_TRUE(window->files().open_mesh_file(out.filePath(name)))
        << window->status_text().toStdString();
    EXPECT_EQ(window->viewport()->mesh()->triangle_count(), triangles) << name;
  }
  // A decimation budget applies to the written file only; the viewport keeps the full mesh.
  if (triangles > 40) {
    const int64_t budget = triangles / 2;
    Status reduced = window->files().export_mesh(out.filePath("half.obj"), {}, budget);
    ASSERT_TRUE(reduced.ok()) << reduced.message();
    ASSERT_TRUE(window->files().open_mesh_file(out.filePath("half.obj")));
    EXPECT_LE(window->viewport()->mesh()->triangle_count(), budget);
    EXPECT_GT(window->viewport()->mesh()->triangle_count(), 0);
  }
  // Files that are not meshes: a message, and the shown mesh stays.
  const QString text = out.filePath("notes.txt");
  std::ofstream(text.toStdString()) << "not a mesh\n";
  EXPECT_FALSE(window->files().open_mesh_file(text));
  EXPECT_TRUE(window->status_text().contains("not a mesh file"))
      << window->status_text().toStdString();
  const QString fake_glb = out.filePath("fake.glb");
  std::ofstream(fake_glb.toStdString()) << "hello, this is text";
  EXPECT_FALSE(window->files().open_mesh_file(fake_glb));
  EXPECT_TRUE(window->status_text().contains("glTF")) << window->status_text().toStdString();
  const QString binary_obj = out.filePath("binary.obj");
  std::ofstream(binary_obj.toStdString(), std::ios::binary) << std::string("v 1 2\0\0\x01", 8);
  EXPECT_FALSE(window->files().open_mesh_file(binary_obj));
  EXPECT_NE(window->viewport()->mesh(), nullptr);
}

// Files only Assimp reads open in the studio through the child process (a PLY here); a file that
// makes Assimp abort is a message naming it, and the studio goes on opening the next file.
TEST(Studio, OpensWhatAssimpReadsAndSurvivesAReaderCrash) {
  if (!mesh::isolated_formats().available) GTEST_SKIP() << mesh::isolated_formats().why_not;
  FixtureModelDir dir("studio-assimp");
  auto window = open_window(fixture_launch(dir));
  QTemporaryDir out;
  const QString ply = out.filePath("tetra.ply");
  std::ofstream(ply.toStdString())
      << "ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\n"
         "property float z\nelement face 4\nproperty list uchar int vertex_indices\nend_header\n"
         "0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 2 1\n3 0 1 3\n3 0 3 2\n3 1 2 3\n";
  ASSERT_TRUE(window->files().open_mesh_file(ply)) << window->status_text().toStdString();
  EXPECT_EQ(window->viewport()->mesh()->triangle_count(), 4);
  EXPECT_TRUE(window->status_text().contains("tetra.ply")) << window->status_text().toStdString();
  const QString crash = out.filePath("crash.ply");
  std::ofstream(crash.toStdString())
      << "ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\n"
         "property float z\nelement face 2\nproperty list uchar uint vertex_indices\nend_header\n"
         "0 0 0\n";
  EXPECT_FALSE(window->files().open_mesh_file(crash));
  EXPECT_TRUE(window->status_text().contains("crash.ply")) << window->status_text().toStdString();
  EXPECT_TRUE(window->status_text().contains("crashed")) << window->status_text().toStdString();
  EXPECT_EQ(window->viewport()->mesh()->triangle_count(), 4);  // the shown mesh stays
  ASSERT_TRUE(window->files().open_mesh_file(ply));
  EXPECT_TRUE(window->isVisible());
}

// Issue 24 in the studio: the Export dialog's presets (what they set, overridable), the live
// triangle-budget preview in the viewport, an asset export with LODs and the settings, the
// privacy switch, and Open of a Tessera file restoring its prompt and seed. With
// TESSERA_TEST_SHOTS set, the dialog's picture is saved there (export_dialog.png) to look at.
TEST(Studio, ExportPresetsBudgetPreviewAndRestore) {
  FixtureModelDir dir("studio-presets");
  auto window = open_window(fixture_launch(dir));
  QTemporaryDir out;
  window->settings_panel()->set_seed(21, true);
  window->settings_panel()->set_sampling(true);
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  const auto full = window->viewport()->mesh();
  ASSERT_NE(full, nullptr);
  const int64_t triangles = full->triangle_count();
  ASSERT_GT(triangles, 100);

  {
    int64_t last_budget = -1;
    ExportDialog dialog(window.get(), triangles, [&](int64_t budget) -> int64_t {
      last_budget = budget;
      auto reduced = std::make_shared<mesh::Mesh>(*full);
      if (budget > 0 && budget < triangles) {
        EXPECT_TRUE(mesh::reduce_triangles(*reduced, budget).ok());
      }
      window->viewport()->set_mesh(reduced, false);
      return reduced->triangle_count();
    });
    dialog.set_path(out.filePath("asset.obj"));
    dialog.select_preset(QStringLiteral("unreal"));
    ExportChoice c = dialog.choice();
    EXPECT_TRUE(c.path.endsWith(QStringLiteral("asset.fbx")))
        << c.path.toStdString();  // its format
    EXPECT_EQ(c.preset, QStringLiteral("unreal"));
    EXPECT_EQ(c.options.up_axis, mesh::UpAxis::kZ);
    EXPECT_TRUE(c.options.front_x);
    EXPECT_EQ(c.options.unit, mesh::LengthUnit::kCentimetre);
    dialog.select_preset(QStringLiteral("roblox"));
    c = dialog.choice();
    EXPECT_EQ(c.asset.max_triangles, 20000);
    EXPECT_TRUE(c.asset.closed);
    EXPECT_EQ(c.options.unit, mesh::LengthUnit::kStud);
    // Override the budget: the viewport shows the decimated mesh and the dialog its count.
    dialog.set_budget(triangles / 2);
    dialog.flush_preview();
    EXPECT_EQ(last_budget, triangles / 2);
    EXPECT_LE(window->viewport()->mesh()->triangle_count(), triangles / 2);
    EXPECT_TRUE(dialog.preview_text().contains(QString::number(triangles)))
        << dialog.preview_text().toStdString();
    c = dialog.choice();
    EXPECT_EQ(c.asset.max_triangles, triangles / 2);
    dialog.show();
    QApplication::processEvents();
    const QImage shot = dialog.grab().toImage();
    EXPECT_GT(shot.width(), 200);
    if (const char* shots = std::getenv("TESSERA_TEST_SHOTS")) {
      shot.save(QDir(shots).filePath("export_dialog.png"));
    }
    dialog.hide();
  }
  window->viewport()->set_mesh(full, false);

  // Export for Unreal with two LODs: an FBX holding LOD0..LOD2 and the shape's settings.
  ExportChoice choice;
  choice.path = out.filePath("asset.fbx");
  choice.preset = QStringLiteral("unreal");
  choice.options.up_axis = mesh::UpAxis::kZ;
  choice.options.front_x = true;
  choice.options.unit = mesh::LengthUnit::kCentimetre;
  choice.options.size_m = 1.5;
  choice.options.pivot = mesh::Pivot::kBase;
  choice.asset.lods = 2;
  QString summary;
  Status st = window->files().export_asset(choice, &summary);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(summary.contains(QStringLiteral("LOD2"))) << summary.toStdString();
  auto metadata = mesh::read_metadata(choice.path.toStdString());
  ASSERT_TRUE(metadata.ok()) << metadata.status().message();
  EXPECT_EQ((*metadata)["prompt"], testing::kParityPrompt);
  EXPECT_EQ((*metadata)["sampling"]["seed"], 21);
  EXPECT_EQ((*metadata)["export"]["preset"], "unreal");
  // The privacy switch: no settings.
  choice.path = out.filePath("private.glb");
  choice.options = mesh::ExportOptions();
  choice.asset = mesh::AssetOptions();
  choice.write_settings = false;
  ASSERT_TRUE(window->files().export_asset(choice).ok());
  EXPECT_FALSE(mesh::read_metadata(choice.path.toStdString()).ok());
  // A bad target fails and writes nothing.
  choice.path = out.filePath("mesh.ply");
  EXPECT_FALSE(window->files().export_asset(choice).ok());

  // Open the FBX elsewhere: its prompt and seed come back, and Generate makes the same shape.
  window->prompt_edit()->setPlainText(QStringLiteral("something else"));
  window->settings_panel()->set_seed(5, false);
  ASSERT_TRUE(window->files().open_mesh_file(out.filePath("asset.fbx")));
  ASSERT_TRUE(window->files().restore_settings_from(out.filePath("asset.fbx")))
      << window->status_text().toStdString();
  EXPECT_EQ(window->prompt_edit()->toPlainText().toStdString(), testing::kParityPrompt);
  EXPECT_TRUE(window->status_text().contains(QStringLiteral("seed 21")))
      << window->status_text().toStdString();
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  ASSERT_NE(window->viewport()->mesh(), nullptr);
  EXPECT_EQ(window->viewport()->mesh()->positions, full->positions);
  // A file without settings: the status says so, nothing changes.
  EXPECT_FALSE(window->files().restore_settings_from(out.filePath("private.glb")));
  EXPECT_TRUE(window->status_text().contains(QStringLiteral("no Tessera metadata")))
      << window->status_text().toStdString();
}

// The readers themselves (every format's textured re-import, broken files) are tested headless
// in tests/engine/mesh/import_*_test.cpp.

// In the studio, opening a textured file shows it textured and says so.
TEST(Studio, OpensTexturedMeshTextured) {
  FixtureModelDir dir("studio-textured-open");
  auto window = open_window(fixture_launch(dir));
  QTemporaryDir out;
  const QString glb = out.filePath("quad.glb");
  ASSERT_TRUE(mesh::write_mesh(mesh::testing::textured_test_mesh(), glb.toStdString()).ok());
  ASSERT_TRUE(window->files().open_mesh_file(glb)) << window->status_text().toStdString();
  ASSERT_NE(window->viewport()->mesh(), nullptr);
  EXPECT_FALSE(window->viewport()->mesh()->texture.empty());
  EXPECT_EQ(window->viewport()->render_options().shading, render::ShadingMode::kTextured);
  EXPECT_TRUE(window->status_text().contains("texture 4x2")) << window->status_text().toStdString();
}

TEST(Studio, ResultsAreKeptAndTheNextStudioShowsThem) {
  QTemporaryDir dir;
  qputenv("TESSERA_LIBRARY", dir.path().toLocal8Bit());
  {
    LaunchOptions launch;  // the embedded model
    auto window = open_window(launch);
    window->settings_panel()->set_final_resolution(33);
    window->prompt_edit()->setPlainText("a ball");
    window->generation().generate();
    ASSERT_TRUE(wait_job(*window));
    ASSERT_EQ(window->engine().stats().state, JobState::kDone);
    EXPECT_EQ(window->gallery()->count(), 1);
  }
  auto kept = runtime::Library::open(dir.path().toStdString());
  ASSERT_TRUE(kept.ok()) << kept.status().message();
  auto entries = (*kept)->list();
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ(entries->front().prompt, "a ball");
  EXPECT_EQ(entries->front().model, "tessera-tiny");
  EXPECT_TRUE(QFile::exists(QString::fromStdString(entries->front().thumbnail_file())));
  EXPECT_TRUE((*kept)->check().ok());
  // The next studio starts with it in the gallery; choosing it reads its mesh.
  LaunchOptions launch;
  auto window = open_window(launch);
  ASSERT_EQ(window->gallery()->count(), 1);
  window->gallery()->setCurrentRow(0);
  Q_EMIT window->gallery()->itemClicked(window->gallery()->item(0));
  ASSERT_NE(window->viewport()->mesh(), nullptr);
  EXPECT_EQ(window->viewport()->mesh()->triangle_count(), entries->front().triangles);
  EXPECT_TRUE(window->status_text().contains("a ball")) << window->status_text().toStdString();
  qunsetenv("TESSERA_LIBRARY");
}

TEST(Studio, TinyWindowKeepsWorking) {
  FixtureModelDir dir("studio-tiny");
  auto window = open_window(fixture_launch(dir));
  window->resize(1, 1);
  window->viewport()->resize(1, 1);
  const int64_t before = window->viewport()->frames();
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();
  ASSERT_TRUE(wait_job(*window));
  EXPECT_EQ(window->engine().stats().state, JobState::kDone);
  window->resize(900, 600);
  ASSERT_TRUE(wait_until([&] { return window->viewport()->frames() > before + 2; }));
  EXPECT_TRUE(window->viewport()->render_error().isEmpty())
      << window->viewport()->render_error().toStdString();
}

}  // namespace
}  // namespace tessera::studio

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Settings go to a throw-away directory, never to the user's.
  QTemporaryDir config;
  qputenv("XDG_CONFIG_HOME", config.path().toLocal8Bit());
  // ... and the library too (each test process its own), and any other data.
  QTemporaryDir library, data;
  qputenv("TESSERA_LIBRARY", library.path().toLocal8Bit());
  qputenv("XDG_DATA_HOME", data.path().toLocal8Bit());
  // As tessera-studio does: a core for the UI.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  tessera::runtime::set_cpu_threads(cores > 1 ? cores - 1 : 1);
  QSurfaceFormat::setDefaultFormat(tessera::studio::make_default_surface_format());
  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName("TesseraTests");
  QCoreApplication::setApplicationName("tessera-studio-tests");
  return RUN_ALL_TESTS();
}
