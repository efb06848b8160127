// The studio's Diffusion panel under Xvfb, on the tiny fixture diffusion model (a diffusers folder
// assembled from tests/fixtures by tests/engine/diffusion/pipeline_test_util.h) and the parity
// shape model: the image refines step by step and lands in the panel, the image waits for the shape
// job, cancel and a new prompt stop it, a missing model is reported in the panel, and "apply as
// texture" gives the mesh uvs and a texture (in-process and through the scripted --apply-texture,
// whose export carries the texture). Shares main() with studio_test.cpp.
#include "ui/studio/diffusion_panel.h"
#include "tests/ui/studio/event_loop.h"

#include <gtest/gtest.h>

#include <QApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QTemporaryDir>
#include <QThread>
#include <algorithm>
#include <filesystem>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/engine/diffusion/pipeline_test_util.h"
#include "tests/support/fixture_model_dir.h"
#include "ui/studio/diffusion_bridge.h"
#include "engine/mesh/import.h"
#include "engine/runtime/library.h"
#include "ui/studio/library_panel.h"
#include "ui/studio/main_window.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {
namespace {

namespace pt = diffusion::pipeline_test;
using testing::FixtureModelDir;

// The fixture diffusion model, written once per process.
const std::string& fixture_diffusion_dir() {
  return pt::fixture_diffusers_model_dir();
}

LaunchOptions launch_for(const FixtureModelDir& shape, const QString& diffusion_model) {
  LaunchOptions o;
  o.model_dir = QString::fromStdString(shape.path());
  o.diffusion_model = diffusion_model;
  o.resolution = 17;
  o.preview_resolution = 9;
  o.preview_every = 4;
  return o;
}

std::unique_ptr<MainWindow> open(const LaunchOptions& launch) {
  auto window = std::make_unique<MainWindow>(launch);
  window->show();
  EXPECT_TRUE(wait_until([&] { return window->engine().has_model(); }));
  EXPECT_TRUE(wait_until(
      [&] { return window->image().diffusion().model_state() != DiffusionModelState::kLoading; }));
  EXPECT_TRUE(wait_until([&] { return window->viewport()->frames() >= 2; }));
  return window;
}

TEST(StudioDiffusion, PanelShowsStepsThenImageAndAppliesTexture) {
  FixtureModelDir shape("studio-diffusion-steps");
  auto window = open(launch_for(shape, QString::fromStdString(fixture_diffusion_dir())));
  DiffusionBridge& bridge = window->image().diffusion();
  ASSERT_EQ(bridge.model_state(), DiffusionModelState::kReady)
      << bridge.model_message().toStdString();
  EXPECT_EQ(bridge.image_size(), 64);

  ImageSettings& settings = window->image().settings();
  EXPECT_TRUE(settings.auto_after_shape);  // the default
  settings.steps = 6;
  settings.guidance = 2.0f;
  settings.lock_seed = true;
  settings.seed = 7;
  // Record what the panel would show at each change: the number of finished steps and whether
  // the picture is a preview or the final image.
  std::set<size_t> step_counts_with_preview;
  bool waited_for_shape = false;
  QObject::connect(&bridge, &DiffusionBridge::imageChanged, window.get(), [&] {
    const ImageJobState& s = bridge.state();
    if (s.waiting_for_shape) waited_for_shape = true;
    if (!s.image_final && !s.image_rgb.empty()) {
      step_counts_with_preview.insert(s.step_ms.size());
      // A frame mid-way, for people to look at (the preview is latent-sized, drawn as blocks).
      if (s.step_ms.size() == 3) {
        window->viewport()->grabFramebuffer().save(QString(TESSERA_BINARY_DIR) +
                                                   "/studio_diffusion_preview.png");
      }
    }
  });
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();  // the shape; the image follows it (auto)
  EXPECT_TRUE(bridge.state().state == JobState::kRunning);
  ASSERT_TRUE(wait_until([&] { return !window->engine().busy(); }));
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }));
  const ImageJobState& s = bridge.state();
  ASSERT_EQ(s.state, JobState::kDone) << s.message.toStdString();
  EXPECT_TRUE(waited_for_shape) << "the image should wait for the shape job";
  EXPECT_EQ(s.step_ms.size(), 6u);
  EXPECT_EQ(s.step_sigma.size(), 6u);
  EXPECT_GE(step_counts_with_preview.size(), 2u) << "previews should arrive step by step";
  EXPECT_TRUE(s.image_final);
  EXPECT_EQ(s.image_width, 64);
  EXPECT_EQ(s.image_rgb.size(), 64u * 64u * 3u);
  EXPECT_GT(s.total_ms, 0.0);
  EXPECT_EQ(s.seed, 7u);
  for (float ms : s.step_ms) EXPECT_GE(ms, 0.0f);

  // The panel draws the image: the image square (left of the panel's text column) is mostly not
  // the panel's flat background.
  window->viewport()->panels().timing = false;  // nothing else near the right column
  QImage shot = window->viewport()->grabFramebuffer().convertToFormat(QImage::Format_RGB32);
  ASSERT_FALSE(shot.isNull());
  const int x0 = shot.width() - kDiffusionPanelRight + 10;
  const int y_search_end = std::min(shot.height() - 1, kDiffusionPanelY + 140);
  // The image starts below the model line: find the first row (from the panel's top) whose
  // pixels vary a lot, which is where the image begins.
  int varied_rows = 0;
  for (int y = kDiffusionPanelY + 20; y < y_search_end; ++y) {
    std::set<QRgb> colours;
    for (int x = x0 + 4; x < x0 + kDiffusionImageSide - 8; ++x) colours.insert(shot.pixel(x, y));
    if (colours.size() > 12) ++varied_rows;
  }
  EXPECT_GT(varied_rows, 40) << "no image in the Diffusion panel";
  shot.save(QString(TESSERA_BINARY_DIR) + "/studio_diffusion_panel.png");

  // Apply as texture: the shown mesh gets uvs and the image atlas; the renderer shows it.
  ASSERT_TRUE(window->viewport()->mesh());
  const int64_t before_vertices = window->viewport()->mesh()->vertex_count();
  const Status st = window->image().apply_as_texture();
  ASSERT_TRUE(st.ok()) << st.message();
  // A job of the runtime's texture lane: the textured copy arrives with its event.
  ASSERT_TRUE(wait_until([&] { return window->image().texture_job() == 0; }));
  const auto textured = window->viewport()->mesh();
  ASSERT_TRUE(textured);
  EXPECT_GE(textured->vertex_count(), before_vertices);
  EXPECT_EQ(textured->uvs.size(), static_cast<size_t>(2 * textured->vertex_count()));
  EXPECT_FALSE(textured->texture.empty());
  EXPECT_EQ(window->viewport()->render_options().shading, render::ShadingMode::kTextured);
  // The library keeps both beside the shape: the concept image and the textured mesh.
  runtime::Library* library = window->library_panel()->library();
  ASSERT_NE(library, nullptr);
  auto kept = library->list({.limit = 1});
  ASSERT_TRUE(kept.ok() && !kept->empty());
  const QImage concept_image(QString::fromStdString(kept->front().concept_file()));
  EXPECT_EQ(concept_image.width(), 64);
  auto reread = mesh::import_mesh_file(kept->front().textured_file());
  ASSERT_TRUE(reread.ok()) << reread.status().message();
  EXPECT_FALSE(reread->uvs.empty());
  EXPECT_FALSE(reread->texture.empty());
  const int64_t frames = window->viewport()->frames();
  ASSERT_TRUE(wait_until([&] { return window->viewport()->frames() > frames + 2; }));
  EXPECT_TRUE(window->viewport()->render_error().isEmpty())
      << window->viewport()->render_error().toStdString();
  window->viewport()->panels().timing = true;
  window->viewport()->grabFramebuffer().save(QString(TESSERA_BINARY_DIR) +
                                             "/studio_diffusion_textured.png");
}

TEST(StudioDiffusion, ImageToImageStartsFromTheViewportAfterTheShape) {
  FixtureModelDir shape("studio-diffusion-i2i");
  auto window = open(launch_for(shape, QString::fromStdString(fixture_diffusion_dir())));
  DiffusionBridge& bridge = window->image().diffusion();
  ASSERT_EQ(bridge.model_state(), DiffusionModelState::kReady);
  ImageSettings& settings = window->image().settings();
  settings.steps = 8;
  settings.strength = 0.5f;
  settings.init_source = ImageSettings::InitSource::kViewport;
  // Without a mesh in the view there is nothing to start from: said, nothing queued.
  EXPECT_FALSE(window->image().generate());
  EXPECT_EQ(bridge.state().job, 0u);
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();
  EXPECT_EQ(bridge.state().job, 0u) << "the image waits for the finished mesh";
  ASSERT_TRUE(wait_until([&] { return !window->engine().busy(); }));
  ASSERT_TRUE(wait_until([&] { return bridge.state().job != 0 && !bridge.busy(); }));
  const ImageJobState& s = bridge.state();
  ASSERT_EQ(s.state, JobState::kDone) << s.message.toStdString();
  EXPECT_TRUE(s.from_image);
  EXPECT_EQ(s.step_ms.size(), 4u);  // floor(8 x 0.5)
  EXPECT_EQ(s.steps, 4);
  EXPECT_EQ(s.image_width, 64);
  // The view it started from: the mesh on the viewport's background, no grid.
  QString error;
  const mesh::TextureImage view = window->viewport()->capture_view(64, &error);
  ASSERT_FALSE(view.empty()) << error.toStdString();
  std::set<uint32_t> colours;
  for (size_t k = 0; k + 2 < view.rgb.size(); k += 3) {
    colours.insert(view.rgb[k] << 16 | view.rgb[k + 1] << 8 | view.rgb[k + 2]);
  }
  EXPECT_GT(colours.size(), 8u) << "the captured view should show the shaded mesh";
  window->grab().save(QString(TESSERA_BINARY_DIR) + "/studio_diffusion_from_viewport.png");
}

TEST(StudioDiffusion, ControlNetFollowsTheViewportDepthAfterTheShape) {
  FixtureModelDir shape("studio-diffusion-control");
  auto window = open(launch_for(shape, QString::fromStdString(fixture_diffusion_dir())));
  DiffusionBridge& bridge = window->image().diffusion();
  ASSERT_EQ(bridge.model_state(), DiffusionModelState::kReady);
  ImageSettings& settings = window->image().settings();
  settings.steps = 3;
  settings.control_source = ImageSettings::ControlSource::kViewportDepth;
  // The fixture model ships no ControlNet: without one the image fails, saying so.
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();
  EXPECT_EQ(bridge.state().job, 0u) << "the image waits for the finished mesh";
  ASSERT_TRUE(wait_until([&] { return !window->engine().busy(); }));
  ASSERT_TRUE(wait_until([&] { return bridge.state().job != 0 && !bridge.busy(); }));
  EXPECT_EQ(bridge.state().state, JobState::kFailed);
  EXPECT_TRUE(bridge.state().message.contains("ships none"))
      << bridge.state().message.toStdString();
  settings.control_model =
      std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/diffusion/controlnet/control.safetensors";
  settings.control_scale = 0.8f;
  ASSERT_TRUE(window->image().generate());
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }));
  ASSERT_EQ(bridge.state().state, JobState::kDone) << bridge.state().message.toStdString();
  EXPECT_TRUE(bridge.state().message.contains("control.safetensors loaded"))
      << bridge.state().message.toStdString();
  // The depth it followed: the mesh white to grey on black, from the viewport's camera.
  QString error;
  const mesh::TextureImage depth = window->viewport()->capture_depth(64, &error);
  ASSERT_FALSE(depth.empty()) << error.toStdString();
  EXPECT_EQ(depth.rgb[0], 0);
  EXPECT_EQ(*std::max_element(depth.rgb.begin(), depth.rgb.end()), 255);
  size_t covered = 0;
  for (size_t k = 0; k < depth.rgb.size(); k += 3) covered += depth.rgb[k] > 0 ? 1 : 0;
  EXPECT_GT(covered, 64u * 64u / 20) << "the mesh should fill part of the view";
  // Upright: a post standing on a wide slab (+Y up) has most of its area in the lower half of the
  // rows it covers, in the view image-to-image starts from and in the depth map.
  auto post = std::make_shared<mesh::Mesh>();
  const auto add_box = [&](float x0, float y0, float z0, float x1, float y1, float z1) {
    const auto base = static_cast<uint32_t>(post->positions.size() / 3);
    for (int k = 0; k < 8; ++k) {
      post->positions.insert(post->positions.end(),
                             {k & 1 ? x1 : x0, k & 2 ? y1 : y0, k & 4 ? z1 : z0});
    }
    for (uint32_t t : {0, 2, 1, 1, 2, 3, 4, 5, 6, 5, 7, 6, 0, 1, 4, 1, 5, 4,
                       2, 6, 3, 3, 6, 7, 0, 4, 2, 2, 4, 6, 1, 3, 5, 3, 7, 5}) {
      post->triangles.push_back(base + t);
    }
  };
  add_box(-1.0f, 0.0f, -1.0f, 1.0f, 0.25f, 1.0f);
  add_box(-0.15f, 0.25f, -0.15f, 0.15f, 2.5f, 0.15f);
  window->viewport()->set_mesh(post, false);
  // Framed with room around it, so the view (the camera as it is) shows all of it.
  mesh::Bounds wide;
  wide.min = {-1.3f, -0.3f, -1.3f};
  wide.max = {1.3f, 2.8f, 1.3f};
  const float distance = window->viewport()->camera().distance;
  window->viewport()->frame_bounds(wide);
  ASSERT_TRUE(wait_until([&] { return window->viewport()->camera().distance != distance; }));
  // Normals shading: every face far from the dark background (lit faces in shadow are not).
  window->viewport()->render_options().shading = render::ShadingMode::kNormals;
  for (bool use_depth : {true, false}) {
    const mesh::TextureImage picture = use_depth ? window->viewport()->capture_depth(64, &error)
                                                 : window->viewport()->capture_view(64, &error);
    ASSERT_FALSE(picture.empty()) << error.toStdString();
    double rows = 0, count = 0;
    int first = 64, last = -1;
    for (int y = 0; y < 64; ++y) {
      for (int x = 0; x < 64; ++x) {
        const uint8_t* p = &picture.rgb[(y * 64 + x) * 3];
        const int diff = std::abs(p[0] - picture.rgb[0]) + std::abs(p[1] - picture.rgb[1]) +
                         std::abs(p[2] - picture.rgb[2]);
        if (diff <= 24) continue;
        rows += y;
        count += 1;
        first = std::min(first, y);
        last = std::max(last, y);
      }
    }
    ASSERT_GT(count, 100) << (use_depth ? "depth" : "view");
    EXPECT_GT(rows / count, 0.5 * (first + last) + 4)
        << (use_depth ? "depth" : "view") << " upside down? rows " << first << ".." << last
        << ", mean " << rows / count;
  }
  window->grab().save(QString(TESSERA_BINARY_DIR) + "/studio_diffusion_controlnet.png");
}

TEST(StudioDiffusion, TheFastChoiceRunsLcmWithTheLcmLora) {
  FixtureModelDir shape("studio-diffusion-fast");
  auto window = open(launch_for(shape, QString::fromStdString(fixture_diffusion_dir())));
  DiffusionBridge& bridge = window->image().diffusion();
  ASSERT_EQ(bridge.model_state(), DiffusionModelState::kReady);
  ImageSettings& settings = window->image().settings();
  settings.steps = 20;
  settings.fast = true;
  window->prompt_edit()->setPlainText("a red torus");
  // No LCM-LoRA anywhere: refused, saying where it looked; nothing queued.
  const QByteArray data_home = qgetenv("XDG_DATA_HOME");
  qputenv("XDG_DATA_HOME", QByteArray::fromStdString(shape.path() + "/no-data"));
  EXPECT_FALSE(window->image().generate());
  EXPECT_EQ(bridge.state().job, 0u);
  qputenv("XDG_DATA_HOME", data_home);
  // A LoRA whose name says LCM is the one (here the fixture's kohya file under such a name).
  const std::string lcm = shape.path() + "/lcm-lora-test.safetensors";
  std::filesystem::copy_file(
      std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/diffusion/lora/kohya.safetensors", lcm);
  settings.loras = {{lcm, 1.0f}};
  ASSERT_TRUE(window->image().generate());
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }));
  ASSERT_EQ(bridge.state().state, JobState::kDone) << bridge.state().message.toStdString();
  EXPECT_EQ(bridge.state().step_ms.size(), 4u) << "LCM's 4 steps, not the settings' 20";
  EXPECT_EQ(settings.steps, 20) << "the settings stay as they were";
}

TEST(StudioDiffusion, LorasFromThePanelReloadTheModel) {
  FixtureModelDir shape("studio-diffusion-lora");
  auto window = open(launch_for(shape, QString::fromStdString(fixture_diffusion_dir())));
  DiffusionBridge& bridge = window->image().diffusion();
  ASSERT_EQ(bridge.model_state(), DiffusionModelState::kReady);
  ImageSettings& settings = window->image().settings();
  settings.steps = 3;
  const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/diffusion/lora/";
  settings.loras = {{dir + "kohya.safetensors", 1.0f}, {dir + "peft.safetensors", 0.5f}};
  window->prompt_edit()->setPlainText("a red torus");
  ASSERT_TRUE(window->image().generate());
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }));
  ASSERT_EQ(bridge.state().state, JobState::kDone) << bridge.state().message.toStdString();
  EXPECT_TRUE(bridge.state().message.contains("reloaded with 2 LoRA(s)"))
      << bridge.state().message.toStdString();
  // A bad LoRA fails the image with the file named; the studio stays usable without it.
  settings.loras = {{dir + "expected.safetensors", 1.0f}};
  ASSERT_TRUE(window->image().generate());
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }));
  EXPECT_EQ(bridge.state().state, JobState::kFailed);
  EXPECT_TRUE(bridge.state().message.contains("expected.safetensors"))
      << bridge.state().message.toStdString();
  settings.loras.clear();
  ASSERT_TRUE(window->image().generate());
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }));
  EXPECT_EQ(bridge.state().state, JobState::kDone) << bridge.state().message.toStdString();
}

TEST(StudioDiffusion, CancelAndNewPromptStopTheImage) {
  FixtureModelDir shape("studio-diffusion-cancel");
  auto window = open(launch_for(shape, QString::fromStdString(fixture_diffusion_dir())));
  DiffusionBridge& bridge = window->image().diffusion();
  ASSERT_EQ(bridge.model_state(), DiffusionModelState::kReady)
      << bridge.model_message().toStdString();
  std::vector<std::pair<quint64, int>> finished;
  QObject::connect(
      &bridge, &DiffusionBridge::imageFinished, window.get(),
      [&](quint64 job, int state, const QString&) { finished.emplace_back(job, state); });
  // The worker waits at step 1 (0-based) until the job is cancelled, so the UI always acts while
  // the job runs: without the hold a fast worker could finish all steps before the cancel.
  bridge.set_worker_step_hook([](int step, const std::atomic<bool>& cancel) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (step >= 1 && !cancel.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  ImageSettings& settings = window->image().settings();
  settings.steps = 200;
  settings.lock_seed = false;
  window->prompt_edit()->setPlainText(testing::kParityPrompt);

  // Cancel from the panel's action.
  ASSERT_TRUE(window->image().generate());
  const uint64_t first = bridge.state().job;
  EXPECT_NE(window->image().settings().seed, 0u);  // unlocked: a random seed was drawn
  ASSERT_TRUE(wait_until([&] { return bridge.state().step_ms.size() >= 2; }));
  window->image().cancel();
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }, 20000));
  EXPECT_EQ(bridge.state().state, JobState::kCancelled);
  EXPECT_LT(bridge.state().step_ms.size(), 200u);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0], std::make_pair(quint64{first}, static_cast<int>(JobState::kCancelled)));

  // A new prompt's shape generation replaces a running image (cancelled at once in the UI,
  // within a step on the worker); with "image after each shape" off nothing new starts.
  settings.auto_after_shape = false;
  ASSERT_TRUE(window->image().generate());
  const uint64_t second = bridge.state().job;
  ASSERT_TRUE(wait_until([&] { return bridge.state().step_ms.size() >= 1; }));
  window->generation().generate();
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }, 20000));
  EXPECT_EQ(bridge.state().job, second);
  EXPECT_EQ(bridge.state().state, JobState::kCancelled);
  ASSERT_TRUE(wait_until([&] { return !window->engine().busy(); }));

  // Still usable: a short image completes.
  bridge.set_worker_step_hook({});
  settings.steps = 2;
  ASSERT_TRUE(window->image().generate());
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }));
  EXPECT_EQ(bridge.state().state, JobState::kDone) << bridge.state().message.toStdString();
  EXPECT_EQ(bridge.state().step_ms.size(), 2u);
}

TEST(StudioDiffusion, MissingModelIsReportedInThePanel) {
  FixtureModelDir shape("studio-diffusion-missing");
  auto window = open(launch_for(shape, "/nonexistent/tessera-diffusion"));
  DiffusionBridge& bridge = window->image().diffusion();
  EXPECT_EQ(bridge.model_state(), DiffusionModelState::kMissing);
  EXPECT_TRUE(bridge.model_message().contains("/nonexistent/tessera-diffusion"))
      << bridge.model_message().toStdString();
  EXPECT_TRUE(bridge.model_message().contains("No diffusion model"));
  EXPECT_FALSE(window->image().generate());
  EXPECT_TRUE(window->status_text().contains("No diffusion model"))
      << window->status_text().toStdString();
  // The shape side is unaffected (auto image on, but no model: the shape job runs alone).
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();
  ASSERT_TRUE(wait_until([&] { return !window->engine().busy(); }));
  EXPECT_EQ(window->engine().stats().state, JobState::kDone);
  EXPECT_EQ(bridge.state().job, 0u);
  EXPECT_FALSE(window->image().apply_as_texture().ok());
  window->viewport()->grabFramebuffer().save(QString(TESSERA_BINARY_DIR) +
                                             "/studio_diffusion_missing.png");

  // A file that is not a model: the loader's message, still usable.
  QTemporaryDir junk_dir;
  const QString junk = junk_dir.filePath("junk.safetensors");
  QFile f(junk);
  ASSERT_TRUE(f.open(QIODevice::WriteOnly));
  f.write("not a safetensors file");
  f.close();
  window->image().diffusion().load_model(junk);
  ASSERT_TRUE(wait_until([&] { return bridge.model_state() != DiffusionModelState::kLoading; }));
  EXPECT_EQ(bridge.model_state(), DiffusionModelState::kFailed);
  EXPECT_TRUE(bridge.model_message().contains("junk.safetensors"))
      << bridge.model_message().toStdString();
}

// Paint mesh on the embedded image model (it ships its depth ControlNet): each view lands on the
// shown mesh as it is made, the panel lists the views, the painted mesh is shown textured and the
// library keeps it; a cancelled paint puts the mesh back as it was.
TEST(StudioDiffusion, PaintMeshLandsViewByViewAndTheLibraryKeepsIt) {
  FixtureModelDir shape("studio-diffusion-paint");
  LaunchOptions launch = launch_for(shape, QString());  // the embedded image model
  auto window = open(launch);
  DiffusionBridge& bridge = window->image().diffusion();
  ASSERT_EQ(bridge.model_state(), DiffusionModelState::kReady)
      << bridge.model_message().toStdString();
  ImageSettings& settings = window->image().settings();
  settings.auto_after_shape = false;
  // Nothing to paint yet.
  EXPECT_FALSE(window->image().paint_mesh().ok());
  window->prompt_edit()->setPlainText(testing::kParityPrompt);
  window->generation().generate();
  ASSERT_TRUE(wait_until([&] { return !window->engine().busy(); }));
  const auto shape_mesh = window->viewport()->mesh();
  ASSERT_TRUE(shape_mesh);
  settings.steps = 2;
  settings.paint_views = 2;
  settings.lock_seed = true;
  settings.seed = 4;
  int views_landed = 0;
  bool textured_while_painting = false;
  QObject::connect(&bridge, &DiffusionBridge::paintView, window.get(),
                   [&](std::shared_ptr<const mesh::Mesh> painted) {
                     ++views_landed;
                     const auto shown = window->viewport()->mesh();
                     textured_while_painting =
                         textured_while_painting || (shown == painted && !shown->texture.empty());
                   });
  const Status st = window->image().paint_mesh();
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }, 120000));
  const ImageJobState& s = bridge.state();
  ASSERT_EQ(s.state, JobState::kDone) << s.message.toStdString();
  EXPECT_TRUE(s.paint);
  ASSERT_EQ(s.views.size(), 4u);  // 2 around, top, bottom
  EXPECT_EQ(s.views[0].name, "front");
  EXPECT_EQ(views_landed, 4);
  EXPECT_TRUE(textured_while_painting) << "each view should land on the mesh in the viewport";
  const auto painted = window->viewport()->mesh();
  ASSERT_TRUE(painted);
  EXPECT_EQ(painted->triangle_count(), shape_mesh->triangle_count());
  EXPECT_EQ(painted->texture.width, 1024);
  EXPECT_EQ(painted->uvs.size(), 2 * static_cast<size_t>(painted->vertex_count()));
  EXPECT_GT(s.coverage, 0.5);
  EXPECT_EQ(window->viewport()->render_options().shading, render::ShadingMode::kTextured);
  runtime::Library* library = window->library_panel()->library();
  ASSERT_NE(library, nullptr);
  auto kept = library->list({.limit = 1});
  ASSERT_TRUE(kept.ok() && !kept->empty());
  auto reread = mesh::import_mesh_file(kept->front().textured_file());
  ASSERT_TRUE(reread.ok()) << reread.status().message();
  EXPECT_EQ(reread->texture.width, 1024);
  const int64_t frames = window->viewport()->frames();
  ASSERT_TRUE(wait_until([&] { return window->viewport()->frames() > frames + 2; }));
  EXPECT_TRUE(window->viewport()->render_error().isEmpty());
  window->viewport()->grabFramebuffer().save(QString(TESSERA_BINARY_DIR) + "/studio_paint.png");

  // A paint cancelled after its first view: the mesh shown is the painted one from before.
  settings.paint_views = 4;
  QObject::connect(&bridge, &DiffusionBridge::paintView, window.get(),
                   [&](std::shared_ptr<const mesh::Mesh>) { bridge.cancel(); });
  ASSERT_TRUE(window->image().paint_mesh().ok());
  ASSERT_TRUE(wait_until([&] { return !bridge.busy(); }, 120000));
  EXPECT_EQ(bridge.state().state, JobState::kCancelled);
  EXPECT_EQ(window->viewport()->mesh(), painted);
}

TEST(StudioDiffusion, ScriptedApplyTextureExportsTexturedMesh) {
  FixtureModelDir shape("studio-diffusion-script");
  QTemporaryDir out;
  ASSERT_TRUE(out.isValid());
  const QString shot = out.filePath("shot.png");
  const QString exported = out.filePath("textured.obj");
  QProcess studio;
  studio.setProcessChannelMode(QProcess::ForwardedErrorChannel);
  studio.start(TESSERA_STUDIO_PATH, {"--model",
                                     QString::fromStdString(shape.path()),
                                     "--diffusion-model",
                                     QString::fromStdString(fixture_diffusion_dir()),
                                     "--prompt",
                                     testing::kParityPrompt,
                                     "--apply-texture",
                                     "--image-steps",
                                     "4",
                                     "--image-seed",
                                     "3",
                                     "--screenshot",
                                     shot,
                                     "--export",
                                     exported,
                                     "--quit-when-done",
                                     "--resolution",
                                     "33",
                                     "--preview-resolution",
                                     "17",
                                     "--preview-every",
                                     "4",
                                     "--no-grid"});
  ASSERT_TRUE(studio.waitForFinished(90000)) << "tessera-studio did not finish";
  const QString output = QString::fromLocal8Bit(studio.readAllStandardOutput());
  ASSERT_EQ(studio.exitCode(), 0) << output.toStdString();
  EXPECT_TRUE(output.contains("job done")) << output.toStdString();
  EXPECT_TRUE(output.contains("image done: 4 steps")) << output.toStdString();
  EXPECT_FALSE(output.contains("mesh uvs 0,")) << output.toStdString();
  EXPECT_TRUE(output.contains("seed 3;")) << output.toStdString();
  QImage image(shot);
  ASSERT_FALSE(image.isNull());
  image.save(QString(TESSERA_BINARY_DIR) + "/studio_diffusion_scripted.png");
  // The OBJ carries texture coordinates and a material with the texture.
  QFile obj(exported);
  ASSERT_TRUE(obj.open(QIODevice::ReadOnly));
  const QByteArray text = obj.readAll();
  EXPECT_TRUE(text.contains("\nvt ")) << "no texture coordinates in the OBJ";
  QFile mtl(out.filePath("textured.mtl"));
  ASSERT_TRUE(mtl.open(QIODevice::ReadOnly));
  EXPECT_TRUE(mtl.readAll().contains("map_Kd")) << "the material does not reference a texture";

  // --image with a missing model fails with the panel's message.
  QProcess missing;
  missing.start(TESSERA_STUDIO_PATH,
                {"--model", QString::fromStdString(shape.path()), "--diffusion-model",
                 "/nonexistent/sd", "--prompt", testing::kParityPrompt, "--image",
                 "--quit-when-done", "--resolution", "17", "--preview-every", "0"});
  ASSERT_TRUE(missing.waitForFinished(60000));
  EXPECT_EQ(missing.exitCode(), 1);
  EXPECT_TRUE(QString::fromLocal8Bit(missing.readAllStandardError()).contains("/nonexistent/sd"));
}

}  // namespace
}  // namespace tessera::studio
