#include "engine/diffusion/layers.h"

#include <cmath>
#include <utility>

namespace tessera::diffusion {

namespace cpu = kernels::cpu;
using kernels::ImageShape;

bool use_bf16(const KernelOptions& opt) {
  return opt.precision == kernels::Precision::kBf16 && cpu::bf16_compute_available();
}

float* Workspace::get(Slot slot, int64_t floats) {
  std::vector<float>& b = buffers_[slot];
  if (static_cast<int64_t>(b.size()) < floats) b.resize(static_cast<size_t>(floats));
  return b.data();
}

Expected<GroupNorm> GroupNorm::load(WeightStore& store, const std::string& name, int64_t channels,
                                    int64_t groups, float eps) {
  GroupNorm n;
  TESSERA_ASSIGN_OR_RETURN(n.gamma, store.f32(name + ".weight", {channels}));
  TESSERA_ASSIGN_OR_RETURN(n.beta, store.f32(name + ".bias", {channels}));
  n.channels = channels;
  n.groups = groups;
  n.eps = eps;
  return n;
}

void GroupNorm::run(const float* x, float* y, const ImageShape& s, bool silu,
                    const KernelOptions& opt) const {
  cpu::group_norm(x, gamma, beta, y, s, groups, eps, silu, opt.group_norm_silu);
}

Expected<Conv2d> Conv2d::load(WeightStore& store, const std::string& name, int64_t in_c,
                              int64_t out_c, int64_t kernel, int64_t stride, bool upsample2x) {
  Conv2d c;
  TESSERA_ASSIGN_OR_RETURN(c.weight_, store.f32(name + ".weight", {out_c, in_c, kernel, kernel}));
  TESSERA_ASSIGN_OR_RETURN(c.bias_, store.f32(name + ".bias", {out_c}));
  c.in_c_ = in_c;
  c.out_c_ = out_c;
  c.kernel_ = kernel;
  c.stride_ = stride;
  c.upsample2x_ = upsample2x;
  return c;
}

void Conv2d::run(const float* x, int64_t batch, int64_t h, int64_t w, float* y,
                 const KernelOptions& opt, Workspace& ws) {
  const bool bf16 = use_bf16(opt);
  if (kernel_ == 1 && !bf16) {
    cpu::linear(x, batch * h * w, kernels::Weight{weight_, DType::kF32, out_c_, in_c_}, bias_, y);
    return;
  }
  kernels::Conv2dShape s;
  s.batch = batch;
  s.in_h = h;
  s.in_w = w;
  s.in_c = in_c_;
  s.out_c = out_c_;
  s.kernel = kernel_;
  s.stride = stride_;
  s.upsample2x = upsample2x_;
  const float* in = x;
  if (upsample2x_ && opt.upsample == kernels::Fusion::kOff) {
    // The unfused baseline: the upsampled image goes through memory.
    float* up = ws.get(Workspace::kUpsample, batch * 4 * h * w * in_c_);
    cpu::upsample_nearest2x(x, up, ImageShape{batch, h, w, in_c_});
    s.in_h = 2 * h;
    s.in_w = 2 * w;
    s.upsample2x = false;
    in = up;
  }
  kernels::ConvAlgo algo = kernels::ConvAlgo::kGemm;
  switch (opt.conv) {
    case ConvPolicy::kAuto:
      algo = cpu::choose_conv_algo(s);
      break;
    case ConvPolicy::kGemm:
      break;
    case ConvPolicy::kWinograd:
      if (cpu::winograd_applies(s)) algo = kernels::ConvAlgo::kWinograd;
      break;
  }
  if (bf16 && algo == kernels::ConvAlgo::kGemm) {
    // bf16 compute replaces im2col + f32 GEMM only: Winograd layers stay f32 Winograd, which
    // on 2 Zen 4 cores outruns bf16 im2col by 1.15-1.55x (4x fewer products vs 2x the product
    // rate; measured on the shared machine, batch 2: 64x64 320->320 64 vs 92 ms, 16x16
    // 1280->1280 67 vs 77 ms; VAE 128x128 512->512 306 vs 472 ms) and is the more accurate of
    // the two (Winograd's own products in bf16 are not accurate enough: kernels::Precision).
    // Where the chooser picks im2col (8x8 1280->1280: 43 ms f32) bf16 halves the time (21 ms).
    if (packed_bf16_.empty()) packed_bf16_ = cpu::conv2d_pack_weights_bf16(weight_, s);
    cpu::conv2d_bf16(in, packed_bf16_, bias_, y, s);
    return;
  }
  std::vector<float>& packed = packed_[static_cast<size_t>(algo)];
  if (packed.empty()) {
    packed.resize(static_cast<size_t>(cpu::conv2d_packed_floats(s, algo)));
    cpu::conv2d_pack_weights(weight_, s, algo, packed.data());
  }
  cpu::conv2d(in, packed.data(), bias_, y, s, algo);
}

Expected<Linear> Linear::load(WeightStore& store, const std::string& name, int64_t out, int64_t in,
                              bool bias) {
  Linear l;
  TESSERA_ASSIGN_OR_RETURN(l.w, store.matrix(name + ".weight", out, in));
  if (bias) {
    TESSERA_ASSIGN_OR_RETURN(l.bias, store.f32(name + ".bias", {out}));
  }
  return l;
}

Expected<Linear> Linear::load_conv1x1(WeightStore& store, const std::string& name, int64_t out,
                                      int64_t in) {
  Linear l;
  TESSERA_ASSIGN_OR_RETURN(const float* w, store.f32(name + ".weight", {out, in, 1, 1}));
  l.w = kernels::Weight{w, DType::kF32, out, in};
  TESSERA_ASSIGN_OR_RETURN(l.bias, store.f32(name + ".bias", {out}));
  return l;
}

void Linear::run(const float* x, int64_t rows, float* y) const {
  cpu::linear(x, rows, w, bias, y);
}

void Linear::run(const float* x, int64_t rows, float* y, const KernelOptions& opt) const {
  if (rows < kMinBf16Rows || !use_bf16(opt)) {
    cpu::linear(x, rows, w, bias, y);
    return;
  }
  if (packed_bf16.empty()) packed_bf16 = cpu::linear_pack_bf16(w);
  cpu::linear_bf16(x, rows, packed_bf16, bias, y);
}

Expected<ResBlock> ResBlock::load(WeightStore& store, const std::string& prefix,
                                  const ResBlockNames& names, int64_t in_c, int64_t out_c,
                                  int64_t emb_dim, int64_t groups, float eps) {
  ResBlock r;
  r.in_c_ = in_c;
  r.out_c_ = out_c;
  TESSERA_ASSIGN_OR_RETURN(r.norm1_,
                           GroupNorm::load(store, prefix + names.norm1, in_c, groups, eps));
  TESSERA_ASSIGN_OR_RETURN(r.conv1_, Conv2d::load(store, prefix + names.conv1, in_c, out_c, 3));
  if (names.emb != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(r.emb_, Linear::load(store, prefix + names.emb, out_c, emb_dim, true));
  }
  TESSERA_ASSIGN_OR_RETURN(r.norm2_,
                           GroupNorm::load(store, prefix + names.norm2, out_c, groups, eps));
  TESSERA_ASSIGN_OR_RETURN(r.conv2_, Conv2d::load(store, prefix + names.conv2, out_c, out_c, 3));
  if (in_c != out_c) {
    TESSERA_ASSIGN_OR_RETURN(r.skip_,
                             Linear::load_conv1x1(store, prefix + names.skip, out_c, in_c));
  }
  return r;
}

void ResBlock::run(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                   const float* silu_emb, const KernelOptions& opt, Workspace& ws) {
  const int64_t pixels = h * w;
  const int64_t wide = std::max(in_c_, out_c_);
  float* a = ws.get(Workspace::kResA, batch * pixels * wide);
  float* b = ws.get(Workspace::kResB, batch * pixels * out_c_);
  norm1_.run(x, a, ImageShape{batch, h, w, in_c_}, true, opt);
  conv1_.run(a, batch, h, w, b, opt, ws);
  if (emb_) {
    float* e = ws.get(Workspace::kEmb, batch * out_c_);
    emb_->run(silu_emb, batch, e);
    for (int64_t n = 0; n < batch; ++n) {
      const float* en = e + n * out_c_;
      float* bn = b + n * pixels * out_c_;
      for (int64_t p = 0; p < pixels; ++p) {
        float* row = bn + p * out_c_;
        for (int64_t c = 0; c < out_c_; ++c) row[c] += en[c];
      }
    }
  }
  norm2_.run(b, a, ImageShape{batch, h, w, out_c_}, true, opt);
  conv2_.run(a, batch, h, w, b, opt, ws);
  if (skip_) {
    skip_->run(x, batch * pixels, y, opt);
    cpu::add(y, b, y, batch * pixels * out_c_);
  } else {
    cpu::add(x, b, y, batch * pixels * out_c_);
  }
}

void run_attention(const float* q, const float* k, const float* v, float* o, int64_t batch,
                   int64_t heads, int64_t q_len, int64_t kv_len, int64_t head_dim,
                   const KernelOptions& opt, Workspace& ws) {
  kernels::AttentionShape s = kernels::contiguous_attention(
      batch, heads, q_len, kv_len, head_dim, false, 1.0f / std::sqrt(static_cast<float>(head_dim)));
  s.allow_bf16 = use_bf16(opt);
  const int64_t scratch_floats = cpu::attention_scratch_floats(s, opt.attention);
  float* scratch = scratch_floats > 0 ? ws.get(Workspace::kAttnScratch, scratch_floats) : nullptr;
  cpu::diffusion_attention(q, k, v, o, s, opt.attention, scratch);
}

Expected<SpatialTransformer> SpatialTransformer::load(WeightStore& store, const std::string& prefix,
                                                      int64_t channels, int64_t context_dim,
                                                      int64_t heads, int64_t groups, float gn_eps,
                                                      float ln_eps) {
  SpatialTransformer t;
  const int64_t c = channels;
  t.c_ = c;
  t.ctx_dim_ = context_dim;
  t.heads_ = heads;
  t.ln_eps_ = ln_eps;
  TESSERA_ASSIGN_OR_RETURN(t.norm_, GroupNorm::load(store, prefix + "norm", c, groups, gn_eps));
  TESSERA_ASSIGN_OR_RETURN(t.proj_in_, Linear::load_conv1x1(store, prefix + "proj_in", c, c));
  TESSERA_ASSIGN_OR_RETURN(t.proj_out_, Linear::load_conv1x1(store, prefix + "proj_out", c, c));
  const std::string b = prefix + "transformer_blocks.0.";
  for (int i = 0; i < 3; ++i) {
    const std::string n = b + "norm" + std::to_string(i + 1);
    TESSERA_ASSIGN_OR_RETURN(t.ln_[i][0], store.f32(n + ".weight", {c}));
    TESSERA_ASSIGN_OR_RETURN(t.ln_[i][1], store.f32(n + ".bias", {c}));
  }
  TESSERA_ASSIGN_OR_RETURN(t.q1_, Linear::load(store, b + "attn1.to_q", c, c, false));
  TESSERA_ASSIGN_OR_RETURN(t.k1_, Linear::load(store, b + "attn1.to_k", c, c, false));
  TESSERA_ASSIGN_OR_RETURN(t.v1_, Linear::load(store, b + "attn1.to_v", c, c, false));
  TESSERA_ASSIGN_OR_RETURN(t.out1_, Linear::load(store, b + "attn1.to_out.0", c, c, true));
  TESSERA_ASSIGN_OR_RETURN(t.q2_, Linear::load(store, b + "attn2.to_q", c, c, false));
  TESSERA_ASSIGN_OR_RETURN(t.k2_, Linear::load(store, b + "attn2.to_k", c, context_dim, false));
  TESSERA_ASSIGN_OR_RETURN(t.v2_, Linear::load(store, b + "attn2.to_v", c, context_dim, false));
  TESSERA_ASSIGN_OR_RETURN(t.out2_, Linear::load(store, b + "attn2.to_out.0", c, c, true));
  TESSERA_ASSIGN_OR_RETURN(t.ff1_, Linear::load(store, b + "ff.net.0.proj", 8 * c, c, true));
  TESSERA_ASSIGN_OR_RETURN(t.ff2_, Linear::load(store, b + "ff.net.2", c, 4 * c, true));
  return t;
}

void SpatialTransformer::run(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                             const float* context, int64_t context_len, const KernelOptions& opt,
                             Workspace& ws) const {
  const int64_t len = h * w, rows = batch * len, c = c_, head_dim = c_ / heads_;
  float* tok = ws.get(Workspace::kTokens, rows * c);
  float* nrm = ws.get(Workspace::kNorm, rows * c);
  float* q = ws.get(Workspace::kQ, rows * c);
  float* o = ws.get(Workspace::kO, rows * c);
  const int64_t kv_rows = batch * std::max(len, context_len);
  float* k = ws.get(Workspace::kK, kv_rows * c);
  float* v = ws.get(Workspace::kV, kv_rows * c);
  // The tokens are the NHWC pixels: [batch * h * w, C] with no transpose.
  norm_.run(x, nrm, ImageShape{batch, h, w, c}, false, opt);
  proj_in_.run(nrm, rows, tok, opt);

  // Self-attention: q, k, v from one pass over the normalised tokens.
  cpu::layer_norm(tok, ln_[0][0], ln_[0][1], nrm, rows, c, ln_eps_);
  if (use_bf16(opt)) {
    q1_.run(nrm, rows, q, opt);
    k1_.run(nrm, rows, k, opt);
    v1_.run(nrm, rows, v, opt);
  } else {
    const kernels::LinearPart qkv[3] = {
        {q1_.w, nullptr, q}, {k1_.w, nullptr, k}, {v1_.w, nullptr, v}};
    cpu::linear_multi(nrm, rows, qkv, 3);
  }
  run_attention(q, k, v, o, batch, heads_, len, len, head_dim, opt, ws);
  out1_.run(o, rows, q, opt);
  cpu::add(tok, q, tok, rows * c);

  // Cross-attention over the context.
  cpu::layer_norm(tok, ln_[1][0], ln_[1][1], nrm, rows, c, ln_eps_);
  q2_.run(nrm, rows, q, opt);
  if (use_bf16(opt)) {
    k2_.run(context, batch * context_len, k, opt);
    v2_.run(context, batch * context_len, v, opt);
  } else {
    const kernels::LinearPart kv[2] = {{k2_.w, nullptr, k}, {v2_.w, nullptr, v}};
    cpu::linear_multi(context, batch * context_len, kv, 2);
  }
  run_attention(q, k, v, o, batch, heads_, len, context_len, head_dim, opt, ws);
  out2_.run(o, rows, q, opt);
  cpu::add(tok, q, tok, rows * c);

  // GEGLU feed-forward: [rows, 8C] -> [rows, 4C] -> [rows, C].
  cpu::layer_norm(tok, ln_[2][0], ln_[2][1], nrm, rows, c, ln_eps_);
  float* ff1 = ws.get(Workspace::kFf1, rows * 8 * c);
  float* ff2 = ws.get(Workspace::kFf2, rows * 4 * c);
  ff1_.run(nrm, rows, ff1, opt);
  cpu::geglu_ff(ff1, ff2, rows, 4 * c, opt.geglu);
  ff2_.run(ff2, rows, q, opt);
  cpu::add(tok, q, tok, rows * c);

  proj_out_.run(tok, rows, y, opt);
  cpu::add(y, x, y, rows * c);
}

Expected<VaeAttention> VaeAttention::load(WeightStore& store, const std::string& prefix,
                                          int64_t channels, int64_t groups, float eps) {
  VaeAttention a;
  const int64_t c = channels;
  a.c_ = c;
  TESSERA_ASSIGN_OR_RETURN(a.norm_, GroupNorm::load(store, prefix + "norm", c, groups, eps));
  TESSERA_ASSIGN_OR_RETURN(a.q_, Linear::load_conv1x1(store, prefix + "q", c, c));
  TESSERA_ASSIGN_OR_RETURN(a.k_, Linear::load_conv1x1(store, prefix + "k", c, c));
  TESSERA_ASSIGN_OR_RETURN(a.v_, Linear::load_conv1x1(store, prefix + "v", c, c));
  TESSERA_ASSIGN_OR_RETURN(a.proj_out_, Linear::load_conv1x1(store, prefix + "proj_out", c, c));
  return a;
}

void VaeAttention::run(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                       const KernelOptions& opt, Workspace& ws) const {
  const int64_t len = h * w, rows = batch * len, c = c_;
  float* nrm = ws.get(Workspace::kNorm, rows * c);
  float* q = ws.get(Workspace::kQ, rows * c);
  float* k = ws.get(Workspace::kK, rows * c);
  float* v = ws.get(Workspace::kV, rows * c);
  float* o = ws.get(Workspace::kO, rows * c);
  norm_.run(x, nrm, ImageShape{batch, h, w, c}, false, opt);
  if (use_bf16(opt)) {
    q_.run(nrm, rows, q, opt);
    k_.run(nrm, rows, k, opt);
    v_.run(nrm, rows, v, opt);
  } else {
    const kernels::LinearPart qkv[3] = {
        {q_.w, q_.bias, q}, {k_.w, k_.bias, k}, {v_.w, v_.bias, v}};
    cpu::linear_multi(nrm, rows, qkv, 3);
  }
  run_attention(q, k, v, o, batch, 1, len, len, c, opt, ws);
  proj_out_.run(o, rows, y, opt);
  cpu::add(y, x, y, rows * c);
}

void nchw_to_nhwc(const float* x, float* y, int64_t batch, int64_t channels, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      const float* src = x + (n * channels + c) * hw;
      float* dst = y + n * hw * channels + c;
      for (int64_t p = 0; p < hw; ++p) dst[p * channels] = src[p];
    }
  }
}

void nhwc_to_nchw(const float* x, float* y, int64_t batch, int64_t channels, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      const float* src = x + n * hw * channels + c;
      float* dst = y + (n * channels + c) * hw;
      for (int64_t p = 0; p < hw; ++p) dst[p] = src[p * channels];
    }
  }
}

}  // namespace tessera::diffusion
