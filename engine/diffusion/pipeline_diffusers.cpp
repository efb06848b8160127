// The diffusers layout read as CompVis (pipeline.h, layout (b)): the key renaming, and the renamed
// UNet and VAE checkpoints, built in memory once so that the networks load one set of names.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "engine/diffusion/controlnet.h"
#include "engine/diffusion/pipeline_internal.h"

namespace tessera::diffusion {

using pipeline_detail::RenamedFile;

namespace {

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t dot = s.find('.', start);
    parts.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

// parts[from..] joined with '.', "" when from is past the end.
std::string join_from(const std::vector<std::string>& parts, size_t from) {
  std::string out;
  for (size_t i = from; i < parts.size(); ++i) out += (i > from ? "." : "") + parts[i];
  return out;
}

bool parse_index(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 6) return false;
  int64_t r = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    r = r * 10 + (c - '0');
  }
  *v = r;
  return true;
}

// "<compvis sub-layer>.<rest>" for parts[k] under a resnet, or "" when unknown / nothing follows.
std::string renamed_tail(const std::vector<std::string>& p, size_t k,
                         std::initializer_list<std::pair<const char*, const char*>> map) {
  if (k + 1 >= p.size()) return "";
  for (const auto& [from, to] : map) {
    if (p[k] == from) return std::string(to) + "." + join_from(p, k + 1);
  }
  return "";
}

std::string unet_resnet_tail(const std::vector<std::string>& p, size_t k) {
  return renamed_tail(p, k,
                      {{"norm1", "in_layers.0"},
                       {"conv1", "in_layers.2"},
                       {"time_emb_proj", "emb_layers.1"},
                       {"norm2", "out_layers.0"},
                       {"conv2", "out_layers.3"},
                       {"conv_shortcut", "skip_connection"}});
}

std::string vae_resnet_tail(const std::vector<std::string>& p, size_t k) {
  return renamed_tail(p, k,
                      {{"norm1", "norm1"},
                       {"conv1", "conv1"},
                       {"norm2", "norm2"},
                       {"conv2", "conv2"},
                       {"conv_shortcut", "nin_shortcut"}});
}

std::string prefixed(const std::string& head, const std::string& tail) {
  return tail.empty() ? std::string() : head + tail;
}

// ---- in-memory renamed checkpoints ------------------------------------------------------------

// rename(info, &shape) returns the new name ("" drops the tensor) and may change the shape (same
// element count).
using RenameFn = std::function<std::string(const TensorInfo&, std::vector<int64_t>*)>;

Expected<RenamedFile> open_renamed(const std::string& path, const RenameFn& rename) {
  TESSERA_ASSIGN_OR_RETURN(SafeTensors src, SafeTensors::open(path));
  struct Kept {
    const TensorInfo* info;
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<Kept> kept;
  std::map<std::string, std::string> origin;  // new name -> source name
  for (const TensorInfo& info : src.tensors()) {
    std::vector<int64_t> shape = info.shape;
    std::string name = rename(info, &shape);
    if (name.empty()) continue;
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    if (numel != info.numel()) {
      return internal_error(path + ": renaming '" + info.name + "' changed its element count");
    }
    auto [it, inserted] = origin.emplace(name, info.name);
    if (!inserted) {
      return corrupt_data(path + ": tensors '" + it->second + "' and '" + info.name +
                          "' both map to '" + name + "'");
    }
    kept.push_back({&info, std::move(name), std::move(shape)});
  }
  // Widest dtypes first, so every tensor stays aligned without gaps (safetensors forbids gaps).
  std::stable_sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) {
    return dtype_size(a.info->dtype) > dtype_size(b.info->dtype);
  });
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const Kept& k : kept) {
    header[k.name] = {{"dtype", dtype_name(k.info->dtype)},
                      {"shape", k.shape},
                      {"data_offsets", {offset, offset + k.info->nbytes}}};
    offset += k.info->nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const size_t total = 8 + text.size() + offset;
  RenamedFile out;
  out.bytes = std::make_unique<uint8_t[]>(total);
  const uint64_t header_len = text.size();
  for (int b = 0; b < 8; ++b) out.bytes[b] = static_cast<uint8_t>(header_len >> (8 * b));
  std::memcpy(out.bytes.get() + 8, text.data(), text.size());
  uint8_t* data = out.bytes.get() + 8 + text.size();
  for (const Kept& k : kept) {
    TESSERA_ASSIGN_OR_RETURN(TensorView v, src.view(k.info->name));
    if (k.info->nbytes > 0) std::memcpy(data, v.data, k.info->nbytes);
    data += k.info->nbytes;
  }
  TESSERA_ASSIGN_OR_RETURN(
      out.file, SafeTensors::parse(out.bytes.get(), total, path + " (diffusers keys renamed)"));
  return out;
}

}  // namespace

namespace pipeline_detail {

Expected<RenamedFile> open_diffusers_unet(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(SafeTensors probe, SafeTensors::open(path));
  if (probe.contains("add_embedding.linear_1.weight")) {
    return unsupported(path +
                       ": tensor 'add_embedding.linear_1.weight' exists: an SDXL UNet; only "
                       "SD 1.x is supported");
  }
  int64_t layers = 0;
  while (probe.contains("down_blocks.0.resnets." + std::to_string(layers) + ".conv1.weight")) {
    ++layers;
  }
  if (layers == 0) {
    return not_found(path +
                     ": missing tensor 'down_blocks.0.resnets.0.conv1.weight' (not a "
                     "diffusers UNet)");
  }
  std::set<int64_t> up_attention;
  for (const TensorInfo& info : probe.tensors()) {
    const auto p = split_dots(info.name);
    int64_t i = 0;
    if (p.size() > 2 && p[0] == "up_blocks" && parse_index(p[1], &i) && p[2] == "attentions") {
      up_attention.insert(i);
    }
  }
  const auto has_attention = [&](int64_t i) { return up_attention.count(i) != 0; };
  return open_renamed(path, [&](const TensorInfo& info, std::vector<int64_t>*) {
    const std::string name = diffusers_unet_key_to_compvis(info.name, layers, has_attention);
    return name.empty() ? name : kUNetPrefix + name;
  });
}

Expected<RenamedFile> open_diffusers_controlnet(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(SafeTensors probe, SafeTensors::open(path));
  if (probe.contains("add_embedding.linear_1.weight")) {
    return unsupported(path +
                       ": tensor 'add_embedding.linear_1.weight' exists: an SDXL ControlNet; only "
                       "SD 1.x ControlNets are supported");
  }
  if (!probe.contains("controlnet_cond_embedding.conv_in.weight")) {
    return not_found(path +
                     ": no diffusers ControlNet (missing tensor "
                     "'controlnet_cond_embedding.conv_in.weight')");
  }
  int64_t layers = 0, hint_blocks = 0;
  while (probe.contains("down_blocks.0.resnets." + std::to_string(layers) + ".conv1.weight")) {
    ++layers;
  }
  while (probe.contains("controlnet_cond_embedding.blocks." + std::to_string(hint_blocks) +
                        ".weight")) {
    ++hint_blocks;
  }
  return open_renamed(path, [&](const TensorInfo& info, std::vector<int64_t>*) {
    const std::string name = diffusers_controlnet_key_to_compvis(info.name, layers, hint_blocks);
    return name.empty() ? name : kControlPrefix + name;
  });
}

Expected<RenamedFile> open_diffusers_vae(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(SafeTensors probe, SafeTensors::open(path));
  int64_t levels = 0;
  while (
      probe.contains("decoder.up_blocks." + std::to_string(levels) + ".resnets.0.conv1.weight")) {
    ++levels;
  }
  if (levels == 0) {
    return not_found(path +
                     ": no VAE decoder (missing tensor "
                     "'decoder.up_blocks.0.resnets.0.conv1.weight')");
  }
  return open_renamed(path, [&](const TensorInfo& info, std::vector<int64_t>* shape) {
    const std::string name = diffusers_vae_key_to_compvis(info.name, levels);
    if (name.empty()) return name;
    // diffusers stores the middle attention's q/k/v/out as linear [C, C]; CompVis as 1x1 convs.
    if ((name.rfind("decoder.mid.attn_1.", 0) == 0 || name.rfind("encoder.mid.attn_1.", 0) == 0) &&
        shape->size() == 2 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0) {
      shape->push_back(1);
      shape->push_back(1);
    }
    return kVaePrefix + name;
  });
}

}  // namespace pipeline_detail

// ---- key renaming -----------------------------------------------------------------------------

std::string diffusers_unet_key_to_compvis(
    const std::string& name, int64_t layers_per_block,
    const std::function<bool(int64_t)>& up_block_has_attention) {
  const auto p = split_dots(name);
  const int64_t per_level = layers_per_block + 1;
  if (p.size() < 2) return "";
  if (p[0] == "time_embedding" && p.size() > 2) {
    if (p[1] == "linear_1") return "time_embed.0." + join_from(p, 2);
    if (p[1] == "linear_2") return "time_embed.2." + join_from(p, 2);
    return "";
  }
  if (p[0] == "conv_in") return "input_blocks.0.0." + join_from(p, 1);
  if (p[0] == "conv_norm_out") return "out.0." + join_from(p, 1);
  if (p[0] == "conv_out") return "out.2." + join_from(p, 1);
  int64_t i = 0, j = 0;
  if (p[0] == "mid_block" && p.size() > 4 && parse_index(p[2], &j)) {
    if (p[1] == "resnets" && j <= 1) {
      return prefixed("middle_block." + std::to_string(2 * j) + ".", unet_resnet_tail(p, 3));
    }
    if (p[1] == "attentions" && j == 0) return "middle_block.1." + join_from(p, 3);
    return "";
  }
  if (p.size() < 5 || !parse_index(p[1], &i)) return "";
  if (p[0] == "down_blocks") {
    if (p[2] == "downsamplers" && p[3] == "0" && p[4] == "conv" && p.size() > 5) {
      return "input_blocks." + std::to_string(per_level * (i + 1)) + ".0.op." + join_from(p, 5);
    }
    if (!parse_index(p[3], &j) || j >= layers_per_block) return "";
    const std::string block = "input_blocks." + std::to_string(per_level * i + j + 1) + ".";
    if (p[2] == "resnets") return prefixed(block + "0.", unet_resnet_tail(p, 4));
    if (p[2] == "attentions") return block + "1." + join_from(p, 4);
    return "";
  }
  if (p[0] == "up_blocks") {
    if (p[2] == "upsamplers" && p[3] == "0" && p[4] == "conv" && p.size() > 5) {
      const int64_t sub = up_block_has_attention && up_block_has_attention(i) ? 2 : 1;
      return "output_blocks." + std::to_string(per_level * i + layers_per_block) + "." +
             std::to_string(sub) + ".conv." + join_from(p, 5);
    }
    if (!parse_index(p[3], &j) || j >= per_level) return "";
    const std::string block = "output_blocks." + std::to_string(per_level * i + j) + ".";
    if (p[2] == "resnets") return prefixed(block + "0.", unet_resnet_tail(p, 4));
    if (p[2] == "attentions") return block + "1." + join_from(p, 4);
  }
  return "";
}

std::string diffusers_controlnet_key_to_compvis(const std::string& name, int64_t layers_per_block,
                                                int64_t hint_blocks) {
  const auto p = split_dots(name);
  if (p.size() < 2) return "";
  int64_t i = 0;
  if (p[0] == "controlnet_cond_embedding" && p.size() > 2) {
    if (p[1] == "conv_in") return "input_hint_block.0." + join_from(p, 2);
    if (p[1] == "conv_out") {
      return "input_hint_block." + std::to_string(2 * hint_blocks + 2) + "." + join_from(p, 2);
    }
    if (p[1] == "blocks" && p.size() > 3 && parse_index(p[2], &i) && i < hint_blocks) {
      return "input_hint_block." + std::to_string(2 * i + 2) + "." + join_from(p, 3);
    }
    return "";
  }
  if (p[0] == "controlnet_down_blocks" && p.size() > 2 && parse_index(p[1], &i)) {
    return "zero_convs." + std::to_string(i) + ".0." + join_from(p, 2);
  }
  if (p[0] == "controlnet_mid_block") return "middle_block_out.0." + join_from(p, 1);
  if (p[0] == "up_blocks" || p[0] == "conv_norm_out" || p[0] == "conv_out") return "";
  return diffusers_unet_key_to_compvis(name, layers_per_block, nullptr);
}

std::string diffusers_vae_key_to_compvis(const std::string& name, int64_t up_levels) {
  const auto p = split_dots(name);
  if (p.size() < 2) return "";
  if (p[0] == "post_quant_conv" || p[0] == "quant_conv") return name;
  if ((p[0] != "decoder" && p[0] != "encoder") || p.size() < 3) return "";
  const std::string& part = p[0];  // the encoder and decoder share the middle block's naming
  if (p[1] == "conv_in" || p[1] == "conv_out") return name;
  if (p[1] == "conv_norm_out") return part + ".norm_out." + join_from(p, 2);
  int64_t i = 0, j = 0;
  if (p[1] == "mid_block" && p.size() > 4 && parse_index(p[3], &j)) {
    if (p[2] == "resnets" && j <= 1) {
      return prefixed(part + ".mid.block_" + std::to_string(j + 1) + ".", vae_resnet_tail(p, 4));
    }
    if (p[2] == "attentions" && j == 0) {
      // Older diffusers files name the projections query/key/value/proj_attn.
      if (p.size() > 6 && p[4] == "to_out" && p[5] == "0") {
        return part + ".mid.attn_1.proj_out." + join_from(p, 6);
      }
      return prefixed(part + ".mid.attn_1.", renamed_tail(p, 4,
                                                          {{"group_norm", "norm"},
                                                           {"to_q", "q"},
                                                           {"query", "q"},
                                                           {"to_k", "k"},
                                                           {"key", "k"},
                                                           {"to_v", "v"},
                                                           {"value", "v"},
                                                           {"proj_attn", "proj_out"}}));
    }
    return "";
  }
  if (part == "encoder") {
    // Encoder levels keep their order: down_blocks.i = down.i.
    if (p[1] != "down_blocks" || p.size() < 6 || !parse_index(p[2], &i)) return "";
    const std::string level = "encoder.down." + std::to_string(i) + ".";
    if (p[3] == "downsamplers" && p[4] == "0" && p[5] == "conv" && p.size() > 6) {
      return level + "downsample.conv." + join_from(p, 6);
    }
    if (p[3] == "resnets" && parse_index(p[4], &j)) {
      return prefixed(level + "block." + std::to_string(j) + ".", vae_resnet_tail(p, 5));
    }
    return "";
  }
  if (p[1] == "up_blocks" && p.size() > 5 && parse_index(p[2], &i) && i < up_levels) {
    const std::string level = "decoder.up." + std::to_string(up_levels - 1 - i) + ".";
    if (p[3] == "upsamplers" && p[4] == "0" && p[5] == "conv" && p.size() > 6) {
      return level + "upsample.conv." + join_from(p, 6);
    }
    if (p[3] == "resnets" && parse_index(p[4], &j)) {
      return prefixed(level + "block." + std::to_string(j) + ".", vae_resnet_tail(p, 5));
    }
  }
  return "";
}

}  // namespace tessera::diffusion
