// GptConfig: the sizes of a Cube 3D GPT ("DualStreamRoformer"), inferred from its tensors.
//
// No config file ships with Cube 3D checkpoints (docs/cube3d.md), so every size comes from tensor
// names and shapes:
//   n_embd, vocab       transformer.wte.weight [vocab, n_embd]
//   head_dim, n_head    transformer.dual_blocks.0.attn.pre_x.q_norm.weight [head_dim]
//   n_dual, n_single    the block indices under transformer.dual_blocks. / single_blocks.
//   mlp_hidden          transformer.dual_blocks.0.post_1.mlp.gate_proj.weight [mlp_hidden, n_embd]
//   shape_embed_dim     shape_proj.weight [n_embd, shape_embed_dim] (codebook vector width)
//   text_embed_dim      text_proj.weight [n_embd, text_embed_dim] (CLIP hidden width)
//   use_bbox (v0.5)     presence of bbox_proj.weight
//   codebook_size       vocab - 3; BOS = codebook_size, EOS = +1, PAD = +2.
// Constants that shapes cannot show (eps, RoPE theta, condition length 77) are fields holding the
// published values. num_latents (tokens generated per shape) is a property of the shape tokenizer,
// not of the GPT: it stays 0 here until the caller sets it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"

namespace tessera::shape {

struct GptConfig {
  int64_t n_embd = 0;
  int64_t n_head = 0;
  int64_t head_dim = 0;
  int64_t n_dual = 0;    // dual-stream blocks; the last one is "condition pre only"
  int64_t n_single = 0;  // single-stream blocks after them
  int64_t mlp_hidden = 0;
  int64_t vocab_size = 0;
  int64_t codebook_size = 0;
  int64_t shape_embed_dim = 0;
  int64_t text_embed_dim = 0;
  bool use_bbox = false;
  int64_t text_len = 77;    // CLIP positions in the condition
  int64_t num_latents = 0;  // from the shape tokenizer; 0 = not known yet
  float rope_theta = 10000.0f;
  float eps = 1e-6f;          // non-affine LayerNorms
  float qk_norm_eps = 1e-5f;  // per-head RMSNorm on q and k

  int32_t bos_id() const { return static_cast<int32_t>(codebook_size); }
  int32_t eos_id() const { return static_cast<int32_t>(codebook_size + 1); }
  int32_t pad_id() const { return static_cast<int32_t>(codebook_size + 2); }
  // Condition tokens: 77 text positions, plus the bounding-box token on v0.5.
  int64_t cond_len() const { return text_len + (use_bbox ? 1 : 0); }
  // Parameters read per decoded token by the shape stream (what bounds the decode step by memory
  // bandwidth): per dual block pre_x (q, k, v) + post_1 (c_proj, SwiGLU), per single block the
  // same, lm_head, plus biases/norms (negligible, not counted).
  int64_t decode_weight_elements() const;
  // "n_embd 1536, 12 heads x 128, 23 dual + 1 single blocks, mlp 6144, vocab 16387, bbox"
  std::string summary() const;
};

// Tensor name -> shape, as in a safetensors header or a tests/fixtures/cube3d/*-tensors.txt list.
using TensorShapes = std::map<std::string, std::vector<int64_t>>;

// Infers the config from tensor shapes. `source` (a file name) prefixes error messages. Errors
// (kCorruptData / kNotFound) name the missing or inconsistent tensor: missing wte, q_norm,
// gate_proj, shape_proj, text_proj, lm_head; q_norm size not dividing n_embd; block indices not
// contiguous from 0; a last dual block that is not "condition pre only"; widths that disagree.
Expected<GptConfig> infer_gpt_config(const TensorShapes& shapes, const std::string& source);
Expected<GptConfig> infer_gpt_config(const SafeTensors& file);

// The shape list of a safetensors file.
TensorShapes tensor_shapes(const SafeTensors& file);

}  // namespace tessera::shape
