#include "engine/diffusion/unet.h"

#include <cmath>
#include <cstring>
#include <utility>

namespace tessera::diffusion {

namespace cpu = kernels::cpu;

void timestep_embedding(const float* t, int64_t batch, int64_t dim, float* out) {
  // PyTorch (sd_unet.py): freqs = exp(-ln(10000) * arange(half) / half) and args = t * freqs, all
  // f32 tensors; mirroring the f32 rounding keeps the arguments (up to ~1000 rad) identical.
  const int64_t half = dim / 2;
  const float neg_log = static_cast<float>(-std::log(10000.0));
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t i = 0; i < half; ++i) {
      const float frac = static_cast<float>(i) / static_cast<float>(half);
      const float freq = std::exp(neg_log * frac);
      const float arg = t[n] * freq;
      out[n * dim + i] = std::cos(arg);
      out[n * dim + half + i] = std::sin(arg);
    }
  }
}

Expected<std::unique_ptr<UNet>> UNet::load(WeightStore& store, const UNetConfig& config,
                                           const std::string& prefix) {
  std::unique_ptr<UNet> m(new UNet());
  m->config_ = config;
  const UNetConfig& c = config;
  const int64_t c0 = c.model_channels, emb = c.time_embed_dim(), g = c.groups;
  if (c.levels() < 1 || static_cast<int64_t>(c.level_attention.size()) != c.levels()) {
    return invalid_argument("UNet config: " + std::to_string(c.levels()) + " levels with " +
                            std::to_string(c.level_attention.size()) + " attention flags");
  }
  if (c.num_heads < 1 || c.groups < 1 || c.model_channels % c.groups != 0) {
    return invalid_argument("UNet config: " + std::to_string(c.num_heads) + " heads, " +
                            std::to_string(c.groups) + " groups for " +
                            std::to_string(c.model_channels) + " model channels");
  }
  for (int64_t l = 0; l < c.levels(); ++l) {
    const bool attention = c.level_attention[l] || l + 1 == c.levels();  // the middle block
    if (c.level_channels[l] % c.groups != 0 ||
        (attention && c.level_channels[l] % c.num_heads != 0)) {
      return invalid_argument("UNet config: level " + std::to_string(l) + " has " +
                              std::to_string(c.level_channels[l]) + " channels, not divisible by " +
                              std::to_string(c.groups) + " groups" +
                              (attention ? " and " + std::to_string(c.num_heads) + " heads" : ""));
    }
  }
  auto res = [&](const std::string& p, int64_t in_c, int64_t out_c) {
    return ResBlock::load(store, p, kUNetResNames, in_c, out_c, emb, g, c.res_eps);
  };
  auto attn = [&](const std::string& p, int64_t ch) {
    return SpatialTransformer::load(store, p, ch, c.context_dim, c.num_heads, g, c.transformer_eps,
                                    c.layer_norm_eps);
  };
  TESSERA_ASSIGN_OR_RETURN(m->time_embed0_,
                           Linear::load(store, prefix + "time_embed.0", emb, c0, true));
  TESSERA_ASSIGN_OR_RETURN(m->time_embed2_,
                           Linear::load(store, prefix + "time_embed.2", emb, emb, true));
  {
    Block b;
    TESSERA_ASSIGN_OR_RETURN(
        b.conv, Conv2d::load(store, prefix + "input_blocks.0.0", c.in_channels, c0, 3));
    b.out_c = c0;
    m->input_.push_back(std::move(b));
  }
  std::vector<int64_t> skips = {c0};
  int64_t ch = c0;
  for (int64_t l = 0; l < c.levels(); ++l) {
    for (int64_t r = 0; r < c.num_res_blocks; ++r) {
      const std::string p = prefix + "input_blocks." + std::to_string(m->input_.size()) + ".";
      Block b;
      TESSERA_ASSIGN_OR_RETURN(b.res, res(p + "0.", ch, c.level_channels[l]));
      ch = c.level_channels[l];
      if (c.level_attention[l]) {
        TESSERA_ASSIGN_OR_RETURN(b.attn, attn(p + "1.", ch));
      }
      b.out_c = ch;
      skips.push_back(ch);
      m->input_.push_back(std::move(b));
    }
    if (l + 1 < c.levels()) {
      const std::string p = prefix + "input_blocks." + std::to_string(m->input_.size()) + ".";
      Block b;
      TESSERA_ASSIGN_OR_RETURN(b.conv, Conv2d::load(store, p + "0.op", ch, ch, 3, 2));
      b.out_c = ch;
      skips.push_back(ch);
      m->input_.push_back(std::move(b));
    }
  }
  {
    Block b0, b1, b2;
    TESSERA_ASSIGN_OR_RETURN(b0.res, res(prefix + "middle_block.0.", ch, ch));
    TESSERA_ASSIGN_OR_RETURN(b1.attn, attn(prefix + "middle_block.1.", ch));
    TESSERA_ASSIGN_OR_RETURN(b2.res, res(prefix + "middle_block.2.", ch, ch));
    b0.out_c = b1.out_c = b2.out_c = ch;
    m->middle_.push_back(std::move(b0));
    m->middle_.push_back(std::move(b1));
    m->middle_.push_back(std::move(b2));
  }
  for (int64_t l = c.levels() - 1; l >= 0; --l) {
    for (int64_t r = 0; r <= c.num_res_blocks; ++r) {
      const std::string p = prefix + "output_blocks." + std::to_string(m->output_.size()) + ".";
      Block b;
      b.skip_c = skips.back();
      skips.pop_back();
      TESSERA_ASSIGN_OR_RETURN(b.res, res(p + "0.", ch + b.skip_c, c.level_channels[l]));
      ch = c.level_channels[l];
      int sub = 1;
      if (c.level_attention[l]) {
        TESSERA_ASSIGN_OR_RETURN(b.attn, attn(p + std::to_string(sub++) + ".", ch));
      }
      if (l > 0 && r == c.num_res_blocks) {
        TESSERA_ASSIGN_OR_RETURN(
            b.upsample, Conv2d::load(store, p + std::to_string(sub) + ".conv", ch, ch, 3, 1, true));
      }
      b.out_c = ch;
      m->output_.push_back(std::move(b));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(m->out_norm_,
                           GroupNorm::load(store, prefix + "out.0", ch, g, c.res_eps));
  TESSERA_ASSIGN_OR_RETURN(m->out_conv_,
                           Conv2d::load(store, prefix + "out.2", ch, c.out_channels, 3));
  m->skips_.resize(m->input_.size());
  return m;
}

float* UNet::buffer(int i, int64_t floats) {
  std::vector<float>& b = main_[i];
  if (static_cast<int64_t>(b.size()) < floats) b.resize(static_cast<size_t>(floats));
  return b.data();
}

void UNet::tap(const std::string& name, const float* data, int64_t b, int64_t h, int64_t w,
               int64_t c) {
  // Callers test tap_ first, so a forward without taps builds no name strings (no allocation).
  tap_(name, data, kernels::ImageShape{b, h, w, c});
}

Status UNet::forward(const float* x, const float* t, const float* context, int64_t batch,
                     int64_t height, int64_t width, int64_t context_len, float* eps) {
  if (x == nullptr || t == nullptr || context == nullptr || eps == nullptr) {
    return invalid_argument("UNet::forward: null input or output");
  }
  const int64_t mult = config_.size_multiple();
  if (batch < 1 || context_len < 1) {
    return invalid_argument("UNet::forward: batch " + std::to_string(batch) +
                            " and context length " + std::to_string(context_len) + " must be >= 1");
  }
  if (height < 1 || width < 1 || height % mult != 0 || width % mult != 0) {
    return invalid_argument("UNet::forward: latent size " + std::to_string(height) + "x" +
                            std::to_string(width) + " is not a positive multiple of " +
                            std::to_string(mult) + " (one halving per level)");
  }
  const KernelOptions& opt = options_;
  const int64_t emb_dim = config_.time_embed_dim(), c0 = config_.model_channels;

  // Timestep embedding -> Linear -> SiLU -> Linear; every ResBlock then reads SiLU(emb).
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
  };
  float* sinus = grow(emb_[0], batch * c0);
  float* hidden = grow(emb_[1], batch * emb_dim);
  float* silu_emb = grow(emb_[2], batch * emb_dim);
  timestep_embedding(t, batch, c0, sinus);
  time_embed0_.run(sinus, batch, hidden);
  cpu::silu(hidden, hidden, batch * emb_dim);
  time_embed2_.run(hidden, batch, silu_emb);
  if (tap_) tap("time_embed", silu_emb, batch, 1, 1, emb_dim);
  cpu::silu(silu_emb, silu_emb, batch * emb_dim);

  int64_t h = height, w = width;
  const float* cur = x;
  for (size_t n = 0; n < input_.size(); ++n) {
    Block& b = input_[n];
    if (b.conv) {
      const int64_t stride = n == 0 ? 1 : 2;
      const int64_t oh = stride == 1 ? h : (h - 1) / 2 + 1, ow = stride == 1 ? w : (w - 1) / 2 + 1;
      float* out = grow(skips_[n], batch * oh * ow * b.out_c);
      b.conv->run(cur, batch, h, w, out, opt, ws_);
      h = oh;
      w = ow;
      cur = out;
    } else {
      float* out = grow(skips_[n], batch * h * w * b.out_c);
      if (b.attn) {
        float* mid = buffer(0, batch * h * w * b.out_c);
        b.res->run(cur, mid, batch, h, w, silu_emb, opt, ws_);
        b.attn->run(mid, out, batch, h, w, context, context_len, opt, ws_);
      } else {
        b.res->run(cur, out, batch, h, w, silu_emb, opt, ws_);
      }
      cur = out;
    }
    if (tap_) tap("input_blocks." + std::to_string(n), cur, batch, h, w, b.out_c);
  }

  int64_t ch = middle_[0].out_c;
  float* a = buffer(0, batch * h * w * ch);
  float* bb = buffer(1, batch * h * w * ch);
  middle_[0].res->run(cur, a, batch, h, w, silu_emb, opt, ws_);
  middle_[1].attn->run(a, bb, batch, h, w, context, context_len, opt, ws_);
  middle_[2].res->run(bb, a, batch, h, w, silu_emb, opt, ws_);
  if (tap_) tap("middle_block", a, batch, h, w, ch);
  int cur_buf = 0;  // main_[cur_buf] holds the activation

  for (size_t n = 0; n < output_.size(); ++n) {
    Block& b = output_[n];
    const std::vector<float>& skip = skips_[input_.size() - 1 - n];
    // Concatenate [h, skip] per pixel (the NHWC form of torch.cat(dim=1)).
    const int64_t pixels = batch * h * w, cat_c = ch + b.skip_c;
    float* cat = buffer(2, pixels * cat_c);
    const float* hp = main_[cur_buf].data();
    for (int64_t p = 0; p < pixels; ++p) {
      std::memcpy(cat + p * cat_c, hp + p * ch, sizeof(float) * static_cast<size_t>(ch));
      std::memcpy(cat + p * cat_c + ch, skip.data() + p * b.skip_c,
                  sizeof(float) * static_cast<size_t>(b.skip_c));
    }
    ch = b.out_c;
    const int other = 1 - cur_buf;
    float* r = buffer(other, pixels * ch);
    b.res->run(cat, r, batch, h, w, silu_emb, opt, ws_);
    cur_buf = other;
    if (b.attn) {
      float* o = buffer(1 - cur_buf, pixels * ch);
      b.attn->run(main_[cur_buf].data(), o, batch, h, w, context, context_len, opt, ws_);
      cur_buf = 1 - cur_buf;
    }
    if (b.upsample) {
      float* o = buffer(1 - cur_buf, pixels * 4 * ch);
      b.upsample->run(main_[cur_buf].data(), batch, h, w, o, opt, ws_);
      cur_buf = 1 - cur_buf;
      h *= 2;
      w *= 2;
    }
    if (tap_) tap("output_blocks." + std::to_string(n), main_[cur_buf].data(), batch, h, w, ch);
  }

  float* act = buffer(1 - cur_buf, batch * h * w * ch);
  out_norm_.run(main_[cur_buf].data(), act, kernels::ImageShape{batch, h, w, ch}, true, opt);
  out_conv_->run(act, batch, h, w, eps, opt, ws_);
  return Status();
}

}  // namespace tessera::diffusion
