#include "engine/diffusion/lora.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "engine/diffusion/pipeline.h"
#include "kernels/ops.h"

namespace tessera::diffusion {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool starts_with(const std::string& s, const std::string& head) {
  return s.rfind(head, 0) == 0;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

// Multi-word module names of SD 1.x's UNet (both namings) and CLIP, kept whole by
// kohya_path_to_dotted.
const char* const kProtected[] = {"down_blocks",
                                  "up_blocks",
                                  "mid_block",
                                  "transformer_blocks",
                                  "proj_in",
                                  "proj_out",
                                  "to_q",
                                  "to_k",
                                  "to_v",
                                  "to_out",
                                  "time_emb_proj",
                                  "conv_shortcut",
                                  "time_embedding",
                                  "linear_1",
                                  "linear_2",
                                  "conv_in",
                                  "conv_out",
                                  "conv_norm_out",
                                  "input_blocks",
                                  "output_blocks",
                                  "middle_block",
                                  "in_layers",
                                  "out_layers",
                                  "emb_layers",
                                  "skip_connection",
                                  "time_embed",
                                  "text_model",
                                  "self_attn",
                                  "q_proj",
                                  "k_proj",
                                  "v_proj",
                                  "out_proj",
                                  "layer_norm1",
                                  "layer_norm2",
                                  "final_layer_norm",
                                  "token_embedding",
                                  "position_embedding"};

// The suffixes that name a module's down / up / alpha, in the formats the header lists.
struct Suffix {
  const char* text;
  int role;  // 0 down, 1 up, 2 alpha
};
const Suffix kSuffixes[] = {{".lora_down.weight", 0},
                            {".lora_up.weight", 1},
                            {".alpha", 2},
                            {".lora_A.weight", 0},
                            {".lora_B.weight", 1},
                            {".lora_A.default.weight", 0},
                            {".lora_B.default.weight", 1},
                            {".lora.down.weight", 0},
                            {".lora.up.weight", 1},
                            {".lora_linear_layer.down.weight", 0},
                            {".lora_linear_layer.up.weight", 1},
                            {"_lora.down.weight", 0},
                            {"_lora.up.weight", 1}};

// An old diffusers attention-processor stem ("...attn1.processor.to_out_lora") as a module path.
std::string processor_path(std::string stem) {
  const std::string p = ".processor.";
  const size_t at = stem.find(p);
  if (at == std::string::npos) return stem;
  std::string tail = stem.substr(at + p.size());
  if (tail == "to_out") tail = "to_out.0";
  return stem.substr(0, at + 1) + tail;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace

Expected<LoraSpec> parse_lora_spec(const std::string& text) {
  LoraSpec spec;
  spec.path = text;
  const size_t colon = text.rfind(':');
  // "C:/x" or "C:\x" is a drive letter, not a multiplier.
  const bool drive =
      colon == 1 && colon + 1 < text.size() && (text[colon + 1] == '/' || text[colon + 1] == '\\');
  if (colon != std::string::npos && colon + 1 < text.size() && !drive) {
    const std::string m = text.substr(colon + 1);
    char* end = nullptr;
    const float v = std::strtof(m.c_str(), &end);
    if (end != m.c_str() && *end == '\0') {
      if (!std::isfinite(v)) return invalid_argument("LoRA '" + text + "': multiplier " + m);
      spec.path = text.substr(0, colon);
      spec.multiplier = v;
    }
  }
  if (spec.path.empty()) return invalid_argument("LoRA '" + text + "': no file");
  return spec;
}

std::string kohya_path_to_dotted(const std::string& underscored) {
  const std::vector<std::string> parts = split(underscored, '_');
  std::vector<std::string> out;
  for (size_t k = 0; k < parts.size();) {
    size_t taken = 0;
    for (const char* token : kProtected) {
      const std::vector<std::string> t = split(token, '_');
      if (k + t.size() <= parts.size() && t.size() > taken &&
          std::equal(t.begin(), t.end(), parts.begin() + static_cast<std::ptrdiff_t>(k))) {
        taken = t.size();
      }
    }
    if (taken == 0) {
      out.push_back(parts[k]);
      ++k;
    } else {
      std::string joined = parts[k];
      for (size_t j = 1; j < taken; ++j) joined += "_" + parts[k + j];
      out.push_back(joined);
      k += taken;
    }
  }
  std::string dotted;
  for (size_t i = 0; i < out.size(); ++i) dotted += (i ? "." : "") + out[i];
  return dotted;
}

Expected<LoraFileModules> read_lora_modules(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(path));
  return read_lora_modules(file);
}

namespace {

// diffusers / PEFT files keep alpha out of the tensors: the safetensors metadata key
// `lora_adapter_metadata` holds PEFT's LoraConfig as JSON per component ("unet.lora_alpha",
// "text_encoder.lora_alpha", or unprefixed "lora_alpha"; "...alpha_pattern": {module suffix:
// alpha} overrides per module). A module with its own alpha tensor keeps it.
Status apply_adapter_metadata(const SafeTensors& file, LoraFileModules* out) {
  const auto it = file.metadata().find("lora_adapter_metadata");
  if (it == file.metadata().end()) return Status();
  const std::string where = file.path() + ": metadata 'lora_adapter_metadata'";
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return corrupt_data(where + " is not a JSON object");
  const auto alpha_of = [&](const nlohmann::json& v, const std::string& key) -> Expected<float> {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
      return corrupt_data(where + ": \"" + key + "\" is not a finite alpha >= 0");
    }
    return static_cast<float>(v.get<double>());
  };
  for (LoraModule& m : out->modules) {
    if (m.alpha > 0) continue;
    const std::string component = m.text ? "text_encoder." : "unet.";
    float alpha = 0.0f;
    for (const std::string& key : {component + "lora_alpha", std::string("lora_alpha")}) {
      if (!j.contains(key)) continue;
      TESSERA_ASSIGN_OR_RETURN(alpha, alpha_of(j[key], key));
      break;
    }
    for (const std::string& key : {component + "alpha_pattern", std::string("alpha_pattern")}) {
      if (!j.contains(key)) continue;
      if (!j[key].is_object()) return corrupt_data(where + ": \"" + key + "\" is not an object");
      for (const auto& [pattern, v] : j[key].items()) {
        if (ends_with(m.path, pattern)) {
          TESSERA_ASSIGN_OR_RETURN(alpha, alpha_of(v, key + "." + pattern));
        }
      }
      break;
    }
    m.alpha = alpha;
  }
  return Status();
}

}  // namespace

Expected<LoraFileModules> read_lora_modules(const SafeTensors& file) {
  const std::string& path = file.path();
  struct Parts {
    std::string down, up, alpha;
  };
  std::map<std::string, Parts> stems;
  std::vector<std::string> unknown;
  for (const TensorInfo& info : file.tensors()) {
    const std::string& name = info.name;
    if (starts_with(name, "lora_te1_") || starts_with(name, "lora_te2_") ||
        starts_with(name, "text_encoder_2.")) {
      return unsupported(
          path + ": key '" + name +
          "' is an SDXL LoRA's (two text encoders); only SD 1.x LoRAs are supported");
    }
    if (name.find(".hada_") != std::string::npos || name.find(".lokr_") != std::string::npos ||
        name.find(".lora_mid.") != std::string::npos) {
      return unsupported(path + ": key '" + name +
                         "' is a LoHa / LoKr / Tucker module; only plain LoRA (down x up) is "
                         "supported");
    }
    bool matched = false;
    for (const Suffix& s : kSuffixes) {
      if (!ends_with(name, s.text)) continue;
      Parts& p = stems[name.substr(0, name.size() - std::string(s.text).size())];
      (s.role == 0 ? p.down : s.role == 1 ? p.up : p.alpha) = name;
      matched = true;
      break;
    }
    if (!matched) unknown.push_back(name);
  }
  LoraFileModules out;
  out.path = path;
  for (const auto& [stem, p] : stems) {
    if (p.down.empty() || p.up.empty()) {
      if (p.down.empty() && p.up.empty()) continue;  // an alpha alone
      return corrupt_data(path + ": module '" + stem + "' has a " +
                          (p.down.empty() ? "up" : "down") + " matrix without its " +
                          (p.down.empty() ? "down" : "up") + " matrix");
    }
    LoraModule m;
    m.key = stem;
    m.down_name = p.down;
    m.up_name = p.up;
    if (!p.alpha.empty()) {
      TESSERA_ASSIGN_OR_RETURN(std::vector<float> a, file.to_f32(p.alpha));
      if (a.size() != 1 || !std::isfinite(a[0]) || a[0] < 0) {
        return corrupt_data(path + ": '" + p.alpha + "' is not one finite alpha >= 0");
      }
      m.alpha = a[0];
    }
    if (starts_with(stem, "lora_unet_")) {
      m.path = kohya_path_to_dotted(stem.substr(10));
    } else if (starts_with(stem, "lora_te_")) {
      m.text = true;
      m.path = kohya_path_to_dotted(stem.substr(8));
    } else if (starts_with(stem, "unet.")) {
      m.path = processor_path(stem.substr(5));
    } else if (starts_with(stem, "text_encoder.")) {
      m.text = true;
      m.path = processor_path(stem.substr(13));
    } else {
      m.path = processor_path(stem);  // a diffusers UNet-only file
    }
    out.modules.push_back(std::move(m));
  }
  if (out.modules.empty()) {
    return invalid_argument(path +
                            ": no LoRA module (keys like 'lora_unet_*.lora_down.weight' or "
                            "'unet.*.lora_A.weight'); first key: '" +
                            (unknown.empty() ? std::string("(none)") : unknown.front()) + "'");
  }
  TESSERA_RETURN_IF_ERROR(apply_adapter_metadata(file, &out));
  return out;
}

Status merge_lora(const LoraSpec& spec, const LoraFileModules& lora, const UNetConfig& unet_config,
                  WeightStore* unet, WeightStore* text, const std::string& text_prefix,
                  LoraMerged* merged) {
  TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(lora.path));
  const int64_t levels = unet_config.levels();
  const auto up_has_attention = [&](int64_t i) {
    const int64_t level = levels - 1 - i;
    return level >= 0 && level < levels && unet_config.level_attention[static_cast<size_t>(level)];
  };
  merged->path = spec.path;
  merged->multiplier = spec.multiplier;
  for (const LoraModule& m : lora.modules) {
    WeightStore* store = m.text ? text : unet;
    if (store == nullptr) continue;
    // The weight this module changes.
    std::string target;
    if (m.text) {
      for (const std::string& name : {text_prefix + m.path + ".weight", m.path + ".weight"}) {
        if (store->file().contains(name)) target = name;
      }
    } else {
      const std::string ldm = std::string(kUNetPrefix) + m.path + ".weight";
      if (store->file().contains(ldm)) {
        target = ldm;
      } else {
        const std::string renamed = diffusers_unet_key_to_compvis(
            m.path + ".weight", unet_config.num_res_blocks, up_has_attention);
        if (!renamed.empty() && store->file().contains(kUNetPrefix + renamed)) {
          target = kUNetPrefix + renamed;
        }
      }
    }
    if (target.empty()) {
      return invalid_argument(lora.path + ": LoRA module '" + m.key + "' (" + m.path +
                              ") changes no weight of this model's " +
                              (m.text ? "text encoder" : "UNet") +
                              ": a LoRA for another model (SDXL, SD 2.x) or another layout");
    }
    const TensorInfo* down_info = file.find(m.down_name);
    const TensorInfo* up_info = file.find(m.up_name);
    const TensorInfo* w_info = store->file().find(target);
    if (down_info == nullptr || up_info == nullptr) {
      return corrupt_data(lora.path + ": LoRA module '" + m.key +
                          "' lost its down or up matrix (the file changed while loading?)");
    }
    const std::vector<int64_t>& ds = down_info->shape;
    const std::vector<int64_t>& us = up_info->shape;
    const std::vector<int64_t>& ws = w_info->shape;
    const bool shapes_ok = ds.size() >= 2 && us.size() >= 2 && ws.size() >= 2 && ds[0] >= 1 &&
                           us[1] == ds[0] && numel(us) == us[0] * us[1] && us[0] == ws[0] &&
                           numel(ds) / ds[0] * us[0] == numel(ws);
    if (!shapes_ok) {
      return invalid_argument(lora.path + ": LoRA module '" + m.key + "': up " + shape_text(us) +
                              " x down " + shape_text(ds) + " does not fit '" + target + "' " +
                              shape_text(ws) +
                              " (a LoRA for another model: SD 2.x's text is 1024 wide, SDXL's "
                              "2048)");
    }
    const int64_t rank = ds[0], out = us[0], cols = numel(ds) / rank;
    TESSERA_ASSIGN_OR_RETURN(std::vector<float> down, file.to_f32(m.down_name));
    TESSERA_ASSIGN_OR_RETURN(std::vector<float> up, file.to_f32(m.up_name));
    const float scale = spec.multiplier * (m.alpha > 0 ? m.alpha / static_cast<float>(rank) : 1.0f);
    // The change scale * up [out, rank] x down [rank, cols], kept as factors until the weight is
    // read (WeightStore::add_low_rank: the scale folded into up, down transposed).
    for (float& v : up) v *= scale;
    std::vector<float> down_t(static_cast<size_t>(cols * rank));
    for (int64_t r = 0; r < rank; ++r) {
      for (int64_t c = 0; c < cols; ++c) down_t[c * rank + r] = down[r * cols + c];
    }
    (void)out;
    TESSERA_RETURN_IF_ERROR(store->add_low_rank(target, std::move(up), std::move(down_t), rank));
    ++(m.text ? merged->text_modules : merged->unet_modules);
  }
  return Status();
}

}  // namespace tessera::diffusion
