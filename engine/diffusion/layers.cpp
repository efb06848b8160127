#include "engine/diffusion/layers.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace tessera::diffusion {

namespace cpu = kernels::cpu;
using kernels::ImageShape;

bool use_bf16(const KernelOptions& opt, const kernels::Backend& backend) {
  const kernels::DiffusionOps* d = backend.diffusion();
  return opt.precision == kernels::Precision::kBf16 && d != nullptr && d->bf16_compute();
}

bool use_tf32(const KernelOptions& opt, const kernels::Backend& backend) {
  const kernels::DiffusionOps* d = backend.diffusion();
  return opt.precision == kernels::Precision::kBf16 && d != nullptr && !d->bf16_compute() &&
         d->tf32_products_available();
}

bool use_device_bf16(const KernelOptions& opt, const kernels::Backend& backend) {
  const kernels::DiffusionOps* d = backend.diffusion();
  return opt.precision == kernels::Precision::kBf16 && d != nullptr && !d->bf16_compute() &&
         d->bf16_products_available();
}

kernels::DiffusionOps& diffusion_ops(kernels::Backend& backend) {
  return *backend.diffusion();
}

namespace {

// A row-major f32 matrix [rows, cols] on the host rounded to bf16 and uploaded as a Weight.
Expected<kernels::Weight> upload_bf16(kernels::Backend& be, const float* host, int64_t rows,
                                      int64_t cols, kernels::DeviceBuffer* storage) {
  std::vector<uint16_t> bf16(static_cast<size_t>(rows * cols));
  convert_f32_to_bf16(host, bf16.data(), bf16.size());
  return be.upload_weight(kernels::Weight{bf16.data(), DType::kBF16, rows, cols}, storage);
}

}  // namespace

Expected<kernels::Backend*> model_backend(kernels::Backend* given,
                                          std::unique_ptr<kernels::Backend>* own,
                                          const char* model) {
  if (given == nullptr) {
    *own = kernels::make_cpu_backend();
    given = own->get();
  }
  if (given->diffusion() == nullptr) {
    return unsupported(std::string(model) + ": backend " + given->name() + " has no diffusion ops");
  }
  return given;
}

Expected<const float*> LoadContext::f32(const std::string& name,
                                        const std::vector<int64_t>& shape) {
  TESSERA_ASSIGN_OR_RETURN(const float* host, store.f32(name, shape));
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  kernels::DeviceBuffer buffer;
  auto uploaded = backend.upload_f32(host, n, &buffer);
  return keep(name, std::move(uploaded), std::move(buffer));
}

Expected<kernels::Weight> LoadContext::weight(const std::string& name,
                                              const kernels::Weight& host) {
  kernels::DeviceBuffer buffer;
  auto uploaded = backend.upload_weight(host, &buffer);
  return keep(name, std::move(uploaded), std::move(buffer));
}

Expected<float*> Workspace::get(int slot, int64_t floats) {
  if (slot < 0) return invalid_argument("workspace slot " + std::to_string(slot));
  if (static_cast<size_t>(slot) >= buffers_.size()) buffers_.resize(static_cast<size_t>(slot) + 1);
  kernels::DeviceBuffer& b = buffers_[static_cast<size_t>(slot)];
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float);
  if (b.data() == nullptr || b.bytes() < bytes) {
    b.reset();  // before the new allocation: the peak stays at the larger size alone
    TESSERA_ASSIGN_OR_RETURN(b, backend_->allocate(bytes));
  }
  return b.as<float>();
}

float* Workspace::data(int slot) const {
  if (slot < 0 || static_cast<size_t>(slot) >= buffers_.size()) return nullptr;
  return buffers_[static_cast<size_t>(slot)].as<float>();
}

Expected<GroupNorm> GroupNorm::load(LoadContext& ctx, const std::string& name, int64_t channels,
                                    int64_t groups, float eps) {
  GroupNorm n;
  n.backend = &ctx.backend;
  TESSERA_ASSIGN_OR_RETURN(n.gamma, ctx.f32(name + ".weight", {channels}));
  TESSERA_ASSIGN_OR_RETURN(n.beta, ctx.f32(name + ".bias", {channels}));
  n.channels = channels;
  n.groups = groups;
  n.eps = eps;
  return n;
}

Status GroupNorm::run(const float* x, float* y, const ImageShape& s, bool silu,
                      const KernelOptions& opt) const {
  return diffusion_ops(*backend).group_norm(x, gamma, beta, y, s, groups, eps, silu,
                                            opt.group_norm_silu);
}

Expected<Conv2d> Conv2d::load(LoadContext& ctx, const std::string& name, int64_t in_c,
                              int64_t out_c, int64_t kernel, int64_t stride, bool upsample2x,
                              bool pad_end_only, bool has_bias) {
  Conv2d c;
  c.backend_ = &ctx.backend;
  TESSERA_ASSIGN_OR_RETURN(c.weight_,
                           ctx.store.f32(name + ".weight", {out_c, in_c, kernel, kernel}));
  if (has_bias) {
    TESSERA_ASSIGN_OR_RETURN(c.bias_, ctx.f32(name + ".bias", {out_c}));
  }
  c.in_c_ = in_c;
  c.out_c_ = out_c;
  c.kernel_ = kernel;
  c.stride_ = stride;
  c.upsample2x_ = upsample2x;
  c.pad_end_only_ = pad_end_only;
  return c;
}

Status Conv2d::run(const float* x, int64_t batch, int64_t h, int64_t w, float* y,
                   const KernelOptions& opt, Workspace& ws) {
  kernels::Backend& be = *backend_;
  const bool bf16 = use_bf16(opt, be);
  kernels::Conv2dShape s;
  s.batch = batch;
  s.in_h = h;
  s.in_w = w;
  s.in_c = in_c_;
  s.out_c = out_c_;
  s.kernel = kernel_;
  s.stride = stride_;
  s.upsample2x = upsample2x_;
  s.pad_end_only = pad_end_only_;
  const float* in = x;
  if (upsample2x_ && opt.upsample == kernels::Fusion::kOff) {
    // The unfused baseline: the upsampled image goes through memory.
    TESSERA_ASSIGN_OR_RETURN(float* up, ws.get(Workspace::kUpsample, batch * 4 * h * w * in_c_));
    TESSERA_RETURN_IF_ERROR(
        diffusion_ops(be).upsample_nearest2x(x, up, ImageShape{batch, h, w, in_c_}));
    s.in_h = 2 * h;
    s.in_w = 2 * w;
    s.upsample2x = false;
    in = up;
  }
  kernels::ConvAlgo algo = kernels::ConvAlgo::kGemm;
  switch (opt.conv) {
    case ConvPolicy::kAuto:
      algo = diffusion_ops(be).choose_conv_algo(s);
      break;
    case ConvPolicy::kGemm:
      break;
    case ConvPolicy::kWinograd:
      if (cpu::winograd_applies(s)) algo = kernels::ConvAlgo::kWinograd;
      break;
  }
  if (use_device_bf16(opt, be)) {
    // Every convolution as im2col on the tensor cores (Winograd's transforms are f32 only).
    if (device_bf16_.data == nullptr) {
      const int64_t n = cpu::conv2d_packed_floats(s, kernels::ConvAlgo::kGemm);
      std::vector<float> host(static_cast<size_t>(n));
      cpu::conv2d_pack_weights(weight_, s, kernels::ConvAlgo::kGemm, host.data());
      TESSERA_ASSIGN_OR_RETURN(
          device_bf16_, upload_bf16(be, host.data(), out_c_, n / std::max<int64_t>(out_c_, 1),
                                    &device_bf16_storage_));
    }
    return diffusion_ops(be).conv2d_weight(in, device_bf16_, bias_, y, s);
  }
  if (bf16 && algo == kernels::ConvAlgo::kGemm) {
    // bf16 compute replaces im2col + f32 GEMM only: Winograd layers stay f32 Winograd, which
    // on 2 Zen 4 cores outruns bf16 im2col by 1.15-1.55x (4x fewer products vs 2x the product
    // rate; measured on the shared machine, batch 2: 64x64 320->320 64 vs 92 ms, 16x16
    // 1280->1280 67 vs 77 ms; VAE 128x128 512->512 306 vs 472 ms) and is the more accurate of
    // the two (Winograd's own products in bf16 are not accurate enough: kernels::Precision).
    // Where the chooser picks im2col (8x8 1280->1280: 43 ms f32) bf16 halves the time (21 ms).
    if (packed_bf16_.empty()) {
      TESSERA_ASSIGN_OR_RETURN(packed_bf16_, diffusion_ops(be).pack_conv2d_bf16(weight_, s));
    }
    return diffusion_ops(be).conv2d_bf16(in, packed_bf16_, bias_, y, s);
  }
  const size_t a = static_cast<size_t>(algo);
  if (packed_[a] == nullptr) {
    // Packed on the host once per algorithm; the kernel-1 packing is the weight as stored.
    std::unique_ptr<float[]>& host = packed_host_[a];
    const int64_t n = cpu::conv2d_packed_floats(s, algo);
    host = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
    cpu::conv2d_pack_weights(weight_, s, algo, host.get());
    TESSERA_ASSIGN_OR_RETURN(packed_[a], be.upload_f32(host.get(), n, &packed_storage_[a]));
    // A device holds its own copy: the host packing is no longer needed.
    if (packed_storage_[a].data() != nullptr) host.reset();
  }
  return diffusion_ops(be).conv2d(in, packed_[a], bias_, y, s, algo);
}

Expected<Linear> Linear::load(LoadContext& ctx, const std::string& name, int64_t out, int64_t in,
                              bool bias) {
  Linear l;
  l.backend = &ctx.backend;
  TESSERA_ASSIGN_OR_RETURN(l.host, ctx.store.matrix(name + ".weight", out, in));
  TESSERA_ASSIGN_OR_RETURN(l.w, ctx.weight(name + ".weight", l.host));
  if (bias) {
    TESSERA_ASSIGN_OR_RETURN(l.bias, ctx.f32(name + ".bias", {out}));
  }
  return l;
}

Expected<Linear> Linear::load_conv1x1(LoadContext& ctx, const std::string& name, int64_t out,
                                      int64_t in) {
  Linear l;
  l.backend = &ctx.backend;
  TESSERA_ASSIGN_OR_RETURN(const float* host, ctx.store.f32(name + ".weight", {out, in, 1, 1}));
  l.host = kernels::Weight{host, DType::kF32, out, in};
  TESSERA_ASSIGN_OR_RETURN(l.w, ctx.weight(name + ".weight", l.host));
  TESSERA_ASSIGN_OR_RETURN(l.bias, ctx.f32(name + ".bias", {out}));
  return l;
}

Status Linear::run(const float* x, int64_t rows, float* y) const {
  return backend->linear(x, rows, w, bias, y);
}

Status Linear::run(const float* x, int64_t rows, float* y, const KernelOptions& opt) const {
  if (rows >= kMinBf16Rows && use_device_bf16(opt, *backend)) {
    if (device_bf16.data == nullptr) {
      if (w.dtype == DType::kBF16) {
        device_bf16 = w;
      } else if (host.dtype == DType::kF32) {
        TESSERA_ASSIGN_OR_RETURN(
            device_bf16, upload_bf16(*backend, static_cast<const float*>(host.data), host.rows,
                                     host.cols, &device_bf16_storage));
      } else {
        return backend->linear(x, rows, w, bias, y);  // int8 and other stored formats stay as are
      }
    }
    return backend->linear(x, rows, device_bf16, bias, y);
  }
  if (rows < kMinBf16Rows || !use_bf16(opt, *backend)) return backend->linear(x, rows, w, bias, y);
  if (packed_bf16.empty()) {
    TESSERA_ASSIGN_OR_RETURN(packed_bf16, diffusion_ops(*backend).pack_linear_bf16(host));
  }
  return diffusion_ops(*backend).linear_bf16(x, rows, packed_bf16, bias, y);
}

Expected<ResBlock> ResBlock::load(LoadContext& ctx, const std::string& prefix,
                                  const ResBlockNames& names, int64_t in_c, int64_t out_c,
                                  int64_t emb_dim, int64_t groups, float eps) {
  ResBlock r;
  r.in_c_ = in_c;
  r.out_c_ = out_c;
  TESSERA_ASSIGN_OR_RETURN(r.norm1_, GroupNorm::load(ctx, prefix + names.norm1, in_c, groups, eps));
  TESSERA_ASSIGN_OR_RETURN(r.conv1_, Conv2d::load(ctx, prefix + names.conv1, in_c, out_c, 3));
  if (names.emb != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(r.emb_, Linear::load(ctx, prefix + names.emb, out_c, emb_dim, true));
  }
  TESSERA_ASSIGN_OR_RETURN(r.norm2_,
                           GroupNorm::load(ctx, prefix + names.norm2, out_c, groups, eps));
  TESSERA_ASSIGN_OR_RETURN(r.conv2_, Conv2d::load(ctx, prefix + names.conv2, out_c, out_c, 3));
  if (in_c != out_c) {
    TESSERA_ASSIGN_OR_RETURN(r.skip_, Linear::load_conv1x1(ctx, prefix + names.skip, out_c, in_c));
  }
  return r;
}

Status ResBlock::run(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                     const float* silu_emb, const KernelOptions& opt, Workspace& ws) {
  kernels::Backend& be = ws.backend();
  const int64_t pixels = h * w;
  const int64_t wide = std::max(in_c_, out_c_);
  TESSERA_ASSIGN_OR_RETURN(float* a, ws.get(Workspace::kResA, batch * pixels * wide));
  TESSERA_ASSIGN_OR_RETURN(float* b, ws.get(Workspace::kResB, batch * pixels * out_c_));
  TESSERA_RETURN_IF_ERROR(norm1_.run(x, a, ImageShape{batch, h, w, in_c_}, true, opt));
  TESSERA_RETURN_IF_ERROR(conv1_.run(a, batch, h, w, b, opt, ws));
  if (emb_) {
    TESSERA_ASSIGN_OR_RETURN(float* e, ws.get(Workspace::kEmb, batch * out_c_));
    TESSERA_RETURN_IF_ERROR(emb_->run(silu_emb, batch, e));
    TESSERA_RETURN_IF_ERROR(diffusion_ops(be).add_per_image(b, e, batch, pixels, out_c_));
  }
  TESSERA_RETURN_IF_ERROR(norm2_.run(b, a, ImageShape{batch, h, w, out_c_}, true, opt));
  TESSERA_RETURN_IF_ERROR(conv2_.run(a, batch, h, w, b, opt, ws));
  if (skip_) {
    TESSERA_RETURN_IF_ERROR(skip_->run(x, batch * pixels, y, opt));
    return be.add(y, b, y, batch * pixels * out_c_);
  }
  return be.add(x, b, y, batch * pixels * out_c_);
}

Status run_attention(const float* q, const float* k, const float* v, float* o, int64_t batch,
                     int64_t heads, int64_t q_len, int64_t kv_len, int64_t head_dim,
                     const KernelOptions& opt, Workspace& ws) {
  kernels::AttentionShape s = kernels::contiguous_attention(
      batch, heads, q_len, kv_len, head_dim, false, 1.0f / std::sqrt(static_cast<float>(head_dim)));
  s.allow_bf16 = use_bf16(opt, ws.backend());
  return diffusion_ops(ws.backend()).diffusion_attention(q, k, v, o, s, opt.attention);
}

Expected<SpatialTransformer> SpatialTransformer::load(LoadContext& ctx, const std::string& prefix,
                                                      int64_t channels, int64_t context_dim,
                                                      int64_t heads, int64_t groups, float gn_eps,
                                                      float ln_eps) {
  SpatialTransformer t;
  const int64_t c = channels;
  t.c_ = c;
  t.ctx_dim_ = context_dim;
  t.heads_ = heads;
  t.ln_eps_ = ln_eps;
  TESSERA_ASSIGN_OR_RETURN(t.norm_, GroupNorm::load(ctx, prefix + "norm", c, groups, gn_eps));
  TESSERA_ASSIGN_OR_RETURN(t.proj_in_, Linear::load_conv1x1(ctx, prefix + "proj_in", c, c));
  TESSERA_ASSIGN_OR_RETURN(t.proj_out_, Linear::load_conv1x1(ctx, prefix + "proj_out", c, c));
  const std::string b = prefix + "transformer_blocks.0.";
  for (int i = 0; i < 3; ++i) {
    const std::string n = b + "norm" + std::to_string(i + 1);
    TESSERA_ASSIGN_OR_RETURN(t.ln_[i][0], ctx.f32(n + ".weight", {c}));
    TESSERA_ASSIGN_OR_RETURN(t.ln_[i][1], ctx.f32(n + ".bias", {c}));
  }
  TESSERA_ASSIGN_OR_RETURN(t.q1_, Linear::load(ctx, b + "attn1.to_q", c, c, false));
  TESSERA_ASSIGN_OR_RETURN(t.k1_, Linear::load(ctx, b + "attn1.to_k", c, c, false));
  TESSERA_ASSIGN_OR_RETURN(t.v1_, Linear::load(ctx, b + "attn1.to_v", c, c, false));
  TESSERA_ASSIGN_OR_RETURN(t.out1_, Linear::load(ctx, b + "attn1.to_out.0", c, c, true));
  TESSERA_ASSIGN_OR_RETURN(t.q2_, Linear::load(ctx, b + "attn2.to_q", c, c, false));
  TESSERA_ASSIGN_OR_RETURN(t.k2_, Linear::load(ctx, b + "attn2.to_k", c, context_dim, false));
  TESSERA_ASSIGN_OR_RETURN(t.v2_, Linear::load(ctx, b + "attn2.to_v", c, context_dim, false));
  TESSERA_ASSIGN_OR_RETURN(t.out2_, Linear::load(ctx, b + "attn2.to_out.0", c, c, true));
  TESSERA_ASSIGN_OR_RETURN(t.ff1_, Linear::load(ctx, b + "ff.net.0.proj", 8 * c, c, true));
  TESSERA_ASSIGN_OR_RETURN(t.ff2_, Linear::load(ctx, b + "ff.net.2", c, 4 * c, true));
  return t;
}

Status SpatialTransformer::run(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                               const float* context, int64_t context_len, const KernelOptions& opt,
                               Workspace& ws) const {
  kernels::Backend& be = ws.backend();
  // Reduced precision runs each projection with its own bf16 weights (Linear::run); f32 fuses
  // q/k/v (and k/v over the context) into one launch.
  const bool per_layer = use_bf16(opt, be) || use_device_bf16(opt, be);
  const int64_t len = h * w, rows = batch * len, c = c_, head_dim = c_ / heads_;
  TESSERA_ASSIGN_OR_RETURN(float* tok, ws.get(Workspace::kTokens, rows * c));
  TESSERA_ASSIGN_OR_RETURN(float* nrm, ws.get(Workspace::kNorm, rows * c));
  TESSERA_ASSIGN_OR_RETURN(float* q, ws.get(Workspace::kQ, rows * c));
  TESSERA_ASSIGN_OR_RETURN(float* o, ws.get(Workspace::kO, rows * c));
  const int64_t kv_rows = batch * std::max(len, context_len);
  TESSERA_ASSIGN_OR_RETURN(float* k, ws.get(Workspace::kK, kv_rows * c));
  TESSERA_ASSIGN_OR_RETURN(float* v, ws.get(Workspace::kV, kv_rows * c));
  // The tokens are the NHWC pixels: [batch * h * w, C] with no transpose.
  TESSERA_RETURN_IF_ERROR(norm_.run(x, nrm, ImageShape{batch, h, w, c}, false, opt));
  TESSERA_RETURN_IF_ERROR(proj_in_.run(nrm, rows, tok, opt));

  // Self-attention: q, k, v from one pass over the normalised tokens.
  TESSERA_RETURN_IF_ERROR(be.layer_norm(tok, ln_[0][0], ln_[0][1], nrm, rows, c, ln_eps_));
  if (per_layer) {
    TESSERA_RETURN_IF_ERROR(q1_.run(nrm, rows, q, opt));
    TESSERA_RETURN_IF_ERROR(k1_.run(nrm, rows, k, opt));
    TESSERA_RETURN_IF_ERROR(v1_.run(nrm, rows, v, opt));
  } else {
    const kernels::LinearPart qkv[3] = {
        {q1_.w, nullptr, q}, {k1_.w, nullptr, k}, {v1_.w, nullptr, v}};
    TESSERA_RETURN_IF_ERROR(be.linear_multi(nrm, rows, qkv, 3));
  }
  TESSERA_RETURN_IF_ERROR(run_attention(q, k, v, o, batch, heads_, len, len, head_dim, opt, ws));
  TESSERA_RETURN_IF_ERROR(out1_.run(o, rows, q, opt));
  TESSERA_RETURN_IF_ERROR(be.add(tok, q, tok, rows * c));

  // Cross-attention over the context.
  TESSERA_RETURN_IF_ERROR(be.layer_norm(tok, ln_[1][0], ln_[1][1], nrm, rows, c, ln_eps_));
  TESSERA_RETURN_IF_ERROR(q2_.run(nrm, rows, q, opt));
  if (per_layer) {
    TESSERA_RETURN_IF_ERROR(k2_.run(context, batch * context_len, k, opt));
    TESSERA_RETURN_IF_ERROR(v2_.run(context, batch * context_len, v, opt));
  } else {
    const kernels::LinearPart kv[2] = {{k2_.w, nullptr, k}, {v2_.w, nullptr, v}};
    TESSERA_RETURN_IF_ERROR(be.linear_multi(context, batch * context_len, kv, 2));
  }
  TESSERA_RETURN_IF_ERROR(
      run_attention(q, k, v, o, batch, heads_, len, context_len, head_dim, opt, ws));
  TESSERA_RETURN_IF_ERROR(out2_.run(o, rows, q, opt));
  TESSERA_RETURN_IF_ERROR(be.add(tok, q, tok, rows * c));

  // GEGLU feed-forward: [rows, 8C] -> [rows, 4C] -> [rows, C].
  TESSERA_RETURN_IF_ERROR(be.layer_norm(tok, ln_[2][0], ln_[2][1], nrm, rows, c, ln_eps_));
  TESSERA_ASSIGN_OR_RETURN(float* ff1, ws.get(Workspace::kFf1, rows * 8 * c));
  TESSERA_ASSIGN_OR_RETURN(float* ff2, ws.get(Workspace::kFf2, rows * 4 * c));
  TESSERA_RETURN_IF_ERROR(ff1_.run(nrm, rows, ff1, opt));
  TESSERA_RETURN_IF_ERROR(diffusion_ops(be).geglu_ff(ff1, ff2, rows, 4 * c, opt.geglu));
  TESSERA_RETURN_IF_ERROR(ff2_.run(ff2, rows, q, opt));
  TESSERA_RETURN_IF_ERROR(be.add(tok, q, tok, rows * c));

  TESSERA_RETURN_IF_ERROR(proj_out_.run(tok, rows, y, opt));
  return be.add(y, x, y, rows * c);
}

Expected<VaeAttention> VaeAttention::load(LoadContext& ctx, const std::string& prefix,
                                          int64_t channels, int64_t groups, float eps) {
  VaeAttention a;
  const int64_t c = channels;
  a.c_ = c;
  TESSERA_ASSIGN_OR_RETURN(a.norm_, GroupNorm::load(ctx, prefix + "norm", c, groups, eps));
  TESSERA_ASSIGN_OR_RETURN(a.q_, Linear::load_conv1x1(ctx, prefix + "q", c, c));
  TESSERA_ASSIGN_OR_RETURN(a.k_, Linear::load_conv1x1(ctx, prefix + "k", c, c));
  TESSERA_ASSIGN_OR_RETURN(a.v_, Linear::load_conv1x1(ctx, prefix + "v", c, c));
  TESSERA_ASSIGN_OR_RETURN(a.proj_out_, Linear::load_conv1x1(ctx, prefix + "proj_out", c, c));
  return a;
}

Status VaeAttention::run(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                         const KernelOptions& opt, Workspace& ws) const {
  kernels::Backend& be = ws.backend();
  const int64_t len = h * w, rows = batch * len, c = c_;
  TESSERA_ASSIGN_OR_RETURN(float* nrm, ws.get(Workspace::kNorm, rows * c));
  TESSERA_ASSIGN_OR_RETURN(float* q, ws.get(Workspace::kQ, rows * c));
  TESSERA_ASSIGN_OR_RETURN(float* k, ws.get(Workspace::kK, rows * c));
  TESSERA_ASSIGN_OR_RETURN(float* v, ws.get(Workspace::kV, rows * c));
  TESSERA_ASSIGN_OR_RETURN(float* o, ws.get(Workspace::kO, rows * c));
  TESSERA_RETURN_IF_ERROR(norm_.run(x, nrm, ImageShape{batch, h, w, c}, false, opt));
  if (use_bf16(opt, be) || use_device_bf16(opt, be)) {  // as SpatialTransformer::run
    TESSERA_RETURN_IF_ERROR(q_.run(nrm, rows, q, opt));
    TESSERA_RETURN_IF_ERROR(k_.run(nrm, rows, k, opt));
    TESSERA_RETURN_IF_ERROR(v_.run(nrm, rows, v, opt));
  } else {
    const kernels::LinearPart qkv[3] = {{q_.w, q_.bias, q}, {k_.w, k_.bias, k}, {v_.w, v_.bias, v}};
    TESSERA_RETURN_IF_ERROR(be.linear_multi(nrm, rows, qkv, 3));
  }
  TESSERA_RETURN_IF_ERROR(run_attention(q, k, v, o, batch, 1, len, len, c, opt, ws));
  TESSERA_RETURN_IF_ERROR(proj_out_.run(o, rows, y, opt));
  return be.add(y, x, y, rows * c);
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

Expected<VaeMiddle> VaeMiddle::load(LoadContext& ctx, const std::string& prefix, int64_t channels,
                                    int64_t groups, float eps) {
  VaeMiddle m;
  m.c_ = channels;
  TESSERA_ASSIGN_OR_RETURN(m.block_1_, ResBlock::load(ctx, prefix + "block_1.", kVaeResNames,
                                                      channels, channels, 0, groups, eps));
  TESSERA_ASSIGN_OR_RETURN(m.attn_,
                           VaeAttention::load(ctx, prefix + "attn_1.", channels, groups, eps));
  TESSERA_ASSIGN_OR_RETURN(m.block_2_, ResBlock::load(ctx, prefix + "block_2.", kVaeResNames,
                                                      channels, channels, 0, groups, eps));
  return m;
}

Status VaeMiddle::run(Workspace& main, int* cur, int64_t batch, int64_t h, int64_t w,
                      const KernelOptions& opt, Workspace& ws) {
  const int64_t n = batch * h * w * c_;
  for (int part = 0; part < 3; ++part) {
    TESSERA_ASSIGN_OR_RETURN(float* out, main.get(1 - *cur, n));
    const float* in = main.data(*cur);
    if (part == 1) {
      TESSERA_RETURN_IF_ERROR(attn_->run(in, out, batch, h, w, opt, ws));
    } else {
      ResBlock& block = part == 0 ? *block_1_ : *block_2_;
      TESSERA_RETURN_IF_ERROR(block.run(in, out, batch, h, w, nullptr, opt, ws));
    }
    *cur = 1 - *cur;
  }
  return Status();
}

}  // namespace tessera::diffusion
