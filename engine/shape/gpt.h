// CubeGpt: the Cube 3D text-to-shape GPT ("DualStreamRoformer"), and GptSession: its preallocated
// KV cache and activations for one generation at a time.
//
// Computation (docs/cube3d.md; oracle: tools/tessera_ref/cube_gpt.py):
//   condition c = text_proj(CLIP last hidden state [77]) (++ bbox_proj(bbox) on v0.5), S tokens;
//   shape stream x = wte[ids], ids[0] = BOS;
//   n_dual dual-stream blocks: per stream non-affine LayerNorm, q/k/v projections, per-head q/k
//     RMSNorm, interleaved RoPE (condition positions 0, shape positions 0..L-1), ONE causal
//     attention over [c ; x], per-stream c_proj + SwiGLU. The last dual block is "condition pre
//     only" (the condition gives keys/values only and ends there);
//   n_single single-stream blocks (causal self-attention over x), ln_f, lm_head -> logits [vocab].
//
// Memory: weights are views of the memory-mapped checkpoint (f32 or bf16 files, zero-copy on the
// CPU backend) unless GptLoadOptions::bf16 asks to convert f32 weights to bf16 once at load (then
// the model owns them). The token table is always owned: rows 0..codebook-1 are replaced at load by
// shape_proj(normalized codebook), the step the reference performs.
//
// Errors come back as Status/Expected; messages name the file and the tensor.
//
// Where it lives: gpt_load.cpp (the codebook, checking and converting the checkpoint),
// gpt_session.cpp (a session's buffers, the condition, the pieces both passes share),
// gpt_prefill.cpp (the full passes: prefill, forward_full), gpt_decode.cpp (the KV-cached decode
// step and the rows of several generations).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "engine/shape/gpt_config.h"
#include "kernels/backend.h"

namespace tessera::shape {

// The shape tokenizer's normalized codebook, row-major [rows, dim], f32 on the host:
// RMSNorm(codebook.weight * cb_weight + cb_bias) * norm.weight, eps 1e-5, computed in f32.
struct NormalizedCodebook {
  int64_t rows = 0;
  int64_t dim = 0;
  std::vector<float> values;
};

// Reads bottleneck.block.{codebook.weight, cb_weight, cb_bias, norm.weight} from the shape
// tokenizer file and normalizes the codebook. Errors name the missing or mis-shaped tensor.
Expected<NormalizedCodebook> load_normalized_codebook(const SafeTensors& tokenizer);
// The same computation from raw arrays (codebook [rows, dim], the three vectors [dim]).
NormalizedCodebook normalize_codebook(const float* codebook, int64_t rows, int64_t dim,
                                      const float* cb_weight, const float* cb_bias,
                                      const float* norm_weight, float eps = 1e-5f);

struct GptLoadOptions {
  // Convert f32 weights to bf16 once at load (halves the bytes read per decoded token). bf16 files
  // stay bf16 either way; f16 files are converted (to f32, or to bf16 when this is set).
  bool bf16 = false;
  // Quantize the linear layers' matrices (attention, MLP, projections, lm_head) to int8 once at
  // load (kernels/int8.h: a scale per group of 128/64/32 along the input; matrices whose rows are
  // not a multiple of 32 long stay as they are); embeddings and norms stay as they are. A file
  // quantized by `tessera quantize` (I8 matrices with NAME.weight_scale beside them) loads as int8
  // whatever this says. CPU backend only for now.
  bool int8 = false;
};

namespace detail {
struct GptLinear {
  kernels::Weight w;
  const float* bias = nullptr;  // null: no bias
};
struct GptPreAttention {
  bool query = true;  // false: keys/values only (condition stream of the last dual block)
  GptLinear q, k, v;  // q/k are the halves of c_qk (or k is c_k, with bias)
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
};
struct GptPostAttention {
  GptLinear c_proj, gate, up, down;
};
struct GptDualBlock {
  bool cond_pre_only = false;
  GptPreAttention pre_x, pre_c;
  GptPostAttention post_1, post_2;  // post_2 unused when cond_pre_only
};
struct GptSingleBlock {
  GptPreAttention attn;
  GptPostAttention post;  // attn.c_proj + mlp
};
struct GptWeights {
  GptLinear text_proj, bbox_proj;  // bbox_proj only with use_bbox
  kernels::Weight wte;             // [vocab, n_embd], codebook rows installed
  kernels::Weight lm_head;         // [vocab, n_embd], no bias
  std::vector<GptDualBlock> dual;
  std::vector<GptSingleBlock> single;
};
}  // namespace detail

class CubeGpt {
 public:
  // Loads the GPT from `file` (which must outlive the model: weights may be views of its memory)
  // on `backend` (which must outlive the model). `codebook` must have config.codebook_size rows of
  // config.shape_embed_dim values (error naming both sizes otherwise: GPT and shape tokenizer do
  // not belong together). Every tensor is checked for name, dtype (F32/BF16/F16; I8 for a linear
  // matrix with its scales, kernels/int8.h) and shape.
  static Expected<std::unique_ptr<CubeGpt>> load(const SafeTensors& file,
                                                 const NormalizedCodebook& codebook,
                                                 kernels::Backend& backend,
                                                 const GptLoadOptions& options = {});
  ~CubeGpt();
  CubeGpt(const CubeGpt&) = delete;
  CubeGpt& operator=(const CubeGpt&) = delete;

  const GptConfig& config() const { return config_; }
  // Tokens per shape come from the shape tokenizer (decoder.positional_encodings rows).
  void set_num_latents(int64_t n) { config_.num_latents = n; }
  kernels::Backend& backend() const { return *backend_; }
  const detail::GptWeights& weights() const { return weights_; }
  // Storage type of the large matrices (kF32 or kBF16); the linear layers' matrices are int8
  // instead when int8_weights() (the token table stays in weight_dtype()).
  DType weight_dtype() const { return weight_dtype_; }
  bool int8_weights() const { return int8_weights_; }
  // Bytes of weights one decode step reads (config().decode_weight_elements() at weight_dtype()).
  int64_t decode_weight_bytes() const;

  // Resident memory between the phases of a job. Weights used in place from the memory-mapped file
  // (a quantized or bf16 file on the CPU backend) count in the process's resident memory once
  // touched. These drop the mapped pages of the matrices only the prefill reads (the condition
  // stream: text/bbox projections, pre_c and post_2 of the dual blocks, about half of Cube 3D's
  // weights), or of the whole file. Nothing else changes: the next use reads the pages again, from
  // the page cache when the memory allows (measured in bench/RESULTS.md, "int8 weights (CPU)"),
  // else from the disk. No effect on weights the model owns (converted or quantized at load) or
  // copies on a device. Safe while another thread reads the weights.
  void release_condition_pages() const;
  void release_weight_pages() const;

 private:
  CubeGpt() = default;
  friend class GptLoader;

  GptConfig config_;
  kernels::Backend* backend_ = nullptr;
  DType weight_dtype_ = DType::kF32;
  bool int8_weights_ = false;  // linear matrices int8 (+ scales): quantized at load or stored so
  const SafeTensors* file_ = nullptr;            // the checkpoint (outlives the model)
  std::vector<std::string> condition_matrices_;  // tensors only the prefill reads
  detail::GptWeights weights_;
  // Host memory the model owns (converted weights, the token table) and backend copies.
  std::vector<std::vector<uint16_t>> host_u16_;
  std::vector<std::vector<int8_t>> host_i8_;  // int8 weights quantized at load
  std::vector<std::vector<float>> host_f32_;
  std::vector<kernels::DeviceBuffer> device_;
};

// Per-block outputs of forward_full for parity tests: name ("dual.I.x", "dual.I.c", "single.I.x",
// "ln_f") and the values [batch, tokens, n_embd] copied to the host.
using GptBlockObserver =
    std::function<void(const std::string& name, const std::vector<float>& values)>;

// The KV cache and every activation buffer of one generation, allocated once from the model's
// backend in create(); prefill/decode/forward_full allocate nothing (forward_full with an observer
// or all-position logits copies to host vectors: test path). Not thread-safe; one session per
// worker. The model must outlive the session.
//
// Layout: per layer K and V caches [max_batch][S + max_shape_tokens][n_embd] for dual blocks (the
// S condition slots first) and [max_batch][max_shape_tokens][n_embd] for single blocks, f32 or
// bf16 (GptSessionOptions::kv_dtype).
//
// bf16 K/V cache: keys and values are rounded to bf16 (nearest even) when they are written, and a
// decode step's attention widens them back exactly (Backend::attention_decode_bf16kv), so the
// step reads half the cache bytes (0.65 -> 0.33 GB per step at 1024 tokens on the full-size v0.5
// model). Full passes (prefill, forward_full) attend over K/V in a one-layer f32 scratch and then
// store them rounded: the shape tokens' K/V as computed, the condition's as cached (rounded to
// bf16 and widened back, or, for rows whose condition stream prefill skips, widened from the
// cache), so a prefill gives the same bits whether the condition was cached or not. Logits then
// differ from the f32 cache by the bf16 rounding of K/V (relative ~2^-9 per element).
struct GptSessionOptions {
  // kF32 or kBF16. Unset: bf16 when the model's weights are bf16 (their own rounding dominates),
  // f32 otherwise (f32 checkpoints keep the reference's exact numerics; the parity tests use them).
  std::optional<DType> kv_dtype;
  // Stack the rows' condition streams in a prefill where that gives the same bits
  // (stacks_condition_rows()); false runs them one row at a time (`bench shape`'s same-run A/B).
  bool stack_condition_rows = true;
};

class GptSession {
 public:
  // max_batch: rows generated together (2 = [cond ; uncond] for guidance). max_shape_tokens:
  // shape positions the cache holds, BOS included (generating N tokens needs N). Errors: sizes
  // < 1, a kv_dtype other than F32/BF16, out of memory, a backend without bf16 K/V support.
  static Expected<std::unique_ptr<GptSession>> create(const CubeGpt& model, int64_t max_batch,
                                                      int64_t max_shape_tokens,
                                                      const GptSessionOptions& options = {});
  // Element type of the K/V cache (kF32 or kBF16).
  DType kv_dtype() const { return kv_dtype_; }
  // Whether a prefill runs the condition streams of its rows stacked in one call per layer (bf16
  // weights on AVX-512 BF16, int8 weights; stack_condition_rows_ below).
  bool stacks_condition_rows() const { return stack_condition_rows_; }

  // Sets the condition of `batch` rows (1 <= batch <= max_batch): clip_hidden [batch, 77,
  // text_embed_dim] host f32 (CLIP last hidden state); bbox [batch, 3] host f32 or null (= zeros;
  // ignored on v0.1). Computes c = text_proj(...) (++ bbox_proj) and resets the cache.
  Status set_condition(int64_t batch, const float* clip_hidden, const float* bbox);
  // The projected condition [batch, S, n_embd] on the host.
  Status read_condition(std::vector<float>* out) const;

  // KV-cache path. prefill runs the condition stream and the first shape token of each row
  // (normally BOS) through every block once, filling the caches; decode appends one token per row
  // at the next position. ids: [batch] host; logits: [batch, vocab] host. Errors: no condition,
  // cache full, id out of range.
  // The condition stream of a row depends on that row's projected condition only (condition
  // tokens come first in the causal joint sequence), so prefill skips it for trailing rows whose
  // projected condition is bit-identical to the one their cached condition K/V were computed from
  // (the unconditional row of every generation with guidance: same empty prompt, zero bbox).
  // Those rows' keys/values are the ones computed before (possibly by a different GEMM path, so
  // logits may differ from a from-scratch prefill in the last bits).
  Status prefill(const int32_t* ids, float* logits);
  Status decode(const int32_t* ids, float* logits);
  // Device-resident decode step (the CUDA-graph path, Backend::choose_token and co.): the same
  // computation as decode(), with the input ids taken from device_ids() (Backend::choose_token
  // writes them there), the position from *step (backend memory, read when the ops run: the step
  // appends at shape position *step) and the logits left in device_logits() ([batch, vocab]).
  // Nothing is read from or written to the host, so the same backend calls serve every step and a
  // backend may record them once. The host does not see the step: advance(n) after n of them
  // (each must have run at *step == length() + k for its k-th call). Errors: before prefill; a
  // backend without device-resident ops (kUnsupported).
  Status decode_at(const int64_t* step);
  Status advance(int64_t steps);

  // Several generations in one decode (ShapeGenerator::generate_candidates): after a prefill of
  // a few rows, copy_row(src, dst) gives row dst the cached sequence of row src (every layer's
  // K/V in use and the condition they came from), and set_rows(n) continues decoding over rows
  // [0, n) (rows past the prefilled ones must have been filled by copy_row; the caller keeps
  // track). load_logits puts host logits [rows, vocab] where device_logits() points, for the
  // device-resident token choice of the prefilled step. Errors: rows out of range, before prefill.
  Status copy_row(int64_t src, int64_t dst);
  Status set_rows(int64_t rows);
  Status load_logits(const float* logits, int64_t rows);
  int32_t* device_ids() const { return ids_; }
  const float* device_logits() const { return logits_; }
  // Shape tokens in the cache (0 before prefill).
  int64_t length() const { return length_; }
  int64_t batch() const { return batch_; }
  int64_t max_shape_tokens() const { return max_len_; }

  // Uncached path (the --no-kv-cache baseline): recomputes condition and all `len` shape tokens.
  // ids [batch, len] host. logits_last [batch, vocab] (may be null); logits_all [batch, len,
  // vocab] (may be null; test path). The observer (may be empty) gets per-block outputs.
  // Overwrites the cache (it is used as the attention buffer); a following decode continues from
  // position len.
  Status forward_full(const int32_t* ids, int64_t len, float* logits_last, float* logits_all,
                      const GptBlockObserver& observer = {});

  ~GptSession();

 private:
  GptSession() = default;
  Status upload_ids(const int32_t* ids, int64_t n);
  Status upload_positions(int64_t len, int64_t first);
  // cond_rows: batch rows [0, cond_rows) run the condition stream; the others' condition K/V are
  // already in the cache (prefill only; forward_full recomputes every row).
  Status run_full(const int32_t* ids, int64_t len, const GptBlockObserver& observer,
                  int64_t cond_rows);
  Status dual_full(size_t i, int64_t len, int64_t cond_rows);
  // Whether the cache's condition K/V of row b were computed from the current condition of row b.
  Expected<bool> cached_condition_matches(int64_t b);
  Status remember_condition(int64_t rows);
  Status single_full(size_t i, int64_t len);
  Status post(const detail::GptPostAttention& p, float* x, const float* y, int64_t rows,
              bool then_norm = false);
  Status project(const detail::GptPreAttention& pre, const float* h, int64_t rows, bool rope,
                 float* q, float* k, float* v);
  Status head(const float* rows_in, float* logits);  // [batch, D] backend -> logits host
  Status observe(const GptBlockObserver& observer, const std::string& name, const float* data,
                 int64_t n) const;

  const CubeGpt* model_ = nullptr;
  kernels::Backend* be_ = nullptr;
  // be_'s decode facet (the bf16 K/V cache, decode_at); null where the backend has none.
  kernels::DecodeOps* dec_ = nullptr;
  int64_t max_batch_ = 0, max_len_ = 0, batch_ = 0, length_ = 0;
  int64_t cond_len_ = 0, joint_len_ = 0;  // S, S + max_len
  bool has_condition_ = false;
  std::vector<int32_t> host_positions_;
  // Per row (max_batch x S x n_embd, host): the projected condition the cached condition K/V
  // were computed from, and whether they are valid; scratch for the comparison.
  std::vector<float> cache_condition_, condition_scratch_;
  std::vector<bool> cache_condition_valid_;
  std::vector<kernels::DeviceBuffer> buffers_;
  float *cond_ = nullptr, *c_ = nullptr, *x_ = nullptr, *h_ = nullptr, *q_ = nullptr, *k_ = nullptr,
        *v_ = nullptr, *y_ = nullptr, *t_ = nullptr, *gate_ = nullptr, *up_ = nullptr,
        *qj_ = nullptr, *oj_ = nullptr, *logits_ = nullptr, *clip_in_ = nullptr,
        *bbox_in_ = nullptr;
  int32_t *ids_ = nullptr, *positions_ = nullptr;
  DType kv_dtype_ = DType::kF32;
  // The condition streams of several rows in one call per layer (rows stacked: m = rows * S)
  // instead of one row at a time, where the backend gives each row the same bits either way
  // (Backend::linear_rows_invariant for every condition-stream weight, m >= S): half the weight
  // passes of a prefill from scratch. Elsewhere one row at a time, as before.
  bool stack_condition_rows_ = false;
  // n_dual + n_single layers: f32 caches (kv_dtype_ kF32) or bf16 ones (kBF16); the other is empty.
  std::vector<float*> k_cache_, v_cache_;
  std::vector<uint16_t*> k_cache16_, v_cache16_;
  // bf16 cache only: one layer's K/V in f32 ([max_batch][S + max_shape_tokens][n_embd]), the
  // attention buffer of full passes.
  float *kj_ = nullptr, *vj_ = nullptr;
  // The f32 K/V buffer a full pass of `layer` attends over: the cache itself, or kj_/vj_.
  float* full_k(size_t layer) const { return k_cache_.empty() ? kj_ : k_cache_[layer]; }
  float* full_v(size_t layer) const { return v_cache_.empty() ? vj_ : v_cache_[layer]; }
  // bf16 cache: rounds K/V slots [first, first + n) of the full-pass buffer into layer's cache,
  // or (widen) the reverse. f32 cache: nothing to do.
  Status store_full_kv(size_t layer, int64_t first, int64_t n);
  Status widen_cached_kv(size_t layer, int64_t first, int64_t n);
};

}  // namespace tessera::shape
