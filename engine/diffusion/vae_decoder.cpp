#include "engine/diffusion/vae_decoder.h"

#include <utility>

namespace tessera::diffusion {

Expected<std::unique_ptr<VaeDecoder>> VaeDecoder::load(WeightStore& store,
                                                       const VaeDecoderConfig& config,
                                                       const std::string& prefix) {
  std::unique_ptr<VaeDecoder> m(new VaeDecoder());
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
  TESSERA_ASSIGN_OR_RETURN(m->post_quant_, Linear::load_conv1x1(store, prefix + "post_quant_conv",
                                                                c.z_channels, c.z_channels));
  int64_t ch = c.level_channels.back();
  TESSERA_ASSIGN_OR_RETURN(m->conv_in_, Conv2d::load(store, d + "conv_in", c.z_channels, ch, 3));
  auto res = [&](const std::string& p, int64_t in_c, int64_t out_c) {
    return ResBlock::load(store, p, kVaeResNames, in_c, out_c, 0, c.groups, c.eps);
  };
  TESSERA_ASSIGN_OR_RETURN(m->mid1_, res(d + "mid.block_1.", ch, ch));
  TESSERA_ASSIGN_OR_RETURN(m->mid_attn_,
                           VaeAttention::load(store, d + "mid.attn_1.", ch, c.groups, c.eps));
  TESSERA_ASSIGN_OR_RETURN(m->mid2_, res(d + "mid.block_2.", ch, ch));
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
                               Conv2d::load(store, p + "upsample.conv", ch, ch, 3, 1, true));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(m->norm_out_,
                           GroupNorm::load(store, d + "norm_out", ch, c.groups, c.eps));
  TESSERA_ASSIGN_OR_RETURN(m->conv_out_,
                           Conv2d::load(store, d + "conv_out", ch, c.out_channels, 3));
  return m;
}

float* VaeDecoder::buffer(int i, int64_t floats) {
  std::vector<float>& b = main_[i];
  if (static_cast<int64_t>(b.size()) < floats) b.resize(static_cast<size_t>(floats));
  return b.data();
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
  const KernelOptions& opt = options_;
  const VaeDecoderConfig& c = config_;
  int64_t h = height, w = width, ch = c.level_channels.back();
  // z / scale (a division, as the reference), then post_quant_conv into buffer 1.
  const int64_t zn = batch * h * w * c.z_channels;
  float* scaled = buffer(0, zn);
  for (int64_t i = 0; i < zn; ++i) scaled[i] = z[i] / c.latent_scale;
  float* pq = buffer(1, zn);
  post_quant_.run(scaled, batch * h * w, pq);
  // From here on the activation alternates between main_[0] and main_[1].
  int cur = 0;
  auto next = [&](int64_t floats) { return buffer(1 - cur, floats); };
  {
    float* out = buffer(0, batch * h * w * ch);
    conv_in_->run(main_[1].data(), batch, h, w, out, opt, ws_);
    cur = 0;
  }
  mid1_->run(main_[cur].data(), next(batch * h * w * ch), batch, h, w, nullptr, opt, ws_);
  cur = 1 - cur;
  mid_attn_->run(main_[cur].data(), next(batch * h * w * ch), batch, h, w, opt, ws_);
  cur = 1 - cur;
  mid2_->run(main_[cur].data(), next(batch * h * w * ch), batch, h, w, nullptr, opt, ws_);
  cur = 1 - cur;
  if (tap_) tap_("mid", main_[cur].data(), kernels::ImageShape{batch, h, w, ch});
  for (int64_t l = c.levels() - 1; l >= 0; --l) {
    Level& level = up_[static_cast<size_t>(l)];
    for (ResBlock& r : level.blocks) {
      const int64_t out_c = c.level_channels[l];
      r.run(main_[cur].data(), next(batch * h * w * out_c), batch, h, w, nullptr, opt, ws_);
      cur = 1 - cur;
      ch = out_c;
    }
    if (level.upsample) {
      level.upsample->run(main_[cur].data(), batch, h, w, next(batch * 4 * h * w * ch), opt, ws_);
      cur = 1 - cur;
      h *= 2;
      w *= 2;
    }
    if (tap_)
      tap_("up." + std::to_string(l), main_[cur].data(), kernels::ImageShape{batch, h, w, ch});
  }
  float* act = next(batch * h * w * ch);
  norm_out_.run(main_[cur].data(), act, kernels::ImageShape{batch, h, w, ch}, true, opt);
  conv_out_->run(act, batch, h, w, image, opt, ws_);
  return Status();
}

}  // namespace tessera::diffusion
