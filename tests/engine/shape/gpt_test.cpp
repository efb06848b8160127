// Cube GPT parity against the PyTorch reference fixtures (tests/fixtures/parity/README.md), KV
// cache on/off equivalence, config inference on the real checkpoints' tensor lists, bad input.
#include "engine/shape/gpt.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/trace.h"
#include "engine/shape/generator.h"
#include "engine/shape/gpt_config.h"
#include "kernels/backend.h"
#include "kernels/forwarding_backend.h"
#include "tests/support/gpt_parity.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::shape {
namespace {

using test::close_rel;  // the fixture's f32 tolerance (tests/support/kernel_test_util.h)

const std::string kParity = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/parity/";

struct Fixture : test::ParityTensors {
  SafeTensors gpt05, gpt01, tokenizer;
  std::unique_ptr<kernels::Backend> backend;
  NormalizedCodebook codebook;
  std::unique_ptr<CubeGpt> model05, model01;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture();
    fx->expected = SafeTensors::open(kParity + "expected.safetensors").value();
    fx->gpt05 = SafeTensors::open(kParity + "gpt_v05/shape_gpt.safetensors").value();
    fx->gpt01 = SafeTensors::open(kParity + "gpt_v01/shape_gpt.safetensors").value();
    fx->tokenizer = SafeTensors::open(kParity + "shape_tokenizer.safetensors").value();
    fx->backend = kernels::make_cpu_backend();
    fx->codebook = load_normalized_codebook(fx->tokenizer).value();
    fx->model05 = CubeGpt::load(fx->gpt05, fx->codebook, *fx->backend).value();
    fx->model01 = CubeGpt::load(fx->gpt01, fx->codebook, *fx->backend).value();
    fx->model05->set_num_latents(16);
    fx->model01->set_num_latents(16);
    return fx;
  }();
  return *f;
}

TensorShapes read_tensor_list(const std::string& path) {
  TensorShapes shapes;
  std::ifstream in(path);
  std::string line;
  const std::regex re(R"(^(\S+) \(([\d, ]*)\)\s*$)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (!std::regex_match(line, m, re)) continue;
    std::vector<int64_t> dims;
    std::string s = m[2];
    for (size_t pos = 0; pos < s.size();) {
      size_t end = s.find(',', pos);
      if (end == std::string::npos) end = s.size();
      const std::string item = s.substr(pos, end - pos);
      if (item.find_first_of("0123456789") != std::string::npos) dims.push_back(std::stoll(item));
      pos = end + 1;
    }
    shapes[m[1]] = dims;
  }
  return shapes;
}

TEST(GptConfigTest, InfersPublishedCheckpointsFromTensorLists) {
  const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/cube3d/";
  for (const char* name : {"cube3d-gpt_v05-tensors.txt", "cube3d-gpt_v01-tensors.txt"}) {
    SCOPED_TRACE(name);
    TensorShapes shapes = read_tensor_list(dir + name);
    ASSERT_GT(shapes.size(), 600u);
    auto cfg = infer_gpt_config(shapes, name);
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    EXPECT_EQ(cfg->n_embd, 1536);
    EXPECT_EQ(cfg->n_head, 12);
    EXPECT_EQ(cfg->head_dim, 128);
    EXPECT_EQ(cfg->n_dual, 23);
    EXPECT_EQ(cfg->n_single, 1);
    EXPECT_EQ(cfg->mlp_hidden, 6144);
    EXPECT_EQ(cfg->vocab_size, 16387);
    EXPECT_EQ(cfg->codebook_size, 16384);
    EXPECT_EQ(cfg->bos_id(), 16384);
    EXPECT_EQ(cfg->eos_id(), 16385);
    EXPECT_EQ(cfg->pad_id(), 16386);
    EXPECT_EQ(cfg->shape_embed_dim, 32);
    EXPECT_EQ(cfg->text_embed_dim, 768);
    const bool v05 = std::string(name).find("v05") != std::string::npos;
    EXPECT_EQ(cfg->use_bbox, v05);
    EXPECT_EQ(cfg->cond_len(), v05 ? 78 : 77);
    // The spec's "0.93 B parameters read" per decode step.
    EXPECT_NEAR(static_cast<double>(cfg->decode_weight_elements()) / 1e9, 0.93, 0.01);
  }
}

TEST(GptConfigTest, ErrorsNameTheTensor) {
  const std::string list =
      std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/cube3d/cube3d-gpt_v05-tensors.txt";
  const TensorShapes good = read_tensor_list(list);
  auto expect_error = [&](TensorShapes shapes, const std::string& needle) {
    auto cfg = infer_gpt_config(shapes, "gpt.safetensors");
    ASSERT_FALSE(cfg.ok()) << needle;
    EXPECT_NE(cfg.status().message().find(needle), std::string::npos) << cfg.status().message();
    EXPECT_NE(cfg.status().message().find("gpt.safetensors"), std::string::npos);
  };
  TensorShapes s = good;
  s.erase("transformer.dual_blocks.0.attn.pre_x.q_norm.weight");
  expect_error(s, "transformer.dual_blocks.0.attn.pre_x.q_norm.weight");
  s = good;
  s["transformer.dual_blocks.0.attn.pre_x.q_norm.weight"] = {100};
  expect_error(s, "q_norm.weight size 100");
  s = good;
  s["lm_head.weight"] = {16000, 1536};
  expect_error(s, "lm_head.weight");
  s = good;
  s.erase("transformer.dual_blocks.22.attn.pre_c.c_k.weight");
  expect_error(s, "transformer.dual_blocks.22.attn.pre_c.c_k.weight");
  s = good;
  for (auto it = s.begin(); it != s.end();) {
    it = it->first.rfind("transformer.dual_blocks.5.", 0) == 0 ? s.erase(it) : std::next(it);
  }
  expect_error(s, "missing block 5");
  expect_error({}, "transformer.wte.weight");
}

TEST(CubeGptTest, FixtureConfigAndCodebook) {
  Fixture& f = fixture();
  const GptConfig& c = f.model05->config();
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_dual, 2);
  EXPECT_EQ(c.n_single, 1);
  EXPECT_EQ(c.mlp_hidden, 256);
  EXPECT_EQ(c.codebook_size, 64);
  EXPECT_TRUE(c.use_bbox);
  EXPECT_FALSE(f.model01->config().use_bbox);
  EXPECT_TRUE(close_rel(f.codebook.values, f.f32("shape.codebook_normalized"), 1e-6));
}

// wte rows 0..63 = shape_proj(normalized codebook), gathered back through the backend.
TEST(CubeGptTest, InstalledTokenTableMatches) {
  Fixture& f = fixture();
  for (auto [model, name] : {std::pair{f.model05.get(), "gpt.wte_installed"},
                             std::pair{f.model01.get(), "gpt_v01.wte_installed"}}) {
    SCOPED_TRACE(name);
    const GptConfig& c = model->config();
    std::vector<int32_t> ids(static_cast<size_t>(c.vocab_size));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::vector<float> out(static_cast<size_t>(c.vocab_size * c.n_embd));
    ASSERT_TRUE(
        f.backend->embedding_gather(model->weights().wte, ids.data(), c.vocab_size, out.data())
            .ok());
    EXPECT_TRUE(close_rel(out, f.f32(name)));
  }
}

TEST(CubeGptTest, ConditionMatches) {
  Fixture& f = fixture();
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  const std::vector<float> bbox = f.f32("gpt.bbox");
  auto s05 = GptSession::create(*f.model05, 2, 9).value();
  ASSERT_TRUE(s05->set_condition(2, hidden.data(), bbox.data()).ok());
  std::vector<float> cond;
  ASSERT_TRUE(s05->read_condition(&cond).ok());
  EXPECT_TRUE(close_rel(cond, f.f32("gpt.cond")));
  auto s01 = GptSession::create(*f.model01, 2, 9).value();
  ASSERT_TRUE(s01->set_condition(2, hidden.data(), nullptr).ok());
  ASSERT_TRUE(s01->read_condition(&cond).ok());
  EXPECT_TRUE(close_rel(cond, f.f32("gpt_v01.cond")));
}

TEST(CubeGptTest, FullForwardMatchesPerBlock) {
  Fixture& f = fixture();
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  const std::vector<float> bbox = f.f32("gpt.bbox");
  const std::vector<int32_t> ids = f.i32("gpt.teacher_ids");
  auto s = GptSession::create(*f.model05, 2, 9).value();
  ASSERT_TRUE(s->set_condition(2, hidden.data(), bbox.data()).ok());
  std::map<std::string, std::vector<float>> seen;
  std::vector<float> logits(2 * 9 * 67), last(2 * 67);
  ASSERT_TRUE(
      s->forward_full(ids.data(), 9, last.data(), logits.data(),
                      [&](const std::string& name, const std::vector<float>& v) { seen[name] = v; })
          .ok());
  const std::vector<std::string> names = {"dual.0.x", "dual.0.c", "dual.1.x", "single.0.x", "ln_f"};
  EXPECT_EQ(seen.size(), names.size());  // no dual.1.c: the last dual block is condition-pre-only
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(seen.count(name));
    EXPECT_TRUE(close_rel(seen[name], f.f32("gpt.full." + name)));
  }
  EXPECT_TRUE(close_rel(logits, f.f32("gpt.full_logits")));
  for (int b = 0; b < 2; ++b) {
    for (int j = 0; j < 67; ++j) EXPECT_EQ(last[b * 67 + j], logits[(b * 9 + 8) * 67 + j]);
  }

  auto s01 = GptSession::create(*f.model01, 2, 9).value();
  ASSERT_TRUE(s01->set_condition(2, hidden.data(), nullptr).ok());
  ASSERT_TRUE(s01->forward_full(ids.data(), 9, nullptr, logits.data()).ok());
  EXPECT_TRUE(close_rel(logits, f.f32("gpt_v01.full_logits")));
}

// Prefill + 8 decode steps through the KV cache, against the reference and against full recompute.
TEST(CubeGptTest, CachedAndUncachedDecodeMatch) {
  Fixture& f = fixture();
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  const std::vector<float> bbox = f.f32("gpt.bbox");
  const std::vector<int32_t> ids = f.i32("gpt.teacher_ids");  // [2, 9]
  auto cached = GptSession::create(*f.model05, 2, 9).value();
  auto full = GptSession::create(*f.model05, 2, 9).value();
  ASSERT_TRUE(cached->set_condition(2, hidden.data(), bbox.data()).ok());
  ASSERT_TRUE(full->set_condition(2, hidden.data(), bbox.data()).ok());
  std::vector<float> logits(2 * 67);
  const int32_t bos[2] = {ids[0], ids[9]};
  ASSERT_TRUE(cached->prefill(bos, logits.data()).ok());
  EXPECT_TRUE(close_rel(logits, f.f32("gpt.prefill_logits")));
  EXPECT_EQ(cached->length(), 1);
  std::vector<float> dec_cached, dec_full;  // [step][b][v], reordered to [b][step][v] below
  std::vector<float> step_full(2 * 67);
  for (int step = 1; step <= 8; ++step) {
    const int32_t next[2] = {ids[step], ids[9 + step]};
    ASSERT_TRUE(cached->decode(next, logits.data()).ok());
    std::vector<int32_t> prefix;
    for (int b = 0; b < 2; ++b)
      prefix.insert(prefix.end(), ids.begin() + b * 9, ids.begin() + b * 9 + step + 1);
    ASSERT_TRUE(full->forward_full(prefix.data(), step + 1, step_full.data(), nullptr).ok());
    // Cached and uncached differ only by summation order.
    EXPECT_TRUE(test::all_close(logits.data(), step_full.data(), logits.size(), 1e-5, 1e-5))
        << "step " << step;
    dec_cached.insert(dec_cached.end(), logits.begin(), logits.end());
    dec_full.insert(dec_full.end(), step_full.begin(), step_full.end());
  }
  EXPECT_EQ(cached->length(), 9);
  auto reorder = [](const std::vector<float>& a) {
    std::vector<float> out(a.size());
    for (int s = 0; s < 8; ++s)
      for (int b = 0; b < 2; ++b)
        for (int v = 0; v < 67; ++v) out[(b * 8 + s) * 67 + v] = a[(s * 2 + b) * 67 + v];
    return out;
  };
  EXPECT_TRUE(close_rel(reorder(dec_cached), f.f32("gpt.decode_logits_cached")));
  EXPECT_TRUE(close_rel(reorder(dec_full), f.f32("gpt.decode_logits_nocache")));
  // The cache is full now: one more step is an error, not an overflow.
  const int32_t more[2] = {1, 1};
  EXPECT_FALSE(cached->decode(more, logits.data()).ok());
  // Out-of-range ids are reported.
  const int32_t bad[2] = {67, 0};
  EXPECT_FALSE(full->forward_full(bad, 1, logits.data(), nullptr).ok());
}

// prefill skips the condition stream of trailing rows whose projected condition is unchanged
// (the unconditional row): the result must equal a fresh session's, and a changed row must be
// recomputed.
TEST(CubeGptTest, PrefillReusesUnchangedConditionRows) {
  Fixture& f = fixture();
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  const std::vector<float> bbox = f.f32("gpt.bbox");
  const int32_t bos[2] = {f.model05->config().bos_id(), f.model05->config().bos_id()};
  const size_t row = hidden.size() / 2;
  auto fresh_logits = [&](const std::vector<float>& h, int32_t next, std::vector<float>* prefill,
                          std::vector<float>* decode) {
    auto s = GptSession::create(*f.model05, 2, 4).value();
    ASSERT_TRUE(s->set_condition(2, h.data(), bbox.data()).ok());
    prefill->resize(2 * 67);
    decode->resize(2 * 67);
    ASSERT_TRUE(s->prefill(bos, prefill->data()).ok());
    const int32_t ids[2] = {next, next};
    ASSERT_TRUE(s->decode(ids, decode->data()).ok());
  };
  auto reused = GptSession::create(*f.model05, 2, 4).value();
  std::vector<float> logits(2 * 67), step(2 * 67), want_prefill, want_decode;
  ASSERT_TRUE(reused->set_condition(2, hidden.data(), bbox.data()).ok());
  ASSERT_TRUE(reused->prefill(bos, logits.data()).ok());
  // New prompt row, same unconditional row: row 1's condition K/V are reused.
  std::vector<float> changed_cond = hidden;
  for (size_t i = 0; i < row; ++i) changed_cond[i] *= -0.5f;
  fresh_logits(changed_cond, 5, &want_prefill, &want_decode);
  ASSERT_TRUE(reused->set_condition(2, changed_cond.data(), bbox.data()).ok());
  ASSERT_TRUE(reused->prefill(bos, logits.data()).ok());
  EXPECT_TRUE(test::all_close(logits.data(), want_prefill.data(), logits.size(), 1e-5, 1e-5));
  const int32_t next[2] = {5, 5};
  ASSERT_TRUE(reused->decode(next, step.data()).ok());
  EXPECT_TRUE(test::all_close(step.data(), want_decode.data(), step.size(), 1e-5, 1e-5));
  // A changed unconditional row is recomputed, not reused.
  std::vector<float> changed_uncond = changed_cond;
  for (size_t i = row; i < 2 * row; ++i) changed_uncond[i] *= 0.25f;
  fresh_logits(changed_uncond, 7, &want_prefill, &want_decode);
  ASSERT_TRUE(reused->set_condition(2, changed_uncond.data(), bbox.data()).ok());
  ASSERT_TRUE(reused->prefill(bos, logits.data()).ok());
  EXPECT_TRUE(test::all_close(logits.data(), want_prefill.data(), logits.size(), 1e-5, 1e-5));
  const int32_t next2[2] = {7, 7};
  ASSERT_TRUE(reused->decode(next2, step.data()).ok());
  EXPECT_TRUE(test::all_close(step.data(), want_decode.data(), step.size(), 1e-5, 1e-5));
}

TEST(CubeGptTest, GreedyGenerationWithGuidanceMatches) {
  Fixture& f = fixture();
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  const std::vector<float> bbox_rows = f.f32("gpt.bbox");
  const ConditionInputs in = test::guided_condition(hidden, bbox_rows);
  auto gen = ShapeGenerator::create(*f.model05).value();
  for (bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "kv cache" : "no kv cache");
    GenerateOptions opt;
    opt.use_kv_cache = cache;
    Trace trace;
    opt.trace = &trace;
    std::vector<int64_t> indices;
    ASSERT_NO_FATAL_FAILURE(
        test::expect_reference_greedy(*gen, in, opt, f, [&](int64_t i, int32_t, double ms) {
          indices.push_back(i);
          EXPECT_GE(ms, 0.0);
        }));
    EXPECT_EQ(indices.size(), 16u);
    ASSERT_NE(trace.find("gpt.decode"), nullptr);
    EXPECT_EQ(trace.find("gpt.decode")->count, 15);
    EXPECT_EQ(trace.find("gpt.prefill")->count, 1);
  }
  test::expect_unguided_and_v01_greedy(*gen, *f.model01, in, f);
}

TEST(CubeGptTest, SampledGenerationIsSeededAndCacheIndependent) {
  Fixture& f = fixture();
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  ConditionInputs in{hidden.data(), hidden.data() + 77 * 32, std::nullopt};
  auto gen = ShapeGenerator::create(*f.model05).value();
  GenerateOptions opt;
  opt.sampling.sample = true;
  opt.sampling.temperature = 1.5f;
  opt.sampling.top_p = 0.95f;
  opt.sampling.seed = 1234;
  auto a = gen->generate(in, opt).value();
  auto b = gen->generate(in, opt).value();
  opt.use_kv_cache = false;
  auto c = gen->generate(in, opt).value();
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  opt.sampling.seed = 99;
  auto d = gen->generate(in, opt).value();
  EXPECT_NE(a, d);  // 16 draws at temperature 1.5: equal sequences would mean the seed is ignored
  for (int32_t id : a) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 64);
  }
}

// The KV-cache loop runs with the token choice on the backend (device-resident: ids, position,
// RNG and step in backend memory) unless a guided_logits hook asks for the host loop: both give
// the same tokens, greedy and sampled, with f32 and bf16 weights (bf16 K/V cache).
TEST(CubeGptTest, DeviceResidentLoopMatchesTheHostLoop) {
  Fixture& f = fixture();
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  const std::vector<float> bbox_rows = f.f32("gpt.bbox");
  const ConditionInputs in = test::guided_condition(hidden, bbox_rows);
  GptLoadOptions bf16;
  bf16.bf16 = true;
  auto model16 = CubeGpt::load(f.gpt05, f.codebook, *f.backend, bf16).value();
  model16->set_num_latents(16);
  for (const CubeGpt* model : {f.model05.get(), model16.get()}) {
    SCOPED_TRACE(model == f.model05.get() ? "f32 weights" : "bf16 weights");
    auto gen = ShapeGenerator::create(*model).value();
    for (int mode = 0; mode < 3; ++mode) {
      GenerateOptions opt;
      if (mode > 0) {
        opt.sampling.sample = true;
        opt.sampling.temperature = mode == 1 ? 1.0f : 0.8f;
        opt.sampling.top_k = mode == 1 ? 0 : 10;
        opt.sampling.top_p = mode == 1 ? 0.9f : 1.0f;
        opt.sampling.seed = 4242 + uint64_t(mode);
      }
      SCOPED_TRACE("mode " + std::to_string(mode));
      std::vector<int64_t> seen;
      const std::vector<int32_t> resident =
          gen->generate(in, opt, [&](int64_t i, int32_t, double) { seen.push_back(i); }).value();
      EXPECT_EQ(gen->session().length(), 16);
      std::vector<float> guided;
      opt.guided_logits = &guided;  // forces the host loop
      const std::vector<int32_t> host = gen->generate(in, opt).value();
      EXPECT_EQ(resident, host);
      EXPECT_EQ(guided.size(), size_t(16 * 64));
      ASSERT_EQ(seen.size(), 16u);
      for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(seen[size_t(i)], i);
    }
  }
}

// A CPU backend that records the way a CUDA graph capture does: between begin_recording() and
// end_recording() compute ops are stored (with their arguments, by value), not run; host traffic
// (upload, download, synchronize, allocation) fails the recording; replay() runs the stored ops.
// The host code of a recorded step runs once, at recording time, exactly as under CUDA: so the
// generator's graph path (two eager tokens, the recording, replays four steps ahead, ring reads,
// the host's length bookkeeping) and GptSession::decode_at's "no host work per step" are tested
// here without a GPU.
class RecordingCpuBackend final : public kernels::ForwardingBackend {
 public:
  RecordingCpuBackend() : ForwardingBackend(kernels::make_cpu_backend()) {}
  int64_t replays = 0;

  std::string name() const override { return "recording " + inner().name(); }
  bool can_record() const override { return true; }
  Status begin_recording() override {
    if (recording_) return invalid_argument("already recording");
    recording_ = true;
    failed_.clear();
    current_.clear();
    return {};
  }
  Expected<int64_t> end_recording() override {
    if (!recording_) return invalid_argument("not recording");
    recording_ = false;
    if (!failed_.empty()) return internal_error("recording invalidated by host work: " + failed_);
    recordings_.push_back(std::move(current_));
    return static_cast<int64_t>(recordings_.size()) - 1;
  }
  Status replay(int64_t id) override {
    ++replays;
    for (const auto& op : recordings_.at(static_cast<size_t>(id))) TESSERA_RETURN_IF_ERROR(op());
    return {};
  }

 protected:
  Status run_op(const kernels::OpLabel& label, std::function<Status()> run) override {
    if (!recording_) return run();
    if (label.kind != kernels::OpLabel::Kind::kCompute) {
      failed_ += failed_.empty() ? label.op : std::string(", ") + label.op;
      return internal_error(std::string(label.op) + " while recording");
    }
    current_.push_back(std::move(run));
    return {};
  }

 private:
  bool recording_ = false;
  std::string failed_;
  std::vector<std::function<Status()>> current_;
  std::vector<std::vector<std::function<Status()>>> recordings_;
};

TEST(CubeGptTest, RecordedDecodeStepReplaysToTheSameTokens) {
  Fixture& f = fixture();
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  const std::vector<float> bbox_rows = f.f32("gpt.bbox");
  const ConditionInputs in = test::guided_condition(hidden, bbox_rows);
  RecordingCpuBackend recorder;
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 weights" : "f32 weights");
    GptLoadOptions load;
    load.bf16 = bf16;
    auto model = CubeGpt::load(f.gpt05, f.codebook, recorder, load).value();
    model->set_num_latents(16);
    auto plain_model = CubeGpt::load(f.gpt05, f.codebook, *f.backend, load).value();
    plain_model->set_num_latents(16);
    auto gen = ShapeGenerator::create(*model).value();
    auto plain = ShapeGenerator::create(*plain_model).value();
    for (bool sample : {false, true}) {
      SCOPED_TRACE(sample ? "sampled" : "greedy");
      GenerateOptions opt;
      opt.sampling.sample = sample;
      opt.sampling.temperature = 1.2f;
      opt.sampling.seed = 8;
      std::vector<int64_t> order;
      const int64_t replays_before = recorder.replays;
      auto replayed =
          gen->generate(in, opt, [&](int64_t i, int32_t, double) { order.push_back(i); });
      ASSERT_TRUE(replayed.ok()) << replayed.status().to_string();
      EXPECT_EQ(recorder.replays - replays_before, 14) << "tokens 2..15 replayed";
      EXPECT_EQ(gen->session().length(), 16);
      ASSERT_EQ(order.size(), 16u);
      for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(order[size_t(i)], i);
      auto want = plain->generate(in, opt);
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      EXPECT_EQ(*replayed, *want);
      if (!sample && !bf16) {
        EXPECT_EQ(*replayed, f.i32("gpt.greedy_tokens"));
      }
    }
    // Cancelled after a few tokens (mid-window): cancelled, and the generator is reusable.
    std::atomic<bool> cancel{false};
    GenerateOptions opt;
    opt.cancel = &cancel;
    auto stopped = gen->generate(in, opt, [&](int64_t i, int32_t, double) {
      if (i == 6) cancel = true;
    });
    ASSERT_FALSE(stopped.ok());
    EXPECT_EQ(stopped.status().code(), ErrorCode::kCancelled);
    EXPECT_EQ(gen->generate(in, GenerateOptions()).value(),
              plain->generate(in, GenerateOptions()).value());
  }
}

TEST(CubeGptTest, CancellationAndBadOptions) {
  Fixture& f = fixture();
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  ConditionInputs in{hidden.data(), hidden.data() + 77 * 32, std::nullopt};
  auto gen = ShapeGenerator::create(*f.model05).value();
  std::atomic<bool> cancel{false};
  GenerateOptions opt;
  opt.cancel = &cancel;
  int64_t produced = 0;
  auto r = gen->generate(in, opt, [&](int64_t i, int32_t, double) {
    produced = i + 1;
    if (i == 2) cancel = true;
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCancelled);
  EXPECT_EQ(produced, 3);
  // The generator is reusable after a cancellation.
  cancel = false;
  EXPECT_EQ(gen->generate(in, opt).value(), f.i32("gpt.greedy_tokens"));

  GenerateOptions bad;
  bad.num_tokens = 17;  // beyond the session's 16
  EXPECT_FALSE(gen->generate(in, bad).ok());
  bad = GenerateOptions();
  bad.sampling.sample = true;
  bad.sampling.top_p = 0.0f;
  auto e = gen->generate(in, bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("top_p"), std::string::npos);
  ConditionInputs no_uncond = in;
  no_uncond.uncond_hidden = nullptr;
  EXPECT_FALSE(gen->generate(no_uncond, GenerateOptions()).ok());
}

// bf16 weights (converted once at load): same greedy tokens on the fixture, logits close.
TEST(CubeGptTest, Bf16WeightsStayClose) {
  Fixture& f = fixture();
  GptLoadOptions bf16;
  bf16.bf16 = true;
  auto model = CubeGpt::load(f.gpt05, f.codebook, *f.backend, bf16).value();
  EXPECT_EQ(model->weight_dtype(), DType::kBF16);
  EXPECT_EQ(model->decode_weight_bytes() * 2, f.model05->decode_weight_bytes());
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  const std::vector<float> bbox = f.f32("gpt.bbox");
  const std::vector<int32_t> ids = f.i32("gpt.teacher_ids");
  auto s = GptSession::create(*model, 2, 9).value();
  ASSERT_TRUE(s->set_condition(2, hidden.data(), bbox.data()).ok());
  std::vector<float> logits(2 * 9 * 67);
  ASSERT_TRUE(s->forward_full(ids.data(), 9, nullptr, logits.data()).ok());
  EXPECT_TRUE(close_rel(logits, f.f32("gpt.full_logits"), 3e-2));
}

// Logits of the fixture's teacher-forced pass with `model`, against the f32 reference's: max
// |error| relative to the largest |logit|, and the relative RMS error.
struct LogitError {
  double rel_max = 0, rel_rms = 0;
};
LogitError fixture_logit_error(const CubeGpt& model) {
  Fixture& f = fixture();
  const std::vector<float> hidden = f.f32("clip.last_hidden_state");
  const std::vector<float> bbox = f.f32("gpt.bbox");
  const std::vector<int32_t> ids = f.i32("gpt.teacher_ids");
  auto s = GptSession::create(model, 2, 9).value();
  EXPECT_TRUE(s->set_condition(2, hidden.data(), bbox.data()).ok());
  std::vector<float> logits(2 * 9 * 67);
  EXPECT_TRUE(s->forward_full(ids.data(), 9, nullptr, logits.data()).ok());
  const std::vector<float> want = f.f32("gpt.full_logits");
  EXPECT_EQ(logits.size(), want.size());
  double err = 0, peak = 0, sum_sq = 0, ref_sq = 0;
  for (size_t i = 0; i < want.size() && i < logits.size(); ++i) {
    const double d = double(logits[i]) - want[i];
    err = std::max(err, std::fabs(d));
    peak = std::max(peak, std::fabs(double(want[i])));
    sum_sq += d * d;
    ref_sq += double(want[i]) * want[i];
  }
  return {err / peak, std::sqrt(sum_sq / ref_sq)};
}

// int8 weights (quantized at load, kernels/int8.h; activations quantized per call) against the f32
// reference's logits on the parity fixture, beside bf16 weights: the errors are printed and
// recorded (RecordProperty) and bounded. Measured when written (random fixture weights, groups of
// 64): int8 max 3.7 % of the largest |logit|, relative RMS 3.4 %; bf16 max 1.0 %, RMS 0.75 %.
TEST(CubeGptTest, Int8WeightsStayClose) {
  Fixture& f = fixture();
  GptLoadOptions int8, bf16;
  int8.int8 = true;
  bf16.bf16 = true;
  auto model = CubeGpt::load(f.gpt05, f.codebook, *f.backend, int8).value();
  auto half = CubeGpt::load(f.gpt05, f.codebook, *f.backend, bf16).value();
  EXPECT_TRUE(model->int8_weights());
  EXPECT_LT(model->decode_weight_bytes() * 3, f.model05->decode_weight_bytes());
  const LogitError e8 = fixture_logit_error(*model), e16 = fixture_logit_error(*half);
  std::printf(
      "logits vs the f32 reference (parity fixture): int8 max %.2f %% of max |logit|, "
      "RMS %.2f %%; bf16 max %.2f %%, RMS %.2f %%\n",
      100 * e8.rel_max, 100 * e8.rel_rms, 100 * e16.rel_max, 100 * e16.rel_rms);
  ::testing::Test::RecordProperty("int8_logit_rel_max_error", std::to_string(e8.rel_max));
  ::testing::Test::RecordProperty("int8_logit_rel_rms_error", std::to_string(e8.rel_rms));
  ::testing::Test::RecordProperty("bf16_logit_rel_max_error", std::to_string(e16.rel_max));
  EXPECT_LT(e8.rel_max, 0.06);
  EXPECT_LT(e8.rel_rms, 0.05);
  EXPECT_LT(e16.rel_max, 0.02);
}

// ---- bad checkpoints ----------------------------------------------------------------------------

class BadCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("tessera_gpt_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Rewrites the v0.5 fixture with `drop` left out and `reshape` given a different shape.
  Expected<std::unique_ptr<CubeGpt>> load_modified(const std::string& drop,
                                                   const std::string& reshape, SafeTensors* keep) {
    Fixture& f = fixture();
    std::vector<std::vector<float>> data;
    std::vector<TensorToWrite> out;
    data.reserve(f.gpt05.size());
    for (const TensorInfo& t : f.gpt05.tensors()) {
      if (t.name == drop) continue;
      data.push_back(f.gpt05.to_f32(t.name).value());
      std::vector<int64_t> shape = t.shape;
      if (t.name == reshape) {
        shape = {t.numel() / 2};
        data.back().resize(static_cast<size_t>(shape[0]));
      }
      out.push_back(TensorToWrite::from_f32(t.name, DType::kF32, shape, data.back().data()));
    }
    const std::string path = (dir_ / "shape_gpt.safetensors").string();
    EXPECT_TRUE(write_safetensors(path, out).ok());
    *keep = SafeTensors::open(path).value();
    return CubeGpt::load(*keep, f.codebook, *f.backend);
  }

  std::filesystem::path dir_;
};

TEST_F(BadCheckpointTest, MissingTensorIsNamed) {
  SafeTensors file;
  auto r = load_modified("transformer.dual_blocks.1.post_1.mlp.up_proj.bias", "", &file);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("transformer.dual_blocks.1.post_1.mlp.up_proj.bias"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("shape_gpt.safetensors"), std::string::npos);
}

TEST_F(BadCheckpointTest, MisShapedTensorIsNamed) {
  SafeTensors file;
  auto r = load_modified("", "transformer.single_blocks.0.attn.c_v.weight", &file);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("transformer.single_blocks.0.attn.c_v.weight"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("[64, 64]"), std::string::npos) << r.status().message();
}

TEST_F(BadCheckpointTest, CodebookSizeMismatchIsReported) {
  Fixture& f = fixture();
  NormalizedCodebook small = f.codebook;
  small.rows = 32;
  small.values.resize(32 * 8);
  auto r = CubeGpt::load(f.gpt05, small, *f.backend);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("do not match"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessera::shape
