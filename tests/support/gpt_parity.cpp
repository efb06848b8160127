#include "tests/support/gpt_parity.h"

#include <gtest/gtest.h>

#include <array>
#include <utility>

#include "tests/support/kernel_test_util.h"

namespace tessera::test {

std::vector<float> ParityTensors::f32(const std::string& name) const {
  return expected.to_f32(name).value();
}

std::vector<int32_t> ParityTensors::i32(const std::string& name) const {
  TensorView v = expected.view(name).value();
  const auto* p = v.as<const int32_t>();
  return std::vector<int32_t>(p, p + v.numel());
}

ParityGpts& parity_gpts() {
  static ParityGpts* m = [] {
    const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/parity/";
    auto* x = new ParityGpts();
    x->expected = SafeTensors::open(dir + "expected.safetensors").value();
    x->gpt05 = SafeTensors::open(dir + "gpt_v05/shape_gpt.safetensors").value();
    x->gpt01 = SafeTensors::open(dir + "gpt_v01/shape_gpt.safetensors").value();
    x->tokenizer = SafeTensors::open(dir + "shape_tokenizer.safetensors").value();
    x->backend = kernels::make_cpu_backend();
    x->codebook = shape::load_normalized_codebook(x->tokenizer).value();
    x->v05 = shape::CubeGpt::load(x->gpt05, x->codebook, *x->backend).value();
    shape::GptLoadOptions bf16;
    bf16.bf16 = true;
    x->v05_bf16 = shape::CubeGpt::load(x->gpt05, x->codebook, *x->backend, bf16).value();
    x->v01 = shape::CubeGpt::load(x->gpt01, x->codebook, *x->backend).value();
    for (shape::CubeGpt* model : {x->v05.get(), x->v05_bf16.get(), x->v01.get()}) {
      model->set_num_latents(16);
    }
    return x;
  }();
  return *m;
}

shape::ConditionInputs guided_condition(const std::vector<float>& hidden,
                                        const std::vector<float>& bbox) {
  shape::ConditionInputs in;
  in.cond_hidden = hidden.data();
  in.uncond_hidden = hidden.data() + 77 * 32;
  in.bbox = std::array<float, 3>{bbox[0], bbox[1], bbox[2]};
  return in;
}

void expect_reference_greedy(shape::ShapeGenerator& gen, const shape::ConditionInputs& in,
                             shape::GenerateOptions options, const ParityTensors& reference,
                             const shape::TokenCallback& on_token, std::vector<int32_t>* tokens) {
  std::vector<float> guided;
  options.guided_logits = &guided;
  Expected<std::vector<int32_t>> made = gen.generate(in, options, on_token);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(*made, reference.i32("gpt.greedy_tokens"));
  EXPECT_TRUE(close_rel(guided, reference.f32("gpt.greedy_logits")));
  if (tokens != nullptr) *tokens = std::move(made).value();
}

void expect_unguided_and_v01_greedy(shape::ShapeGenerator& gen05, const shape::CubeGpt& model01,
                                    const shape::ConditionInputs& in,
                                    const ParityTensors& reference) {
  shape::GenerateOptions no_guidance;
  no_guidance.sampling.guidance = 0.0f;
  shape::ConditionInputs cond_only = in;
  cond_only.uncond_hidden = nullptr;
  auto tokens = gen05.generate(cond_only, no_guidance);
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_EQ(*tokens, reference.i32("gpt.greedy_tokens_noguidance"));

  auto gen01 = shape::ShapeGenerator::create(model01).value();
  shape::ConditionInputs in01 = in;
  in01.bbox.reset();
  tokens = gen01->generate(in01, shape::GenerateOptions());
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_EQ(*tokens, reference.i32("gpt_v01.greedy_tokens"));
}

}  // namespace tessera::test
