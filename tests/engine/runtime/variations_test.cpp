// Variations through the runtime on the embedded tessera-tiny (issue 23): one job of V candidates
// gives, for candidate j, exactly the tokens and mesh of a lone job with seed S + j, whatever V
// (batch invariance), with the events in the documented order; bad requests fail clearly.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "engine/runtime/session.h"

namespace tessera::runtime {
namespace {

struct JobResult {
  std::vector<FinalMeshEvent> meshes;  // in candidate order
  std::vector<TokenEvent> tokens;
  std::vector<std::string> stages;  // "name/candidate"
  std::string error;
};

JobResult run(Session& session, const JobOptions& job) {
  JobResult result;
  const uint64_t id = session.submit(job);
  session.wait_for(id, [&](const Event& e) {
    if (const auto* t = std::get_if<TokenEvent>(&e.payload)) result.tokens.push_back(*t);
    if (const auto* s = std::get_if<StageEvent>(&e.payload)) {
      result.stages.push_back(s->name + "/" + std::to_string(s->candidate));
    }
    if (const auto* f = std::get_if<FinalMeshEvent>(&e.payload)) result.meshes.push_back(*f);
    if (const auto* err = std::get_if<ErrorEvent>(&e.payload)) {
      result.error = err->status.message();
    }
  });
  return result;
}

JobOptions sampled(const std::string& prompt, uint64_t seed, int variations) {
  JobOptions job;
  job.prompt = prompt;
  job.generation.sampling.sample = true;
  job.generation.sampling.top_p = 0.9f;
  job.generation.sampling.seed = seed;
  job.variations = variations;
  job.mesh.resolution = 33;  // the invariance is in the tokens; a small lattice keeps it quick
  return job;
}

TEST(Variations, EachCandidateIsALoneJobWithItsSeed) {
  auto session = Session::open(ShapeModelOptions{});
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  Session& s = **session;
  const std::string prompt = "a chair";
  const JobResult four = run(s, sampled(prompt, 500, 4));
  ASSERT_TRUE(four.error.empty()) << four.error;
  ASSERT_EQ(four.meshes.size(), 4u);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(four.meshes[static_cast<size_t>(j)].candidate, j);
    EXPECT_EQ(four.meshes[static_cast<size_t>(j)].seed, 500u + static_cast<uint64_t>(j));
  }
  // Events: each step's tokens for candidates 0..3 in order; mesh stages per candidate in order.
  ASSERT_EQ(four.tokens.size(), 4u * four.meshes[0].tokens.size());
  for (size_t e = 0; e < four.tokens.size(); ++e) {
    EXPECT_EQ(four.tokens[e].candidate, static_cast<int>(e % 4));
    EXPECT_EQ(four.tokens[e].index, static_cast<int64_t>(e / 4));
    EXPECT_EQ(four.tokens[e].id, four.meshes[e % 4].tokens[e / 4]);
  }
  const std::vector<std::string> want_stages = {
      "text/0",       "prefill/0",       "decode/0",        "latent_decode/0", "extraction/0",
      "cleanup/0",    "latent_decode/1", "extraction/1",    "cleanup/1",       "latent_decode/2",
      "extraction/2", "cleanup/2",       "latent_decode/3", "extraction/3",    "cleanup/3"};
  EXPECT_EQ(four.stages, want_stages);
  // Each candidate alone, and inside a batch of two in another order of seeds: the same tokens.
  for (int j = 0; j < 4; ++j) {
    const JobResult lone = run(s, sampled(prompt, 500 + static_cast<uint64_t>(j), 1));
    ASSERT_EQ(lone.meshes.size(), 1u) << lone.error;
    EXPECT_EQ(lone.meshes[0].tokens, four.meshes[static_cast<size_t>(j)].tokens)
        << "seed " << 500 + j;
    EXPECT_EQ(lone.meshes[0].mesh->positions, four.meshes[static_cast<size_t>(j)].mesh->positions);
  }
  const JobResult two = run(s, sampled(prompt, 502, 2));
  ASSERT_EQ(two.meshes.size(), 2u) << two.error;
  EXPECT_EQ(two.meshes[0].tokens, four.meshes[2].tokens);
  EXPECT_EQ(two.meshes[1].tokens, four.meshes[3].tokens);
  // Sampled candidates of one prompt are not all the same shape.
  EXPECT_NE(four.meshes[0].tokens, four.meshes[1].tokens);
}

TEST(Variations, BadRequestsFailClearlyAndTheSessionGoesOn) {
  auto session = Session::open(ShapeModelOptions{});
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  Session& s = **session;
  JobOptions greedy;
  greedy.prompt = "a ball";
  greedy.variations = 3;
  const JobResult g = run(s, greedy);
  EXPECT_NE(g.error.find("sampling"), std::string::npos) << g.error;
  EXPECT_TRUE(g.meshes.empty());
  for (int bad : {0, -1, kMaxVariations + 1}) {
    const JobResult b = run(s, sampled("a ball", 1, bad));
    EXPECT_NE(b.error.find("variations"), std::string::npos) << b.error;
  }
  const JobResult ok = run(s, sampled("a ball", 1, 2));
  EXPECT_EQ(ok.meshes.size(), 2u) << ok.error;
}

}  // namespace
}  // namespace tessera::runtime
