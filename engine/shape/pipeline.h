// ShapePipeline: a loaded Cube 3D-compatible model directory, prompt -> shape tokens -> mesh.
//
// Owns, on one kernels::Backend: the opened model directory (engine/shape/model_dir.h), the CLIP
// tokenizer and text encoder, the Cube GPT with its ShapeGenerator (KV cache preallocated for
// num_latents tokens) and the shape decoder. Stages, each a method, so callers (Session, CLI,
// benchmarks) can time, stream and cancel between them:
//   1. encode_prompt: CLIP over 77 positions for the prompt (cond) and for "" (uncond, the
//      classifier-free-guidance branch), padded with CLIP's EOS and run with the tokenizer's
//      attention mask (padded keys hidden), as docs/cube3d.md says. The empty prompt is valid (it
//      is the unconditional branch itself). A prompt longer than 77 CLIP tokens is truncated to
//      BOS + its first 75 tokens + EOS (EncodedPrompt::truncated says so). There is no "bad"
//      prompt: invalid UTF-8 is replaced by U+FFFD by the tokenizer.
//   2. generate: the token loop (engine/shape/generator.h), options below.
//   3. decode_latents / extract_mesh / tokens_to_mesh: token ids -> latents -> coarse-to-fine
//      occupancy extraction on a lattice of R = 2^k + 1 points per axis -> clean-up -> Mesh.
//
// Token prefixes (live preview, truncated token files): fewer than num_latents ids are completed
// to num_latents with the fill token: model.json's `tokens.fill_token_id` when the model directory
// has a model.json with that field (tessera-tiny trains its last code as a learned "fill" code),
// else code 0 (the real Cube 3D checkpoints have no such code; code 0 is as neutral as any, and the
// decoder needs a full sequence because its positional encodings cover num_latents positions).
//
// Timings go to the Trace passed in (may be null), names in ms (see kTrace* below); the generator
// adds "gpt.condition", "gpt.prefill" and "gpt.decode" (one sample per token: its mean is TPOT).
//
// Errors come back as Status: the model directory's (missing file, wrong architecture, mismatched
// files: see model_dir.h), NaN/inf in the weights (kCorruptData naming the tensor, when
// PipelineOptions::check_finite), non-finite logits during generation (naming the step),
// out-of-range or too many token ids (kInvalidArgument naming the position), a field with no
// surface (kNotFound, "no surface ..."), and kCancelled when the cancel flag was set.
//
// Thread safety: none. One pipeline serves one thread at a time (runtime::Session gives it a worker
// thread); the methods reuse preallocated buffers.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/trace.h"
#include "engine/weights/weight_store.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/mesh.h"
#include "engine/shape/generator.h"
#include "engine/shape/gpt.h"
#include "engine/shape/model_dir.h"
#include "engine/shape/sampler.h"
#include "engine/shape/shape_decoder.h"
#include "engine/text/clip_text_encoder.h"
#include "engine/text/clip_tokenizer.h"
#include "kernels/backend.h"

namespace tessera::shape {

// Trace names the pipeline records (milliseconds).
inline constexpr const char* kTraceText = "text";                   // CLIP, cond + uncond
inline constexpr const char* kTraceLatentDecode = "latent_decode";  // ids -> latents
inline constexpr const char* kTraceExtraction = "extraction";       // occupancy + marching cubes
inline constexpr const char* kTraceCleanup = "cleanup";             // weld, components, normals

struct PipelineOptions {
  // f32: weights memory-mapped as stored; bf16: matrices converted once at load (half the bytes
  // read per token).
  WeightFormat weights = WeightFormat::kF32;
  // The shape GPT's linear layers in int8 (GptLoadOptions::int8), whatever `weights` says.
  bool gpt_int8 = false;
  // Scan every weight for NaN / inf at load (about 1 s per 4 GB of weights on 2 cores). Off, a
  // NaN still never becomes a mesh: it shows up as non-finite logits, reported by the generator
  // or by extraction.
  bool check_finite = true;
  // See ModelDirOptions::clip_vocab_fallback.
  std::string clip_vocab_fallback;
  // Points per occupancy chunk of the shape decoder (buffers are sized for this at load).
  int64_t occupancy_chunk = ShapeDecoder::kDefaultOccupancyChunk;
  // The backend a pipeline creates for itself (load() without a backend; kernels/backend.h,
  // make_backend): kCpu; kCuda (load fails, saying why, when there is no usable GPU); kAuto (CUDA
  // when a usable GPU exists and the models fit in its memory, else the CPU, silently:
  // backend_note() says why).
  kernels::DeviceChoice device = kernels::DeviceChoice::kCpu;
  // Resident memory by phase: weights used in place from their memory-mapped files (an int8 or
  // bf16 GPT on the CPU, f32 CLIP and shape tokenizer files run in f32) leave resident memory when
  // the job is done with them: the text encoder's after each encoding, the GPT's condition stream
  // after each prefill and the whole GPT after each decode, the shape tokenizer's after each
  // extraction (CubeGpt::release_condition_pages, SafeTensors::drop_all_pages). The next use reads
  // them again from the page cache (bench/RESULTS.md, "int8 weights (CPU)", measures the cost).
  // Weights converted at load or copied to a GPU are not affected.
  bool release_idle_pages = true;
};

// CLIP last hidden states of a prompt and of the empty prompt, host f32 [text_len, width] each.
struct EncodedPrompt {
  std::vector<float> cond;
  std::vector<float> uncond;
  int prompt_tokens = 0;   // CLIP tokens of the prompt, BOS and EOS included, before truncation
  bool truncated = false;  // prompt_tokens > 77
  // Tokens left out of the shape condition: the diffusion vocabulary extension's colour / material
  // / background words (text_encoder/extension.json), which the shape GPT never trained on, and the
  // articles they leave dangling. They still reach the image model. prompt_tokens counts after
  // this.
  int image_only_tokens = 0;
};

struct GenerationOptions {
  // The reference's by default: greedy, guidance 3 (0: the conditional row only).
  SamplingSettings sampling;
  // v0.5 bounding box (x, y, z; proportions); none = (0, 0, 0). Ignored (not an error) on v0.1
  // checkpoints, which have no box token.
  std::optional<std::array<float, 3>> bbox;
  bool use_kv_cache = true;  // false: recompute the whole sequence per step (the baseline)
  // CUDA: replay the recorded decode step (GenerateOptions::use_graphs); false: eager launches.
  bool use_graphs = true;
  int64_t num_tokens = 0;  // 0: the model's num_latents; fewer gives a prefix
};

struct MeshOptions {
  // Lattice points per axis of the finest level, R = 2^k + 1 with k in [1, 10] (257: the
  // reference's default; 33 or 65 for previews). 0: the model's default (model.json
  // defaults.resolution, else kReferenceResolution).
  int resolution = 0;
  // First lattice of the coarse-to-fine search: 2^coarse_base + 1 points per axis (clamped to
  // the resolution; 0: the model's, model.json defaults.coarse_resolution, else
  // kDefaultCoarseBase), and coarse cells whose corners all agree but come within
  // near_surface_logit of the surface level (logit units) are refined too (negative: the model's,
  // defaults.near_surface_logit, else 0; mesh::ExtractionOptions). The margin is in the model's
  // logit units, so it belongs to the model card: tessera-tiny's (17, 1.0) were chosen on its 91
  // first prompts (tools/train/first_prompts.tsv, greedy) against the dense lattice: every mesh
  // kept its triangle count at 65 and 33, with 22.8k queries per shape at 65 (33^3 and no margin:
  // 47.9k) and 8.1k at 33 (35.9k); 17^3 without the margin lost thin walls on 2 shapes, 9^3 on 5.
  // On a field of steep logits (bench shape's analytic sphere, 10 logits per unit) the same
  // margin multiplies the queries at 257 by ~6: a model without a card keeps (33, none).
  int coarse_base = 0;
  float near_surface_logit = -1.0f;
  mesh::CleanupOptions cleanup;
};

// The Cube 3D reference's extraction resolution (2^8 + 1), the default for models without a card.
inline constexpr int kReferenceResolution = 257;
// The coarse-to-fine search's first lattice for models without a card: 2^5 + 1.
inline constexpr int kDefaultCoarseBase = 5;

// Shape token ids a decoder with `num_codes` codes and `num_latents` positions
// accepts: 1..num_latents ids, each in [0, num_codes); kInvalidArgument naming the first bad
// position otherwise.
Status validate_token_ids(const std::vector<int32_t>& ids, int64_t num_latents, int64_t num_codes);

// Checks that `resolution` is 2^k + 1 with k in [1, 10] and returns k; the message names the value.
Expected<int> resolution_base(int resolution);

class ShapePipeline {
 public:
  // Opens `model_dir` and loads every model on `backend` (null: a backend the pipeline creates and
  // owns, chosen by options.device; otherwise not owned and it must outlive the pipeline). With
  // kAuto, a GPU that runs out of memory while the models load is given up for the CPU (the
  // reason goes to backend_note()); any other error is returned.
  static Expected<std::unique_ptr<ShapePipeline>> load(const std::string& model_dir,
                                                       const PipelineOptions& options = {},
                                                       kernels::Backend* backend = nullptr);
  ~ShapePipeline();
  ShapePipeline(const ShapePipeline&) = delete;
  ShapePipeline& operator=(const ShapePipeline&) = delete;

  // The CLIP ids the shape GPT is conditioned on: [BOS, words..., EOS] of `text` without the
  // image-only words of text_encoder/extension.json (when the folder has one) and the articles
  // they leave at the end, so "a shiny red torus on a dark background" conditions the shape like
  // "a torus" (tessera-tiny's shape match fell from 0.86 to 0.70-0.83 with a colour word in the
  // prompt). Not truncated. `dropped` (may be null) receives how many tokens were left out.
  std::vector<int32_t> shape_prompt_ids(std::string_view text, int* dropped = nullptr) const;

  // Stage 1. `cancel` may be null; it is checked before the encoder runs.
  Expected<EncodedPrompt> encode_prompt(std::string_view prompt, Trace* trace = nullptr,
                                        const std::atomic<bool>* cancel = nullptr);

  // Stage 2: num_tokens codes in [0, codebook_size). on_token runs on this thread after every
  // token (index, id, ms of that step). Errors: invalid options (naming them), non-finite logits,
  // kCancelled (checked before every step).
  Expected<std::vector<int32_t>> generate(const EncodedPrompt& prompt,
                                          const GenerationOptions& options,
                                          const TokenCallback& on_token = {},
                                          Trace* trace = nullptr,
                                          const std::atomic<bool>* cancel = nullptr);

  // Stage 2 for several candidates in one decode (variations, batches): candidate j continues
  // *prompts[candidates[j].prompt] with seed candidates[j].seed (options.sampling.seed unused),
  // the rest of `options` shared; ShapeGenerator::generate_candidates says how, and why candidate
  // j's tokens equal generate()'s for its prompt and seed. At most kMaxCandidates; the generator
  // grows its cache to the largest count asked for so far. on_token: (candidate, index, id, ms).
  static constexpr int64_t kMaxCandidates = 8;
  Expected<std::vector<std::vector<int32_t>>> generate_candidates(
      const std::vector<const EncodedPrompt*>& prompts,
      const std::vector<CandidateSpec>& candidates, const GenerationOptions& options,
      const CandidateTokenCallback& on_token = {}, Trace* trace = nullptr,
      const std::atomic<bool>* cancel = nullptr);
  // Stage 3a: ids (1 <= size <= num_latents, each in [0, codebook_size)) filled up to num_latents
  // with fill_token_id(), decoded to latents [num_latents, width] and made current for
  // extract_mesh. Errors name the offending position.
  Status decode_latents(const std::vector<int32_t>& ids, Trace* trace = nullptr);
  // Stage 3b: coarse-to-fine extraction of the current latents, then clean-up. `stats` may be
  // null. Errors: bad resolution, kNotFound "no surface" (the field never crosses 0), a
  // non-finite logit, kCancelled (checked before every occupancy batch).
  Expected<mesh::Mesh> extract_mesh(const MeshOptions& options, Trace* trace = nullptr,
                                    const std::atomic<bool>* cancel = nullptr,
                                    mesh::ExtractionStats* stats = nullptr);
  // extract_mesh without the clean-up (options.cleanup unused): the caller runs
  // mesh::cleanup(mesh, options.cleanup) itself, e.g. on another thread while the decoder extracts
  // the next shape (the clean-up does not touch the pipeline).
  Expected<mesh::Mesh> extract_surface(const MeshOptions& options, Trace* trace = nullptr,
                                       const std::atomic<bool>* cancel = nullptr,
                                       mesh::ExtractionStats* stats = nullptr);
  // decode_latents + extract_mesh.
  Expected<mesh::Mesh> tokens_to_mesh(const std::vector<int32_t>& ids, const MeshOptions& options,
                                      Trace* trace = nullptr,
                                      const std::atomic<bool>* cancel = nullptr,
                                      mesh::ExtractionStats* stats = nullptr);

  // Checks ids against the model (count and range) without decoding; messages name the position.
  Status validate_tokens(const std::vector<int32_t>& ids) const;
  // Codes of the shape decoder's codebook (what decode_latents accepts).
  int64_t decoder_codes() const { return decoder_->config().num_codes; }

  const GptConfig& gpt_config() const { return gpt_->config(); }
  const ShapeDecoderConfig& decoder_config() const { return decoder_->config(); }
  int64_t num_latents() const { return decoder_->config().num_latents; }
  int64_t codebook_size() const { return gpt_->config().codebook_size; }
  int32_t fill_token_id() const { return fill_token_id_; }
  // Final-mesh resolution used when MeshOptions::resolution is 0: model.json's
  // defaults.resolution (tessera-tiny: its training grid's scale), else kReferenceResolution.
  int default_resolution() const { return default_resolution_; }
  // `requested` unless it is 0 (then default_resolution()); not validated.
  int resolve_resolution(int requested) const {
    return requested == 0 ? default_resolution_ : requested;
  }
  // Prompts the model is known to answer (model.json's example_prompts, else "a <family>" for each
  // of its families; empty for models without a card, such as the released Cube 3D folders).
  const std::vector<std::string>& example_prompts() const { return example_prompts_; }
  // True when fill_token_id() came from model.json (false: the code-0 default).
  bool has_learned_fill_token() const { return learned_fill_; }
  const ModelPaths& paths() const { return model_->paths; }
  const CubeGpt& gpt() const { return *gpt_; }
  kernels::Backend& backend() const { return *backend_; }
  // Why an owned backend is not the one options.device asked for first (kAuto ended on the CPU),
  // one line for verbose output; empty otherwise.
  const std::string& backend_note() const { return backend_note_; }

 private:
  ShapePipeline() = default;
  // load() on `external` (not owned) or, when it is null, on `owned`.
  static Expected<std::unique_ptr<ShapePipeline>> load_on(const std::string& model_dir,
                                                          const PipelineOptions& options,
                                                          kernels::Backend* external,
                                                          std::unique_ptr<kernels::Backend> owned,
                                                          std::string note);

  std::unique_ptr<kernels::Backend> owned_backend_;
  kernels::Backend* backend_ = nullptr;
  std::string backend_note_;
  // Heap-allocated and never moved: the models hold views of its memory-mapped files.
  std::unique_ptr<ModelDir> model_;
  std::optional<text::ClipTokenizer> tokenizer_;
  std::vector<int32_t> image_only_ids_;  // sorted; from text_encoder/extension.json
  std::vector<int32_t> article_ids_;
  std::optional<text::ClipTextEncoder> text_encoder_;
  std::unique_ptr<ShapeDecoder> decoder_;
  std::unique_ptr<CubeGpt> gpt_;
  std::unique_ptr<ShapeGenerator> generator_;
  int32_t fill_token_id_ = 0;
  bool learned_fill_ = false;
  int default_resolution_ = kReferenceResolution;
  int default_coarse_base_ = kDefaultCoarseBase;
  float default_near_surface_logit_ = 0.0f;
  std::vector<std::string> example_prompts_;
  // Scratch: padded ids / length for CLIP [77] / [1], filled ids and latents [num_latents(,
  // width)].
  std::vector<int32_t> clip_ids_, clip_lengths_, filled_ids_;
  std::vector<float> latents_;
  // CLIP hidden states of "" (computed on the first encode_prompt, then reused).
  std::vector<float> uncond_cache_;
  bool latents_ready_ = false;
  bool release_idle_pages_ = true;  // PipelineOptions::release_idle_pages
};

}  // namespace tessera::shape
