#include "engine/diffusion/unet.h"

#include <cmath>
#include <utility>

namespace tessera::diffusion {

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
                                           const std::string& prefix, kernels::Backend* backend,
                                           UNetPart part) {
  std::unique_ptr<UNet> m(new UNet());
  TESSERA_ASSIGN_OR_RETURN(backend, model_backend(backend, &m->own_backend_, "UNet"));
  m->backend_ = backend;
  m->ws_ = Workspace(backend);
  m->skips_ = Workspace(backend);
  m->main_ = Workspace(backend);
  m->emb_ = Workspace(backend);
  LoadContext ctx{store, *backend, m->storage_};
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
    return ResBlock::load(ctx, p, kUNetResNames, in_c, out_c, emb, g, c.res_eps);
  };
  auto attn = [&](const std::string& p, int64_t ch) {
    return SpatialTransformer::load(ctx, p, ch, c.context_dim, c.num_heads, g, c.transformer_eps,
                                    c.layer_norm_eps);
  };
  TESSERA_ASSIGN_OR_RETURN(m->time_embed0_,
                           Linear::load(ctx, prefix + "time_embed.0", emb, c0, true));
  TESSERA_ASSIGN_OR_RETURN(m->time_embed2_,
                           Linear::load(ctx, prefix + "time_embed.2", emb, emb, true));
  {
    Block b;
    TESSERA_ASSIGN_OR_RETURN(b.conv,
                             Conv2d::load(ctx, prefix + "input_blocks.0.0", c.in_channels, c0, 3));
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
      TESSERA_ASSIGN_OR_RETURN(b.conv, Conv2d::load(ctx, p + "0.op", ch, ch, 3, 2));
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
  if (part == UNetPart::kEncoder) return m;
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
            b.upsample, Conv2d::load(ctx, p + std::to_string(sub) + ".conv", ch, ch, 3, 1, true));
      }
      b.out_c = ch;
      m->output_.push_back(std::move(b));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(m->out_norm_, GroupNorm::load(ctx, prefix + "out.0", ch, g, c.res_eps));
  TESSERA_ASSIGN_OR_RETURN(m->out_conv_,
                           Conv2d::load(ctx, prefix + "out.2", ch, c.out_channels, 3));
  return m;
}

UNet::BlockSize UNet::block_size(int k) const {
  int64_t h = encoded_.height, w = encoded_.width;
  for (int n = 1; n <= k; ++n) {
    if (input_[static_cast<size_t>(n)].conv) {
      h = (h - 1) / 2 + 1;
      w = (w - 1) / 2 + 1;
    }
  }
  return BlockSize{h, w, input_[static_cast<size_t>(k)].out_c};
}

const float* UNet::block_output(int k) const {
  return skips_.data(k);
}

const float* UNet::middle_output() const {
  return main_.data(0);
}

Status UNet::tap(const std::string& name, const float* data, int64_t b, int64_t h, int64_t w,
                 int64_t c) {
  // Callers test tap_ first, so a forward without taps builds no name strings (no allocation).
  tap_host_.resize(static_cast<size_t>(b * h * w * c));
  TESSERA_RETURN_IF_ERROR(
      backend_->download(tap_host_.data(), data, tap_host_.size() * sizeof(float)));
  tap_(name, tap_host_.data(), kernels::ImageShape{b, h, w, c});
  return Status();
}

Status UNet::encode(const float* x, const float* t, const float* context, int64_t batch,
                    int64_t height, int64_t width, int64_t context_len, const float* first_add) {
  const Tf32Scope tf32(*backend_, options_);
  return encode_half(x, t, context, batch, height, width, context_len, first_add);
}

Status UNet::encode_half(const float* x, const float* t, const float* context, int64_t batch,
                         int64_t height, int64_t width, int64_t context_len,
                         const float* first_add) {
  if (x == nullptr || t == nullptr || context == nullptr) {
    return invalid_argument("UNet: null input");
  }
  const int64_t mult = config_.size_multiple();
  if (batch < 1 || context_len < 1) {
    return invalid_argument("UNet: batch " + std::to_string(batch) + " and context length " +
                            std::to_string(context_len) + " must be >= 1");
  }
  if (height < 1 || width < 1 || height % mult != 0 || width % mult != 0) {
    return invalid_argument("UNet: latent size " + std::to_string(height) + "x" +
                            std::to_string(width) + " is not a positive multiple of " +
                            std::to_string(mult) + " (one halving per level)");
  }
  kernels::Backend& be = *backend_;
  const KernelOptions& opt = options_;
  const int64_t emb_dim = config_.time_embed_dim(), c0 = config_.model_channels;

  // Timestep embedding (host) -> Linear -> SiLU -> Linear; every ResBlock then reads SiLU(emb).
  sinus_host_.resize(static_cast<size_t>(batch * c0));
  timestep_embedding(t, batch, c0, sinus_host_.data());
  TESSERA_ASSIGN_OR_RETURN(float* sinus, emb_.get(0, batch * c0));
  TESSERA_ASSIGN_OR_RETURN(float* hidden, emb_.get(1, batch * emb_dim));
  TESSERA_ASSIGN_OR_RETURN(float* silu_emb, emb_.get(2, batch * emb_dim));
  TESSERA_RETURN_IF_ERROR(be.upload(sinus, sinus_host_.data(), sinus_host_.size() * sizeof(float)));
  TESSERA_RETURN_IF_ERROR(time_embed0_.run(sinus, batch, hidden));
  TESSERA_RETURN_IF_ERROR(be.silu(hidden, hidden, batch * emb_dim));
  TESSERA_RETURN_IF_ERROR(time_embed2_.run(hidden, batch, silu_emb));
  if (tap_) TESSERA_RETURN_IF_ERROR(tap("time_embed", silu_emb, batch, 1, 1, emb_dim));
  TESSERA_RETURN_IF_ERROR(be.silu(silu_emb, silu_emb, batch * emb_dim));

  int64_t h = height, w = width;
  const float* cur = x;
  for (size_t n = 0; n < input_.size(); ++n) {
    Block& b = input_[n];
    const int slot = static_cast<int>(n);
    if (b.conv) {
      const int64_t stride = n == 0 ? 1 : 2;
      const int64_t oh = stride == 1 ? h : (h - 1) / 2 + 1, ow = stride == 1 ? w : (w - 1) / 2 + 1;
      TESSERA_ASSIGN_OR_RETURN(float* out, skips_.get(slot, batch * oh * ow * b.out_c));
      TESSERA_RETURN_IF_ERROR(b.conv->run(cur, batch, h, w, out, opt, ws_));
      h = oh;
      w = ow;
      cur = out;
      if (n == 0 && first_add != nullptr) {
        const int64_t per_image = h * w * b.out_c;
        for (int64_t i = 0; i < batch; ++i) {
          TESSERA_RETURN_IF_ERROR(
              be.add(out + i * per_image, first_add, out + i * per_image, per_image));
        }
      }
    } else {
      TESSERA_ASSIGN_OR_RETURN(float* out, skips_.get(slot, batch * h * w * b.out_c));
      if (b.attn) {
        TESSERA_ASSIGN_OR_RETURN(float* mid, main_.get(0, batch * h * w * b.out_c));
        TESSERA_RETURN_IF_ERROR(b.res->run(cur, mid, batch, h, w, silu_emb, opt, ws_));
        TESSERA_RETURN_IF_ERROR(b.attn->run(mid, out, batch, h, w, context, context_len, opt, ws_));
      } else {
        TESSERA_RETURN_IF_ERROR(b.res->run(cur, out, batch, h, w, silu_emb, opt, ws_));
      }
      cur = out;
    }
    if (tap_) {
      TESSERA_RETURN_IF_ERROR(tap("input_blocks." + std::to_string(n), cur, batch, h, w, b.out_c));
    }
  }

  int64_t ch = middle_[0].out_c;
  TESSERA_ASSIGN_OR_RETURN(float* a, main_.get(0, batch * h * w * ch));
  TESSERA_ASSIGN_OR_RETURN(float* bb, main_.get(1, batch * h * w * ch));
  TESSERA_RETURN_IF_ERROR(middle_[0].res->run(cur, a, batch, h, w, silu_emb, opt, ws_));
  TESSERA_RETURN_IF_ERROR(middle_[1].attn->run(a, bb, batch, h, w, context, context_len, opt, ws_));
  TESSERA_RETURN_IF_ERROR(middle_[2].res->run(bb, a, batch, h, w, silu_emb, opt, ws_));
  if (tap_) TESSERA_RETURN_IF_ERROR(tap("middle_block", a, batch, h, w, ch));
  encoded_ = EncodedSizes{batch, height, width, h, w};
  return Status();
}

Status UNet::forward(const float* x, const float* t, const float* context, int64_t batch,
                     int64_t height, int64_t width, int64_t context_len, float* eps,
                     const ControlResiduals* control) {
  if (eps == nullptr) return invalid_argument("UNet::forward: null output");
  if (output_.empty()) {
    return invalid_argument("UNet::forward: this UNet was loaded without its decoder half");
  }
  if (control != nullptr && (control->first_row < 0 || control->batch < 1 ||
                             control->first_row + control->batch > batch ||
                             control->height != height || control->width != width)) {
    return invalid_argument(
        "UNet::forward: control residuals for rows " + std::to_string(control->first_row) + "+" +
        std::to_string(control->batch) + " at " + std::to_string(control->width) + "x" +
        std::to_string(control->height) + ", the pass is batch " + std::to_string(batch) + " at " +
        std::to_string(width) + "x" + std::to_string(height));
  }
  if (control != nullptr && control->skips.size() != input_.size()) {
    return invalid_argument("UNet::forward: " + std::to_string(control->skips.size()) +
                            " control residuals for " + std::to_string(input_.size()) +
                            " input blocks");
  }
  kernels::Backend& be = *backend_;
  const KernelOptions& opt = options_;
  const Tf32Scope tf32(be, opt);
  TESSERA_RETURN_IF_ERROR(encode_half(x, t, context, batch, height, width, context_len, nullptr));
  const float* silu_emb = emb_.data(2);
  int64_t h = encoded_.middle_height, w = encoded_.middle_width;
  int64_t ch = middle_[0].out_c;
  if (control != nullptr) {
    // A ControlNet's residuals join the skips and the middle block's output (already scaled).
    for (size_t n = 0; n < input_.size(); ++n) {
      const BlockSize s = block_size(static_cast<int>(n));
      const int64_t per_image = s.height * s.width * s.channels;
      float* skip = skips_.data(static_cast<int>(n)) + control->first_row * per_image;
      if (control->skips[n] == nullptr) continue;
      TESSERA_RETURN_IF_ERROR(be.add(skip, control->skips[n], skip, control->batch * per_image));
    }
    if (control->middle != nullptr) {
      float* middle = main_.data(0) + control->first_row * h * w * ch;
      TESSERA_RETURN_IF_ERROR(be.add(middle, control->middle, middle, control->batch * h * w * ch));
    }
  }
  int cur_buf = 0;  // main_ slot cur_buf holds the activation

  for (size_t n = 0; n < output_.size(); ++n) {
    Block& b = output_[n];
    const float* skip = skips_.data(static_cast<int>(input_.size() - 1 - n));
    // Concatenate [h, skip] per pixel (the NHWC form of torch.cat(dim=1)).
    const int64_t pixels = batch * h * w, cat_c = ch + b.skip_c;
    TESSERA_ASSIGN_OR_RETURN(float* cat, main_.get(2, pixels * cat_c));
    TESSERA_RETURN_IF_ERROR(
        diffusion_ops(be).concat_channels(main_.data(cur_buf), ch, skip, b.skip_c, cat, pixels));
    ch = b.out_c;
    const int other = 1 - cur_buf;
    TESSERA_ASSIGN_OR_RETURN(float* r, main_.get(other, pixels * ch));
    TESSERA_RETURN_IF_ERROR(b.res->run(cat, r, batch, h, w, silu_emb, opt, ws_));
    cur_buf = other;
    if (b.attn) {
      TESSERA_ASSIGN_OR_RETURN(float* o, main_.get(1 - cur_buf, pixels * ch));
      TESSERA_RETURN_IF_ERROR(
          b.attn->run(main_.data(cur_buf), o, batch, h, w, context, context_len, opt, ws_));
      cur_buf = 1 - cur_buf;
    }
    if (b.upsample) {
      TESSERA_ASSIGN_OR_RETURN(float* o, main_.get(1 - cur_buf, pixels * 4 * ch));
      TESSERA_RETURN_IF_ERROR(b.upsample->run(main_.data(cur_buf), batch, h, w, o, opt, ws_));
      cur_buf = 1 - cur_buf;
      h *= 2;
      w *= 2;
    }
    if (tap_) {
      TESSERA_RETURN_IF_ERROR(
          tap("output_blocks." + std::to_string(n), main_.data(cur_buf), batch, h, w, ch));
    }
  }

  TESSERA_ASSIGN_OR_RETURN(float* act, main_.get(1 - cur_buf, batch * h * w * ch));
  TESSERA_RETURN_IF_ERROR(
      out_norm_.run(main_.data(cur_buf), act, kernels::ImageShape{batch, h, w, ch}, true, opt));
  return out_conv_->run(act, batch, h, w, eps, opt, ws_);
}

}  // namespace tessera::diffusion
