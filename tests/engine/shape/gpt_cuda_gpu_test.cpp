// The Cube GPT on the CUDA backend against the PyTorch parity fixtures (tests/fixtures/parity),
// with the CPU tests' f32 tolerance (1e-4 of each tensor's scale, gpt_test.cpp): condition,
// per-block outputs and logits of the full forward, prefill + cached decode against the
// reference's cached and uncached logits, greedy tokens identical to the reference and to the
// CPU backend with and without the KV cache, and the bf16 K/V cache on CUDA against the CPU
// backend's bf16 cache. Skips without a usable CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/shape/generator.h"
#include "engine/shape/gpt.h"
#include "kernels/backend.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/gpt_parity.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::shape {
namespace {

using test::close_rel;  // the fixture's f32 tolerance (tests/support/kernel_test_util.h)

const std::string kParity = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/parity/";
constexpr int kVocab = 67;

// The fixture's files and the models loaded on the CUDA and the CPU backends (f32 weights, plus
// bf16 weights on both for the bf16 K/V cache). Built once, never freed (see shared_cuda_backend).
struct Models : test::ParityTensors {
  SafeTensors gpt05, gpt01, tokenizer;
  NormalizedCodebook codebook;
  std::unique_ptr<kernels::Backend> cpu;
  std::unique_ptr<CubeGpt> cuda05, cuda01, cuda05_bf16, cpu05, cpu05_bf16;
};

// Null (with a test failure) when a model does not load; call after the skip check.
Models* models() {
  static Models* m = []() -> Models* {
    auto* x = new Models();
    kernels::Backend& cuda = *test::shared_cuda_backend();
    x->expected = SafeTensors::open(kParity + "expected.safetensors").value();
    x->gpt05 = SafeTensors::open(kParity + "gpt_v05/shape_gpt.safetensors").value();
    x->gpt01 = SafeTensors::open(kParity + "gpt_v01/shape_gpt.safetensors").value();
    x->tokenizer = SafeTensors::open(kParity + "shape_tokenizer.safetensors").value();
    x->codebook = load_normalized_codebook(x->tokenizer).value();
    x->cpu = kernels::make_cpu_backend();
    GptLoadOptions bf16;
    bf16.bf16 = true;
    struct Load {
      std::unique_ptr<CubeGpt>* out;
      const SafeTensors* file;
      kernels::Backend* backend;
      GptLoadOptions options;
    };
    for (const Load& l :
         {Load{&x->cuda05, &x->gpt05, &cuda, {}}, Load{&x->cuda01, &x->gpt01, &cuda, {}},
          Load{&x->cuda05_bf16, &x->gpt05, &cuda, bf16},
          Load{&x->cpu05, &x->gpt05, x->cpu.get(), {}},
          Load{&x->cpu05_bf16, &x->gpt05, x->cpu.get(), bf16}}) {
      Expected<std::unique_ptr<CubeGpt>> model =
          CubeGpt::load(*l.file, x->codebook, *l.backend, l.options);
      if (!model.ok()) {
        ADD_FAILURE() << "loading " << l.file->path() << " on " << l.backend->name() << ": "
                      << model.status().to_string();
        return nullptr;
      }
      *l.out = std::move(model).value();
      (*l.out)->set_num_latents(16);
    }
    return x;
  }();
  return m;
}

class GptCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
    m_ = models();
    ASSERT_NE(m_, nullptr);
  }
  Models* m_ = nullptr;
};

TEST_F(GptCudaTest, ConditionAndFullForwardMatchPerBlock) {
  const std::vector<float> hidden = m_->f32("clip.last_hidden_state");
  const std::vector<float> bbox = m_->f32("gpt.bbox");
  const std::vector<int32_t> ids = m_->i32("gpt.teacher_ids");
  auto s = GptSession::create(*m_->cuda05, 2, 9).value();
  TESSERA_ASSERT_OK(s->set_condition(2, hidden.data(), bbox.data()));
  std::vector<float> cond;
  TESSERA_ASSERT_OK(s->read_condition(&cond));
  EXPECT_TRUE(close_rel(cond, m_->f32("gpt.cond")));
  std::map<std::string, std::vector<float>> seen;
  std::vector<float> logits(2 * 9 * kVocab), last(2 * kVocab);
  TESSERA_ASSERT_OK(s->forward_full(
      ids.data(), 9, last.data(), logits.data(),
      [&](const std::string& name, const std::vector<float>& v) { seen[name] = v; }));
  for (const char* name : {"dual.0.x", "dual.0.c", "dual.1.x", "single.0.x", "ln_f"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(seen.count(name));
    EXPECT_TRUE(close_rel(seen[name], m_->f32(std::string("gpt.full.") + name)));
  }
  EXPECT_TRUE(close_rel(logits, m_->f32("gpt.full_logits")));

  auto s01 = GptSession::create(*m_->cuda01, 2, 9).value();
  TESSERA_ASSERT_OK(s01->set_condition(2, hidden.data(), nullptr));
  TESSERA_ASSERT_OK(s01->read_condition(&cond));
  EXPECT_TRUE(close_rel(cond, m_->f32("gpt_v01.cond")));
  TESSERA_ASSERT_OK(s01->forward_full(ids.data(), 9, nullptr, logits.data()));
  EXPECT_TRUE(close_rel(logits, m_->f32("gpt_v01.full_logits")));
}

// Prefill + 8 teacher-forced decode steps through the KV cache vs full recompute, both against the
// reference, and the cache-full error.
TEST_F(GptCudaTest, CachedAndUncachedDecodeMatchTheReference) {
  const std::vector<float> hidden = m_->f32("clip.last_hidden_state");
  const std::vector<float> bbox = m_->f32("gpt.bbox");
  const std::vector<int32_t> ids = m_->i32("gpt.teacher_ids");  // [2, 9]
  auto cached = GptSession::create(*m_->cuda05, 2, 9).value();
  auto full = GptSession::create(*m_->cuda05, 2, 9).value();
  TESSERA_ASSERT_OK(cached->set_condition(2, hidden.data(), bbox.data()));
  TESSERA_ASSERT_OK(full->set_condition(2, hidden.data(), bbox.data()));
  std::vector<float> logits(2 * kVocab), step_full(2 * kVocab);
  const int32_t bos[2] = {ids[0], ids[9]};
  TESSERA_ASSERT_OK(cached->prefill(bos, logits.data()));
  EXPECT_TRUE(close_rel(logits, m_->f32("gpt.prefill_logits")));
  std::vector<float> dec_cached, dec_full;  // [step][b][v]
  for (int step = 1; step <= 8; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int32_t next[2] = {ids[step], ids[9 + step]};
    TESSERA_ASSERT_OK(cached->decode(next, logits.data()));
    std::vector<int32_t> prefix;
    for (int b = 0; b < 2; ++b)
      prefix.insert(prefix.end(), ids.begin() + b * 9, ids.begin() + b * 9 + step + 1);
    TESSERA_ASSERT_OK(full->forward_full(prefix.data(), step + 1, step_full.data(), nullptr));
    EXPECT_TRUE(close_rel(logits, step_full));
    dec_cached.insert(dec_cached.end(), logits.begin(), logits.end());
    dec_full.insert(dec_full.end(), step_full.begin(), step_full.end());
  }
  auto reorder = [](const std::vector<float>& a) {  // -> [b][step][v], the fixture's order
    std::vector<float> out(a.size());
    for (int s = 0; s < 8; ++s)
      for (int b = 0; b < 2; ++b)
        for (int v = 0; v < kVocab; ++v)
          out[(b * 8 + s) * kVocab + v] = a[(s * 2 + b) * kVocab + v];
    return out;
  };
  EXPECT_TRUE(close_rel(reorder(dec_cached), m_->f32("gpt.decode_logits_cached")));
  EXPECT_TRUE(close_rel(reorder(dec_full), m_->f32("gpt.decode_logits_nocache")));
  const int32_t more[2] = {1, 1};
  EXPECT_FALSE(cached->decode(more, logits.data()).ok());
}

// Greedy generation with guidance: the reference's tokens and guided logits, identical tokens on
// the CPU backend and with / without the KV cache; v0.1 and no-guidance tokens too.
TEST_F(GptCudaTest, GreedyTokensMatchReferenceAndCpuWithAndWithoutCache) {
  const std::vector<float> hidden = m_->f32("clip.last_hidden_state");
  const std::vector<float> bbox_rows = m_->f32("gpt.bbox");
  const ConditionInputs in = test::guided_condition(hidden, bbox_rows);
  auto gen = ShapeGenerator::create(*m_->cuda05).value();
  auto cpu_gen = ShapeGenerator::create(*m_->cpu05).value();
  for (bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "kv cache" : "no kv cache");
    GenerateOptions opt;
    opt.use_kv_cache = cache;
    std::vector<int32_t> tokens;
    ASSERT_NO_FATAL_FAILURE(test::expect_reference_greedy(*gen, in, opt, *m_, {}, &tokens));
    auto cpu_tokens = cpu_gen->generate(in, opt);
    ASSERT_TRUE(cpu_tokens.ok()) << cpu_tokens.status().to_string();
    EXPECT_EQ(tokens, *cpu_tokens);
  }
  test::expect_unguided_and_v01_greedy(*gen, *m_->cuda01, in, *m_);
}

// The device-resident loop on CUDA: the decode step recorded once as a CUDA graph and replayed
// (tokens through the mapped ring, a few steps behind) gives the same tokens as launching every op
// each step (use_graphs = false) and as the CPU backend, greedy and sampled, with every token
// reported in order; a cancellation mid-generation stops it and the generator stays usable.
TEST_F(GptCudaTest, GraphReplayEagerAndCpuGiveTheSameTokens) {
  const std::vector<float> hidden = m_->f32("clip.last_hidden_state");
  const std::vector<float> bbox_rows = m_->f32("gpt.bbox");
  const ConditionInputs in = test::guided_condition(hidden, bbox_rows);
  auto gen = ShapeGenerator::create(*m_->cuda05).value();
  auto cpu_gen = ShapeGenerator::create(*m_->cpu05).value();
  for (bool sample : {false, true}) {
    SCOPED_TRACE(sample ? "sampled" : "greedy");
    GenerateOptions opt;
    opt.sampling.sample = sample;
    opt.sampling.temperature = 0.9f;
    opt.sampling.top_k = 20;
    opt.sampling.top_p = 0.95f;
    opt.sampling.seed = 31;
    std::vector<int64_t> order;
    auto graphs = gen->generate(in, opt, [&](int64_t i, int32_t, double) { order.push_back(i); });
    ASSERT_TRUE(graphs.ok()) << graphs.status().to_string();
    ASSERT_EQ(order.size(), graphs->size());
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], int64_t(i));
    opt.use_graphs = false;
    auto eager = gen->generate(in, opt);
    auto cpu = cpu_gen->generate(in, opt);
    ASSERT_TRUE(eager.ok()) << eager.status().to_string();
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    EXPECT_EQ(*graphs, *eager);
    EXPECT_EQ(*graphs, *cpu);
    if (!sample) {
      EXPECT_EQ(*graphs, m_->i32("gpt.greedy_tokens"));
    }
  }
  std::atomic<bool> cancel{false};
  GenerateOptions opt;
  opt.cancel = &cancel;
  auto stopped = gen->generate(in, opt, [&](int64_t i, int32_t, double) {
    if (i == 5) cancel = true;
  });
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.status().code(), ErrorCode::kCancelled);
  auto again = gen->generate(in, GenerateOptions());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(*again, m_->i32("gpt.greedy_tokens"));
}

// Variations on the GPU (issue 23): every candidate of a batch decoded together (one graph
// recorded per generation for its row count, and eager) has exactly the tokens of a lone
// generation with its prompt and seed, for 1, 2, 4, 5 and 8 candidates (2 to 16 rows with
// guidance: the GEMV serves them all) and two prompts mixed, f32 and bf16 weights.
TEST_F(GptCudaTest, EachCandidateIsItsLoneGeneration) {
  const std::vector<float> hidden = m_->f32("clip.last_hidden_state");  // [2, 77, 32]
  const float* cond = hidden.data();
  const float* uncond = hidden.data() + 77 * 32;
  const std::vector<ConditionInputs> prompts = {
      {cond, uncond, std::array<float, 3>{0.8f, 1.1f, 0.5f}},
      {uncond, uncond, std::array<float, 3>{0.2f, 0.4f, 0.9f}}};
  for (CubeGpt* model : {m_->cuda05.get(), m_->cuda05_bf16.get()}) {
    for (bool graphs : {true, false}) {
      SCOPED_TRACE(std::string(model == m_->cuda05.get() ? "f32" : "bf16") +
                   (graphs ? ", graphs" : ", eager"));
      GenerateOptions o;
      o.sampling.sample = true;
      o.sampling.temperature = 1.5f;
      o.sampling.top_p = 0.95f;
      o.use_graphs = graphs;
      auto alone = [&](const ConditionInputs& in, uint64_t seed) {
        auto gen = ShapeGenerator::create(*model).value();
        GenerateOptions lone = o;
        lone.sampling.seed = seed;
        auto tokens = gen->generate(in, lone);
        EXPECT_TRUE(tokens.ok()) << tokens.status().to_string();
        return tokens.ok() ? *tokens : std::vector<int32_t>{};
      };
      std::vector<std::vector<int32_t>> ref0, ref1;
      for (uint64_t j = 0; j < 8; ++j) ref0.push_back(alone(prompts[0], 100 + j));
      for (uint64_t j = 0; j < 4; ++j) ref1.push_back(alone(prompts[1], 200 + j));
      EXPECT_NE(ref0[0], ref0[1]) << "two seeds gave the same tokens";
      auto gen = ShapeGenerator::create(*model, 0, 8).value();
      for (int v : {1, 2, 4, 5, 8}) {
        std::vector<CandidateSpec> specs;
        for (int j = 0; j < v; ++j) specs.push_back({0, 100 + static_cast<uint64_t>(j)});
        auto got = gen->generate_candidates({prompts[0]}, specs, o);
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        ASSERT_EQ(got->size(), static_cast<size_t>(v));
        for (int j = 0; j < v; ++j) {
          EXPECT_EQ((*got)[static_cast<size_t>(j)], ref0[static_cast<size_t>(j)])
              << "variation " << j << " of " << v;
        }
      }
      const std::vector<CandidateSpec> mixed = {{1, 202}, {0, 103}, {1, 200}, {0, 100}, {1, 203}};
      auto got = gen->generate_candidates(prompts, mixed, o);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      for (size_t j = 0; j < mixed.size(); ++j) {
        const auto& want =
            mixed[j].prompt == 0 ? ref0[mixed[j].seed - 100] : ref1[mixed[j].seed - 200];
        EXPECT_EQ((*got)[j], want) << "mixed candidate " << j;
      }
    }
    // Sampled tokens alone would hide a change in the last bit of the logits (a draw rarely lands
    // that close to a cut-off): candidate 0's guided logits, through the host loop (the hook), must
    // be the lone generation's bit for bit, with 4 other candidates (10 rows) and with 7 (16 rows).
    GenerateOptions o;
    o.sampling.sample = true;
    o.sampling.seed = 100;
    std::vector<float> lone_logits;
    o.guided_logits = &lone_logits;
    auto lone = ShapeGenerator::create(*model).value()->generate(prompts[0], o);
    ASSERT_TRUE(lone.ok()) << lone.status().to_string();
    ASSERT_FALSE(lone_logits.empty());
    auto gen = ShapeGenerator::create(*model, 0, 8).value();
    for (int v : {5, 8}) {
      std::vector<CandidateSpec> specs;
      for (int j = 0; j < v; ++j) specs.push_back({0, 100 + static_cast<uint64_t>(j)});
      std::vector<float> batch_logits;
      o.guided_logits = &batch_logits;
      auto got = gen->generate_candidates({prompts[0]}, specs, o);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ((*got)[0], *lone) << v << " candidates";
      ASSERT_EQ(batch_logits.size(), lone_logits.size()) << v << " candidates";
      for (size_t i = 0; i < lone_logits.size(); ++i) {
        ASSERT_EQ(batch_logits[i], lone_logits[i]) << v << " candidates, logit " << i;
      }
    }
  }
}

// bf16 weights (bf16 K/V cache by default): CUDA vs the CPU backend, same configuration. The
// weights are the same bits; the CPU may also round activations to bf16 where its bf16 kernels do
// (cpu::linear's bf16 GEMV on AVX-512 BF16), so the logits are compared at the bf16 tolerance of
// gpt_kv_cache_test.cpp (1e-2 of their scale) and the greedy tokens must be the same.
TEST_F(GptCudaTest, Bf16WeightsAndKvCacheMatchTheCpuBackend) {
  const std::vector<float> hidden = m_->f32("clip.last_hidden_state");
  const std::vector<float> bbox = m_->f32("gpt.bbox");
  const std::vector<int32_t> ids = m_->i32("gpt.teacher_ids");
  auto gpu = GptSession::create(*m_->cuda05_bf16, 2, 9).value();
  auto cpu = GptSession::create(*m_->cpu05_bf16, 2, 9).value();
  ASSERT_EQ(gpu->kv_dtype(), DType::kBF16);
  TESSERA_ASSERT_OK(gpu->set_condition(2, hidden.data(), bbox.data()));
  TESSERA_ASSERT_OK(cpu->set_condition(2, hidden.data(), bbox.data()));
  std::vector<float> lg(2 * kVocab), lc(2 * kVocab);
  const int32_t bos[2] = {ids[0], ids[9]};
  TESSERA_ASSERT_OK(gpu->prefill(bos, lg.data()));
  TESSERA_ASSERT_OK(cpu->prefill(bos, lc.data()));
  EXPECT_TRUE(close_rel(lg, lc, 1e-2));
  for (int step = 1; step <= 8; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int32_t next[2] = {ids[step], ids[9 + step]};
    TESSERA_ASSERT_OK(gpu->decode(next, lg.data()));
    TESSERA_ASSERT_OK(cpu->decode(next, lc.data()));
    EXPECT_TRUE(close_rel(lg, lc, 1e-2));
  }
  // Reuse of the unconditional row's cached (bf16) condition K/V on the next prefill.
  TESSERA_ASSERT_OK(gpu->set_condition(2, hidden.data(), bbox.data()));
  TESSERA_ASSERT_OK(cpu->set_condition(2, hidden.data(), bbox.data()));
  TESSERA_ASSERT_OK(gpu->prefill(bos, lg.data()));
  TESSERA_ASSERT_OK(cpu->prefill(bos, lc.data()));
  EXPECT_TRUE(close_rel(lg, lc, 1e-2));

  const ConditionInputs in = test::guided_condition(hidden, bbox);
  auto gen = ShapeGenerator::create(*m_->cuda05_bf16).value();
  auto cpu_gen = ShapeGenerator::create(*m_->cpu05_bf16).value();
  auto a = gen->generate(in, GenerateOptions());
  auto b = cpu_gen->generate(in, GenerateOptions());
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(*a, *b);
}

}  // namespace
}  // namespace tessera::shape
