// Paint jobs through the runtime (Session::submit_paint) on the embedded tessera-tiny image model
// and its depth ControlNet: the events in order (the atlas, one view event per view with its image
// and mask, the painted mesh, Done), the painted mesh's texture and metrics, a mesh's own uvs kept,
// cancel between views, and bad options as Error events naming what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/mesh/uv_atlas.h"
#include "engine/runtime/session.h"
#include "tests/support/test_meshes.h"

namespace tessera::runtime {
namespace {

std::shared_ptr<const mesh::Mesh> sphere() {
  return std::make_shared<mesh::Mesh>(test::ellipsoid(16, 32, {0.4, 0.4, 0.4}));
}

std::unique_ptr<Session> session_with_embedded_model() {
  auto session = Session::create();
  const Event loaded = session->wait_for(session->load_image_model(ImageModelOptions{}));
  EXPECT_TRUE(std::holds_alternative<DoneEvent>(loaded.payload))
      << (std::holds_alternative<ErrorEvent>(loaded.payload)
              ? std::get<ErrorEvent>(loaded.payload).status.message()
              : "");
  return session;
}

PaintJobOptions paint_job(std::shared_ptr<const mesh::Mesh> m) {
  PaintJobOptions job;
  job.mesh = std::move(m);
  job.image.prompt = "a red ball";
  job.image.steps = 6;
  job.image.seed = 11;
  return job;
}

std::vector<Event> run(Session& session, uint64_t id) {
  std::vector<Event> events;
  for (;;) {
    auto e = session.wait_event(std::chrono::milliseconds(100));
    if (!e || e->job != id) continue;
    events.push_back(*e);
    if (e->terminal()) break;
  }
  return events;
}

TEST(RuntimePaintJob, ViewsInOrderThenThePaintedMesh) {
  auto session = session_with_embedded_model();
  const std::vector<Event> events = run(*session, session->submit_paint(paint_job(sphere())));
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(events.back().payload))
      << (std::holds_alternative<ErrorEvent>(events.back().payload)
              ? std::get<ErrorEvent>(events.back().payload).status.message()
              : "not done");
  std::vector<std::string> names;
  int steps = 0;
  bool atlas = false;
  const PaintedMeshEvent* painted = nullptr;
  for (const Event& e : events) {
    if (const auto* s = std::get_if<StageEvent>(&e.payload)) atlas |= s->name == kStagePaintAtlas;
    if (std::holds_alternative<ImageStepEvent>(e.payload)) ++steps;
    if (const auto* v = std::get_if<PaintViewEvent>(&e.payload)) {
      EXPECT_EQ(v->view, static_cast<int>(names.size()));
      EXPECT_EQ(v->views, 6);
      names.push_back(v->name);
      ASSERT_NE(v->painted, nullptr);
      EXPECT_EQ(v->painted->texture.width, kDefaultPaintTextureSize);
      if (v->image != nullptr) {
        EXPECT_EQ(v->image->width, 64);  // the embedded model's size
        ASSERT_NE(v->mask, nullptr);
        EXPECT_GT(v->generated_share, 0.0);
      }
    }
    if (const auto* p = std::get_if<PaintedMeshEvent>(&e.payload)) painted = p;
  }
  EXPECT_TRUE(atlas);
  EXPECT_EQ(names, (std::vector<std::string>{"front", "back", "right", "left", "top", "bottom"}));
  EXPECT_GE(steps, 6);  // the first view's steps at least
  ASSERT_NE(painted, nullptr);
  ASSERT_NE(painted->mesh, nullptr);
  EXPECT_TRUE(painted->new_atlas);
  EXPECT_TRUE(mesh::validate(*painted->mesh).ok());
  EXPECT_EQ(painted->mesh->texture.width, kDefaultPaintTextureSize);
  EXPECT_EQ(painted->mesh->triangles.size(), sphere()->triangles.size());
  EXPECT_GT(painted->coverage, 0.9);
  ASSERT_EQ(painted->agreement_db.size(), painted->view_names.size());
  // The embedded model's 64-pixel views agree with the painted mesh at 17-26 dB (the views are
  // blended where they overlap; the stand-in generator of paint_views_test reaches 51-61).
  for (double db : painted->agreement_db) EXPECT_GT(db, 15.0);
  // The texture is no flat fill: the views put colour in it.
  const auto& rgb = painted->mesh->texture.rgb;
  EXPECT_NE(std::count(rgb.begin(), rgb.end(), rgb[0]), static_cast<long>(rgb.size()));
}

// A mesh's own uvs are kept when they give every triangle its own texels; overlapping ones (a
// spherical mapping wraps around its seam) get a new atlas, and the job says so.
TEST(RuntimePaintJob, AMeshsOwnUvsAreKeptUnlessTheyOverlap) {
  auto session = session_with_embedded_model();
  auto paint = [&](std::shared_ptr<const mesh::Mesh> m) {
    PaintJobOptions job = paint_job(std::move(m));
    job.views.top = job.views.bottom = false;
    job.views.ring = 2;
    std::optional<PaintedMeshEvent> painted;
    for (const Event& e : run(*session, session->submit_paint(job))) {
      if (const auto* p = std::get_if<PaintedMeshEvent>(&e.payload)) painted = *p;
    }
    return painted;
  };
  mesh::AtlasOptions atlas;
  atlas.size = 1024;
  auto laid = std::make_shared<mesh::Mesh>(*mesh::make_uv_atlas(*sphere(), atlas));
  auto kept = paint(laid);
  ASSERT_TRUE(kept.has_value());
  EXPECT_FALSE(kept->new_atlas);
  EXPECT_EQ(kept->mesh->uvs, laid->uvs);

  auto wrapped = std::make_shared<mesh::Mesh>(*sphere());
  for (size_t v = 0; v < wrapped->positions.size() / 3; ++v) {  // a spherical mapping
    const float x = wrapped->positions[3 * v], y = wrapped->positions[3 * v + 1],
                z = wrapped->positions[3 * v + 2];
    wrapped->uvs.push_back(static_cast<float>(0.5 + std::atan2(z, x) / (2 * M_PI)));
    wrapped->uvs.push_back(
        static_cast<float>(0.5 + std::asin(std::clamp(y / 0.4f, -1.0f, 1.0f)) / M_PI));
  }
  auto replaced = paint(wrapped);
  ASSERT_TRUE(replaced.has_value());
  EXPECT_TRUE(replaced->new_atlas);
  EXPECT_NE(replaced->mesh->uvs, wrapped->uvs);
  bool said = false;
  for (const std::string& note : replaced->notes)
    said |= note.find("uvs overlap") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(RuntimePaintJob, CancelBetweenViewsEndsWithoutAMesh) {
  auto session = session_with_embedded_model();
  const uint64_t id = session->submit_paint(paint_job(sphere()));
  bool painted = false;
  std::optional<Event> end;
  while (!end) {
    auto e = session->wait_event(std::chrono::milliseconds(100));
    if (!e || e->job != id) continue;
    if (std::holds_alternative<PaintViewEvent>(e->payload)) session->cancel(Lane::kImage);
    painted |= std::holds_alternative<PaintedMeshEvent>(e->payload);
    if (e->terminal()) end = e;
  }
  EXPECT_TRUE(std::holds_alternative<CancelledEvent>(end->payload));
  EXPECT_FALSE(painted);
}

// A mesh over the triangle limit is simplified first, and the notes say so.
TEST(RuntimePaintJob, AMeshOverTheTriangleLimitIsSimplifiedFirstAndSaid) {
  auto session = session_with_embedded_model();
  auto big = std::make_shared<mesh::Mesh>(test::ellipsoid(48, 96, {0.4, 0.5, 0.4}));
  ASSERT_GT(big->triangle_count(), 8000);
  PaintJobOptions job = paint_job(big);
  job.image.steps = 1;
  job.views.ring = 1;
  job.views.top = job.views.bottom = false;
  job.max_triangles = 2000;
  const PaintedMeshEvent* painted = nullptr;
  const std::vector<Event> events = run(*session, session->submit_paint(job));
  for (const Event& e : events) {
    if (const auto* p = std::get_if<PaintedMeshEvent>(&e.payload)) painted = p;
  }
  ASSERT_NE(painted, nullptr);
  EXPECT_LE(painted->mesh->triangle_count(), 2000);
  EXPECT_GT(painted->mesh->triangle_count(), 1000);
  bool said = false;
  for (const std::string& note : painted->notes) {
    said = said || note.find("simplified from " + std::to_string(big->triangle_count())) !=
                       std::string::npos;
  }
  EXPECT_TRUE(said);
  job.max_triangles = -1;
  const std::vector<Event> refused = run(*session, session->submit_paint(job));
  const auto* e = std::get_if<ErrorEvent>(&refused.back().payload);
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->status.message().find("triangle limit -1"), std::string::npos);
}

TEST(RuntimePaintJob, BadOptionsComeBackAsErrorsNamingThem) {
  auto session = session_with_embedded_model();
  auto error_of = [&](PaintJobOptions job) {
    const std::vector<Event> events = run(*session, session->submit_paint(std::move(job)));
    const auto* e = std::get_if<ErrorEvent>(&events.back().payload);
    return e ? e->status.message() : std::string("no error");
  };
  EXPECT_NE(error_of(paint_job(nullptr)).find("no mesh"), std::string::npos);
  PaintJobOptions job = paint_job(sphere());
  job.texture_size = 1000;
  EXPECT_NE(error_of(job).find("1000"), std::string::npos);
  job = paint_job(sphere());
  job.views.ring = 0;
  EXPECT_NE(error_of(job).find("ring"), std::string::npos);
  job = paint_job(sphere());
  job.image.init_image = std::make_shared<mesh::TextureImage>();
  EXPECT_NE(error_of(job).find("its own init images"), std::string::npos);
  job = paint_job(std::make_shared<mesh::Mesh>());
  EXPECT_NE(error_of(job).find("no triangles"), std::string::npos);
  // A flat square seen only edge-on: no view sees it, and the job says so (no grey texture).
  auto square = std::make_shared<mesh::Mesh>();
  square->positions = {-0.5f, 0, -0.5f, 0.5f, 0, -0.5f, 0.5f, 0, 0.5f, -0.5f, 0, 0.5f};
  square->triangles = {0, 2, 1, 0, 3, 2};
  job = paint_job(square);
  job.views.ring = 1;
  job.views.ring_elevation_deg = 0;
  job.views.top = job.views.bottom = false;
  EXPECT_NE(error_of(job).find("no view saw the surface"), std::string::npos) << error_of(job);
}

}  // namespace
}  // namespace tessera::runtime
