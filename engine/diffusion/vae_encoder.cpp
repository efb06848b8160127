#include "engine/diffusion/vae_encoder.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace tessera::diffusion {

Expected<std::unique_ptr<VaeEncoder>> VaeEncoder::load(WeightStore& store,
                                                       const VaeEncoderConfig& config,
                                                       const std::string& prefix,
                                                       kernels::Backend* backend) {
  std::unique_ptr<VaeEncoder> m(new VaeEncoder());
  TESSERA_ASSIGN_OR_RETURN(backend, model_backend(backend, &m->own_backend_, "VAE encoder"));
  m->backend_ = backend;
  m->ws_ = Workspace(backend);
  m->main_ = Workspace(backend);
  LoadContext ctx{store, *backend, m->storage_};
  m->config_ = config;
  const VaeEncoderConfig& c = config;
  if (c.levels() < 1 || c.blocks_per_level < 0 || c.z_channels < 1 || c.in_channels < 1) {
    return invalid_argument("VAE encoder config: " + c.summary());
  }
  for (int64_t ch : c.level_channels) {
    if (c.groups < 1 || ch % c.groups != 0 || c.base_channels % c.groups != 0) {
      return invalid_argument("VAE encoder config: channels not divisible by " +
                              std::to_string(c.groups) + " groups (" + c.summary() + ")");
    }
  }
  const std::string e = prefix + "encoder.";
  int64_t ch = c.base_channels;
  TESSERA_ASSIGN_OR_RETURN(m->conv_in_, Conv2d::load(ctx, e + "conv_in", c.in_channels, ch, 3));
  auto res = [&](const std::string& p, int64_t in_c, int64_t out_c) {
    return ResBlock::load(ctx, p, kVaeResNames, in_c, out_c, 0, c.groups, c.eps);
  };
  m->down_.resize(static_cast<size_t>(c.levels()));
  for (int64_t l = 0; l < c.levels(); ++l) {
    const std::string p = e + "down." + std::to_string(l) + ".";
    Level& level = m->down_[static_cast<size_t>(l)];
    for (int64_t j = 0; j < c.blocks_per_level; ++j) {
      TESSERA_ASSIGN_OR_RETURN(
          ResBlock r, res(p + "block." + std::to_string(j) + ".", ch, c.level_channels[l]));
      level.blocks.push_back(std::move(r));
      ch = c.level_channels[l];
    }
    if (l + 1 < c.levels()) {
      TESSERA_ASSIGN_OR_RETURN(level.downsample,
                               Conv2d::load(ctx, p + "downsample.conv", ch, ch, 3, 2, false, true));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(m->mid_, VaeMiddle::load(ctx, e + "mid.", ch, c.groups, c.eps));
  TESSERA_ASSIGN_OR_RETURN(m->norm_out_, GroupNorm::load(ctx, e + "norm_out", ch, c.groups, c.eps));
  TESSERA_ASSIGN_OR_RETURN(m->conv_out_,
                           Conv2d::load(ctx, e + "conv_out", ch, 2 * c.z_channels, 3));
  TESSERA_ASSIGN_OR_RETURN(m->quant_, Linear::load_conv1x1(ctx, prefix + "quant_conv",
                                                           2 * c.z_channels, 2 * c.z_channels));
  return m;
}

Status VaeEncoder::encode(const float* image, int64_t batch, int64_t height, int64_t width,
                          float* moments) {
  if (image == nullptr || moments == nullptr) {
    return invalid_argument("VaeEncoder::encode: null input or output");
  }
  const VaeEncoderConfig& c = config_;
  const int64_t f = c.downscale();
  if (batch < 1 || height < f || width < f || height % f != 0 || width % f != 0) {
    return invalid_argument("VaeEncoder::encode: batch " + std::to_string(batch) + ", image " +
                            std::to_string(width) + "x" + std::to_string(height) +
                            ": the sides must be positive multiples of " + std::to_string(f));
  }
  kernels::Backend& be = *backend_;
  const KernelOptions& opt = options_;
  const Tf32Scope tf32(be, opt);
  int64_t h = height, w = width, ch = c.base_channels;
  auto tap = [&](const std::string& name, const float* data) -> Status {
    tap_host_.resize(static_cast<size_t>(batch * h * w * ch));
    TESSERA_RETURN_IF_ERROR(be.download(tap_host_.data(), data, tap_host_.size() * sizeof(float)));
    tap_(name, tap_host_.data(), kernels::ImageShape{batch, h, w, ch});
    return Status();
  };
  int cur = 0;
  {
    TESSERA_ASSIGN_OR_RETURN(float* out, main_.get(0, batch * h * w * ch));
    TESSERA_RETURN_IF_ERROR(conv_in_->run(image, batch, h, w, out, opt, ws_));
  }
  const auto next = [&](int64_t floats) { return main_.get(1 - cur, floats); };
  for (int64_t l = 0; l < c.levels(); ++l) {
    Level& level = down_[static_cast<size_t>(l)];
    for (ResBlock& r : level.blocks) {
      const int64_t out_c = c.level_channels[l];
      TESSERA_ASSIGN_OR_RETURN(float* o, next(batch * h * w * out_c));
      TESSERA_RETURN_IF_ERROR(r.run(main_.data(cur), o, batch, h, w, nullptr, opt, ws_));
      cur = 1 - cur;
      ch = out_c;
    }
    if (level.downsample) {
      TESSERA_ASSIGN_OR_RETURN(float* o, next(batch * (h / 2) * (w / 2) * ch));
      TESSERA_RETURN_IF_ERROR(level.downsample->run(main_.data(cur), batch, h, w, o, opt, ws_));
      cur = 1 - cur;
      h /= 2;
      w /= 2;
    }
    if (tap_) TESSERA_RETURN_IF_ERROR(tap("down." + std::to_string(l), main_.data(cur)));
  }
  TESSERA_RETURN_IF_ERROR(mid_->run(main_, &cur, batch, h, w, opt, ws_));
  if (tap_) TESSERA_RETURN_IF_ERROR(tap("mid", main_.data(cur)));
  TESSERA_ASSIGN_OR_RETURN(float* act, next(batch * h * w * ch));
  TESSERA_RETURN_IF_ERROR(
      norm_out_.run(main_.data(cur), act, kernels::ImageShape{batch, h, w, ch}, true, opt));
  const int64_t zc = 2 * c.z_channels;
  TESSERA_ASSIGN_OR_RETURN(float* pre, main_.get(cur, batch * h * w * zc));
  TESSERA_RETURN_IF_ERROR(conv_out_->run(act, batch, h, w, pre, opt, ws_));
  return quant_.run(pre, batch * h * w, moments);
}

void posterior_latents(const float* moments, int64_t pixels, int64_t z_channels, const float* noise,
                       float scale, float* latents) {
  for (int64_t p = 0; p < pixels; ++p) {
    const float* m = moments + p * 2 * z_channels;
    for (int64_t c = 0; c < z_channels; ++c) {
      float z = m[c];
      if (noise != nullptr) {
        const float logvar = std::clamp(m[z_channels + c], -30.0f, 20.0f);
        z += std::exp(0.5f * logvar) * noise[p * z_channels + c];
      }
      latents[p * z_channels + c] = scale * z;
    }
  }
}

void rgb8_to_image(const uint8_t* rgb, int64_t pixels, float* image) {
  for (int64_t k = 0; k < pixels * 3; ++k) image[k] = static_cast<float>(rgb[k]) / 127.5f - 1.0f;
}

}  // namespace tessera::diffusion
