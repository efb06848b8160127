// ShapeGenerator: the token loop of the Cube 3D GPT: condition -> num_tokens shape codes, for one
// generation or several decoded together (generate_candidates: variations and batches).
//
// Per step i of N: logits of the current position for the batch [cond ; uncond], restricted to the
// codes [0, codebook_size), mixed with the reference's decaying classifier-free guidance
//   l = (1 + g) * l_cond - g * l_uncond,  g = guidance * (N - i) / N,
// then the sampler picks the code, which both rows take as their next input. With guidance 0
// (GenerateOptions::sampling.guidance) only the conditional row runs (batch 1).
//
// KV cache on (default): one prefill (condition + BOS), then one decode step per token, each
// processing one token per row (the GEMV path). KV cache off (the `--no-kv-cache` baseline):
// every step recomputes the whole sequence. Both give the same tokens.
//
// Timings go to GenerateOptions::trace (if given): "gpt.condition" (text/bbox projection),
// "gpt.prefill" (step 0), "gpt.decode" (every later step; its mean is the TPOT, samples kept).
// The token callback runs on the calling thread after each token with (index, id, milliseconds of
// that step). Cancellation: the flag is checked before every step; a set flag returns kCancelled.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "core/trace.h"
#include "engine/shape/gpt.h"
#include "engine/shape/sampler.h"

namespace tessera::shape {

struct ConditionInputs {
  // CLIP last hidden state of the prompt, [77, text_embed_dim] host f32. Required.
  const float* cond_hidden = nullptr;
  // CLIP last hidden state of the empty prompt (the unconditional branch), same shape. Required
  // when the guidance is > 0.
  const float* uncond_hidden = nullptr;
  // v0.5 bounding box (x, y, z) of the conditional row; none = (0, 0, 0). The unconditional row
  // always gets (0, 0, 0). Ignored by v0.1 checkpoints.
  std::optional<std::array<float, 3>> bbox;
};

// The number of tokens a generation makes: `requested` when > 0, else the model's num_latents (the
// one place that spells the "0 means all" rule; the runtime re-exports it).
inline int64_t tokens_to_generate(int64_t requested, int64_t num_latents) {
  return requested > 0 ? requested : num_latents;
}

struct GenerateOptions {
  int64_t num_tokens = 0;  // 0: the model's num_latents
  bool use_kv_cache = true;
  // After the prefill, CubeGpt::release_condition_pages (the condition stream's weights are not
  // read again until the next prefill; ShapePipeline sets this, PipelineOptions says why).
  bool release_condition_pages = false;
  // With the KV cache on a backend that can record (CUDA): record one decode step (GPT step +
  // token choice) after an eager warm-up step and replay it for every further token, the tokens
  // reaching the host a few steps behind through a ring in host-visible memory. false: every op
  // launched every step (the "eager" mode the benchmarks compare against).
  bool use_graphs = true;
  SamplingSettings sampling;                  // the reference's by default: greedy, guidance 3
  const std::atomic<bool>* cancel = nullptr;  // may be null
  Trace* trace = nullptr;                     // may be null
  // Test hook (may be null): receives the guided, restricted logits of every step appended
  // ([num_tokens, codebook_size]).
  std::vector<float>* guided_logits = nullptr;
};

using TokenCallback = std::function<void(int64_t index, int32_t id, double ms)>;

// One generation of a batch (generate_candidates): which prompt it continues and its sampler's
// seed (GenerateOptions::sampling.seed is not used there).
struct CandidateSpec {
  int64_t prompt = 0;  // index into the prompts
  uint64_t seed = 0;
};
// (candidate, token index, id, milliseconds of that step, shared by the step's candidates).
using CandidateTokenCallback =
    std::function<void(int64_t candidate, int64_t index, int32_t id, double ms)>;

// The token choice of a generation of `total_steps` tokens of model config `c` (the guidance mix
// over the [cond ; uncond] logits rows when guided), as Backend::choose_token takes it.
kernels::TokenChoice make_token_choice(const GptConfig& c, bool guided, int64_t total_steps,
                                       const SamplingSettings& sampling);
// A device-resident loop's counters in backend memory: *step = first (int64), rng = the four
// xoshiro256** words of Xoshiro256(seed).
Status reset_resident_state(kernels::Backend& be, void* step, void* rng, int64_t first,
                            uint64_t seed);

class ShapeGenerator {
 public:
  // Preallocates a session for max_candidates generations at once (2 rows each with guidance)
  // and max_tokens shape positions (0: the model's num_latents). The model must outlive the
  // generator.
  static Expected<std::unique_ptr<ShapeGenerator>> create(const CubeGpt& model,
                                                          int64_t max_tokens = 0,
                                                          int64_t max_candidates = 1);
  int64_t max_candidates() const { return max_candidates_; }

  // Generates options.num_tokens codes. Errors: invalid options (naming them), missing inputs,
  // non-finite logits (naming the step), kCancelled.
  Expected<std::vector<int32_t>> generate(const ConditionInputs& inputs,
                                          const GenerateOptions& options,
                                          const TokenCallback& on_token = {});

  // Several generations in one KV-cached decode (variations, batches): candidate j continues
  // prompts[candidates[j].prompt] and samples with its own seed; the other options are shared.
  // Each prompt is prefilled once, with the rows of a single generation (its cache rows copied to
  // each of its candidates), and every decode step runs all candidates' rows together: the weights
  // are read once per step for all of them. Batch invariance: candidate j's tokens are exactly
  // those of generate() with its prompt and seed, whatever the other candidates or their number
  // (prefill per prompt, condition stream per row, GEMV kernels whose per-row order of additions
  // does not depend on the rows: tests/engine/shape/candidates_test.cpp; on CUDA the GEMV serves
  // up to 16 rows for the same reason: CudaLinear.GemvIsBatchInvariant). The uncached baseline
  // (use_kv_cache = false) recomputes rows x tokens at once: batch-invariant on the CPU, whose
  // linear layers are per-row invariant, not on CUDA, whose GEMM (cuBLAS / tiled) sums in an order
  // that depends on the row count. Rows: candidate j owns rows [j * r, (j + 1) * r), r = 2 with
  // guidance ([cond ; uncond]) else 1.
  // Errors: as generate(), plus no candidates, more than max_candidates(), a prompt index out of
  // range (naming the candidate). guided_logits, if set, receives candidate 0's.
  Expected<std::vector<std::vector<int32_t>>> generate_candidates(
      const std::vector<ConditionInputs>& prompts, const std::vector<CandidateSpec>& candidates,
      const GenerateOptions& options, const CandidateTokenCallback& on_token = {});

  GptSession& session() { return *session_; }

 private:
  ShapeGenerator() = default;
  // Recorded steps launched ahead of the host's reads of the token ring.
  static constexpr int64_t kRingLag = 4;
  // The KV-cache loop with the token choice on the backend (Backend::choose_token): ids, position,
  // RNG state and step counter stay in backend memory and the tokens come back through a ring
  // buffer there; the host only reads the ring. Used when the backend has device-resident ops and
  // no guided_logits hook is set; same tokens as the host loop.
  // Called after the prefill (the session holds every candidate's rows, logits_ their logits).
  Expected<std::vector<std::vector<int32_t>>> generate_resident(
      int64_t n, bool guided, const std::vector<CandidateSpec>& candidates, double prefill_ms,
      const GenerateOptions& options, const CandidateTokenCallback& on_token);
  // Prefills each prompt of `candidates` once and copies its rows to its candidates' rows; the
  // prefill logits of every row land in logits_.
  Status prefill_candidates(const std::vector<ConditionInputs>& prompts,
                            const std::vector<CandidateSpec>& candidates, bool guided,
                            const GenerateOptions& options);
  const CubeGpt* model_ = nullptr;
  int64_t max_candidates_ = 1;
  std::unique_ptr<GptSession> session_;
  // Host scratch sized at create() for R = 2 * max_candidates rows: logits [R, vocab], token
  // history [R, max_tokens], condition inputs [R, 77, text_dim], guided logits [codebook].
  std::vector<float> logits_, hidden_, guided_;
  std::vector<int32_t> history_, step_ids_;
  // generate_resident's backend memory: step counter, RNG words, token ring (max_tokens entries,
  // host-visible).
  kernels::DeviceBuffer step_buf_, rng_buf_, ring_buf_;
};

}  // namespace tessera::shape
