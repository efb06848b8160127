#include "engine/diffusion/controlnet.h"

#include <cmath>
#include <sstream>
#include <utility>

namespace tessera::diffusion {

namespace {

std::string joined(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out.push_back('/');
    out.append(std::to_string(v[i]));
  }
  return out;
}

std::string hint_name(const std::string& prefix, size_t conv) {
  return prefix + "input_hint_block." + std::to_string(2 * conv);
}

// The output channels of each input block of `u` (conv_in, the ResBlocks, the downsamples): one
// zero convolution each.
std::vector<int64_t> input_block_widths(const UNetConfig& u) {
  std::vector<int64_t> widths = {u.model_channels};
  for (int64_t l = 0; l < u.levels(); ++l) {
    for (int64_t r = 0; r < u.num_res_blocks; ++r) widths.push_back(u.level_channels[l]);
    if (l + 1 < u.levels()) widths.push_back(u.level_channels[l]);
  }
  return widths;
}

}  // namespace

std::vector<int64_t> hint_strides(const std::vector<int64_t>& channels) {
  std::vector<int64_t> strides(channels.size(), 1);
  for (size_t i = 1; i + 1 < channels.size(); ++i) {
    if (channels[i] != channels[i - 1]) strides[i] = 2;
  }
  return strides;
}

int64_t HintEncoderConfig::downscale() const {
  int64_t f = 1;
  for (int64_t s : strides) f *= s;
  return f;
}

std::string ControlNetConfig::summary() const {
  return "hint " + joined(hint.channels) + " (x" + std::to_string(hint.downscale()) +
         "), encoder " + unet.summary();
}

ControlNetConfig sd15_controlnet_config() {
  ControlNetConfig c;
  c.unet = sd15_unet_config();
  c.hint.channels = {16, 16, 32, 32, 96, 96, 256, 320};
  c.hint.strides = hint_strides(c.hint.channels);
  return c;
}

TensorShapes controlnet_tensor_shapes(const ControlNetConfig& config, const std::string& prefix) {
  TensorShapes all = unet_tensor_shapes(config.unet, prefix);
  TensorShapes s;
  for (auto& [name, shape] : all) {
    const std::string rest = name.substr(prefix.size());
    if (rest.rfind("output_blocks.", 0) == 0 || rest.rfind("out.", 0) == 0) continue;
    s.emplace(name, shape);
  }
  int64_t in = config.hint.in_channels;
  for (size_t i = 0; i < config.hint.channels.size(); ++i) {
    const int64_t out = config.hint.channels[i];
    s[hint_name(prefix, i) + ".weight"] = {out, in, 3, 3};
    s[hint_name(prefix, i) + ".bias"] = {out};
    in = out;
  }
  // One zero convolution per input block, as wide as the block's output.
  const UNetConfig& u = config.unet;
  const std::vector<int64_t> widths = input_block_widths(u);
  for (size_t k = 0; k < widths.size(); ++k) {
    const std::string n = prefix + "zero_convs." + std::to_string(k) + ".0";
    s[n + ".weight"] = {widths[k], widths[k], 1, 1};
    s[n + ".bias"] = {widths[k]};
  }
  const int64_t mid = u.level_channels.back();
  s[prefix + "middle_block_out.0.weight"] = {mid, mid, 1, 1};
  s[prefix + "middle_block_out.0.bias"] = {mid};
  return s;
}

int64_t controlnet_parameter_count(const ControlNetConfig& config) {
  int64_t n = 0;
  for (const auto& [name, shape] : controlnet_tensor_shapes(config, "")) {
    int64_t e = 1;
    for (int64_t d : shape) e *= d;
    n += e;
  }
  return n;
}

Expected<ControlNetConfig> infer_controlnet_config(const SafeTensors& file,
                                                   const UNetConfig& steered,
                                                   int64_t latent_downscale,
                                                   const std::string& prefix) {
  const std::string& path = file.path();
  for (const char* sdxl : {"add_embedding.linear_1.weight", "label_emb.0.0.weight"}) {
    if (file.contains(prefix + sdxl)) {
      return unsupported(path + ": tensor '" + prefix + sdxl +
                         "' exists: an SDXL ControlNet; only SD 1.x ControlNets are supported");
    }
  }
  if (!file.contains(hint_name(prefix, 0) + ".weight")) {
    return not_found(path + ": no ControlNet (missing tensor '" + hint_name(prefix, 0) +
                     ".weight', the hint encoder's first convolution)");
  }
  ControlNetConfig c;
  auto encoder = infer_unet_encoder_config(file, steered.num_heads, prefix);
  if (!encoder.ok()) return encoder.status().with_context("ControlNet");
  c.unet = *encoder;
  if (c.unet.context_dim != steered.context_dim) {
    return unsupported(path + ": the ControlNet's cross-attention takes a " +
                       std::to_string(c.unet.context_dim) + "-wide text context (SD 2.x: 1024) " +
                       "and this model's UNet a " + std::to_string(steered.context_dim) +
                       "-wide one: the ControlNet is for another Stable Diffusion version");
  }
  if (c.unet.level_channels != steered.level_channels ||
      c.unet.level_attention != steered.level_attention ||
      c.unet.num_res_blocks != steered.num_res_blocks ||
      c.unet.model_channels != steered.model_channels) {
    return invalid_argument(path + ": the ControlNet's encoder (" + c.unet.summary() +
                            ") is not the UNet's (" + steered.summary() +
                            "): it was made for another model");
  }
  const int64_t latent_channels = steered.out_channels;
  if (c.unet.in_channels != latent_channels) {
    return invalid_argument(path + ": tensor '" + prefix + "input_blocks.0.0.weight' takes " +
                            std::to_string(c.unet.in_channels) + " channels; the latents have " +
                            std::to_string(latent_channels));
  }
  // The hint encoder: convolutions at even indices until one is missing.
  for (size_t i = 0;; ++i) {
    const TensorInfo* w = file.find(hint_name(prefix, i) + ".weight");
    if (w == nullptr) break;
    if (w->shape.size() != 4 || w->shape[2] != 3 || w->shape[3] != 3) {
      return corrupt_data(path + ": tensor '" + w->name + "' has shape " + w->shape_string() +
                          ", expected a 3x3 convolution");
    }
    if (i == 0) {
      c.hint.in_channels = w->shape[1];
      if (c.hint.in_channels != 3) {
        return unsupported(path + ": tensor '" + w->name + "' takes " +
                           std::to_string(c.hint.in_channels) +
                           "-channel control images; Tessera gives ControlNets RGB (3 channels)");
      }
    }
    c.hint.channels.push_back(w->shape[0]);
  }
  if (c.hint.channels.back() != c.unet.model_channels) {
    return invalid_argument(path + ": the hint encoder's last convolution '" +
                            hint_name(prefix, c.hint.channels.size() - 1) + ".weight' gives " +
                            std::to_string(c.hint.channels.back()) +
                            " channels; the encoder's first block has " +
                            std::to_string(c.unet.model_channels));
  }
  c.hint.strides = hint_strides(c.hint.channels);
  if (c.hint.downscale() != latent_downscale) {
    return invalid_argument(path + ": the hint encoder (" + joined(c.hint.channels) +
                            ") scales a control image down " + std::to_string(c.hint.downscale()) +
                            "x, this model's VAE " + std::to_string(latent_downscale) +
                            "x: the ControlNet was made for another model");
  }
  return c;
}

std::vector<float> guess_mode_scales(float strength, int count) {
  std::vector<float> s(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    s[static_cast<size_t>(i)] =
        static_cast<float>(strength * std::pow(0.825, static_cast<double>(count - 1 - i)));
  }
  return s;
}

Expected<std::unique_ptr<ControlNet>> ControlNet::load(WeightStore& store,
                                                       const ControlNetConfig& config,
                                                       const std::string& prefix,
                                                       kernels::Backend* backend) {
  std::unique_ptr<ControlNet> m(new ControlNet());
  TESSERA_ASSIGN_OR_RETURN(backend, model_backend(backend, &m->own_backend_, "ControlNet"));
  m->backend_ = backend;
  m->config_ = config;
  m->ws_ = Workspace(backend);
  m->hint_ = Workspace(backend);
  m->out_ = Workspace(backend);
  if (config.hint.channels.empty() || config.hint.channels.size() != config.hint.strides.size()) {
    return invalid_argument("ControlNet config: " + std::to_string(config.hint.channels.size()) +
                            " hint convolutions with " +
                            std::to_string(config.hint.strides.size()) + " strides");
  }
  TESSERA_ASSIGN_OR_RETURN(m->encoder_,
                           UNet::load(store, config.unet, prefix, backend, UNetPart::kEncoder));
  LoadContext ctx{store, *backend, m->storage_};
  int64_t in = config.hint.in_channels;
  for (size_t i = 0; i < config.hint.channels.size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(Conv2d conv,
                             Conv2d::load(ctx, hint_name(prefix, i), in, config.hint.channels[i], 3,
                                          config.hint.strides[i]));
    m->hint_convs_.push_back(std::move(conv));
    in = config.hint.channels[i];
  }
  const UNetConfig& u = config.unet;
  const std::vector<int64_t> widths = input_block_widths(u);
  for (size_t k = 0; k < widths.size(); ++k) {
    TESSERA_ASSIGN_OR_RETURN(
        Linear z, Linear::load_conv1x1(ctx, prefix + "zero_convs." + std::to_string(k) + ".0",
                                       widths[k], widths[k]));
    m->zero_convs_.push_back(std::move(z));
  }
  const int64_t mid = u.level_channels.back();
  TESSERA_ASSIGN_OR_RETURN(m->middle_out_,
                           Linear::load_conv1x1(ctx, prefix + "middle_block_out.0", mid, mid));
  return m;
}

void ControlNet::set_options(const KernelOptions& options) {
  options_ = options;
  encoder_->set_options(options);
}

Status ControlNet::set_hint(const float* hint, int64_t height, int64_t width) {
  const int64_t f = config_.hint.downscale();
  if (hint == nullptr) return invalid_argument("ControlNet::set_hint: null hint");
  if (height < 1 || width < 1 || height % f != 0 || width % f != 0) {
    return invalid_argument("ControlNet: a control image of " + std::to_string(width) + "x" +
                            std::to_string(height) + " is not a positive multiple of " +
                            std::to_string(f) + " (the hint encoder's downscale)");
  }
  hint_height_ = hint_width_ = 0;
  kernels::Backend& be = *backend_;
  const Tf32Scope tf32(be, options_);
  int64_t h = height, w = width;
  const float* cur = hint;
  int slot = 0;
  for (size_t i = 0; i < hint_convs_.size(); ++i) {
    const int64_t s = config_.hint.strides[i];
    const int64_t oh = s == 1 ? h : (h - 1) / 2 + 1, ow = s == 1 ? w : (w - 1) / 2 + 1;
    const int64_t c = config_.hint.channels[i];
    const bool last = i + 1 == hint_convs_.size();
    TESSERA_ASSIGN_OR_RETURN(float* out, hint_.get(last ? 2 : slot, oh * ow * c));
    TESSERA_RETURN_IF_ERROR(hint_convs_[i].run(cur, 1, h, w, out, options_, ws_));
    if (!last) TESSERA_RETURN_IF_ERROR(be.silu(out, out, oh * ow * c));
    cur = out;
    slot = 1 - slot;
    h = oh;
    w = ow;
  }
  hint_height_ = h;
  hint_width_ = w;
  return Status();
}

Expected<const ControlResiduals*> ControlNet::forward(const float* x, const float* t,
                                                      const float* context, int64_t batch,
                                                      int64_t height, int64_t width,
                                                      int64_t context_len,
                                                      const std::vector<float>& scales,
                                                      const std::vector<float>& row_scales) {
  if (!has_hint()) return invalid_argument("ControlNet::forward: no control image (set_hint)");
  if (height != hint_height_ || width != hint_width_) {
    return invalid_argument("ControlNet: latents of " + std::to_string(width) + "x" +
                            std::to_string(height) + " but the control image's features are " +
                            std::to_string(hint_width_) + "x" + std::to_string(hint_height_));
  }
  if (static_cast<int>(scales.size()) != residual_count() ||
      static_cast<int64_t>(row_scales.size()) != batch) {
    return invalid_argument("ControlNet::forward: " + std::to_string(scales.size()) +
                            " scales for " + std::to_string(residual_count()) + " residuals, " +
                            std::to_string(row_scales.size()) + " row scales for batch " +
                            std::to_string(batch));
  }
  TESSERA_RETURN_IF_ERROR(
      encoder_->encode(x, t, context, batch, height, width, context_len, hint_.data(2)));
  kernels::Backend& be = *backend_;
  kernels::DiffusionOps& ops = diffusion_ops(be);
  const Tf32Scope tf32(be, options_);  // the zero convolutions, as the encoder's products
  // out_ slot k = scale_k * row_scale_b * zero_conv_k(block k's output), per image b.
  auto project = [&](int k, const Linear& conv, const float* in, int64_t pixels,
                     int64_t channels) -> Expected<const float*> {
    TESSERA_ASSIGN_OR_RETURN(float* out, out_.get(k, batch * pixels * channels));
    TESSERA_RETURN_IF_ERROR(conv.run(in, batch * pixels, out, options_));
    const int64_t per_image = pixels * channels;
    for (int64_t b = 0; b < batch; ++b) {
      const float s = scales[static_cast<size_t>(k)] * row_scales[static_cast<size_t>(b)];
      float* y = out + b * per_image;
      if (s == 0.0f) {
        TESSERA_RETURN_IF_ERROR(be.fill_zero(y, static_cast<size_t>(per_image) * sizeof(float)));
      } else if (s != 1.0f) {
        TESSERA_RETURN_IF_ERROR(ops.divide(y, 1.0f / s, y, per_image));
      }
    }
    return out;
  };
  residuals_.batch = batch;
  residuals_.first_row = 0;
  residuals_.height = height;
  residuals_.width = width;
  residuals_.skips.resize(zero_convs_.size());
  for (size_t k = 0; k < zero_convs_.size(); ++k) {
    const UNet::BlockSize s = encoder_->block_size(static_cast<int>(k));
    TESSERA_ASSIGN_OR_RETURN(
        residuals_.skips[k],
        project(static_cast<int>(k), zero_convs_[k], encoder_->block_output(static_cast<int>(k)),
                s.height * s.width, s.channels));
  }
  const UNet::BlockSize m = encoder_->middle_size();
  TESSERA_ASSIGN_OR_RETURN(residuals_.middle,
                           project(static_cast<int>(zero_convs_.size()), middle_out_,
                                   encoder_->middle_output(), m.height * m.width, m.channels));
  return &residuals_;
}

}  // namespace tessera::diffusion
