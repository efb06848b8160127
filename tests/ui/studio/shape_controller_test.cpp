// The studio's shape lane without a window: ShapeController over EngineBridge and the embedded
// model. What an artist does (generate, variations, choose, more like this, re-mesh, a refused
// prompt, an opened file) is driven on the controller and checked on its signals and state.
#include "ui/studio/shape_controller.h"

#include <gtest/gtest.h>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QThread>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/capabilities.h"
#include "tests/ui/studio/event_loop.h"
#include "ui/studio/engine_bridge.h"

namespace tessera::studio {
namespace {

// What the controller told the window, in order.
struct Seen {
  int started = 0, started_variations = 0;
  quint64 started_seed = 0;
  QStringList notes;
  std::vector<std::shared_ptr<const mesh::Mesh>> shown;
  int previews = 0, finals = 0;
  std::vector<std::pair<int, bool>> candidate_meshes;  // (candidate, final)
  std::vector<std::pair<QString, int>> results;        // (label, candidate)

  explicit Seen(ShapeController& c) {
    QObject::connect(&c, &ShapeController::started,
                     [this](int v, quint64 seed, const QStringList& n) {
                       ++started;
                       started_variations = v;
                       started_seed = seed;
                       notes = n;
                     });
    QObject::connect(&c, &ShapeController::showMesh,
                     [this](std::shared_ptr<const mesh::Mesh> m) { shown.push_back(m); });
    QObject::connect(&c, &ShapeController::previewed,
                     [this](qint64, bool final) { ++(final ? finals : previews); });
    QObject::connect(&c, &ShapeController::candidateMesh,
                     [this](int i, std::shared_ptr<const mesh::Mesh>, bool final) {
                       candidate_meshes.emplace_back(i, final);
                     });
    QObject::connect(&c, &ShapeController::result,
                     [this](const QString& label, std::shared_ptr<const mesh::Mesh>, int i, bool) {
                       results.emplace_back(label, i);
                     });
  }
};

runtime::JobOptions small_job(const std::string& prompt) {
  runtime::JobOptions job;
  job.prompt = prompt;
  job.mesh.resolution = 17;
  job.preview_every = 16;
  job.preview_resolution = 9;
  job.preview_budget = 1.0;
  return job;
}

TEST(ShapeController, GenerateChooseMoreLikeThisAndRemesh) {
  EngineBridge engine;
  ShapeController shape(engine);
  Seen seen(shape);
  // Before any model: nothing starts, nothing to continue or re-mesh.
  EXPECT_EQ(shape.start(small_job("a cube")).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(shape.more_like_this().status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(seen.started, 0);
  engine.load_model(QString::fromStdString(runtime::default_shape_model_dir()));
  ASSERT_TRUE(wait_until([&] { return engine.has_model() || !engine.loading(); }));
  ASSERT_TRUE(engine.has_model());

  // A single greedy job: the viewport follows candidate 0, the final mesh goes to the gallery.
  ASSERT_TRUE(shape.start(small_job("a cube")).ok());
  EXPECT_EQ(seen.started, 1);
  EXPECT_EQ(seen.started_variations, 1);
  ASSERT_TRUE(wait_until([&] { return !engine.busy(); }));
  ASSERT_EQ(engine.stats().state, JobState::kDone) << engine.stats().message;
  EXPECT_EQ(seen.finals, 1);
  ASSERT_EQ(seen.results.size(), 1u);
  EXPECT_EQ(seen.results[0].first, QStringLiteral("a cube"));
  EXPECT_EQ(seen.results[0].second, -1);
  ASSERT_FALSE(seen.shown.empty());
  EXPECT_EQ(seen.shown.back(), shape.candidate(0).mesh);
  EXPECT_TRUE(shape.candidate(0).final);
  EXPECT_FALSE(shape.current_tokens().empty());
  nlohmann::json settings = shape.shown_settings_json();
  ASSERT_TRUE(settings.is_object());
  EXPECT_EQ(settings["prompt"], "a cube");
  EXPECT_EQ(settings["resolution"], 17);
  EXPECT_FALSE(settings["sampling"]["sample"].get<bool>());

  // More like this after a greedy job: sampled with the product's defaults, the next seed.
  ASSERT_TRUE(shape.more_like_this().ok());
  EXPECT_TRUE(shape.last_job().generation.sampling.sample);
  EXPECT_FLOAT_EQ(shape.last_job().generation.sampling.top_p, runtime::kDefaultSampling.top_p);
  EXPECT_EQ(seen.started_seed, 1u);
  ASSERT_TRUE(wait_until([&] { return !engine.busy(); }));

  // The studio's door refuses settings out of range with check_sampling's message, starting
  // nothing.
  runtime::JobOptions bad = small_job("a vase");
  bad.generation.sampling.top_p = 1.5f;
  const auto refused = shape.start(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "top_p: 1.5 is outside (0, 1]");
  EXPECT_FALSE(engine.busy());
  EXPECT_TRUE(shape.last_job().generation.sampling.sample);  // the last job is still the last

  // Three variations: a tile per candidate, each finished one in the gallery with its seed.
  runtime::JobOptions job = small_job("a chair");
  job.variations = 3;
  job.generation.sampling.sample = true;
  job.generation.sampling.seed = 40;
  seen.results.clear();
  seen.candidate_meshes.clear();
  ASSERT_TRUE(shape.start(job).ok());
  EXPECT_EQ(shape.variations(), 3);
  EXPECT_FALSE(shape.choose(1));  // no mesh yet
  ASSERT_TRUE(wait_until([&] { return !engine.busy(); }));
  ASSERT_TRUE(wait_until([&] { return seen.results.size() == 3; }));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(shape.candidate(i).final) << i;
    EXPECT_EQ(shape.candidate(i).seed, 40u + static_cast<uint64_t>(i));
    EXPECT_FALSE(shape.candidate(i).tokens.empty()) << i;
  }
  for (const auto& [label, candidate] : seen.results) {
    EXPECT_GE(candidate, 0);
    EXPECT_TRUE(label.contains(QStringLiteral("seed %1").arg(40 + candidate)))
        << label.toStdString();
  }
  // Choosing candidate 2 makes its mesh, tokens and seed the current ones.
  ASSERT_TRUE(shape.choose(2));
  EXPECT_EQ(shape.chosen(), 2);
  EXPECT_EQ(seen.shown.back(), shape.candidate(2).mesh);
  EXPECT_EQ(shape.current_tokens(), shape.candidate(2).tokens);
  EXPECT_EQ(shape.shown_settings_json()["sampling"]["seed"], 42);
  EXPECT_FALSE(shape.choose(3));
  EXPECT_FALSE(shape.choose(-1));

  // Re-mesh the chosen candidate finer: its tile and the viewport get the new mesh.
  const auto before = shape.candidate(2).mesh;
  EXPECT_EQ(shape.remesh(64, small_job("")).code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(shape.remesh(33, small_job("")).ok());
  EXPECT_TRUE(shape.remeshing());
  ASSERT_TRUE(wait_until([&] { return !engine.busy(); }));
  ASSERT_TRUE(wait_until([&] { return !shape.remeshing(); }));
  EXPECT_NE(shape.candidate(2).mesh, before);
  EXPECT_GT(shape.candidate(2).mesh->triangle_count(), before->triangle_count());
  EXPECT_EQ(seen.shown.back(), shape.candidate(2).mesh);
  EXPECT_TRUE(seen.results.back().first.contains(QStringLiteral("33")));
  EXPECT_EQ(seen.results.back().second, -1);
  EXPECT_EQ(shape.shown_settings_json()["resolution"], 33);

  // An opened file: nothing to re-mesh, no settings to carry.
  shape.show_other();
  EXPECT_EQ(shape.remesh(33, small_job("")).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(shape.shown_settings_json().is_null());
}

TEST(ShapeController, ARefusedPromptStartsNothingAndARepairedOneSaysSo) {
  EngineBridge engine;
  ShapeController shape(engine);
  Seen seen(shape);
  engine.load_model(QString::fromStdString(runtime::default_shape_model_dir()));
  ASSERT_TRUE(wait_until([&] { return engine.has_model() || !engine.loading(); }));
  ASSERT_TRUE(engine.has_model());
  auto refused = shape.start(small_job(std::string(9000, 'a')));
  EXPECT_EQ(refused.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(seen.started, 0);
  EXPECT_FALSE(shape.has_last_job());
  EXPECT_FALSE(engine.busy());
  auto repaired =
      shape.start(small_job("a \xff"
                            "ball"));
  ASSERT_TRUE(repaired.ok()) << repaired.status().message();
  EXPECT_EQ(repaired->size(), 1u);
  EXPECT_EQ(seen.notes.size(), 1);
  EXPECT_EQ(shape.prompt(), QString::fromUtf8("a \xef\xbf\xbd"
                                              "ball"));
  ASSERT_TRUE(wait_until([&] { return !engine.busy(); }));
  EXPECT_EQ(engine.stats().state, JobState::kDone);
}

}  // namespace
}  // namespace tessera::studio
