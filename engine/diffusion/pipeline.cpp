#include "engine/diffusion/pipeline.h"
#include "engine/diffusion/model_dir.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "core/safetensors.h"
#include "engine/diffusion/unet.h"
#include "engine/diffusion/vae_decoder.h"
#include "engine/text/clip_text_encoder.h"
#include "engine/text/clip_tokenizer.h"
#include "kernels/backend.h"

namespace tessera::diffusion {
namespace fs = std::filesystem;

namespace {

constexpr const char* kCompVisText = "cond_stage_model.transformer.";
constexpr int64_t kClipVocab = 49408;

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

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

// A checkpoint whose tensors were renamed (and possibly reshaped) into an owned buffer; the
// SafeTensors views point into `bytes`, which therefore must outlive every store made from it.
struct RenamedFile {
  std::unique_ptr<uint8_t[]> bytes;
  SafeTensors file;
};

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
    if (name.rfind("decoder.mid.attn_1.", 0) == 0 && shape->size() == 2 && name.size() > 7 &&
        name.compare(name.size() - 7, 7, ".weight") == 0) {
      shape->push_back(1);
      shape->push_back(1);
    }
    return kVaePrefix + name;
  });
}

// ---- file discovery ---------------------------------------------------------------------------

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The JSON object in `path`; a null json when the file does not exist (the caller's default
// applies), kIoError / kCorruptData naming the file otherwise.
Expected<nlohmann::json> read_json_object(const std::string& path) {
  if (!is_file(path)) return nlohmann::json();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return io_error(path + ": cannot read");
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt_data(path + ": not a JSON object");
  return j;
}

// A diffusers unet/config.json's head count ("num_attention_heads", else "attention_head_dim", an
// integer or a per-level list); 0 when the file or both keys are absent.
Expected<int64_t> read_unet_heads(const std::string& config_path) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json j, read_json_object(config_path));
  if (j.is_null()) return int64_t{0};
  for (const char* key : {"num_attention_heads", "attention_head_dim"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    nlohmann::json v = j[key];
    if (v.is_array() && !v.empty()) v = v[0];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
      return corrupt_data(config_path + ": '" + key + "' must be a positive integer, got " +
                          j[key].dump());
    }
    return v.get<int64_t>();
  }
  return int64_t{0};
}

}  // namespace

Expected<int64_t> model_card_unet_heads(const std::string& model_dir) {
  const std::string card_path = (fs::path(model_dir) / "model.json").string();
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json j, read_json_object(card_path));
  if (j.is_null() || !j.contains("unet") || !j["unet"].is_object() ||
      !j["unet"].contains("num_heads")) {
    return int64_t{0};
  }
  const nlohmann::json& v = j["unet"]["num_heads"];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    return corrupt_data(card_path + ": 'unet.num_heads' must be a positive integer, got " +
                        v.dump());
  }
  return v.get<int64_t>();
}

namespace {

Expected<text::ClipTextEncoder> load_text_encoder(const std::string& weights,
                                                  const std::string& config, int64_t heads,
                                                  WeightFormat format, kernels::Backend& backend) {
  if (heads == 0) {
    TESSERA_ASSIGN_OR_RETURN(heads, text::read_clip_num_heads(config));
  }
  TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(weights));
  text::ClipTextEncoderOptions options;
  options.n_heads = heads;
  return text::ClipTextEncoder::create(WeightStore(std::move(file), format), backend, options);
}

// A HF text encoder in `dir` (model.safetensors) or the file itself.
bool find_hf_text_encoder(const fs::path& where, std::string* weights, std::string* config) {
  if (is_file(where) && where.extension() == ".safetensors") {
    *weights = where.string();
    *config = (where.parent_path() / "config.json").string();
    return true;
  }
  if (is_file(where / "model.safetensors")) {
    *weights = (where / "model.safetensors").string();
    *config = (where / "config.json").string();
    return true;
  }
  return false;
}

Status with_prefix(const Status& s, const std::string& prefix) {
  return Status(s.code(), prefix + s.message());
}

}  // namespace

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

std::string diffusers_vae_key_to_compvis(const std::string& name, int64_t up_levels) {
  const auto p = split_dots(name);
  if (p.size() < 2) return "";
  if (p[0] == "post_quant_conv") return name;
  if (p[0] != "decoder" || p.size() < 3) return "";
  if (p[1] == "conv_in" || p[1] == "conv_out") return name;
  if (p[1] == "conv_norm_out") return "decoder.norm_out." + join_from(p, 2);
  int64_t i = 0, j = 0;
  if (p[1] == "mid_block" && p.size() > 4 && parse_index(p[3], &j)) {
    if (p[2] == "resnets" && j <= 1) {
      return prefixed("decoder.mid.block_" + std::to_string(j + 1) + ".", vae_resnet_tail(p, 4));
    }
    if (p[2] == "attentions" && j == 0) {
      // Older diffusers files name the projections query/key/value/proj_attn.
      if (p.size() > 6 && p[4] == "to_out" && p[5] == "0") {
        return "decoder.mid.attn_1.proj_out." + join_from(p, 6);
      }
      return prefixed("decoder.mid.attn_1.", renamed_tail(p, 4,
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

const char* model_layout_name(ModelLayout layout) {
  return layout == ModelLayout::kDiffusers ? "diffusers" : "compvis";
}

// ---- previews and images ----------------------------------------------------------------------

namespace {
uint8_t to_u8(float v01) {
  if (!(v01 > 0.0f)) return 0;  // also NaN
  if (v01 >= 1.0f) return 255;
  return static_cast<uint8_t>(std::lround(v01 * 255.0f));
}
}  // namespace

void latents_to_rgb_preview(const float* latents, int64_t height, int64_t width, uint8_t* rgb) {
  for (int64_t p = 0; p < height * width; ++p) {
    const float* z = latents + 4 * p;
    for (int c = 0; c < 3; ++c) {
      float v = 0;
      for (int k = 0; k < 4; ++k) v += z[k] * kLatentRgb[k][c];
      rgb[3 * p + c] = to_u8((v + 1.0f) * 0.5f);
    }
  }
}

void image_to_rgb8(const float* image, int64_t pixels, uint8_t* rgb) {
  for (int64_t k = 0; k < pixels * 3; ++k) rgb[k] = to_u8((image[k] + 1.0f) * 0.5f);
}

// ---- the model --------------------------------------------------------------------------------

struct DiffusionModel::Impl {
  // Declaration order = destruction order reversed: the renamed bytes and stores outlive the
  // models that point into them; the backend outlives the text encoder.
  std::unique_ptr<kernels::Backend> backend;
  std::string device_note;
  std::vector<std::unique_ptr<uint8_t[]>> renamed_bytes;
  std::unique_ptr<WeightStore> unet_store, vae_store;  // vae_store null when shared with the UNet
  std::optional<text::ClipTextEncoder> text;
  std::optional<text::ClipTokenizer> tokenizer;
  std::unique_ptr<UNet> unet;
  std::unique_ptr<VaeDecoder> vae;
  // Generation buffers, reused between calls: host, then the backend's (slots: Dev).
  std::vector<float> context, x, x_in, t, eps, guided, decoded;
  enum Dev : int { kDevContext, kDevX, kDevEps, kDevImage };
  Workspace dev;
  std::vector<uint8_t> preview;
};

DiffusionModel::DiffusionModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiffusionModel::~DiffusionModel() = default;

const UNetConfig& DiffusionModel::unet_config() const {
  return impl_->unet->config();
}
const VaeDecoderConfig& DiffusionModel::vae_config() const {
  return impl_->vae->config();
}
int64_t DiffusionModel::text_width() const {
  return impl_->text->config().width;
}
int64_t DiffusionModel::context_length() const {
  return impl_->text->config().max_positions;
}
int64_t DiffusionModel::size_multiple() const {
  return vae_config().upscale() * unet_config().size_multiple();
}
int64_t DiffusionModel::default_image_size() const {
  const int64_t multiple = size_multiple();
  const int64_t side = unet_config().model_channels >= 320 ? 512 : 64;
  return (side + multiple - 1) / multiple * multiple;
}
void DiffusionModel::set_kernel_options(const KernelOptions& options) {
  impl_->unet->set_options(options);
  impl_->vae->set_options(options);
}
kernels::Precision DiffusionModel::compute_precision() const {
  const KernelOptions& o = impl_->unet->options();
  return use_bf16(o, *impl_->backend) || use_tf32(o, *impl_->backend) ? kernels::Precision::kBf16
                                                                      : kernels::Precision::kF32;
}

const char* DiffusionModel::compute_precision_label() const {
  const KernelOptions& o = impl_->unet->options();
  if (use_bf16(o, *impl_->backend)) return "bf16";
  if (use_device_bf16(o, *impl_->backend)) return "bf16 tensor cores (tf32 attention)";
  return use_tf32(o, *impl_->backend) ? "tf32" : "f32";
}

const kernels::Backend& DiffusionModel::backend() const {
  return *impl_->backend;
}

const std::string& DiffusionModel::device_note() const {
  return impl_->device_note;
}

const char* compute_precision_name(ComputePrecision p) {
  switch (p) {
    case ComputePrecision::kF32:
      return "f32";
    case ComputePrecision::kBf16:
      return "bf16";
    case ComputePrecision::kAuto:
      break;
  }
  return "auto";
}

kernels::Precision resolve_precision(ComputePrecision p, int64_t model_channels) {
  const bool want =
      p == ComputePrecision::kBf16 || (p == ComputePrecision::kAuto && model_channels >= 320);
  return want && kernels::cpu::bf16_compute_available() ? kernels::Precision::kBf16
                                                        : kernels::Precision::kF32;
}

kernels::Precision resolve_precision(ComputePrecision p, int64_t model_channels,
                                     const kernels::Backend& backend) {
  if (backend.bf16_compute() || !backend.tf32_products_available()) {
    return resolve_precision(p, model_channels);
  }
  // A GPU: kBf16 only when asked for. Its kBf16 was TF32 products when the H200 ablation of
  // 2026-12-04 (SD 1.5 512x512) measured it slower than f32 (UNet step 119.3 against 116.5 ms,
  // VAE 94.9 against 58.8 ms); it is now bf16 tensor-core products for every weight
  // (use_device_bf16), not measured yet, so auto stays f32 until a device run says otherwise.
  (void)model_channels;
  return p == ComputePrecision::kBf16 ? kernels::Precision::kBf16 : kernels::Precision::kF32;
}

namespace {

// A model's UNet and VAE weights, opened, with the configurations their tensors imply.
struct DenoiserWeights {
  std::vector<std::unique_ptr<uint8_t[]>> renamed_bytes;  // diffusers tensors under CompVis names
  std::unique_ptr<WeightStore> unet_store, vae_store;     // vae_store null: in unet_store
  UNetConfig unet;
  VaeDecoderConfig vae;
  bool text_in_checkpoint = false;  // a CompVis checkpoint carrying its CLIP text encoder
};

// The UNet's attention head count, not visible in tensor shapes: the option, else `config`'s,
// else 8 (SD 1.x).
Expected<int64_t> unet_head_count(int64_t given, const std::vector<fs::path>& configs,
                                  const fs::path& card_dir) {
  int64_t heads = given;
  if (heads == 0 && !card_dir.empty()) {
    // A Tessera model card next to the checkpoint (tools/train/diffusion/export.py writes
    // "unet": {"num_heads": N}).
    TESSERA_ASSIGN_OR_RETURN(heads, model_card_unet_heads(card_dir.string()));
  }
  for (const fs::path& config : configs) {
    if (heads != 0) break;
    TESSERA_ASSIGN_OR_RETURN(heads, read_unet_heads(config.string()));
  }
  return heads != 0 ? heads : 8;
}

// diffusers: unet/ and vae/ folders, their tensors renamed to CompVis names.
Expected<DenoiserWeights> open_diffusers_weights(const std::string& path, const fs::path& dir,
                                                 const DiffusionModelFiles& files,
                                                 const DiffusionLoadOptions& options) {
  if (!is_file(files.unet)) {
    return not_found("diffusers model '" + path + "': missing unet/" + kDiffusersWeights +
                     " (the UNet)");
  }
  if (!is_file(files.vae)) {
    return not_found("diffusers model '" + path + "': missing vae/" + kDiffusersWeights +
                     " (the VAE decoder)");
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t heads,
                           unet_head_count(options.unet_heads, {dir / "unet" / "config.json"}, {}));
  DenoiserWeights w;
  TESSERA_ASSIGN_OR_RETURN(RenamedFile unet_file, open_diffusers_unet(files.unet));
  TESSERA_ASSIGN_OR_RETURN(w.unet, infer_unet_config(unet_file.file, heads));
  TESSERA_ASSIGN_OR_RETURN(RenamedFile vae_file, open_diffusers_vae(files.vae));
  auto vae_inferred = infer_vae_decoder_config(vae_file.file);
  if (!vae_inferred.ok()) return with_prefix(vae_inferred.status(), "VAE decoder: ");
  w.vae = *vae_inferred;
  w.unet_store = std::make_unique<WeightStore>(std::move(unet_file.file), options.weights);
  w.vae_store = std::make_unique<WeightStore>(std::move(vae_file.file), options.weights);
  w.renamed_bytes.push_back(std::move(unet_file.bytes));
  w.renamed_bytes.push_back(std::move(vae_file.bytes));
  return w;
}

// CompVis: one SD 1.x checkpoint with the UNet, the VAE and usually the text encoder.
Expected<DenoiserWeights> open_compvis_weights(const fs::path& dir,
                                               const DiffusionModelFiles& files,
                                               const DiffusionLoadOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(files.unet));
  for (const TensorInfo& info : file.tensors()) {
    if (info.name.rfind("conditioner.", 0) == 0) {
      return unsupported(files.unet + ": tensor '" + info.name +
                         "' is SDXL's conditioner; only SD 1.x checkpoints are supported");
    }
    if (info.name.rfind("cond_stage_model.model.", 0) == 0) {
      return unsupported(files.unet + ": tensor '" + info.name +
                         "' is an OpenCLIP text encoder (SD 2.x); only SD 1.x checkpoints "
                         "(CLIP ViT-L under cond_stage_model.transformer.) are supported");
    }
  }
  if (!file.contains(std::string(kUNetPrefix) + "input_blocks.0.0.weight")) {
    return not_found(files.unet + ": no UNet (missing tensor '" + kUNetPrefix +
                     "input_blocks.0.0.weight')");
  }
  if (!file.contains(std::string(kVaePrefix) + "post_quant_conv.weight") &&
      !file.contains(std::string(kVaePrefix) + "decoder.conv_in.weight")) {
    return not_found(files.unet + ": no VAE decoder (missing tensors '" + kVaePrefix +
                     "post_quant_conv.weight' and '" + kVaePrefix + "decoder.*')");
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t heads,
                           unet_head_count(options.unet_heads, {dir / "config.json"}, dir));
  DenoiserWeights w;
  TESSERA_ASSIGN_OR_RETURN(w.unet, infer_unet_config(file, heads));
  auto vae_inferred = infer_vae_decoder_config(file);
  if (!vae_inferred.ok()) return with_prefix(vae_inferred.status(), "VAE decoder: ");
  w.vae = *vae_inferred;
  w.text_in_checkpoint =
      file.contains(std::string(kCompVisText) + "text_model.embeddings.token_embedding.weight");
  w.unet_store = std::make_unique<WeightStore>(std::move(file), options.weights);
  return w;
}

// The UNet and the VAE belong together: an RGB decoder whose latent channels are the UNet's.
Status check_denoiser_fit(const DiffusionModelFiles& files, const UNetConfig& unet,
                          const VaeDecoderConfig& vae) {
  if (vae.out_channels != 3) {
    return unsupported(files.vae + ": the VAE decoder has " + std::to_string(vae.out_channels) +
                       " output channels (tensor '" + kVaePrefix +
                       "decoder.conv_out.weight'); an RGB image needs 3");
  }
  if (unet.in_channels != vae.z_channels || unet.out_channels != unet.in_channels) {
    return invalid_argument(
        files.unet + ": UNet in/out channels " + std::to_string(unet.in_channels) + "/" +
        std::to_string(unet.out_channels) + " do not match the VAE's " +
        std::to_string(vae.z_channels) + " latent channels (" + files.vae + ")");
  }
  return Status();
}

struct TextEncoderFiles {
  std::string weights, config;  // config "": inferred from the tensors
};

// The CLIP text encoder: the option, else the checkpoint's own, else a text_encoder/ folder beside
// (or, for CompVis, one level up).
Expected<TextEncoderFiles> locate_text_encoder(const std::string& path, const fs::path& dir,
                                               const DiffusionModelFiles& files,
                                               bool text_in_checkpoint,
                                               const DiffusionLoadOptions& options) {
  TextEncoderFiles t;
  if (!options.text_encoder.empty()) {
    if (!find_hf_text_encoder(options.text_encoder, &t.weights, &t.config)) {
      return not_found("text encoder '" + options.text_encoder +
                       "': no such .safetensors file or directory with model.safetensors");
    }
  } else if (text_in_checkpoint) {
    t.weights = files.unet;
  } else if (!find_hf_text_encoder(dir / "text_encoder", &t.weights, &t.config) &&
             (files.layout == ModelLayout::kDiffusers ||
              !find_hf_text_encoder(dir.parent_path() / "text_encoder", &t.weights, &t.config))) {
    return not_found(
        "diffusion model '" + path + "': no CLIP text encoder (looked for " +
        (files.layout == ModelLayout::kDiffusers
             ? (dir / "text_encoder" / "model.safetensors").string()
             : "tensors '" + std::string(kCompVisText) + "text_model.*' in " + files.unet + ", " +
                   (dir / "text_encoder" / "model.safetensors").string() + ", " +
                   (dir.parent_path() / "text_encoder" / "model.safetensors").string()) +
        ")");
  }
  return t;
}

// The CLIP tokenizer's vocabulary: the option, else vocab.json + merges.txt in the usual folders,
// else the bundled vocabulary file beside, else the fallback for CLIP-sized vocabularies.
Expected<std::string> locate_vocab(const std::string& path, const fs::path& dir, int64_t vocab_size,
                                   const DiffusionLoadOptions& options) {
  if (!options.vocab.empty()) return options.vocab;
  std::vector<std::string> looked;
  for (const fs::path& d : {dir / "tokenizer", dir, dir / "text_encoder", dir.parent_path()}) {
    looked.push_back((d / "vocab.json").string());
    if (is_file(d / "vocab.json") && is_file(d / "merges.txt")) return d.string();
  }
  const fs::path gz = dir / text::ClipTokenizer::kDefaultVocabFile;
  looked.push_back(gz.string());
  if (is_file(gz)) return gz.string();
  if (vocab_size == kClipVocab && !options.clip_vocab_fallback.empty()) {
    return options.clip_vocab_fallback;
  }
  std::string list;
  for (const std::string& l : looked) list += (list.empty() ? "" : ", ") + l;
  return not_found("diffusion model '" + path + "': no CLIP tokenizer vocabulary (looked for " +
                   list + ")");
}

}  // namespace

// Load in named steps: the backend, the files (locate_diffusion_model), the UNet and VAE weights
// and their fit, the networks, the text encoder, the tokenizer.
Expected<std::unique_ptr<DiffusionModel>> DiffusionModel::load(
    const std::string& path, const DiffusionLoadOptions& options) {
  auto impl = std::make_unique<Impl>();
  {
    auto selected = kernels::make_backend(options.device, options.cuda_device);
    if (!selected.ok()) return with_prefix(selected.status(), "diffusion model '" + path + "': ");
    impl->backend = std::move(selected->backend);
    impl->device_note = std::move(selected->note);
    impl->dev = Workspace(impl->backend.get());
  }
  TESSERA_ASSIGN_OR_RETURN(DiffusionModelLocation location, locate_diffusion_model(path));
  DiffusionModelFiles files = std::move(location.files);
  const fs::path dir = location.dir;

  TESSERA_ASSIGN_OR_RETURN(DenoiserWeights weights,
                           files.layout == ModelLayout::kDiffusers
                               ? open_diffusers_weights(path, dir, files, options)
                               : open_compvis_weights(dir, files, options));
  TESSERA_RETURN_IF_ERROR(check_denoiser_fit(files, weights.unet, weights.vae));
  impl->renamed_bytes = std::move(weights.renamed_bytes);
  impl->unet_store = std::move(weights.unet_store);
  impl->vae_store = std::move(weights.vae_store);
  TESSERA_ASSIGN_OR_RETURN(
      impl->unet, UNet::load(*impl->unet_store, weights.unet, kUNetPrefix, impl->backend.get()));
  WeightStore& vae_store = impl->vae_store ? *impl->vae_store : *impl->unet_store;
  auto vae = VaeDecoder::load(vae_store, weights.vae, kVaePrefix, impl->backend.get());
  if (!vae.ok()) return with_prefix(vae.status(), "VAE decoder: ");
  impl->vae = std::move(*vae);
  KernelOptions kernel_options;
  kernel_options.precision =
      resolve_precision(options.precision, weights.unet.model_channels, *impl->backend);
  impl->unet->set_options(kernel_options);
  impl->vae->set_options(kernel_options);

  TESSERA_ASSIGN_OR_RETURN(
      const TextEncoderFiles text_files,
      locate_text_encoder(path, dir, files, weights.text_in_checkpoint, options));
  files.text_encoder = text_files.weights;
  auto encoder = load_text_encoder(text_files.weights, text_files.config, options.text_heads,
                                   options.weights, *impl->backend);
  if (!encoder.ok()) return with_prefix(encoder.status(), "text encoder: ");
  impl->text.emplace(std::move(*encoder));
  const text::ClipTextConfig& tc = impl->text->config();
  if (tc.width != weights.unet.context_dim) {
    return invalid_argument("text encoder " + text_files.weights + " has width " +
                            std::to_string(tc.width) + " but the UNet in " + files.unet +
                            " cross-attends to context dim " +
                            std::to_string(weights.unet.context_dim) + " (tensor '" + kUNetPrefix +
                            "...attn2.to_k.weight'): the two do not belong together");
  }

  TESSERA_ASSIGN_OR_RETURN(files.vocab, locate_vocab(path, dir, tc.vocab_size, options));
  auto tokenizer = text::ClipTokenizer::load(files.vocab);
  if (!tokenizer.ok()) return with_prefix(tokenizer.status(), "tokenizer: ");
  impl->tokenizer.emplace(std::move(*tokenizer));

  auto model = std::unique_ptr<DiffusionModel>(new DiffusionModel(std::move(impl)));
  model->files_ = std::move(files);
  return model;
}

Status DiffusionModel::encode_prompts(const std::string& prompt, const std::string& negative_prompt,
                                      std::vector<float>* context) {
  Impl& m = *impl_;
  const int length = static_cast<int>(context_length());
  std::vector<int32_t> ids;
  for (const std::string* text : {&negative_prompt, &prompt}) {
    TESSERA_ASSIGN_OR_RETURN(text::PaddedTokens tokens,
                             m.tokenizer->encode_padded(*text, length, m.tokenizer->eos_id()));
    ids.insert(ids.end(), tokens.ids.begin(), tokens.ids.end());
  }
  // SD runs CLIP causal-only: the EOS padding is not masked (valid_lengths = null).
  return m.text->encode_to_host(ids.data(), nullptr, 2, length, context);
}

Expected<GeneratedImage> DiffusionModel::generate(const GenerateRequest& request,
                                                  const GenerateCallbacks& callbacks) {
  Impl& m = *impl_;
  const int64_t multiple = size_multiple();
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"width", request.width},
                                    std::pair<const char*, int64_t>{"height", request.height}}) {
    if (value <= 0 || value % multiple != 0) {
      return invalid_argument(std::string("image ") + name + " " + std::to_string(value) +
                              " is not a positive multiple of " + std::to_string(multiple) +
                              " (the VAE's " + std::to_string(vae_config().upscale()) +
                              "x upscale times the UNet's " +
                              std::to_string(unet_config().size_multiple()) + "x downsampling)");
    }
  }
  if (request.steps < 1) {
    return invalid_argument("steps must be >= 1, got " + std::to_string(request.steps));
  }
  if (!std::isfinite(request.guidance_scale)) {
    return invalid_argument("guidance scale must be finite");
  }
  const auto cancelled_now = [&] {
    return callbacks.cancel != nullptr && callbacks.cancel->load(std::memory_order_relaxed);
  };
  const int64_t upscale = vae_config().upscale();
  const int64_t lh = request.height / upscale, lw = request.width / upscale;
  const int64_t channels = unet_config().in_channels;
  const int64_t n = lh * lw * channels;
  if (request.initial_noise != nullptr &&
      static_cast<int64_t>(request.initial_noise->size()) != n) {
    return invalid_argument("initial noise has " + std::to_string(request.initial_noise->size()) +
                            " values, expected " + std::to_string(n) + " (" + std::to_string(lh) +
                            " x " + std::to_string(lw) + " x " + std::to_string(channels) + ")");
  }
  const SigmaSchedule schedule = request.schedule.value_or(
      request.sampler == SamplerKind::kDpmpp2m ? SigmaSchedule::kKarras : SigmaSchedule::kNormal);
  TESSERA_ASSIGN_OR_RETURN(Sampler sampler,
                           Sampler::create(NoiseSchedule::sd(), request.sampler, schedule,
                                           request.steps, n, request.seed));
  GeneratedImage out;
  if (cancelled_now()) return cancelled("image generation cancelled before the text encoder");
  auto t0 = Clock::now();
  TESSERA_RETURN_IF_ERROR(encode_prompts(request.prompt, request.negative_prompt, &m.context));
  out.text_ms = ms_since(t0);

  const bool guided = request.guidance_scale != 1.0f;
  const int64_t batch = guided ? 2 : 1;
  const int64_t length = context_length();
  // Batch 1 uses the prompt's row (row 1) alone. The context goes to the backend once.
  const int64_t context_floats = batch * length * text_width();
  TESSERA_ASSIGN_OR_RETURN(float* context, m.dev.get(Impl::kDevContext, context_floats));
  TESSERA_RETURN_IF_ERROR(m.backend->upload(context,
                                            m.context.data() + (guided ? 0 : length * text_width()),
                                            static_cast<size_t>(context_floats) * sizeof(float)));
  TESSERA_ASSIGN_OR_RETURN(float* x_dev, m.dev.get(Impl::kDevX, batch * n));
  TESSERA_ASSIGN_OR_RETURN(float* eps_dev, m.dev.get(Impl::kDevEps, batch * n));
  m.x.resize(static_cast<size_t>(n));
  m.x_in.resize(static_cast<size_t>(batch * n));
  m.eps.resize(static_cast<size_t>(batch * n));
  m.guided.resize(static_cast<size_t>(n));
  m.t.resize(static_cast<size_t>(batch));
  if (request.initial_noise != nullptr) {
    const double s0 = sampler.sigma(0);
    for (int64_t k = 0; k < n; ++k) {
      m.x[k] = static_cast<float>((*request.initial_noise)[k] * s0);
    }
  } else {
    sampler.init_latents(m.x.data());
  }
  const bool preview = callbacks.on_step && channels == 4;
  if (preview) m.preview.resize(static_cast<size_t>(lh * lw * 3));
  std::vector<float> denoised(preview ? static_cast<size_t>(n) : 0);

  const auto denoise_start = Clock::now();
  for (int i = 0; i < sampler.steps(); ++i) {
    if (cancelled_now()) {
      return cancelled("image generation cancelled after " + std::to_string(i) + " of " +
                       std::to_string(sampler.steps()) + " steps");
    }
    const auto step_start = Clock::now();
    const double sigma = sampler.sigma(i);
    scale_model_input(m.x.data(), n, sigma, m.x_in.data());
    if (guided) std::copy(m.x_in.begin(), m.x_in.begin() + n, m.x_in.begin() + n);
    std::fill(m.t.begin(), m.t.end(), static_cast<float>(sampler.timestep(i)));
    TESSERA_RETURN_IF_ERROR(m.backend->upload(x_dev, m.x_in.data(), m.x_in.size() * sizeof(float)));
    TESSERA_RETURN_IF_ERROR(
        m.unet->forward(x_dev, m.t.data(), context, batch, lh, lw, length, eps_dev));
    TESSERA_RETURN_IF_ERROR(
        m.backend->download(m.eps.data(), eps_dev, m.eps.size() * sizeof(float)));
    if (guided) {
      apply_guidance(m.eps.data(), m.eps.data() + n, n, request.guidance_scale, m.guided.data());
    } else {
      std::copy(m.eps.begin(), m.eps.begin() + n, m.guided.begin());
    }
    if (preview) {
      // The model's current estimate of the clean latents, before the step moves x.
      for (int64_t k = 0; k < n; ++k) {
        denoised[k] = static_cast<float>(m.x[k] - sigma * m.guided[k]);
      }
    }
    TESSERA_RETURN_IF_ERROR(sampler.step(i, m.guided.data(), m.x.data()));
    if (callbacks.on_step) {
      StepProgress progress{};
      progress.step = i;
      progress.steps = sampler.steps();
      progress.sigma = sigma;
      progress.ms = ms_since(step_start);
      progress.latents = m.x.data();
      progress.latent_height = lh;
      progress.latent_width = lw;
      progress.latent_channels = channels;
      if (preview) {
        latents_to_rgb_preview(denoised.data(), lh, lw, m.preview.data());
        progress.preview_rgb = m.preview.data();
      }
      callbacks.on_step(progress);
    }
  }
  out.denoise_ms = ms_since(denoise_start);
  if (cancelled_now()) return cancelled("image generation cancelled before the VAE decode");

  t0 = Clock::now();
  out.width = request.width;
  out.height = request.height;
  const int64_t pixels = request.width * request.height;
  out.decoded.resize(static_cast<size_t>(pixels * vae_config().out_channels));
  {
    TESSERA_ASSIGN_OR_RETURN(float* z_dev, m.dev.get(Impl::kDevX, n));
    TESSERA_ASSIGN_OR_RETURN(float* image_dev,
                             m.dev.get(Impl::kDevImage, static_cast<int64_t>(out.decoded.size())));
    TESSERA_RETURN_IF_ERROR(m.backend->upload(z_dev, m.x.data(), m.x.size() * sizeof(float)));
    TESSERA_RETURN_IF_ERROR(m.vae->decode(z_dev, 1, lh, lw, image_dev));
    TESSERA_RETURN_IF_ERROR(
        m.backend->download(out.decoded.data(), image_dev, out.decoded.size() * sizeof(float)));
  }
  out.vae_ms = ms_since(t0);
  for (size_t k = 0; k < out.decoded.size(); ++k) {
    if (!std::isfinite(out.decoded[k])) {
      return corrupt_data("VAE decode: the image has " +
                          std::string(std::isnan(out.decoded[k]) ? "NaN" : "an infinity") +
                          " at pixel " + std::to_string(k / 3) + " (latents were finite)");
    }
  }
  out.rgb.resize(static_cast<size_t>(pixels * 3));
  image_to_rgb8(out.decoded.data(), pixels, out.rgb.data());
  out.latents = m.x;
  return out;
}

}  // namespace tessera::diffusion
