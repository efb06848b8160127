// The runtime's image lane: an image job's events in order, cancellation between denoising steps,
// a queued image held by the Scheduler while a shape job runs and resumed after it, and bad options
// coming back as Error events. On the diffusion pipeline fixture (a tiny SD-layout model) and the
// shape parity fixture.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "engine/runtime/session.h"
#include "tests/engine/diffusion/pipeline_test_util.h"
#include "tests/support/fixture_model_dir.h"

namespace tessera::runtime {
namespace {

namespace pt = diffusion::pipeline_test;

const std::string& fixture_diffusion_dir() {
  return pt::fixture_diffusers_model_dir();
}

std::unique_ptr<Session> session_with_image_model() {
  auto session = Session::create();
  ImageModelOptions model;
  model.path = fixture_diffusion_dir();
  const Event loaded = session->wait_for(session->load_image_model(model));
  EXPECT_TRUE(std::holds_alternative<DoneEvent>(loaded.payload))
      << (std::holds_alternative<ErrorEvent>(loaded.payload)
              ? std::get<ErrorEvent>(loaded.payload).status.message()
              : "");
  return session;
}

ImageJobOptions small_image(int steps) {
  ImageJobOptions job;
  job.prompt = "a red torus";
  job.steps = steps;
  job.guidance = 2.0f;
  job.seed = 3;
  return job;
}

TEST(RuntimeImageLane, EventsInOrderAndTheImageIsTheModelsSize) {
  auto session = session_with_image_model();
  ASSERT_TRUE(session->image_model().has_value());
  const int64_t side = session->image_model()->default_size;
  EXPECT_GT(side, 0);
  std::vector<int> steps;
  std::vector<std::string> stages;
  std::shared_ptr<const mesh::TextureImage> image;
  const Event end = session->wait_for(session->submit_image(small_image(3)), [&](const Event& e) {
    EXPECT_EQ(e.lane, Lane::kImage);
    if (const auto* s = std::get_if<ImageStepEvent>(&e.payload)) {
      EXPECT_EQ(s->steps, 3);
      EXPECT_TRUE(image == nullptr);  // every step comes before the image
      steps.push_back(s->step);
    } else if (const auto* st = std::get_if<StageEvent>(&e.payload)) {
      stages.push_back(st->name);
    } else if (const auto* i = std::get_if<ImageEvent>(&e.payload)) {
      image = i->image;
      EXPECT_EQ(i->seed, 3u);
    }
  });
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(end.payload));
  EXPECT_EQ(steps, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(stages, (std::vector<std::string>{kStageImageText, kStageDenoise, kStageVae}));
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(image->width, side);
  EXPECT_EQ(image->height, side);
  EXPECT_EQ(image->rgb.size(), static_cast<size_t>(side * side * 3));
}

TEST(RuntimeImageLane, CancelBetweenStepsAndBadOptions) {
  auto session = session_with_image_model();
  // Hold the job at step 1 until it is cancelled: the cancel always lands mid-job.
  session->set_image_step_hook([](int step, const std::atomic<bool>& cancel) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (step >= 1 && !cancel.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const uint64_t id = session->submit_image(small_image(50));
  int steps = 0;
  const Event end = session->wait_for(id, [&](const Event& e) {
    if (std::holds_alternative<ImageStepEvent>(e.payload) && ++steps == 2) {
      session->cancel(Lane::kImage);
    }
  });
  EXPECT_TRUE(std::holds_alternative<CancelledEvent>(end.payload));
  EXPECT_LT(steps, 50);
  session->set_image_step_hook({});
  // A bad option: an Error naming it; the lane stays usable.
  ImageJobOptions bad = small_image(2);
  bad.width = 33;
  const Event failed = session->wait_for(session->submit_image(bad));
  const auto* e = std::get_if<ErrorEvent>(&failed.payload);
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->status.message().find("width"), std::string::npos) << e->status.message();
  EXPECT_TRUE(std::holds_alternative<DoneEvent>(
      session->wait_for(session->submit_image(small_image(2))).payload));
}

TEST(RuntimeImageLane, AnImageWaitsForTheShapeJobOnTheSameDeviceAndResumes) {
  testing::FixtureModelDir shape("runtime-image-lane-shape");
  auto session = session_with_image_model();
  ShapeModelOptions model;
  model.path = shape.path();
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(
      session->wait_for(session->load_shape_model(model)).payload));
  EXPECT_TRUE(session->engines_share_device());  // both on the CPU
  JobOptions job;
  job.prompt = testing::kParityPrompt;
  job.generation.bbox = std::array<float, 3>{0.5f, 1.0f, 0.25f};
  job.mesh.resolution = 17;
  const uint64_t shape_id = session->submit(job);
  const uint64_t image_id = session->submit_image(small_image(2));
  // Record the order of the two jobs' events as they arrive.
  std::vector<std::string> order;
  bool shape_done = false, image_done = false;
  while (!shape_done || !image_done) {
    auto e = session->wait_event(std::chrono::milliseconds(30000));
    ASSERT_TRUE(e.has_value()) << "no event within the timeout";
    if (e->job == shape_id && e->terminal()) {
      EXPECT_TRUE(std::holds_alternative<DoneEvent>(e->payload));
      order.push_back("shape done");
      shape_done = true;
    } else if (e->job == image_id) {
      if (const auto* w = std::get_if<WaitingEvent>(&e->payload)) {
        order.push_back(w->waiting ? "image waits" : "image resumes");
      } else if (std::holds_alternative<ImageStepEvent>(e->payload)) {
        if (order.empty() || order.back() != "image step") order.push_back("image step");
      } else if (e->terminal()) {
        EXPECT_TRUE(std::holds_alternative<DoneEvent>(e->payload));
        order.push_back("image done");
        image_done = true;
      }
    }
  }
  // The image waited before its first step and ran only after the shape job ended.
  EXPECT_EQ(order, (std::vector<std::string>{"image waits", "shape done", "image resumes",
                                             "image step", "image done"}));
}

}  // namespace
}  // namespace tessera::runtime
