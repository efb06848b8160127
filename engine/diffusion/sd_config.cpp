#include "engine/diffusion/sd_config.h"

#include <sstream>
#include <utility>

namespace tessera::diffusion {
namespace {

std::string join(const std::vector<int64_t>& v, const char* sep) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? sep : "") << v[i];
  return os.str();
}

// Tensor-shape list builders shared by the count and the checks.
class Shapes {
 public:
  explicit Shapes(std::string prefix) : prefix_(std::move(prefix)) {}
  void add(const std::string& name, std::vector<int64_t> shape) {
    shapes_[prefix_ + name] = std::move(shape);
  }
  void conv(const std::string& name, int64_t out_c, int64_t in_c, int64_t k) {
    add(name + ".weight", {out_c, in_c, k, k});
    add(name + ".bias", {out_c});
  }
  void linear(const std::string& name, int64_t out, int64_t in, bool bias = true) {
    add(name + ".weight", {out, in});
    if (bias) add(name + ".bias", {out});
  }
  void norm(const std::string& name, int64_t c) {
    add(name + ".weight", {c});
    add(name + ".bias", {c});
  }
  TensorShapes take() { return std::move(shapes_); }

 private:
  std::string prefix_;
  TensorShapes shapes_;
};

void unet_res_block(Shapes& s, const std::string& p, int64_t in_c, int64_t out_c, int64_t emb) {
  s.norm(p + "in_layers.0", in_c);
  s.conv(p + "in_layers.2", out_c, in_c, 3);
  s.linear(p + "emb_layers.1", out_c, emb);
  s.norm(p + "out_layers.0", out_c);
  s.conv(p + "out_layers.3", out_c, out_c, 3);
  if (in_c != out_c) s.conv(p + "skip_connection", out_c, in_c, 1);
}

void unet_transformer(Shapes& s, const std::string& p, int64_t c, int64_t ctx) {
  s.norm(p + "norm", c);
  s.conv(p + "proj_in", c, c, 1);
  const std::string b = p + "transformer_blocks.0.";
  for (const char* attn : {"attn1.", "attn2."}) {
    const int64_t kv_in = attn[4] == '1' ? c : ctx;
    s.linear(b + attn + "to_q", c, c, false);
    s.linear(b + attn + "to_k", c, kv_in, false);
    s.linear(b + attn + "to_v", c, kv_in, false);
    s.linear(b + attn + "to_out.0", c, c);
  }
  s.linear(b + "ff.net.0.proj", 8 * c, c);
  s.linear(b + "ff.net.2", c, 4 * c);
  for (const char* n : {"norm1", "norm2", "norm3"}) s.norm(b + n, c);
  s.conv(p + "proj_out", c, c, 1);
}

void vae_res_block(Shapes& s, const std::string& p, int64_t in_c, int64_t out_c) {
  s.norm(p + "norm1", in_c);
  s.conv(p + "conv1", out_c, in_c, 3);
  s.norm(p + "norm2", out_c);
  s.conv(p + "conv2", out_c, out_c, 3);
  if (in_c != out_c) s.conv(p + "nin_shortcut", out_c, in_c, 1);
}

// The shape of `name` or kNotFound naming it.
Expected<const std::vector<int64_t>*> shape_of(const SafeTensors& file, const std::string& name,
                                               size_t rank) {
  const TensorInfo* info = file.find(name);
  if (info == nullptr) {
    return not_found(file.path() + ": missing tensor '" + name + "'");
  }
  if (info->shape.size() != rank) {
    return corrupt_data(file.path() + ": tensor '" + name + "' has shape " + info->shape_string() +
                        ", expected " + std::to_string(rank) + " dimensions");
  }
  return &info->shape;
}

}  // namespace

std::string UNetConfig::summary() const {
  std::ostringstream os;
  os << join(level_channels, "/") << ", " << num_res_blocks << " res blocks, attention at levels ";
  bool any = false;
  for (size_t l = 0; l < level_attention.size(); ++l) {
    if (level_attention[l]) os << (any ? "," : "") << l;
    any = any || level_attention[l];
  }
  os << (any ? " + middle" : "middle") << ", " << num_heads << " heads, context " << context_dim;
  return os.str();
}

std::string VaeDecoderConfig::summary() const {
  std::ostringstream os;
  os << "levels " << join(level_channels, "/") << ", " << blocks_per_level
     << " res blocks per level, z " << z_channels;
  return os.str();
}

std::string VaeEncoderConfig::summary() const {
  std::ostringstream os;
  os << "conv_in " << base_channels << ", levels " << join(level_channels, "/") << ", "
     << blocks_per_level << " res blocks per level, z " << z_channels;
  return os.str();
}

UNetConfig sd15_unet_config() {
  UNetConfig c;
  c.level_channels = {320, 640, 1280, 1280};
  c.level_attention = {true, true, true, false};
  return c;
}

VaeDecoderConfig sd15_vae_decoder_config() {
  VaeDecoderConfig c;
  c.level_channels = {128, 256, 512, 512};
  return c;
}

VaeEncoderConfig sd15_vae_encoder_config() {
  VaeEncoderConfig c;
  c.level_channels = {128, 256, 512, 512};
  return c;
}

TensorShapes unet_tensor_shapes(const UNetConfig& c, const std::string& prefix) {
  Shapes s(prefix);
  const int64_t c0 = c.model_channels, emb = c.time_embed_dim();
  s.linear("time_embed.0", emb, c0);
  s.linear("time_embed.2", emb, emb);
  s.conv("input_blocks.0.0", c0, c.in_channels, 3);
  std::vector<int64_t> skips = {c0};
  int64_t ch = c0, n = 1;
  for (int64_t l = 0; l < c.levels(); ++l) {
    for (int64_t r = 0; r < c.num_res_blocks; ++r, ++n) {
      const std::string p = "input_blocks." + std::to_string(n) + ".";
      unet_res_block(s, p + "0.", ch, c.level_channels[l], emb);
      ch = c.level_channels[l];
      if (c.level_attention[l]) unet_transformer(s, p + "1.", ch, c.context_dim);
      skips.push_back(ch);
    }
    if (l + 1 < c.levels()) {
      s.conv("input_blocks." + std::to_string(n++) + ".0.op", ch, ch, 3);
      skips.push_back(ch);
    }
  }
  unet_res_block(s, "middle_block.0.", ch, ch, emb);
  unet_transformer(s, "middle_block.1.", ch, c.context_dim);
  unet_res_block(s, "middle_block.2.", ch, ch, emb);
  n = 0;
  for (int64_t l = c.levels() - 1; l >= 0; --l) {
    for (int64_t r = 0; r <= c.num_res_blocks; ++r, ++n) {
      const std::string p = "output_blocks." + std::to_string(n) + ".";
      const int64_t skip = skips.back();
      skips.pop_back();
      unet_res_block(s, p + "0.", ch + skip, c.level_channels[l], emb);
      ch = c.level_channels[l];
      int64_t sub = 1;
      if (c.level_attention[l])
        unet_transformer(s, p + std::to_string(sub++) + ".", ch, c.context_dim);
      if (l > 0 && r == c.num_res_blocks) s.conv(p + std::to_string(sub) + ".conv", ch, ch, 3);
    }
  }
  s.norm("out.0", ch);
  s.conv("out.2", c.out_channels, ch, 3);
  return s.take();
}

TensorShapes vae_decoder_tensor_shapes(const VaeDecoderConfig& c, const std::string& prefix) {
  Shapes s(prefix);
  s.conv("post_quant_conv", c.z_channels, c.z_channels, 1);
  int64_t ch = c.level_channels.back();
  s.conv("decoder.conv_in", ch, c.z_channels, 3);
  vae_res_block(s, "decoder.mid.block_1.", ch, ch);
  s.norm("decoder.mid.attn_1.norm", ch);
  for (const char* n : {"q", "k", "v", "proj_out"}) {
    s.conv(std::string("decoder.mid.attn_1.") + n, ch, ch, 1);
  }
  vae_res_block(s, "decoder.mid.block_2.", ch, ch);
  for (int64_t l = c.levels() - 1; l >= 0; --l) {
    const std::string p = "decoder.up." + std::to_string(l) + ".";
    for (int64_t j = 0; j < c.blocks_per_level; ++j) {
      vae_res_block(s, p + "block." + std::to_string(j) + ".", ch, c.level_channels[l]);
      ch = c.level_channels[l];
    }
    if (l > 0) s.conv(p + "upsample.conv", ch, ch, 3);
  }
  s.norm("decoder.norm_out", ch);
  s.conv("decoder.conv_out", c.out_channels, ch, 3);
  return s.take();
}

TensorShapes vae_encoder_tensor_shapes(const VaeEncoderConfig& c, const std::string& prefix) {
  Shapes s(prefix);
  int64_t ch = c.base_channels;
  s.conv("encoder.conv_in", ch, c.in_channels, 3);
  for (int64_t l = 0; l < c.levels(); ++l) {
    const std::string p = "encoder.down." + std::to_string(l) + ".";
    for (int64_t j = 0; j < c.blocks_per_level; ++j) {
      vae_res_block(s, p + "block." + std::to_string(j) + ".", ch, c.level_channels[l]);
      ch = c.level_channels[l];
    }
    if (l + 1 < c.levels()) s.conv(p + "downsample.conv", ch, ch, 3);
  }
  vae_res_block(s, "encoder.mid.block_1.", ch, ch);
  s.norm("encoder.mid.attn_1.norm", ch);
  for (const char* n : {"q", "k", "v", "proj_out"}) {
    s.conv(std::string("encoder.mid.attn_1.") + n, ch, ch, 1);
  }
  vae_res_block(s, "encoder.mid.block_2.", ch, ch);
  s.norm("encoder.norm_out", ch);
  s.conv("encoder.conv_out", 2 * c.z_channels, ch, 3);
  s.conv("quant_conv", 2 * c.z_channels, 2 * c.z_channels, 1);
  return s.take();
}

namespace {
int64_t count(const TensorShapes& shapes) {
  int64_t total = 0;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    total += n;
  }
  return total;
}
}  // namespace

int64_t unet_parameter_count(const UNetConfig& config) {
  return count(unet_tensor_shapes(config, ""));
}
int64_t vae_decoder_parameter_count(const VaeDecoderConfig& config) {
  return count(vae_decoder_tensor_shapes(config, ""));
}
int64_t vae_encoder_parameter_count(const VaeEncoderConfig& config) {
  return count(vae_encoder_tensor_shapes(config, ""));
}

Expected<UNetConfig> infer_unet_encoder_config(const SafeTensors& file, int64_t num_heads,
                                               const std::string& prefix) {
  UNetConfig c;
  c.level_channels.clear();
  c.level_attention.clear();
  const std::string& path = file.path();
  TESSERA_ASSIGN_OR_RETURN(const auto* conv_in,
                           shape_of(file, prefix + "input_blocks.0.0.weight", 4));
  c.model_channels = (*conv_in)[0];
  c.in_channels = (*conv_in)[1];
  // Walk the input blocks: ResBlocks accumulate into the current level, a downsample closes it.
  std::vector<int64_t> res_per_level = {0};
  std::vector<int> attn_per_level = {0};
  int64_t level_ch = 0;
  std::string first_transformer;
  for (int64_t n = 1;; ++n) {
    const std::string p = prefix + "input_blocks." + std::to_string(n) + ".";
    if (file.contains(p + "0.op.weight")) {
      if (res_per_level.back() == 0) {
        return corrupt_data(path + ": downsample '" + p + "0.op.weight' follows no ResBlock");
      }
      c.level_channels.push_back(level_ch);
      res_per_level.push_back(0);
      attn_per_level.push_back(0);
      continue;
    }
    if (!file.contains(p + "0.in_layers.2.weight")) break;
    TESSERA_ASSIGN_OR_RETURN(const auto* conv, shape_of(file, p + "0.in_layers.2.weight", 4));
    if (res_per_level.back() > 0 && (*conv)[0] != level_ch) {
      return corrupt_data(path + ": tensor '" + p + "0.in_layers.2.weight' has " +
                          std::to_string((*conv)[0]) + " output channels, expected " +
                          std::to_string(level_ch) + " as the level's previous ResBlock");
    }
    level_ch = (*conv)[0];
    ++res_per_level.back();
    if (file.contains(p + "1.proj_in.weight")) {
      ++attn_per_level.back();
      if (first_transformer.empty()) first_transformer = p + "1.";
    }
  }
  if (res_per_level.back() == 0) {
    return not_found(path + ": no ResBlock under '" + prefix +
                     "input_blocks.1.0' (missing tensor '" + prefix +
                     "input_blocks.1.0.in_layers.2.weight')");
  }
  c.level_channels.push_back(level_ch);
  c.num_res_blocks = res_per_level[0];
  for (size_t l = 0; l < res_per_level.size(); ++l) {
    if (res_per_level[l] != c.num_res_blocks) {
      return corrupt_data(path + ": level " + std::to_string(l) + " has " +
                          std::to_string(res_per_level[l]) + " ResBlocks under " + prefix +
                          "input_blocks, level 0 has " + std::to_string(c.num_res_blocks));
    }
    if (attn_per_level[l] != 0 && attn_per_level[l] != c.num_res_blocks) {
      return corrupt_data(path + ": level " + std::to_string(l) +
                          " has attention after only some of its ResBlocks");
    }
    c.level_attention.push_back(attn_per_level[l] != 0);
  }
  const std::string mid = prefix + "middle_block.1.";
  if (first_transformer.empty()) first_transformer = mid;
  const TensorInfo* proj_in = file.find(first_transformer + "proj_in.weight");
  if (proj_in == nullptr) {
    return not_found(path + ": missing tensor '" + first_transformer + "proj_in.weight'");
  }
  if (proj_in->shape.size() == 2) {
    return unsupported(path + ": tensor '" + first_transformer +
                       "proj_in.weight' is a linear layer " + proj_in->shape_string() +
                       " (SD 2.x layout); only SD 1.x checkpoints (1x1 convolution) are supported");
  }
  if (file.contains(first_transformer + "transformer_blocks.1.norm1.weight")) {
    return unsupported(
        path + ": '" + first_transformer +
        "transformer_blocks.1' exists: more than one transformer block per attention "
        "is not SD 1.x");
  }
  TESSERA_ASSIGN_OR_RETURN(
      const auto* to_k,
      shape_of(file, first_transformer + "transformer_blocks.0.attn2.to_k.weight", 2));
  c.context_dim = (*to_k)[1];
  c.out_channels = c.in_channels;
  if (num_heads <= 0) {
    return invalid_argument(path + ": UNet head count " + std::to_string(num_heads) +
                            " must be > 0");
  }
  c.num_heads = num_heads;
  for (int64_t l = 0; l < c.levels(); ++l) {
    if (c.level_channels[l] % c.groups != 0) {
      return corrupt_data(path + ": UNet level " + std::to_string(l) + " has " +
                          std::to_string(c.level_channels[l]) + " channels, not a multiple of " +
                          std::to_string(c.groups) + " GroupNorm groups");
    }
    if ((c.level_attention[l] || l + 1 == c.levels()) && c.level_channels[l] % num_heads != 0) {
      return invalid_argument(path + ": UNet level " + std::to_string(l) + " has " +
                              std::to_string(c.level_channels[l]) + " channels, not divisible by " +
                              std::to_string(num_heads) + " heads");
    }
  }
  if (c.model_channels % c.groups != 0) {
    return corrupt_data(path + ": tensor '" + prefix + "input_blocks.0.0.weight': " +
                        std::to_string(c.model_channels) + " channels, not a multiple of " +
                        std::to_string(c.groups) + " GroupNorm groups");
  }
  return c;
}

Expected<UNetConfig> infer_unet_config(const SafeTensors& file, int64_t num_heads,
                                       const std::string& prefix) {
  TESSERA_ASSIGN_OR_RETURN(UNetConfig c, infer_unet_encoder_config(file, num_heads, prefix));
  TESSERA_ASSIGN_OR_RETURN(const auto* conv_out, shape_of(file, prefix + "out.2.weight", 4));
  c.out_channels = (*conv_out)[0];
  return c;
}

Expected<VaeDecoderConfig> infer_vae_decoder_config(const SafeTensors& file,
                                                    const std::string& prefix) {
  VaeDecoderConfig c;
  c.level_channels.clear();
  const std::string& path = file.path();
  TESSERA_ASSIGN_OR_RETURN(const auto* pq, shape_of(file, prefix + "post_quant_conv.weight", 4));
  c.z_channels = (*pq)[0];
  for (int64_t l = 0;; ++l) {
    const std::string name = prefix + "decoder.up." + std::to_string(l) + ".block.0.conv2.weight";
    if (!file.contains(name)) break;
    TESSERA_ASSIGN_OR_RETURN(const auto* conv, shape_of(file, name, 4));
    c.level_channels.push_back((*conv)[0]);
  }
  if (c.level_channels.empty()) {
    return not_found(path + ": missing tensor '" + prefix +
                     "decoder.up.0.block.0.conv2.weight' (no VAE decoder)");
  }
  c.blocks_per_level = 0;
  while (file.contains(prefix + "decoder.up.0.block." + std::to_string(c.blocks_per_level) +
                       ".conv1.weight")) {
    ++c.blocks_per_level;
  }
  if (c.blocks_per_level == 0) {
    return not_found(path + ": missing tensor '" + prefix + "decoder.up.0.block.0.conv1.weight'");
  }
  TESSERA_ASSIGN_OR_RETURN(const auto* conv_out,
                           shape_of(file, prefix + "decoder.conv_out.weight", 4));
  c.out_channels = (*conv_out)[0];
  for (int64_t l = 0; l < c.levels(); ++l) {
    if (c.level_channels[l] % c.groups != 0) {
      return corrupt_data(path + ": VAE level " + std::to_string(l) + " has " +
                          std::to_string(c.level_channels[l]) + " channels, not a multiple of " +
                          std::to_string(c.groups) + " GroupNorm groups");
    }
  }
  return c;
}

Expected<VaeEncoderConfig> infer_vae_encoder_config(const SafeTensors& file,
                                                    const std::string& prefix) {
  VaeEncoderConfig c;
  c.level_channels.clear();
  const std::string& path = file.path();
  if (!file.contains(prefix + "encoder.conv_in.weight")) {
    return not_found(path + ": missing tensor '" + prefix +
                     "encoder.conv_in.weight' (no VAE encoder: this file has only the decoder)");
  }
  TESSERA_ASSIGN_OR_RETURN(const auto* conv_in,
                           shape_of(file, prefix + "encoder.conv_in.weight", 4));
  c.base_channels = (*conv_in)[0];
  c.in_channels = (*conv_in)[1];
  for (int64_t l = 0;; ++l) {
    const std::string name = prefix + "encoder.down." + std::to_string(l) + ".block.0.conv2.weight";
    if (!file.contains(name)) break;
    TESSERA_ASSIGN_OR_RETURN(const auto* conv, shape_of(file, name, 4));
    c.level_channels.push_back((*conv)[0]);
  }
  if (c.level_channels.empty()) {
    return not_found(path + ": missing tensor '" + prefix +
                     "encoder.down.0.block.0.conv2.weight' (a VAE encoder without blocks)");
  }
  c.blocks_per_level = 0;
  while (file.contains(prefix + "encoder.down.0.block." + std::to_string(c.blocks_per_level) +
                       ".conv1.weight")) {
    ++c.blocks_per_level;
  }
  TESSERA_ASSIGN_OR_RETURN(const auto* quant, shape_of(file, prefix + "quant_conv.weight", 4));
  if ((*quant)[0] % 2 != 0 || (*quant)[0] < 2) {
    return corrupt_data(path + ": tensor '" + prefix + "quant_conv.weight' has " +
                        std::to_string((*quant)[0]) +
                        " output channels; a KL encoder has an even count (mean | log-variance)");
  }
  c.z_channels = (*quant)[0] / 2;
  for (int64_t ch : c.level_channels) {
    if (ch % c.groups != 0) {
      return corrupt_data(path + ": VAE encoder level with " + std::to_string(ch) +
                          " channels, not a multiple of " + std::to_string(c.groups) +
                          " GroupNorm groups");
    }
  }
  if (c.base_channels % c.groups != 0) {
    return corrupt_data(path + ": VAE encoder conv_in has " + std::to_string(c.base_channels) +
                        " channels, not a multiple of " + std::to_string(c.groups) +
                        " GroupNorm groups");
  }
  return c;
}

}  // namespace tessera::diffusion
