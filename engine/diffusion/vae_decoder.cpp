#include "engine/diffusion/vae_decoder.h"

#include <string>
#include <utility>

namespace tessera::diffusion {

Expected<std::unique_ptr<VaeDecoder>> VaeDecoder::load(WeightStore& store,
                                                       const VaeDecoderConfig& config,
                                                       const std::string& prefix,
                                                       kernels::Backend* backend) {
  std::unique_ptr<VaeDecoder> m(new VaeDecoder());
  TESSERA_ASSIGN_OR_RETURN(backend, model_backend(backend, &m->own_backend_, "VAE decoder"));
  m->backend_ = backend;
  m->ws_ = Workspace(backend);
  m->main_ = Workspace(backend);
  LoadContext ctx{store, *backend, m->storage_};
  m->config_ = config;
  const VaeDecoderConfig& c = config;
  if (c.levels() < 1 || c.blocks_per_level < 1) {
    return invalid_argument("VAE decoder config: " + std::to_string(c.levels()) + " levels, " +
                            std::to_string(c.blocks_per_level) + " blocks per level");
  }
  for (int64_t ch : c.level_channels) {
    if (c.groups < 1 || ch % c.groups != 0) {
      return invalid_argument("VAE decoder config: " + std::to_string(ch) +
                              " channels not divisible by " + std::to_string(c.groups) + " groups");
    }
  }
  const std::string d = prefix + "decoder.";
  TESSERA_ASSIGN_OR_RETURN(m->post_quant_, Linear::load_conv1x1(ctx, prefix + "post_quant_conv",
                                                                c.z_channels, c.z_channels));
  int64_t ch = c.level_channels.back();
  TESSERA_ASSIGN_OR_RETURN(m->conv_in_, Conv2d::load(ctx, d + "conv_in", c.z_channels, ch, 3));
  auto res = [&](const std::string& p, int64_t in_c, int64_t out_c) {
    return ResBlock::load(ctx, p, kVaeResNames, in_c, out_c, 0, c.groups, c.eps);
  };
  TESSERA_ASSIGN_OR_RETURN(m->mid_, VaeMiddle::load(ctx, d + "mid.", ch, c.groups, c.eps));
  m->up_.resize(static_cast<size_t>(c.levels()));
  for (int64_t l = c.levels() - 1; l >= 0; --l) {
    const std::string p = d + "up." + std::to_string(l) + ".";
    Level& level = m->up_[static_cast<size_t>(l)];
    for (int64_t j = 0; j < c.blocks_per_level; ++j) {
      TESSERA_ASSIGN_OR_RETURN(
          ResBlock r, res(p + "block." + std::to_string(j) + ".", ch, c.level_channels[l]));
      level.blocks.push_back(std::move(r));
      ch = c.level_channels[l];
    }
    if (l > 0) {
      TESSERA_ASSIGN_OR_RETURN(level.upsample,
                               Conv2d::load(ctx, p + "upsample.conv", ch, ch, 3, 1, true));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(m->norm_out_, GroupNorm::load(ctx, d + "norm_out", ch, c.groups, c.eps));
  TESSERA_ASSIGN_OR_RETURN(m->conv_out_, Conv2d::load(ctx, d + "conv_out", ch, c.out_channels, 3));
  return m;
}

Status VaeDecoder::decode(const float* z, int64_t batch, int64_t height, int64_t width,
                          float* image) {
  if (z == nullptr || image == nullptr)
    return invalid_argument("VaeDecoder::decode: null input or output");
  if (batch < 1 || height < 1 || width < 1) {
    return invalid_argument("VaeDecoder::decode: batch " + std::to_string(batch) +
                            ", latent size " + std::to_string(height) + "x" +
                            std::to_string(width) + " must be >= 1");
  }
  kernels::Backend& be = *backend_;
  const KernelOptions& opt = options_;
  const Tf32Scope tf32(be, opt);
  const VaeDecoderConfig& c = config_;
  int64_t h = height, w = width, ch = c.level_channels.back();
  auto tap = [&](const std::string& name, const float* data) -> Status {
    tap_host_.resize(static_cast<size_t>(batch * h * w * ch));
    TESSERA_RETURN_IF_ERROR(be.download(tap_host_.data(), data, tap_host_.size() * sizeof(float)));
    tap_(name, tap_host_.data(), kernels::ImageShape{batch, h, w, ch});
    return Status();
  };
  // z / scale (a division, as the reference), then post_quant_conv into slot 1.
  const int64_t zn = batch * h * w * c.z_channels;
  TESSERA_ASSIGN_OR_RETURN(float* scaled, main_.get(0, zn));
  TESSERA_RETURN_IF_ERROR(diffusion_ops(be).divide(z, c.latent_scale, scaled, zn));
  TESSERA_ASSIGN_OR_RETURN(float* pq, main_.get(1, zn));
  TESSERA_RETURN_IF_ERROR(post_quant_.run(scaled, batch * h * w, pq));
  // From here on the activation alternates between slots 0 and 1.
  int cur = 0;
  {
    TESSERA_ASSIGN_OR_RETURN(float* out, main_.get(0, batch * h * w * ch));
    TESSERA_RETURN_IF_ERROR(conv_in_->run(pq, batch, h, w, out, opt, ws_));
    cur = 0;
  }
  const auto next = [&](int64_t floats) { return main_.get(1 - cur, floats); };
  TESSERA_RETURN_IF_ERROR(mid_->run(main_, &cur, batch, h, w, opt, ws_));
  if (tap_) TESSERA_RETURN_IF_ERROR(tap("mid", main_.data(cur)));
  for (int64_t l = c.levels() - 1; l >= 0; --l) {
    Level& level = up_[static_cast<size_t>(l)];
    for (ResBlock& r : level.blocks) {
      const int64_t out_c = c.level_channels[l];
      TESSERA_ASSIGN_OR_RETURN(float* o, next(batch * h * w * out_c));
      TESSERA_RETURN_IF_ERROR(r.run(main_.data(cur), o, batch, h, w, nullptr, opt, ws_));
      cur = 1 - cur;
      ch = out_c;
    }
    if (level.upsample) {
      TESSERA_ASSIGN_OR_RETURN(float* o, next(batch * 4 * h * w * ch));
      TESSERA_RETURN_IF_ERROR(level.upsample->run(main_.data(cur), batch, h, w, o, opt, ws_));
      cur = 1 - cur;
      h *= 2;
      w *= 2;
    }
    if (tap_) TESSERA_RETURN_IF_ERROR(tap("up." + std::to_string(l), main_.data(cur)));
  }
  TESSERA_ASSIGN_OR_RETURN(float* act, next(batch * h * w * ch));
  TESSERA_RETURN_IF_ERROR(
      norm_out_.run(main_.data(cur), act, kernels::ImageShape{batch, h, w, ch}, true, opt));
  return conv_out_->run(act, batch, h, w, image, opt, ws_);
}

}  // namespace tessera::diffusion
