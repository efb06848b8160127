// ClipTextEncoder: the CLIP text transformer (Hugging Face CLIPTextModel, the text half of
// openai/clip-vit-large-patch14 that Cube 3D and Stable Diffusion 1.x condition on), written once
// against kernels::Backend.
//
// Architecture (pre-LN transformer): x = token_embedding[ids] + position_embedding[0..T);
// per layer: x += out_proj(attention(layer_norm1(x))); x += fc2(quick_gelu(fc1(layer_norm2(x))));
// output = final_layer_norm(x), the "last hidden state" [batch, T, width]. LayerNorm eps 1e-5,
// attention scale 1/sqrt(head_dim), quick_gelu(x) = x * sigmoid(1.702 x).
//
// Masking: attention is causal. With the tokenizer's attention mask (valid_lengths[b] = number of
// real tokens BOS..EOS, see ClipTokenizer PaddedTokens::length) padded keys are hidden as well, as
// Cube 3D runs CLIP (docs/cube3d.md). Only prefix masks (1 on [0, L), 0 after) are expressible,
// which is what a CLIP tokenizer produces. Without valid_lengths: causal only (Stable Diffusion).
//
// Tensor names: `text_model.embeddings.token_embedding.weight [vocab, width]`,
// `text_model.embeddings.position_embedding.weight [max_positions, width]`,
// `text_model.encoder.layers.N.self_attn.{q,k,v,out}_proj.{weight,bias}`,
// `text_model.encoder.layers.N.layer_norm{1,2}.{weight,bias}`,
// `text_model.encoder.layers.N.mlp.{fc1,fc2}.{weight,bias}`,
// `text_model.final_layer_norm.{weight,bias}`, under any prefix (e.g.
// `cond_stage_model.transformer.` in Stable Diffusion checkpoints). Every size is inferred from the
// shapes; the head count is not visible in shapes: it comes from config.json
// (`num_attention_heads`) when given, else width / 64 (the CLIP convention: 12 for ViT-L/14's 768).
//
// Memory: weights come from a WeightStore (f32 memory-mapped zero-copy, or bf16 converted once;
// linear layers then read bf16) and are handed to the backend once (upload_weight: zero-copy on
// the CPU). Activations are allocated on the first encode() and reused; a later call allocates
// again only when its batch is larger than every earlier one.
//
// Thread safety: encode() mutates the activation buffers: one call at a time per encoder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/weights/weight_store.h"
#include "kernels/backend.h"

namespace tessera::text {

struct ClipTextConfig {
  int64_t vocab_size = 0;
  int64_t max_positions = 0;  // 77
  int64_t width = 0;          // 768 for CLIP-L
  int64_t n_layers = 0;       // 12
  int64_t n_heads = 0;        // 12
  int64_t head_dim = 0;       // width / n_heads
  int64_t mlp_hidden = 0;     // 3072
  float eps = 1e-5f;
  std::string
      prefix;  // name prefix before "text_model.", e.g. "" or "cond_stage_model.transformer."
};

// Reads `num_attention_heads` (and nothing else) from a Hugging Face config.json. Returns 0 when
// `path` is empty or the file does not exist (the caller falls back to width / 64); an unreadable
// file, invalid JSON or a non-positive / non-integer value is an error naming the file and field.
Expected<int64_t> read_clip_num_heads(const std::string& config_json_path);

struct ClipTextEncoderOptions {
  // 0: width / 64 (load() fills it from config.json when there is one).
  int64_t n_heads = 0;
};

class ClipTextEncoder {
 public:
  using Options = ClipTextEncoderOptions;

  ClipTextEncoder(ClipTextEncoder&&) noexcept;
  ClipTextEncoder& operator=(ClipTextEncoder&&) noexcept;
  ~ClipTextEncoder();

  // Builds the encoder from the weights in `store` (which it takes over and keeps alive), on
  // `backend` (not owned; must outlive the encoder). Checks every tensor's presence and shape:
  // errors name the tensor, the file and expected vs actual shape (kNotFound / kInvalidArgument).
  // A width not divisible by the head count is kInvalidArgument.
  // The mapped pages of the weights file leave resident memory (SafeTensors::drop_all_pages);
  // weights used in place are read again on the next encoding. Converted weights are unaffected.
  void release_weight_pages() const;
  // The store the weights come from (which tensors were asked for in which form).
  const WeightStore& weights() const;

  static Expected<ClipTextEncoder> create(WeightStore store, kernels::Backend& backend,
                                          const Options& options = {});
  // Opens `<dir>/model.safetensors` (+ `<dir>/config.json` when present) where dir is a model's
  // text encoder directory (e.g. `<model>/text_encoder`), or a .safetensors file directly (config
  // looked up beside it). Missing file: kNotFound naming the path.
  static Expected<ClipTextEncoder> load(const std::string& path, kernels::Backend& backend,
                                        WeightFormat format = WeightFormat::kF32);

  const ClipTextConfig& config() const { return config_; }

  // Encodes `batch` sequences of `seq_len` ids each (host memory, row-major [batch, seq_len]).
  // seq_len must be in [1, max_positions]; every id in [0, vocab_size) (kInvalidArgument naming the
  // position otherwise, nothing computed). valid_lengths (host, `batch` entries, each in
  // [1, seq_len]) is the attention mask as lengths, or null for causal-only attention.
  // Returns the last hidden state [batch, seq_len, width] f32 in backend memory, owned by the
  // encoder and valid until the next encode() (copy or consume it before). Errors from the backend
  // are passed through.
  // hidden_states (optional, for parity tests and debugging): receives n_layers + 1 host tensors
  // [batch, seq_len, width]: the embeddings, then each layer's output before final_layer_norm.
  Expected<const float*> encode(const int32_t* ids, const int32_t* valid_lengths, int64_t batch,
                                int64_t seq_len,
                                std::vector<std::vector<float>>* hidden_states = nullptr);
  // encode() followed by a download into `out` (resized to batch * seq_len * width).
  Status encode_to_host(const int32_t* ids, const int32_t* valid_lengths, int64_t batch,
                        int64_t seq_len, std::vector<float>* out);

 private:
  struct Impl;
  explicit ClipTextEncoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  ClipTextConfig config_;
};

}  // namespace tessera::text
