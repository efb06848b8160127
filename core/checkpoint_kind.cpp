#include "core/checkpoint_kind.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string_view>
#include <unordered_map>

namespace tessera {

namespace {

constexpr std::string_view kTokenEmbedding = "embeddings.token_embedding.weight";

// Name -> shape lookup over the header, plus the queries the rules below need.
class ShapeIndex {
 public:
  explicit ShapeIndex(const std::vector<TensorShapeEntry>& tensors) : tensors_(tensors) {
    for (const auto& t : tensors) by_name_.emplace(t.name, &t.shape);
  }

  bool has(const std::string& name) const { return by_name_.count(name) != 0; }
  // Dimension `d` of tensor `name`, or nullopt when the tensor is missing or has fewer dims.
  std::optional<int64_t> dim(const std::string& name, size_t d) const {
    const auto it = by_name_.find(name);
    if (it == by_name_.end() || it->second->size() <= d) return std::nullopt;
    return (*it->second)[d];
  }
  bool any_with_prefix(std::string_view prefix) const {
    for (const auto& t : tensors_)
      if (std::string_view(t.name).substr(0, prefix.size()) == prefix) return true;
    return false;
  }
  // Number of distinct integer indices N in names "<prefix>N.<...>" (layer counts).
  int64_t count_indices(std::string_view prefix) const {
    std::set<long> indices;
    for (const auto& t : tensors_) {
      const std::string_view name(t.name);
      if (name.substr(0, prefix.size()) != prefix) continue;
      const std::string_view rest = name.substr(prefix.size());
      size_t digits = 0;
      while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
      if (digits == 0 || digits > 6 || digits == rest.size() || rest[digits] != '.') continue;
      indices.insert(std::strtol(std::string(rest.substr(0, digits)).c_str(), nullptr, 10));
    }
    return static_cast<int64_t>(indices.size());
  }
  // First tensor whose name ends with `suffix`; its name or nullptr.
  const std::string* find_suffix(std::string_view suffix) const {
    for (const auto& t : tensors_) {
      const std::string_view name(t.name);
      if (name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix)
        return &t.name;
    }
    return nullptr;
  }
  // First tensor under `prefix` whose name contains `part`.
  const std::string* find_containing(std::string_view prefix, std::string_view part) const {
    for (const auto& t : tensors_) {
      const std::string_view name(t.name);
      if (name.substr(0, prefix.size()) == prefix && name.find(part) != std::string_view::npos)
        return &t.name;
    }
    return nullptr;
  }

 private:
  const std::vector<TensorShapeEntry>& tensors_;
  std::unordered_map<std::string, const std::vector<int64_t>*> by_name_;
};

void put(CheckpointKindInfo* info, const char* key, std::optional<int64_t> value) {
  if (value) info->config.emplace_back(key, *value);
}

void set_kind(CheckpointKindInfo* info, CheckpointKind kind) {
  info->kind = kind;
  info->name = checkpoint_kind_name(kind);
}

void infer_cube_gpt(const ShapeIndex& idx, CheckpointKindInfo* info) {
  set_kind(info, CheckpointKind::kCube3dGpt);
  const bool v05 = idx.has("bbox_proj.weight");
  info->version = v05 ? "v0.5" : "v0.1";
  const auto n_embd = idx.dim("transformer.wte.weight", 1);
  const auto head_dim = idx.dim("transformer.dual_blocks.0.attn.pre_x.q_norm.weight", 0);
  put(info, "n_embd", n_embd);
  if (n_embd && head_dim && *head_dim > 0 && *n_embd % *head_dim == 0)
    put(info, "n_head", *n_embd / *head_dim);
  else
    info->notes.push_back(
        "head count unknown (transformer.dual_blocks.0.attn.pre_x.q_norm.weight "
        "missing or not dividing n_embd)");
  put(info, "head_dim", head_dim);
  put(info, "n_dual_blocks", idx.count_indices("transformer.dual_blocks."));
  put(info, "n_single_blocks", idx.count_indices("transformer.single_blocks."));
  put(info, "vocab_size", idx.dim("transformer.wte.weight", 0));
  put(info, "mlp_hidden", idx.dim("transformer.dual_blocks.0.post_1.mlp.gate_proj.weight", 0));
  put(info, "text_dim", idx.dim("text_proj.weight", 1));
  put(info, "code_dim", idx.dim("shape_proj.weight", 1));
  // Not visible in the GPT's shapes. The published checkpoints fix it per version
  // (docs/cube3d.md); for any other size it is the shape tokenizer's latent count.
  const auto vocab = idx.dim("transformer.wte.weight", 0);
  if (n_embd && *n_embd == 1536 && vocab && *vocab == 16387)
    put(info, "num_latents", v05 ? 1024 : 512);
  else
    info->notes.push_back(
        "num_latents not fixed by this GPT: it is the shape tokenizer's latent count");
}

void infer_cube_shape(const ShapeIndex& idx, CheckpointKindInfo* info) {
  set_kind(info, CheckpointKind::kCube3dShapeTokenizer);
  const auto latents = idx.dim("decoder.positional_encodings", 0);
  const auto width = idx.dim("decoder.positional_encodings", 1);
  if (latents == 512) info->version = "v0.1";
  if (latents == 1024) info->version = "v0.5";
  const auto head_dim = idx.dim("decoder.blocks.0.attn.q_norm.weight", 0);
  put(info, "num_latents", latents);
  put(info, "width", width);
  if (width && head_dim && *head_dim > 0 && *width % *head_dim == 0)
    put(info, "n_head", *width / *head_dim);
  put(info, "head_dim", head_dim);
  put(info, "codebook_size", idx.dim("bottleneck.block.codebook.weight", 0));
  put(info, "codebook_dim", idx.dim("bottleneck.block.codebook.weight", 1));
  put(info, "n_encoder_layers", idx.count_indices("encoder.blocks."));
  put(info, "n_decoder_layers", idx.count_indices("decoder.blocks."));
  put(info, "mlp_hidden", idx.dim("decoder.blocks.0.mlp.up_proj.weight", 0));
  auto freqs = idx.dim("occupancy_decoder.embedder.weight", 1);
  if (!freqs) freqs = idx.dim("embedder.weight", 1);
  if (!freqs) freqs = idx.dim("encoder.embedder.weight", 1);
  put(info, "fourier_freqs", freqs);
  if (latents && info->version.empty())
    info->notes.push_back("latent count " + std::to_string(*latents) +
                          " matches no released version (512: v0.1, 1024: v0.5)");
}

// CLIP text model under `prefix` (which ends with "text_model." or is the transformer prefix).
void put_clip(const ShapeIndex& idx, const std::string& p, CheckpointKindInfo* info,
              bool with_prefix_keys) {
  const std::string tok = p + "embeddings.token_embedding.weight";
  const auto width = idx.dim(tok, 1);
  const auto layers = idx.count_indices(p + "encoder.layers.");
  if (with_prefix_keys) {
    put(info, "clip_width", width);
    put(info, "clip_layers", layers);
    return;
  }
  put(info, "width", width);
  put(info, "n_layers", layers);
  put(info, "vocab_size", idx.dim(tok, 0));
  put(info, "max_positions", idx.dim(p + "embeddings.position_embedding.weight", 0));
  put(info, "mlp_hidden", idx.dim(p + "encoder.layers.0.mlp.fc1.weight", 0));
  if (const std::string* proj = idx.find_suffix("text_projection.weight"))
    put(info, "projection_dim", idx.dim(*proj, 0));
  if (width && *width % 64 == 0)
    info->notes.push_back("heads not stored in the file; CLIP convention width/64 = " +
                          std::to_string(*width / 64));
}

// UNet under `p` in CompVis (input_blocks) or diffusers (conv_in/down_blocks) layout.
void put_unet(const ShapeIndex& idx, const std::string& p, CheckpointKindInfo* info) {
  const bool compvis = idx.has(p + "input_blocks.0.0.weight");
  const std::string in = compvis ? p + "input_blocks.0.0.weight" : p + "conv_in.weight";
  const std::string out = compvis ? p + "out.2.weight" : p + "conv_out.weight";
  put(info, "unet_in_channels", idx.dim(in, 1));
  put(info, "unet_model_channels", idx.dim(in, 0));
  put(info, "unet_out_channels", idx.dim(out, 0));
  if (const std::string* k = idx.find_containing(p, "attn2.to_k.weight"))
    put(info, "unet_context_dim", idx.dim(*k, 1));
}

void put_vae(const ShapeIndex& idx, const std::string& p, CheckpointKindInfo* info) {
  put(info, "vae_latent_channels", idx.dim(p + "post_quant_conv.weight", 0));
  put(info, "vae_decoder_channels", idx.dim(p + "decoder.conv_in.weight", 0));
  put(info, "vae_out_channels", idx.dim(p + "decoder.conv_out.weight", 0));
}

}  // namespace

const char* checkpoint_kind_name(CheckpointKind kind) {
  switch (kind) {
    case CheckpointKind::kUnknown:
      return "unknown";
    case CheckpointKind::kCube3dGpt:
      return "cube3d-gpt";
    case CheckpointKind::kCube3dShapeTokenizer:
      return "cube3d-shape-tokenizer";
    case CheckpointKind::kClipText:
      return "clip-text";
    case CheckpointKind::kSdUnet:
      return "sd-unet";
    case CheckpointKind::kSdVae:
      return "sd-vae";
    case CheckpointKind::kSdCheckpoint:
      return "sd-checkpoint";
  }
  return "unknown";
}

std::optional<int64_t> CheckpointKindInfo::get(const std::string& key) const {
  for (const auto& [k, v] : config)
    if (k == key) return v;
  return std::nullopt;
}

CheckpointKindInfo infer_checkpoint_kind(const std::vector<TensorShapeEntry>& tensors) {
  const ShapeIndex idx(tensors);
  CheckpointKindInfo info;

  if (idx.has("transformer.wte.weight") && idx.any_with_prefix("transformer.dual_blocks.")) {
    infer_cube_gpt(idx, &info);
    return info;
  }
  if (idx.has("bottleneck.block.codebook.weight") && idx.has("decoder.positional_encodings")) {
    infer_cube_shape(idx, &info);
    return info;
  }

  const bool compvis_unet = idx.any_with_prefix("model.diffusion_model.");
  const bool compvis_vae = idx.has("first_stage_model.decoder.conv_in.weight");
  if (compvis_unet && compvis_vae) {
    set_kind(&info, CheckpointKind::kSdCheckpoint);
    put_unet(idx, "model.diffusion_model.", &info);
    put_vae(idx, "first_stage_model.", &info);
    if (const std::string* tok = idx.find_suffix(kTokenEmbedding)) {
      const std::string p = tok->substr(0, tok->size() - kTokenEmbedding.size());
      put_clip(idx, p, &info, /*with_prefix_keys=*/true);
    } else {
      info.notes.push_back("no text encoder in the file");
    }
    return info;
  }
  if (compvis_unet) {
    set_kind(&info, CheckpointKind::kSdUnet);
    info.prefix = "model.diffusion_model.";
    put_unet(idx, info.prefix, &info);
    return info;
  }
  if (idx.has("conv_in.weight") && idx.any_with_prefix("down_blocks.") &&
      idx.has("time_embedding.linear_1.weight")) {
    set_kind(&info, CheckpointKind::kSdUnet);
    put_unet(idx, "", &info);
    return info;
  }
  for (const char* p : {"first_stage_model.", ""}) {
    const std::string prefix = p;
    if (idx.has(prefix + "decoder.conv_in.weight") && idx.has(prefix + "post_quant_conv.weight")) {
      set_kind(&info, CheckpointKind::kSdVae);
      info.prefix = prefix;
      put_vae(idx, prefix, &info);
      return info;
    }
  }
  if (const std::string* tok = idx.find_suffix(kTokenEmbedding)) {
    const std::string p = tok->substr(0, tok->size() - kTokenEmbedding.size());
    if (idx.any_with_prefix(p + "encoder.layers.")) {
      set_kind(&info, CheckpointKind::kClipText);
      // Report the prefix above text_model. ("" for a plain HF CLIPTextModel file).
      const std::string_view tm = "text_model.";
      info.prefix = p.size() >= tm.size() && std::string_view(p).substr(p.size() - tm.size()) == tm
                        ? p.substr(0, p.size() - tm.size())
                        : p;
      put_clip(idx, p, &info, /*with_prefix_keys=*/false);
      return info;
    }
  }
  return info;
}

CheckpointKindInfo infer_checkpoint_kind(const SafeTensors& file) {
  std::vector<TensorShapeEntry> entries;
  entries.reserve(file.size());
  for (const auto& t : file.tensors()) entries.push_back({t.name, t.shape});
  CheckpointKindInfo info = infer_checkpoint_kind(entries);
  // int8 weights (engine/runtime/quantize.h): I8 matrices with NAME_scale [rows, groups] beside.
  int64_t int8 = 0, group = 0, smallest = 0;
  for (const auto& t : file.tensors()) {
    if (t.dtype != DType::kI8 || t.shape.size() != 2) continue;
    ++int8;
    const TensorInfo* s = file.find(t.name + "_scale");
    if (s != nullptr && s->shape.size() == 2 && s->shape[1] > 0) {
      const int64_t g = t.shape[1] / s->shape[1];
      group = std::max(group, g);
      smallest = smallest == 0 ? g : std::min(smallest, g);
    }
  }
  if (int8 > 0) {
    info.config.emplace_back("int8_matrices", int8);
    if (group > 0) info.config.emplace_back("int8_group", group);
    const std::string groups = smallest == group
                                   ? std::to_string(group)
                                   : std::to_string(smallest) + "-" + std::to_string(group);
    info.notes.push_back("int8 weights: " + std::to_string(int8) +
                         " linear matrices stored as I8 with f32 scales per group of " + groups +
                         " weights (tessera quantize); they load as int8");
  }
  return info;
}

}  // namespace tessera
