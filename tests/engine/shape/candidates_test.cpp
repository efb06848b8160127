// Several generations in one decode (ShapeGenerator::generate_candidates, issue 23): batch
// invariance on the parity fixtures (the small v0.5 / v0.1 GPTs of tests/fixtures/parity/). Every
// candidate's tokens must equal, token for token, those of a lone generate() with its prompt and
// seed, whatever the other candidates and their number: KV cache on (the device-resident loop the
// CPU backend runs, and the host loop), off, guided and unguided, f32 and bf16 weights (bf16 K/V
// cache), one prompt or several mixed in one batch, and a generator reused across calls.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/shape/generator.h"
#include "engine/shape/gpt.h"
#include "tests/support/gpt_parity.h"

namespace tessera::shape {
namespace {

using Models = test::ParityGpts;
Models& models() {
  return test::parity_gpts();
}

// Two different prompts from the fixture: its condition row and its unconditional row (as a
// "prompt" too), both guided against the unconditional row, with different boxes.
struct Prompts {
  std::vector<float> hidden, bbox;
  std::vector<ConditionInputs> inputs;
};
Prompts two_prompts() {
  Models& m = models();
  Prompts p;
  p.hidden = m.f32("clip.last_hidden_state");  // [2, 77, 32]: cond, uncond
  const float* cond = p.hidden.data();
  const float* uncond = p.hidden.data() + 77 * 32;
  p.inputs.push_back({cond, uncond, std::array<float, 3>{0.8f, 1.1f, 0.5f}});
  p.inputs.push_back({uncond, uncond, std::array<float, 3>{0.2f, 0.4f, 0.9f}});
  return p;
}

GenerateOptions sampled() {
  GenerateOptions o;
  o.sampling.sample = true;
  o.sampling.temperature = 1.5f;  // a broad distribution: a changed logit soon changes a draw
  o.sampling.top_p = 0.95f;
  return o;
}

// Candidate j alone, through a fresh generator (as `tessera generate --seed S` would run it).
std::vector<int32_t> alone(const CubeGpt& model, const ConditionInputs& in, uint64_t seed,
                           GenerateOptions options) {
  auto gen = ShapeGenerator::create(model).value();
  options.sampling.seed = seed;
  auto tokens = gen->generate(in, options);
  EXPECT_TRUE(tokens.ok()) << tokens.status().to_string();
  return tokens.ok() ? *tokens : std::vector<int32_t>{};
}

void expect_invariant(const CubeGpt& model, const std::string& what, GenerateOptions options) {
  Prompts p = two_prompts();
  auto gen = ShapeGenerator::create(model, 0, 8).value();
  // Lone references: prompt 0 with seeds 100..107, prompt 1 with seeds 200..203.
  std::vector<std::vector<int32_t>> ref0, ref1;
  for (uint64_t s = 0; s < 8; ++s) ref0.push_back(alone(model, p.inputs[0], 100 + s, options));
  for (uint64_t s = 0; s < 4; ++s) ref1.push_back(alone(model, p.inputs[1], 200 + s, options));
  EXPECT_NE(ref0[0], ref0[1]) << what << ": two seeds gave the same tokens (seed ignored?)";
  // One prompt, 1..8 variations, the same generator reused.
  for (int v : {1, 2, 3, 4, 8}) {
    std::vector<CandidateSpec> specs;
    for (int j = 0; j < v; ++j) specs.push_back({0, 100 + static_cast<uint64_t>(j)});
    auto got = gen->generate_candidates({p.inputs[0]}, specs, options);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
    ASSERT_EQ(got->size(), static_cast<size_t>(v));
    for (int j = 0; j < v; ++j) {
      EXPECT_EQ((*got)[static_cast<size_t>(j)], ref0[static_cast<size_t>(j)])
          << what << ": variation " << j << " of " << v;
    }
  }
  // Two prompts mixed, in an order where candidate 0 is not prompt 0's.
  const std::vector<CandidateSpec> mixed = {{1, 202}, {0, 103}, {1, 200}, {0, 100}, {1, 203}};
  auto got = gen->generate_candidates(p.inputs, mixed, options);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  for (size_t j = 0; j < mixed.size(); ++j) {
    const auto& expected =
        mixed[j].prompt == 0 ? ref0[mixed[j].seed - 100] : ref1[mixed[j].seed - 200];
    EXPECT_EQ((*got)[j], expected) << what << ": mixed candidate " << j;
  }
}

TEST(Candidates, EachCandidateIsItsLoneGenerationF32) {
  expect_invariant(*models().v05, "f32, guided, KV cache", sampled());
}

TEST(Candidates, EachCandidateIsItsLoneGenerationBf16) {
  expect_invariant(*models().v05_bf16, "bf16 weights and K/V cache, guided", sampled());
}

TEST(Candidates, EachCandidateIsItsLoneGenerationUnguidedAndV01) {
  GenerateOptions o = sampled();
  o.sampling.guidance = 0.0f;
  expect_invariant(*models().v05, "f32, unguided", o);
  expect_invariant(*models().v01, "v0.1, guided", sampled());
}

TEST(Candidates, HostLoopAndUncachedPathAgree) {
  // guided_logits forces the host loop (candidate 0's logits); use_kv_cache = false recomputes.
  Models& m = models();
  Prompts p = two_prompts();
  auto gen = ShapeGenerator::create(*m.v05, 0, 4).value();
  const std::vector<CandidateSpec> specs = {{0, 7}, {1, 8}, {0, 9}};
  auto resident = gen->generate_candidates(p.inputs, specs, sampled());
  ASSERT_TRUE(resident.ok()) << resident.status().to_string();
  GenerateOptions host = sampled();
  std::vector<float> logits;
  host.guided_logits = &logits;
  auto hosted = gen->generate_candidates(p.inputs, specs, host);
  ASSERT_TRUE(hosted.ok()) << hosted.status().to_string();
  EXPECT_EQ(*hosted, *resident);
  EXPECT_EQ(logits.size(), 16u * 64u);  // candidate 0's guided logits only
  GenerateOptions uncached = sampled();
  uncached.use_kv_cache = false;
  auto recomputed = gen->generate_candidates(p.inputs, specs, uncached);
  ASSERT_TRUE(recomputed.ok()) << recomputed.status().to_string();
  EXPECT_EQ(*recomputed, *resident);
}

TEST(Candidates, GreedyReferenceHoldsInABatch) {
  // Greedy with guidance: every candidate of the fixture's prompt is the reference's sequence.
  Models& m = models();
  const std::vector<float> hidden = m.f32("clip.last_hidden_state");
  const std::vector<float> bbox_rows = m.f32("gpt.bbox");
  const ConditionInputs in = test::guided_condition(hidden, bbox_rows);
  const std::vector<int32_t> expected = m.i32("gpt.greedy_tokens");
  auto gen = ShapeGenerator::create(*m.v05, 0, 4).value();
  auto got = gen->generate_candidates({in}, {{0, 1}, {0, 2}, {0, 3}, {0, 4}}, GenerateOptions{});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  for (const auto& tokens : *got) EXPECT_EQ(tokens, expected);
}

TEST(Candidates, CallbackOrderAndBadRequests) {
  Models& m = models();
  Prompts p = two_prompts();
  auto gen = ShapeGenerator::create(*m.v05, 0, 3).value();
  std::vector<std::pair<int64_t, int64_t>> order;  // (candidate, index)
  auto got = gen->generate_candidates({p.inputs[0]}, {{0, 1}, {0, 2}, {0, 3}}, sampled(),
                                      [&](int64_t candidate, int64_t index, int32_t id, double ms) {
                                        EXPECT_GE(id, 0);
                                        EXPECT_GE(ms, 0.0);
                                        order.emplace_back(candidate, index);
                                      });
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(order.size(), 48u);
  for (size_t e = 0; e < order.size(); ++e) {
    EXPECT_EQ(order[e].first, static_cast<int64_t>(e % 3));  // each step: candidates in order
    EXPECT_EQ(order[e].second, static_cast<int64_t>(e / 3));
  }
  auto none = gen->generate_candidates({p.inputs[0]}, {}, sampled());
  EXPECT_FALSE(none.ok());
  auto too_many =
      gen->generate_candidates({p.inputs[0]}, {{0, 1}, {0, 2}, {0, 3}, {0, 4}}, sampled());
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("max_candidates"), std::string::npos)
      << too_many.status().message();
  auto bad_prompt = gen->generate_candidates({p.inputs[0]}, {{0, 1}, {2, 2}}, sampled());
  ASSERT_FALSE(bad_prompt.ok());
  EXPECT_NE(bad_prompt.status().message().find("candidate 1"), std::string::npos)
      << bad_prompt.status().message();
  // The generator still works after refusals.
  auto again = gen->generate_candidates({p.inputs[0]}, {{0, 1}}, sampled());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0], (*got)[0]);
}

}  // namespace
}  // namespace tessera::shape
