#include "engine/shape/gpt_config.h"

#include <cstdlib>
#include <set>
#include <sstream>

namespace tessera::shape {

namespace {

Expected<std::vector<int64_t>> need(const TensorShapes& shapes, const std::string& source,
                                    const std::string& name, size_t rank) {
  auto it = shapes.find(name);
  if (it == shapes.end()) {
    return not_found(source + ": missing tensor '" + name + "' (not a Cube 3D GPT checkpoint?)");
  }
  if (it->second.size() != rank) {
    return corrupt_data(source + ": tensor '" + name + "' has shape " +
                        shape_to_string(it->second) + ", expected " + std::to_string(rank) +
                        " dimensions");
  }
  return it->second;
}

// Number of blocks under `prefix` (e.g. "transformer.dual_blocks."): indices must be 0..n-1.
Expected<int64_t> count_blocks(const TensorShapes& shapes, const std::string& source,
                               const std::string& prefix) {
  std::set<int64_t> found;
  for (const auto& [name, shape] : shapes) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    size_t end = prefix.size();
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end == prefix.size() || end >= name.size() || name[end] != '.' || end - prefix.size() > 6) {
      return corrupt_data(source + ": tensor '" + name + "' has no block index after '" + prefix +
                          "'");
    }
    found.insert(std::strtoll(name.c_str() + prefix.size(), nullptr, 10));
  }
  int64_t expected = 0;
  for (int64_t index : found) {
    if (index != expected) {
      return corrupt_data(source + ": block indices under '" + prefix +
                          "' are not contiguous from 0 (missing block " + std::to_string(expected) +
                          ")");
    }
    ++expected;
  }
  return expected;
}

}  // namespace

int64_t GptConfig::decode_weight_elements() const {
  const int64_t d = n_embd;
  const int64_t per_block = 3 * d * d + d * d + 3 * d * mlp_hidden;
  return (n_dual + n_single) * per_block + vocab_size * d;
}

std::string GptConfig::summary() const {
  std::ostringstream s;
  s << "n_embd " << n_embd << ", " << n_head << " heads x " << head_dim << ", " << n_dual
    << " dual + " << n_single << " single blocks, mlp " << mlp_hidden << ", vocab " << vocab_size
    << (use_bbox ? ", bbox" : "");
  return s.str();
}

TensorShapes tensor_shapes(const SafeTensors& file) {
  TensorShapes shapes;
  for (const TensorInfo& info : file.tensors()) shapes[info.name] = info.shape;
  return shapes;
}

Expected<GptConfig> infer_gpt_config(const TensorShapes& shapes, const std::string& source) {
  GptConfig cfg;
  TESSERA_ASSIGN_OR_RETURN(auto wte, need(shapes, source, "transformer.wte.weight", 2));
  cfg.vocab_size = wte[0];
  cfg.n_embd = wte[1];
  if (cfg.vocab_size < 4 || cfg.n_embd < 1) {
    return corrupt_data(source + ": transformer.wte.weight " + shape_to_string(wte) +
                        " leaves no shape codes (vocabulary = codes + BOS, EOS, PAD)");
  }
  cfg.codebook_size = cfg.vocab_size - 3;
  const std::string q_norm = "transformer.dual_blocks.0.attn.pre_x.q_norm.weight";
  TESSERA_ASSIGN_OR_RETURN(auto qn, need(shapes, source, q_norm, 1));
  cfg.head_dim = qn[0];
  if (cfg.head_dim <= 0 || cfg.head_dim % 2 != 0 || cfg.n_embd % cfg.head_dim != 0) {
    return corrupt_data(source + ": " + q_norm + " size " + std::to_string(cfg.head_dim) +
                        " is not an even divisor of n_embd " + std::to_string(cfg.n_embd));
  }
  cfg.n_head = cfg.n_embd / cfg.head_dim;
  TESSERA_ASSIGN_OR_RETURN(cfg.n_dual, count_blocks(shapes, source, "transformer.dual_blocks."));
  TESSERA_ASSIGN_OR_RETURN(cfg.n_single,
                           count_blocks(shapes, source, "transformer.single_blocks."));
  const std::string last =
      "transformer.dual_blocks." + std::to_string(cfg.n_dual - 1) + ".attn.pre_c.c_k.weight";
  if (!shapes.count(last)) {
    return corrupt_data(source + ": missing tensor '" + last +
                        "': the last dual block must be \"condition pre only\"");
  }
  TESSERA_ASSIGN_OR_RETURN(
      auto gate, need(shapes, source, "transformer.dual_blocks.0.post_1.mlp.gate_proj.weight", 2));
  cfg.mlp_hidden = gate[0];
  TESSERA_ASSIGN_OR_RETURN(auto shp, need(shapes, source, "shape_proj.weight", 2));
  TESSERA_ASSIGN_OR_RETURN(auto txt, need(shapes, source, "text_proj.weight", 2));
  if (shp[0] != cfg.n_embd || txt[0] != cfg.n_embd) {
    return corrupt_data(source + ": shape_proj.weight " + shape_to_string(shp) +
                        " / text_proj.weight " + shape_to_string(txt) +
                        ": output width differs from n_embd " + std::to_string(cfg.n_embd));
  }
  cfg.shape_embed_dim = shp[1];
  cfg.text_embed_dim = txt[1];
  TESSERA_ASSIGN_OR_RETURN(auto lm, need(shapes, source, "lm_head.weight", 2));
  if (lm[0] != cfg.vocab_size || lm[1] != cfg.n_embd) {
    return corrupt_data(source + ": lm_head.weight has shape " + shape_to_string(lm) +
                        ", expected " + shape_to_string({cfg.vocab_size, cfg.n_embd}));
  }
  cfg.use_bbox = shapes.count("bbox_proj.weight") != 0;
  if (cfg.mlp_hidden < 1 || cfg.shape_embed_dim < 1 || cfg.text_embed_dim < 1) {
    return corrupt_data(source + ": zero-sized gate_proj, shape_proj or text_proj");
  }
  return cfg;
}

Expected<GptConfig> infer_gpt_config(const SafeTensors& file) {
  return infer_gpt_config(tensor_shapes(file), file.path());
}

}  // namespace tessera::shape
