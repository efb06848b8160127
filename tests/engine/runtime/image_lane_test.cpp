// The runtime's image lane: an image job's events in order, cancellation between denoising steps,
// a queued image held by the Scheduler while a shape job runs and resumed after it, and bad options
// coming back as Error events. On the diffusion pipeline fixture (a tiny SD-layout model) and the
// shape parity fixture.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <chrono>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "core/safetensors.h"
#include "engine/runtime/image_inputs.h"
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

// A picture of `w` x `h` with a left-right ramp (red) and a top-bottom ramp (green).
std::shared_ptr<const mesh::TextureImage> ramp(int64_t w, int64_t h) {
  auto image = std::make_shared<mesh::TextureImage>();
  image->width = w;
  image->height = h;
  image->rgb.resize(static_cast<size_t>(w * h * 3));
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      uint8_t* p = image->rgb.data() + (y * w + x) * 3;
      p[0] = static_cast<uint8_t>(255 * x / std::max<int64_t>(1, w - 1));
      p[1] = static_cast<uint8_t>(255 * y / std::max<int64_t>(1, h - 1));
      p[2] = 90;
    }
  }
  return image;
}

TEST(RuntimeImageLane, ImageToImageTakesThePicturesSizeAndSaysWhatItResized) {
  auto session = session_with_image_model();
  const int64_t step = session->image_model()->size_multiple;
  ImageJobOptions job = small_image(4);
  // 37 x 22: rounded down to the size step (36 x 20 with the fixture's 4), resized and said.
  job.init_image = ramp(37, 22);
  job.strength = 0.5f;
  auto mask = std::make_shared<mesh::TextureImage>(*ramp(37, 22));
  job.mask = mask;
  std::vector<std::string> stages;
  std::optional<ImageEvent> done;
  int steps = 0;
  const Event end = session->wait_for(session->submit_image(job), [&](const Event& e) {
    if (const auto* s = std::get_if<ImageStepEvent>(&e.payload)) {
      EXPECT_EQ(s->steps, 2);  // floor(4 x 0.5)
      ++steps;
    } else if (const auto* st = std::get_if<StageEvent>(&e.payload)) {
      stages.push_back(st->name);
    } else if (const auto* i = std::get_if<ImageEvent>(&e.payload)) {
      done = *i;
    }
  });
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(end.payload))
      << (std::holds_alternative<ErrorEvent>(end.payload)
              ? std::get<ErrorEvent>(end.payload).status.message()
              : "");
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(done->steps_run, 2);
  EXPECT_EQ(done->image->width, 37 / step * step);
  EXPECT_EQ(done->image->height, 22 / step * step);
  ASSERT_EQ(done->notes.size(), 2u);
  EXPECT_NE(done->notes[0].find("init image resized from 37x22"), std::string::npos)
      << done->notes[0];
  EXPECT_NE(done->notes[1].find("mask resized"), std::string::npos) << done->notes[1];
  EXPECT_EQ(stages,
            (std::vector<std::string>{kStageImageText, kStageVaeEncode, kStageDenoise, kStageVae}));
  // A mask without an init image is an Error naming both.
  ImageJobOptions bad = small_image(2);
  bad.mask = mask;
  const Event failed = session->wait_for(session->submit_image(bad));
  const auto* e = std::get_if<ErrorEvent>(&failed.payload);
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->status.message().find("mask needs an init image"), std::string::npos);
}

TEST(RuntimeImageLane, LoraTagsReloadTheModelWithThemMerged) {
  auto session = session_with_image_model();
  const std::string lora_dir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/diffusion/lora";
  ImageJobOptions job;
  job.prompt = "a red torus <lora:kohya:1> <lora:peft:0.5>";
  job.lora_dir = lora_dir;
  job.width = job.height = 32;
  job.steps = 3;
  job.guidance = 2.0f;
  job.seed = 42;
  std::optional<ImageEvent> done;
  const Event end = session->wait_for(session->submit_image(job), [&](const Event& e) {
    if (const auto* i = std::get_if<ImageEvent>(&e.payload)) done = *i;
  });
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(end.payload))
      << (std::holds_alternative<ErrorEvent>(end.payload)
              ? std::get<ErrorEvent>(end.payload).status.message()
              : "");
  ASSERT_TRUE(done.has_value());
  ASSERT_FALSE(done->notes.empty());
  EXPECT_NE(done->notes[0].find("reloaded with 2 LoRA(s)"), std::string::npos) << done->notes[0];
  ASSERT_EQ(session->image_model()->loras.size(), 2u);
  // The image PyTorch makes with both merged (tools/make_lora_fixtures.py), to an 8-bit step.
  auto expected = SafeTensors::open(lora_dir + "/expected.safetensors");
  ASSERT_TRUE(expected.ok());
  const std::vector<float> nchw = expected->to_f32("image").value();
  int worst = 0;
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t p = 0; p < 32 * 32; ++p) {
      const float v = std::clamp((nchw[c * 32 * 32 + p] + 1.0f) * 0.5f, 0.0f, 1.0f) * 255.0f;
      worst = std::max(worst, std::abs(int(std::lround(v)) - int(done->image->rgb[p * 3 + c])));
    }
  }
  EXPECT_LE(worst, 1);
  // The same set again: no reload.
  done.reset();
  session->wait_for(session->submit_image(job), [&](const Event& e) {
    if (const auto* i = std::get_if<ImageEvent>(&e.payload)) done = *i;
  });
  ASSERT_TRUE(done.has_value());
  EXPECT_TRUE(done->notes.empty());
  // A tag naming no file is an Error naming it and the folder.
  job.prompt = "a red torus <lora:nosuch>";
  const Event failed = session->wait_for(session->submit_image(job));
  const auto* err = std::get_if<ErrorEvent>(&failed.payload);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(err->status.message().find("<lora:nosuch>"), std::string::npos);
}

TEST(RuntimeImageInputs, LoraTagsComeOutOfThePrompt) {
  const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/diffusion/lora";
  std::string prompt = "<lora:kohya:0.5>a cat <lora:kohya.safetensors:0.25> on a mat";
  auto tags = take_lora_tags(&prompt, dir);
  ASSERT_TRUE(tags.ok()) << tags.status().message();
  EXPECT_EQ(prompt, "a cat on a mat");
  ASSERT_EQ(tags->size(), 1u);  // the same file twice: multipliers add up
  EXPECT_FLOAT_EQ((*tags)[0].multiplier, 0.75f);
  prompt = "x <lora:kohya:lots>";
  EXPECT_NE(take_lora_tags(&prompt, dir).status().message().find("not a multiplier"),
            std::string::npos);
  prompt = "x <lora:kohya";
  EXPECT_FALSE(take_lora_tags(&prompt, dir).ok());
  EXPECT_EQ(parse_lora_choice("a.safetensors:0.3").value().multiplier, 0.3f);
}

TEST(RuntimeImageInputs, FastChoiceNeedsTheLcmLora) {
  const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/diffusion/lora";
  ImageJobOptions job;
  Status st = apply_fast_choice(&job, dir);  // no lcm-lora-sdv1-5.safetensors there
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find(kLcmLoraFile), std::string::npos) << st.message();
  EXPECT_EQ(job.sampler, SamplerKind::kEuler);  // unchanged
  job.loras = {{"/somewhere/LCM_lora_sd15.safetensors", 1.0f}};
  ASSERT_TRUE(apply_fast_choice(&job, dir).ok());
  EXPECT_EQ(job.sampler, SamplerKind::kLcm);
  EXPECT_EQ(job.steps, kFastImageSteps);
  EXPECT_EQ(job.guidance, kFastImageGuidance);
  EXPECT_EQ(job.loras.size(), 1u);  // the given one, not a second copy
}

TEST(RuntimeImageInputs, SizesAndResizing) {
  // No size given and no picture: the model's default side.
  auto p = prepare_image_inputs(0, 0, nullptr, nullptr, 8, 64);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->width, 64);
  EXPECT_TRUE(p->notes.empty());
  // A picture of the right size is shared, not copied.
  auto exact = ramp(48, 40);
  p = prepare_image_inputs(0, 0, exact, nullptr, 8, 64);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->init, exact);
  EXPECT_TRUE(p->notes.empty());
  // A given size wins over the picture's; a tiny picture still gives one size step.
  p = prepare_image_inputs(16, 0, ramp(5, 3), nullptr, 8, 64);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->width, 16);
  EXPECT_EQ(p->height, 8);
  EXPECT_NE(p->notes[0].find("to 16x8"), std::string::npos);
  // One side given: the other keeps the picture's aspect ratio (320 x 4 / 3 = 426.7 -> 424).
  p = prepare_image_inputs(0, 320, ramp(400, 300), nullptr, 8, 64);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->width, 424);
  EXPECT_EQ(p->height, 320);
  // A control image does not set the size: it is fitted to the model's default, and said.
  p = prepare_image_inputs(0, 0, nullptr, nullptr, 8, 64, ramp(100, 100));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->width, 64);
  ASSERT_NE(p->control, nullptr);
  EXPECT_EQ(p->control->width, 64);
  EXPECT_NE(p->notes[0].find("control image resized from 100x100 to 64x64"), std::string::npos)
      << p->notes[0];
  // A large photo is shrunk, aspect kept, and said.
  p = prepare_image_inputs(0, 0, ramp(400, 300), nullptr, 8, 64);
  ASSERT_TRUE(p.ok());
  EXPECT_LE(p->width * p->height, 128 * 128);
  EXPECT_EQ(p->width, 144);  // 400 x 0.3695 = 147.8, down to a multiple of 8
  EXPECT_EQ(p->height, 104);
  EXPECT_NE(p->notes[0].find("at most 128x128"), std::string::npos) << p->notes[0];
  // Bad pictures are named.
  auto broken = std::make_shared<mesh::TextureImage>();
  broken->width = 4;
  broken->height = 4;
  auto bad = prepare_image_inputs(0, 0, broken, nullptr, 8, 64);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("init image: 4x4"), std::string::npos);
}

TEST(RuntimeImageInputs, ResizeKeepsRampsAndMasksStayBinary) {
  // Shrinking by 4 averages each 4 x 4 block; enlarging interpolates; nearest keeps values.
  mesh::TextureImage blocks;
  blocks.width = 8;
  blocks.height = 4;
  blocks.rgb.assign(8 * 4 * 3, 0);
  for (int64_t y = 0; y < 4; ++y) {
    for (int64_t x = 4; x < 8; ++x) std::fill_n(blocks.rgb.begin() + (y * 8 + x) * 3, 3, 200);
  }
  const mesh::TextureImage small = mesh::resize_texture(blocks, 2, 1, false);
  EXPECT_EQ(small.rgb[0], 0);
  EXPECT_EQ(small.rgb[3], 200);
  const mesh::TextureImage half = mesh::resize_texture(blocks, 3, 1, false);  // 8/3 px per output
  EXPECT_EQ(half.rgb[0], 0);
  EXPECT_EQ(half.rgb[3], 100);  // 1.33 px of 0 and 1.33 px of 200 of 2.67
  EXPECT_EQ(half.rgb[6], 200);
  const mesh::TextureImage big = mesh::resize_texture(blocks, 16, 8, false);
  EXPECT_EQ(big.rgb[0], 0);
  EXPECT_EQ(big.rgb[(16 - 1) * 3], 200);
  EXPECT_GT(big.rgb[7 * 3], 0);  // the edge is blended
  EXPECT_LT(big.rgb[7 * 3], 200);
  const mesh::TextureImage nearest = mesh::resize_texture(blocks, 13, 7, true);
  for (uint8_t v : nearest.rgb) EXPECT_TRUE(v == 0 || v == 200);
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
