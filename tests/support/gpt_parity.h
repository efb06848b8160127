// The Cube GPT's PyTorch parity fixtures (tests/fixtures/parity/README.md) as the GPT tests read
// them on either backend (tests/engine/shape/gpt_test.cpp on the CPU, gpt_cuda_gpu_test.cpp on
// CUDA), and the greedy-generation checks both make against them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/shape/generator.h"
#include "engine/shape/gpt.h"
#include "kernels/backend.h"

namespace tessera::test {

// The reference's tensors (expected.safetensors), read by name.
struct ParityTensors {
  SafeTensors expected;

  std::vector<float> f32(const std::string& name) const;
  std::vector<int32_t> i32(const std::string& name) const;
};

// The fixture's GPTs on the CPU backend, loaded once per test binary (and never freed): v0.5 as
// stored (f32) and converted to bf16 at load, v0.1 as stored; num_latents 16 (the fixture's token
// count). With the reference's tensors.
struct ParityGpts : ParityTensors {
  SafeTensors gpt05, gpt01, tokenizer;
  std::unique_ptr<kernels::Backend> backend;
  shape::NormalizedCodebook codebook;
  std::unique_ptr<shape::CubeGpt> v05, v05_bf16, v01;
};
ParityGpts& parity_gpts();

// The condition of the guided greedy fixtures: the prompt's and the empty prompt's rows of
// clip.last_hidden_state ([2, 77, 32]) and gpt.bbox's first row. Points into `hidden`.
shape::ConditionInputs guided_condition(const std::vector<float>& hidden,
                                        const std::vector<float>& bbox);

// One greedy generation with guidance under `options` (KV cache on or off, trace, ...): the tokens
// must be the reference's gpt.greedy_tokens and the guided logits gpt.greedy_logits. The tokens go
// to `tokens` (may be null); a generation error is a fatal failure (ASSERT_NO_FATAL_FAILURE).
void expect_reference_greedy(shape::ShapeGenerator& gen, const shape::ConditionInputs& in,
                             shape::GenerateOptions options, const ParityTensors& reference,
                             const shape::TokenCallback& on_token = {},
                             std::vector<int32_t>* tokens = nullptr);

// The other greedy fixtures: `gen05` (a v0.5 model) without guidance, from the condition row only,
// gives gpt.greedy_tokens_noguidance; `model01` (v0.1, no bbox) with guidance gives
// gpt_v01.greedy_tokens.
void expect_unguided_and_v01_greedy(shape::ShapeGenerator& gen05, const shape::CubeGpt& model01,
                                    const shape::ConditionInputs& in,
                                    const ParityTensors& reference);

}  // namespace tessera::test
