// ShapePipeline end to end on a model directory assembled from the parity fixtures: prompt text
// -> CLIP -> GPT -> tokens reproduces the PyTorch reference's greedy tokens; tokens -> mesh; fill
// token, prefix decoding, bad tokens, cancellation and model.json errors.
#include "engine/shape/pipeline.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/assets.h"
#include "core/safetensors.h"
#include "tests/support/fixture_model_dir.h"

namespace tessera::shape {
namespace {

using testing::FixtureModelDir;
using testing::kParityPrompt;

const std::string kExpected =
    std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/parity/expected.safetensors";

std::vector<int32_t> expected_i32(const std::string& name) {
  SafeTensors file = SafeTensors::open(kExpected).value();
  TensorView v = file.view(name).value();
  const auto* p = v.as<const int32_t>();
  return std::vector<int32_t>(p, p + v.numel());
}

double max_rel_diff(const std::vector<float>& a, const float* b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - b[i]) /
                     std::max(1.0, std::abs(static_cast<double>(b[i])));
    worst = std::max(worst, d);
  }
  return worst;
}

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new FixtureModelDir("pipeline");
    auto loaded = ShapePipeline::load(dir_->path());
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    pipeline_ = std::move(loaded).value().release();
  }
  static void TearDownTestSuite() {
    delete pipeline_;
    delete dir_;
  }
  static FixtureModelDir* dir_;
  static ShapePipeline* pipeline_;
};
FixtureModelDir* PipelineTest::dir_ = nullptr;
ShapePipeline* PipelineTest::pipeline_ = nullptr;

TEST_F(PipelineTest, LoadsTheFixtureSizes) {
  EXPECT_EQ(pipeline_->num_latents(), 16);
  EXPECT_EQ(pipeline_->codebook_size(), 64);
  EXPECT_TRUE(pipeline_->gpt_config().use_bbox);
  EXPECT_EQ(pipeline_->fill_token_id(), 0);  // no model.json: code 0
  EXPECT_FALSE(pipeline_->has_learned_fill_token());
}

TEST_F(PipelineTest, PromptEncodingMatchesTheReference) {
  Trace trace;
  auto encoded = pipeline_->encode_prompt(kParityPrompt, &trace);
  ASSERT_TRUE(encoded.ok()) << encoded.status().to_string();
  EXPECT_EQ(encoded->prompt_tokens, 8);
  EXPECT_FALSE(encoded->truncated);
  const std::vector<float> expected =
      SafeTensors::open(kExpected).value().to_f32("clip.last_hidden_state").value();  // [2, 77, 32]
  ASSERT_EQ(encoded->cond.size(), 77u * 32u);
  EXPECT_LT(max_rel_diff(encoded->cond, expected.data(), 77 * 32), 1e-4);
  EXPECT_LT(max_rel_diff(encoded->uncond, expected.data() + 77 * 32, 77 * 32), 1e-4);
  ASSERT_NE(trace.find(kTraceText), nullptr);

  // Over 77 tokens: truncated, still encoded.
  std::string long_prompt;
  for (int i = 0; i < 100; ++i) long_prompt += "a ";
  auto truncated = pipeline_->encode_prompt(long_prompt);
  ASSERT_TRUE(truncated.ok()) << truncated.status().to_string();
  EXPECT_TRUE(truncated->truncated);
  EXPECT_EQ(truncated->prompt_tokens, 102);
  // The empty prompt is the unconditional branch itself.
  auto empty = pipeline_->encode_prompt("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->cond, empty->uncond);
}

TEST_F(PipelineTest, GreedyTokensFromTextMatchTheReferenceWithAndWithoutCache) {
  auto encoded = pipeline_->encode_prompt(kParityPrompt).value();
  const std::vector<int32_t> expected = expected_i32("gpt.greedy_tokens");
  for (bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "kv cache" : "no kv cache");
    GenerationOptions options;
    options.bbox = std::array<float, 3>{0.5f, 1.0f, 0.25f};  // gpt.bbox row 0
    options.use_kv_cache = cache;
    Trace trace;
    int64_t calls = 0;
    auto tokens = pipeline_->generate(
        encoded, options, [&](int64_t, int32_t, double) { ++calls; }, &trace);
    ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
    EXPECT_EQ(*tokens, expected);
    EXPECT_EQ(calls, 16);
    ASSERT_NE(trace.find("gpt.decode"), nullptr);
    EXPECT_EQ(trace.find("gpt.decode")->count, 15);
  }
}

TEST_F(PipelineTest, SeededSamplingIsReproducibleAndPrefixesWork) {
  auto encoded = pipeline_->encode_prompt("b c").value();
  GenerationOptions options;
  options.sampling.sample = true;
  options.sampling.seed = 7;
  options.sampling.temperature = 1.5f;
  options.sampling.top_k = 20;
  options.sampling.top_p = 0.9f;
  auto a = pipeline_->generate(encoded, options).value();
  auto b = pipeline_->generate(encoded, options).value();
  EXPECT_EQ(a, b);
  // A shorter run is a prefix of the longer one without guidance (the guidance schedule
  // g = scale * (N - i) / N depends on N).
  options.sampling.guidance = 0.0f;
  auto full = pipeline_->generate(encoded, options).value();
  options.num_tokens = 5;
  auto prefix = pipeline_->generate(encoded, options).value();
  EXPECT_EQ(prefix, std::vector<int32_t>(full.begin(), full.begin() + 5));
  options.num_tokens = 17;
  EXPECT_FALSE(pipeline_->generate(encoded, options).ok());
  options.num_tokens = 0;
  options.sampling.top_p = 0.0f;
  auto bad = pipeline_->generate(encoded, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("top_p"), std::string::npos) << bad.status().message();
}

TEST_F(PipelineTest, TokensToMeshGivesAValidMeshOrANamedNoSurface) {
  const std::vector<int32_t> ids = expected_i32("gpt.greedy_tokens");
  MeshOptions options;
  options.resolution = 17;  // small: the fixture decoder costs ~10 us per query
  Trace trace;
  mesh::ExtractionStats stats;
  auto m = pipeline_->tokens_to_mesh(ids, options, &trace, nullptr, &stats);
  ASSERT_NE(trace.find(kTraceLatentDecode), nullptr);
  if (m.ok()) {
    EXPECT_TRUE(mesh::validate(*m).ok());
    EXPECT_GT(m->triangle_count(), 0);
    EXPECT_EQ(m->normals.size(), m->positions.size());
    EXPECT_GT(stats.queries, 0);
    ASSERT_NE(trace.find(kTraceExtraction), nullptr);
  } else {
    EXPECT_EQ(m.status().code(), ErrorCode::kNotFound) << m.status().to_string();
    EXPECT_NE(m.status().message().find("no surface"), std::string::npos);
  }
  // Same tokens, same result (deterministic decode).
  auto again = pipeline_->tokens_to_mesh(ids, options);
  ASSERT_EQ(again.ok(), m.ok());
  if (m.ok()) {
    EXPECT_EQ(again->positions, m->positions);
  }
}

TEST_F(PipelineTest, PrefixesAreFilledAndBadTokensAreNamed) {
  std::vector<int32_t> prefix = {3, 5, 7};
  EXPECT_TRUE(pipeline_->decode_latents(prefix).ok());
  Status too_many = pipeline_->decode_latents(std::vector<int32_t>(17, 1));
  EXPECT_EQ(too_many.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("17 ids"), std::string::npos) << too_many.message();
  Status out_of_range = pipeline_->decode_latents({1, 2, 64});
  EXPECT_EQ(out_of_range.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(out_of_range.message().find("position 2"), std::string::npos) << out_of_range.message();
  EXPECT_FALSE(pipeline_->decode_latents({-1}).ok());
  EXPECT_FALSE(pipeline_->decode_latents({}).ok());
  // After a failed decode there are no current latents.
  EXPECT_FALSE(pipeline_->extract_mesh(MeshOptions()).ok());
  MeshOptions bad_resolution;
  bad_resolution.resolution = 100;
  auto r = pipeline_->tokens_to_mesh(prefix, bad_resolution);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("resolution 100"), std::string::npos) << r.status().message();
}

TEST_F(PipelineTest, CancelFlagStopsEveryStage) {
  std::atomic<bool> cancel{true};
  EXPECT_EQ(pipeline_->encode_prompt("a", nullptr, &cancel).status().code(), ErrorCode::kCancelled);
  auto encoded = pipeline_->encode_prompt("a").value();
  EXPECT_EQ(pipeline_->generate(encoded, GenerationOptions(), {}, nullptr, &cancel).status().code(),
            ErrorCode::kCancelled);
  MeshOptions options;
  options.resolution = 17;
  EXPECT_EQ(pipeline_->tokens_to_mesh({1, 2, 3}, options, nullptr, &cancel).status().code(),
            ErrorCode::kCancelled);
  ASSERT_TRUE(pipeline_->decode_latents({1, 2, 3}).ok());
  EXPECT_EQ(pipeline_->extract_mesh(options, nullptr, &cancel).status().code(),
            ErrorCode::kCancelled);
}

TEST(PipelineLoadTest, FillTokenComesFromModelJson) {
  FixtureModelDir dir("pipeline-fill", /*v05=*/false, /*fill_token=*/63);
  auto p = ShapePipeline::load(dir.path());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ((*p)->fill_token_id(), 63);
  EXPECT_TRUE((*p)->has_learned_fill_token());
  EXPECT_FALSE((*p)->gpt_config().use_bbox);

  FixtureModelDir bad("pipeline-badfill", true, 64);
  auto q = ShapePipeline::load(bad.path());
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("model.json"), std::string::npos) << q.status().message();
  EXPECT_NE(q.status().message().find("fill_token_id 64"), std::string::npos)
      << q.status().message();
}

TEST(PipelineLoadTest, DefaultResolutionComesFromModelJson) {
  FixtureModelDir plain("pipeline-defres-none");
  auto p = ShapePipeline::load(plain.path());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ((*p)->default_resolution(), kReferenceResolution);  // no card: the reference's 257
  EXPECT_EQ((*p)->resolve_resolution(0), 257);
  EXPECT_EQ((*p)->resolve_resolution(33), 33);

  FixtureModelDir carded("pipeline-defres-17");
  std::ofstream(carded.path() + "/model.json") << R"({"defaults": {"resolution": 17}})";
  auto q = ShapePipeline::load(carded.path());
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ((*q)->default_resolution(), 17);
  // resolution 0 in MeshOptions extracts at the card's lattice.
  ASSERT_TRUE((*q)->decode_latents({1, 2, 3}).ok());
  mesh::ExtractionStats stats;
  auto m = (*q)->extract_mesh(MeshOptions(), nullptr, nullptr, &stats);
  if (m.ok())
    EXPECT_LE(stats.queries, 17 * 17 * 17);
  else
    EXPECT_EQ(m.status().code(), ErrorCode::kNotFound) << m.status().to_string();

  for (const char* bad :
       {R"({"defaults": {"resolution": 100}})", R"({"defaults": {"resolution": "65"}})",
        R"({"defaults": {"resolution": -1}})"}) {
    FixtureModelDir dir("pipeline-defres-bad");
    std::ofstream(dir.path() + "/model.json") << bad;
    auto r = ShapePipeline::load(dir.path());
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("defaults.resolution"), std::string::npos)
        << r.status().message();
  }
}

// The coarse-to-fine search's first lattice and near-surface margin come from the card too
// (defaults.coarse_resolution, defaults.near_surface_logit); MeshOptions overrides them; bad values
// are errors naming the field.
TEST(PipelineLoadTest, ExtractionSearchComesFromModelJson) {
  auto queries = [](ShapePipeline& p, const MeshOptions& o) -> int64_t {
    mesh::ExtractionStats stats;
    auto m = p.extract_mesh(o, nullptr, nullptr, &stats);
    return m.ok() || m.status().code() == ErrorCode::kNotFound ? stats.queries : -1;
  };
  FixtureModelDir plain("pipeline-coarse-none");
  auto p = ShapePipeline::load(plain.path());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_TRUE((*p)->decode_latents({1, 2, 3}).ok());
  MeshOptions o;
  o.resolution = 33;
  // No card: the 33^3 lattice first, i.e. every point at resolution 33.
  EXPECT_EQ(queries(**p, o), 33 * 33 * 33);

  // tessera-tiny's card: (17, 1.0), on a shape with a surface.
  auto tiny = ShapePipeline::load(default_shape_model_dir());
  ASSERT_TRUE(tiny.ok()) << tiny.status().to_string();
  ShapePipeline& t = **tiny;
  auto prompt = t.encode_prompt("a torus");
  ASSERT_TRUE(prompt.ok());
  auto ids = t.generate(*prompt, GenerationOptions());
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  ASSERT_TRUE(t.decode_latents(*ids).ok());
  MeshOptions card_values = o;
  card_values.coarse_base = 4;
  card_values.near_surface_logit = 1.0f;
  const int64_t from_card = queries(t, o);
  EXPECT_EQ(from_card, queries(t, card_values));
  EXPECT_GT(from_card, 17 * 17 * 17);
  MeshOptions forced = o;
  forced.coarse_base = 5;  // the caller's choice wins over the card's
  forced.near_surface_logit = 0.0f;
  EXPECT_EQ(queries(t, forced), 33 * 33 * 33);
  EXPECT_LT(from_card, 33 * 33 * 33 / 2);
  MeshOptions margin = o;
  margin.near_surface_logit = 1e6f;  // every coarse cell is "near": every one is refined
  // More than the card's search, and no point twice: at most the whole lattice (the last level
  // queries only the corners of the cells the surface crosses in parents whose corners change
  // sign, and whole blocks of the others).
  const int64_t every_cell = queries(t, margin);
  EXPECT_GT(every_cell, from_card);
  EXPECT_LE(every_cell, 33 * 33 * 33);

  for (const char* bad : {R"({"defaults": {"coarse_resolution": 10}})",
                          R"({"defaults": {"coarse_resolution": "17"}})",
                          R"({"defaults": {"near_surface_logit": -1}})",
                          R"({"defaults": {"near_surface_logit": "1"}})"}) {
    FixtureModelDir dir("pipeline-coarse-bad");
    std::ofstream(dir.path() + "/model.json") << bad;
    auto r = ShapePipeline::load(dir.path());
    ASSERT_FALSE(r.ok()) << bad;
    const std::string field = std::string(bad).find("coarse") != std::string::npos
                                  ? "defaults.coarse_resolution"
                                  : "defaults.near_surface_logit";
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  }
}

TEST(PipelineLoadTest, MissingDirectoryAndBrokenCardAreNamed) {
  auto missing = ShapePipeline::load("/nonexistent/tessera-model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/tessera-model"), std::string::npos);

  FixtureModelDir dir("pipeline-badcard");
  std::ofstream(dir.path() + "/model.json") << "{not json";
  auto broken = ShapePipeline::load(dir.path());
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("model.json"), std::string::npos)
      << broken.status().message();
}

TEST(PipelineLoadTest, ResolutionMustBeAPowerOfTwoPlusOne) {
  EXPECT_EQ(resolution_base(257).value(), 8);
  EXPECT_EQ(resolution_base(3).value(), 1);
  EXPECT_EQ(resolution_base(1025).value(), 10);
  EXPECT_FALSE(resolution_base(2049).ok());
  EXPECT_FALSE(resolution_base(256).ok());
  EXPECT_FALSE(resolution_base(0).ok());
}

// The diffusion vocabulary extension (text_encoder/extension.json): its words reach the image model
// only; the shape GPT is conditioned as if they were not in the prompt.
namespace image_only {

namespace fs = std::filesystem;

// A fixture model folder whose text_encoder/ is a real directory holding `extension` (no file when
// empty). In the fixture vocabulary a=5 (an article), b=17, c=42, d=311, BOS 998, EOS 999.
struct ExtendedDir {
  explicit ExtendedDir(const std::string& name, const std::string& extension) : dir(name) {
    const fs::path te = fs::path(dir.path()) / "text_encoder";
    const fs::path parity = fs::path(TESSERA_SOURCE_DIR) / "tests" / "fixtures" / "parity";
    fs::remove(te);
    fs::create_directories(te);
    fs::copy_file(parity / "text_encoder" / "model.safetensors", te / "model.safetensors");
    fs::copy_file(parity / "text_encoder" / "config.json", te / "config.json");
    if (!extension.empty()) std::ofstream(te / "extension.json") << extension;
  }
  FixtureModelDir dir;
};

TEST(ShapePromptImageOnlyWords, AreLeftOutOfTheShapeConditionWithTheirDanglingArticles) {
  ExtendedDir ext("image-only", R"({"base_vocab_size": 40, "words": {"c": 42, "d": 311}})");
  auto loaded = ShapePipeline::load(ext.dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ShapePipeline& p = **loaded;
  using Ids = std::vector<int32_t>;
  EXPECT_EQ(p.shape_prompt_ids("b c a d"), (Ids{998, 17, 999}));   // "a" would dangle
  EXPECT_EQ(p.shape_prompt_ids("a c b"), (Ids{998, 5, 17, 999}));  // "a" still has its word
  EXPECT_EQ(p.shape_prompt_ids("c d"), (Ids{998, 999}));           // nothing left: unconditional
  EXPECT_EQ(p.shape_prompt_ids("b a"), (Ids{998, 17, 5, 999}));    // nothing dropped: untouched
  int dropped = 0;
  p.shape_prompt_ids("a c b d", &dropped);
  EXPECT_EQ(dropped, 2);

  auto full = p.encode_prompt("a c b on d").value();  // "on" is letters here, so it stays
  auto plain = p.encode_prompt("a b on").value();
  EXPECT_EQ(full.cond, plain.cond);
  EXPECT_EQ(full.image_only_tokens, 2);
  EXPECT_EQ(plain.image_only_tokens, 0);
  EXPECT_EQ(full.prompt_tokens, plain.prompt_tokens);
  auto with_d = p.encode_prompt("a b d").value();
  auto without = p.encode_prompt("a b").value();
  EXPECT_EQ(with_d.cond, without.cond);
  EXPECT_NE(without.cond, p.encode_prompt("a c").value().cond);  // "a c" -> "" differs from "a b"
}

TEST(ShapePromptImageOnlyWords, WithoutAnExtensionEveryTokenIsKept) {
  ExtendedDir ext("image-only-none", "");
  auto loaded = ShapePipeline::load(ext.dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ((*loaded)->shape_prompt_ids("b c a"), (std::vector<int32_t>{998, 17, 42, 5, 999}));
}

TEST(ShapePromptImageOnlyWords, AMalformedExtensionIsAnErrorNamingTheFile) {
  for (const std::string& bad :
       {std::string("{not json"), std::string(R"({"words": [1, 2]})"),
        std::string(R"({"words": {"c": "42"}})"), std::string(R"({"words": {"c": 5000}})")}) {
    ExtendedDir ext("image-only-bad", bad);
    auto loaded = ShapePipeline::load(ext.dir.path());
    ASSERT_FALSE(loaded.ok()) << bad;
    EXPECT_NE(loaded.status().message().find("extension.json"), std::string::npos)
        << loaded.status().to_string();
  }
}

}  // namespace image_only

}  // namespace
}  // namespace tessera::shape
