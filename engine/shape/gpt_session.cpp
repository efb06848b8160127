// GptSession (gpt.h): creating a session (its K/V caches and activation buffers, allocated once),
// setting the condition, and the pieces both passes run: token ids and positions to the backend,
// the q/k/v projection, the post-attention MLP and the head. The full passes are in
// gpt_prefill.cpp, the KV-cached decode step in gpt_decode.cpp.
#include "engine/shape/gpt.h"

#include <algorithm>
#include <type_traits>

#include "core/dtype.h"

namespace tessera::shape {

using kernels::DeviceBuffer;

GptSession::~GptSession() = default;

Expected<std::unique_ptr<GptSession>> GptSession::create(const CubeGpt& model, int64_t max_batch,
                                                         int64_t max_shape_tokens,
                                                         const GptSessionOptions& options) {
  if (max_batch < 1 || max_shape_tokens < 1) {
    return invalid_argument("GptSession: batch " + std::to_string(max_batch) +
                            " and shape tokens " + std::to_string(max_shape_tokens) +
                            " must be >= 1");
  }
  const DType kv_dtype =
      options.kv_dtype.value_or(model.weight_dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32);
  if (kv_dtype != DType::kF32 && kv_dtype != DType::kBF16) {
    return invalid_argument(std::string("GptSession: K/V cache dtype ") + dtype_name(kv_dtype) +
                            " is not supported (F32 or BF16)");
  }
  const GptConfig& c = model.config();
  std::unique_ptr<GptSession> s(new GptSession());
  s->kv_dtype_ = kv_dtype;
  s->model_ = &model;
  s->be_ = &model.backend();
  s->dec_ = s->be_->decode();
  s->max_batch_ = max_batch;
  s->max_len_ = max_shape_tokens;
  s->cond_len_ = c.cond_len();
  s->joint_len_ = s->cond_len_ + max_shape_tokens;
  const int64_t b = max_batch, d = c.n_embd, rows = b * std::max(s->cond_len_, max_shape_tokens);
  auto alloc = [&](int64_t elements, auto** out) -> Status {
    TESSERA_ASSIGN_OR_RETURN(DeviceBuffer buf,
                             s->be_->allocate(static_cast<size_t>(elements) * sizeof(**out)));
    *out = static_cast<std::remove_reference_t<decltype(**out)>*>(buf.data());
    s->buffers_.push_back(std::move(buf));
    return {};
  };
  TESSERA_RETURN_IF_ERROR(alloc(b * s->cond_len_ * d, &s->cond_));
  TESSERA_RETURN_IF_ERROR(alloc(b * s->cond_len_ * d, &s->c_));
  TESSERA_RETURN_IF_ERROR(alloc(b * max_shape_tokens * d, &s->x_));
  for (float** p : {&s->h_, &s->q_, &s->k_, &s->v_, &s->y_, &s->t_}) {
    TESSERA_RETURN_IF_ERROR(alloc(rows * d, p));
  }
  TESSERA_RETURN_IF_ERROR(alloc(rows * c.mlp_hidden, &s->gate_));
  TESSERA_RETURN_IF_ERROR(alloc(rows * c.mlp_hidden, &s->up_));
  TESSERA_RETURN_IF_ERROR(alloc(b * s->joint_len_ * d, &s->qj_));
  TESSERA_RETURN_IF_ERROR(alloc(b * s->joint_len_ * d, &s->oj_));
  TESSERA_RETURN_IF_ERROR(alloc(b * c.vocab_size, &s->logits_));
  TESSERA_RETURN_IF_ERROR(alloc(b * c.text_len * c.text_embed_dim, &s->clip_in_));
  TESSERA_RETURN_IF_ERROR(alloc(b * 3, &s->bbox_in_));
  TESSERA_RETURN_IF_ERROR(alloc(b * max_shape_tokens, &s->ids_));
  TESSERA_RETURN_IF_ERROR(alloc(b * max_shape_tokens, &s->positions_));
  for (int64_t i = 0; i < c.n_dual + c.n_single; ++i) {
    const int64_t len = i < c.n_dual ? s->joint_len_ : max_shape_tokens;
    if (kv_dtype == DType::kBF16) {
      uint16_t *k = nullptr, *v = nullptr;
      TESSERA_RETURN_IF_ERROR(alloc(b * len * d, &k));
      TESSERA_RETURN_IF_ERROR(alloc(b * len * d, &v));
      s->k_cache16_.push_back(k);
      s->v_cache16_.push_back(v);
    } else {
      float *k = nullptr, *v = nullptr;
      TESSERA_RETURN_IF_ERROR(alloc(b * len * d, &k));
      TESSERA_RETURN_IF_ERROR(alloc(b * len * d, &v));
      s->k_cache_.push_back(k);
      s->v_cache_.push_back(v);
    }
  }
  if (kv_dtype == DType::kBF16) {
    // joint_len_ >= max_shape_tokens: also holds a single block's [max_batch][max_len] K/V.
    TESSERA_RETURN_IF_ERROR(alloc(b * s->joint_len_ * d, &s->kj_));
    TESSERA_RETURN_IF_ERROR(alloc(b * s->joint_len_ * d, &s->vj_));
    // Fail here, not in the first decode step, on a backend without bf16 K/V support.
    if (s->dec_ == nullptr) {
      return unsupported("Cube GPT: backend " + s->be_->name() +
                         " has no bf16 K/V cache (no decode ops)");
    }
    TESSERA_RETURN_IF_ERROR(s->dec_->convert_f32_to_bf16(s->k_cache16_[0], s->kj_, 0));
    TESSERA_RETURN_IF_ERROR(s->dec_->convert_bf16_to_f32(s->kj_, s->k_cache16_[0], 0));
  }
  s->stack_condition_rows_ = options.stack_condition_rows;
  for (const detail::GptDualBlock& blk : model.weights().dual) {
    const detail::GptLinear* ws[] = {&blk.pre_c.q,       &blk.pre_c.k,     &blk.pre_c.v,
                                     &blk.post_2.c_proj, &blk.post_2.gate, &blk.post_2.up,
                                     &blk.post_2.down};
    for (const detail::GptLinear* l : ws) {
      if (l->w.data == nullptr) continue;  // absent (no query, or post_2 of cond_pre_only)
      if (!s->be_->linear_rows_invariant(l->w, s->cond_len_)) s->stack_condition_rows_ = false;
    }
  }
  s->host_positions_.resize(static_cast<size_t>(b * max_shape_tokens));
  s->cache_condition_.resize(static_cast<size_t>(b * s->cond_len_ * d));
  s->condition_scratch_.resize(static_cast<size_t>(s->cond_len_ * d));
  s->cache_condition_valid_.assign(static_cast<size_t>(b), false);
  return s;
}

Status GptSession::set_condition(int64_t batch, const float* clip_hidden, const float* bbox) {
  const GptConfig& c = model_->config();
  if (batch < 1 || batch > max_batch_) {
    return invalid_argument("GptSession::set_condition: batch " + std::to_string(batch) +
                            " outside [1, " + std::to_string(max_batch_) + "]");
  }
  if (!clip_hidden) return invalid_argument("GptSession::set_condition: no CLIP hidden states");
  batch_ = batch;
  length_ = 0;
  has_condition_ = false;
  const detail::GptWeights& w = model_->weights();
  const int64_t d = c.n_embd, s = cond_len_;
  TESSERA_RETURN_IF_ERROR(be_->upload(
      clip_in_, clip_hidden, static_cast<size_t>(batch * c.text_len * c.text_embed_dim) * 4));
  for (int64_t b = 0; b < batch; ++b) {
    TESSERA_RETURN_IF_ERROR(be_->linear(clip_in_ + b * c.text_len * c.text_embed_dim, c.text_len,
                                        w.text_proj.w, w.text_proj.bias, cond_ + b * s * d));
  }
  if (c.use_bbox) {
    float zeros[3] = {0, 0, 0};
    for (int64_t b = 0; b < batch; ++b) {
      TESSERA_RETURN_IF_ERROR(be_->upload(bbox_in_ + 3 * b, bbox ? bbox + 3 * b : zeros, 12));
    }
    TESSERA_RETURN_IF_ERROR(be_->linear(bbox_in_, batch, w.bbox_proj.w, w.bbox_proj.bias, t_));
    for (int64_t b = 0; b < batch; ++b) {
      TESSERA_RETURN_IF_ERROR(
          be_->copy(cond_ + (b * s + c.text_len) * d, t_ + b * d, static_cast<size_t>(d) * 4));
    }
  }
  has_condition_ = true;
  return {};
}

Status GptSession::read_condition(std::vector<float>* out) const {
  if (!has_condition_) return invalid_argument("GptSession: no condition set");
  out->resize(static_cast<size_t>(batch_ * cond_len_ * model_->config().n_embd));
  return be_->download(out->data(), cond_, out->size() * 4);
}

Status GptSession::upload_ids(const int32_t* ids, int64_t n) {
  const int32_t vocab = static_cast<int32_t>(model_->config().vocab_size);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return invalid_argument("Cube GPT: token id " + std::to_string(ids[i]) + " at index " +
                              std::to_string(i) + " outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
    }
  }
  return be_->upload(ids_, ids, static_cast<size_t>(n) * 4);
}

// positions[b * len + t] = first + t for every row b.
Status GptSession::upload_positions(int64_t len, int64_t first) {
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t t = 0; t < len; ++t)
      host_positions_[static_cast<size_t>(b * len + t)] = static_cast<int32_t>(first + t);
  }
  return be_->upload(positions_, host_positions_.data(), static_cast<size_t>(batch_ * len) * 4);
}

// q/k/v of `rows` tokens (normalized input h): per-head RMSNorm of q and k, RoPE at positions_
// when `rope` (condition tokens sit at position 0, where the rotation is the identity).
Status GptSession::project(const detail::GptPreAttention& pre, const float* h, int64_t rows,
                           bool rope, float* q, float* k, float* v) {
  const GptConfig& c = model_->config();
  // q, k and v read the same h: one linear_multi (one pass over the three weights on the CPU).
  const kernels::LinearPart parts[3] = {
      {pre.k.w, pre.k.bias, k}, {pre.v.w, pre.v.bias, v}, {pre.q.w, pre.q.bias, q}};
  TESSERA_RETURN_IF_ERROR(be_->linear_multi(h, rows, parts, pre.query ? 3 : 2));
  // Per-head RMSNorm (+ RoPE): one fused op on backends that fuse it (heads are contiguous:
  // n_embd = n_head * head_dim).
  const int32_t* positions = rope ? positions_ : nullptr;
  if (pre.query) {
    return be_->rms_norm_rope_pair(q, pre.q_norm, k, pre.k_norm, rows, c.n_head, c.head_dim,
                                   c.qk_norm_eps, positions, c.rope_theta);
  }
  return be_->rms_norm_rope(k, pre.k_norm, rows, c.n_head, c.head_dim, c.qk_norm_eps, positions,
                            c.rope_theta);
}

// x += c_proj(y); x += SwiGLU(LN(x)); with `then_norm`, also h_ = LN(x) for what follows (the
// next block's input norm, or the head's): the last add and that norm in one backend op.
Status GptSession::post(const detail::GptPostAttention& p, float* x, const float* y, int64_t rows,
                        bool then_norm) {
  const GptConfig& c = model_->config();
  const int64_t n = rows * c.n_embd;
  TESSERA_RETURN_IF_ERROR(be_->linear(y, rows, p.c_proj.w, p.c_proj.bias, t_));
  TESSERA_RETURN_IF_ERROR(be_->add_layer_norm(x, t_, h_, rows, c.n_embd, c.eps));
  TESSERA_RETURN_IF_ERROR(
      be_->linear_swiglu(h_, rows, p.gate.w, p.gate.bias, p.up.w, p.up.bias, gate_, up_, gate_));
  TESSERA_RETURN_IF_ERROR(be_->linear(gate_, rows, p.down.w, p.down.bias, t_));
  if (then_norm) return be_->add_layer_norm(x, t_, h_, rows, c.n_embd, c.eps);
  return be_->add(x, t_, x, n);
}

// logits = lm_head(ln_f(rows_in [batch, D])) -> host [batch, vocab].
Status GptSession::head(const float* rows_in, float* logits) {
  const GptConfig& c = model_->config();
  TESSERA_RETURN_IF_ERROR(be_->layer_norm(rows_in, nullptr, nullptr, h_, batch_, c.n_embd, c.eps));
  TESSERA_RETURN_IF_ERROR(be_->linear(h_, batch_, model_->weights().lm_head, nullptr, logits_));
  return be_->download(logits, logits_, static_cast<size_t>(batch_ * c.vocab_size) * 4);
}

}  // namespace tessera::shape
