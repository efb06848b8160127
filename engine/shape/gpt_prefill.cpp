// GptSession's full passes (gpt.h): every shape token through every block at once, for prefill()
// (which fills the K/V cache and skips the condition stream of rows whose cached condition still
// holds) and forward_full() (the uncached baseline and the parity tests' per-block outputs).
#include "engine/shape/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tessera::shape {

// One dual block over the condition stream c_ [batch, S] and `len` shape tokens x_ [batch, len].
// The joint sequence [c ; x] of row b lives at slots 0..S+len-1 of qj_/oj_/the layer's cache.
Status GptSession::dual_full(size_t i, int64_t len, int64_t cond_rows) {
  const GptConfig& c = model_->config();
  const detail::GptDualBlock& blk = model_->weights().dual[i];
  const int64_t d = c.n_embd, s = cond_len_, t = joint_len_;
  const size_t row_bytes = static_cast<size_t>(d) * 4;
  float* kc = full_k(i);
  float* vc = full_v(i);
  // Condition stream: S rows per batch row (the other rows' condition K/V are in the cache), so
  // that a row's condition K/V are the same bits whether it is computed alone or with others (GEMM
  // paths may depend on m): a generation's tokens never depend on what else ran. Stacked into one
  // call where the backend promises that (stack_condition_rows_), else one row at a time.
  const int64_t cond_step = stack_condition_rows_ ? std::max<int64_t>(cond_rows, 1) : 1;
  for (int64_t b = 0; b < cond_rows; b += cond_step) {
    const int64_t at = b * s * d, rows = std::min(cond_step, cond_rows - b) * s;
    TESSERA_RETURN_IF_ERROR(be_->layer_norm(c_ + at, nullptr, nullptr, h_ + at, rows, d, c.eps));
    TESSERA_RETURN_IF_ERROR(project(blk.pre_c, h_ + at, rows, false, q_ + at, k_ + at, v_ + at));
  }
  for (int64_t b = 0; b < cond_rows; ++b) {
    const size_t bytes = static_cast<size_t>(s) * row_bytes;
    if (blk.pre_c.query) TESSERA_RETURN_IF_ERROR(be_->copy(qj_ + b * t * d, q_ + b * s * d, bytes));
    TESSERA_RETURN_IF_ERROR(be_->copy(kc + b * t * d, k_ + b * s * d, bytes));
    TESSERA_RETURN_IF_ERROR(be_->copy(vc + b * t * d, v_ + b * s * d, bytes));
  }
  // Shape stream: rows batch * len, positions 0..len-1.
  TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_ * len, d, c.eps));
  TESSERA_RETURN_IF_ERROR(project(blk.pre_x, h_, batch_ * len, true, q_, k_, v_));
  for (int64_t b = 0; b < batch_; ++b) {
    const size_t bytes = static_cast<size_t>(len) * row_bytes;
    const int64_t at = (b * t + s) * d;
    TESSERA_RETURN_IF_ERROR(be_->copy(qj_ + at, q_ + b * len * d, bytes));
    TESSERA_RETURN_IF_ERROR(be_->copy(kc + at, k_ + b * len * d, bytes));
    TESSERA_RETURN_IF_ERROR(be_->copy(vc + at, v_ + b * len * d, bytes));
  }
  // The K/V cache gets the new slots: [c ; x] of rows that ran the condition stream, x of the
  // others, whose cached condition K/V the attention below reads (widened, with a bf16 cache).
  // With a bf16 cache the attention reads the condition's K/V as cached (rounded), whether they
  // were computed now or reused: a prefill gives the same bits either way, so a generation's
  // tokens do not depend on what the session ran before (batch invariance across calls).
  for (int64_t b = 0; b < batch_; ++b) {
    const bool with_condition = b < cond_rows;
    if (!with_condition) TESSERA_RETURN_IF_ERROR(widen_cached_kv(i, b * t, s));
    TESSERA_RETURN_IF_ERROR(
        store_full_kv(i, b * t + (with_condition ? 0 : s), len + (with_condition ? s : 0)));
    if (with_condition) TESSERA_RETURN_IF_ERROR(widen_cached_kv(i, b * t, s));
  }
  // One causal attention over the joint sequence. Condition-pre-only, and rows whose condition
  // stream is skipped: queries are the shape tokens, the last `len` positions of the joint
  // sequence.
  kernels::AttentionShape as;
  as.heads = c.n_head;
  as.head_dim = c.head_dim;
  as.kv_len = s + len;
  as.q_token_stride = as.k_token_stride = as.v_token_stride = as.o_token_stride = d;
  as.q_batch_stride = as.k_batch_stride = as.v_batch_stride = as.o_batch_stride = t * d;
  as.causal = true;
  as.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  auto attend = [&](int64_t first_row, int64_t rows, bool condition_queries) {
    as.batch = rows;
    as.q_len = condition_queries ? s + len : len;
    const int64_t at = first_row * t * d;
    const int64_t q_off = at + (condition_queries ? 0 : s * d);
    return be_->attention(qj_ + q_off, kc + at, vc + at, oj_ + q_off, as);
  };
  if (blk.cond_pre_only) {
    TESSERA_RETURN_IF_ERROR(attend(0, batch_, false));
  } else {
    if (cond_rows > 0) TESSERA_RETURN_IF_ERROR(attend(0, cond_rows, true));
    if (cond_rows < batch_) TESSERA_RETURN_IF_ERROR(attend(cond_rows, batch_ - cond_rows, false));
  }
  for (int64_t b = 0; b < batch_; ++b) {
    TESSERA_RETURN_IF_ERROR(
        be_->copy(y_ + b * len * d, oj_ + (b * t + s) * d, static_cast<size_t>(len) * row_bytes));
  }
  TESSERA_RETURN_IF_ERROR(post(blk.post_1, x_, y_, batch_ * len));
  if (blk.cond_pre_only || cond_rows == 0) return {};
  for (int64_t b = 0; b < cond_rows; ++b) {
    TESSERA_RETURN_IF_ERROR(
        be_->copy(y_ + b * s * d, oj_ + b * t * d, static_cast<size_t>(s) * row_bytes));
  }
  for (int64_t b = 0; b < cond_rows; b += cond_step) {  // as above
    TESSERA_RETURN_IF_ERROR(
        post(blk.post_2, c_ + b * s * d, y_ + b * s * d, std::min(cond_step, cond_rows - b) * s));
  }
  return {};
}

Status GptSession::single_full(size_t i, int64_t len) {
  const GptConfig& c = model_->config();
  const detail::GptSingleBlock& blk = model_->weights().single[i];
  const int64_t d = c.n_embd, layer = c.n_dual + static_cast<int64_t>(i);
  float* kc = full_k(static_cast<size_t>(layer));
  float* vc = full_v(static_cast<size_t>(layer));
  TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_ * len, d, c.eps));
  TESSERA_RETURN_IF_ERROR(project(blk.attn, h_, batch_ * len, true, q_, k_, v_));
  for (int64_t b = 0; b < batch_; ++b) {
    const size_t bytes = static_cast<size_t>(len * d) * 4;
    TESSERA_RETURN_IF_ERROR(be_->copy(kc + b * max_len_ * d, k_ + b * len * d, bytes));
    TESSERA_RETURN_IF_ERROR(be_->copy(vc + b * max_len_ * d, v_ + b * len * d, bytes));
    TESSERA_RETURN_IF_ERROR(store_full_kv(static_cast<size_t>(layer), b * max_len_, len));
  }
  kernels::AttentionShape as =
      kernels::contiguous_attention(batch_, c.n_head, len, len, c.head_dim, true,
                                    1.0f / std::sqrt(static_cast<float>(c.head_dim)));
  as.k_batch_stride = as.v_batch_stride = max_len_ * d;
  TESSERA_RETURN_IF_ERROR(be_->attention(q_, kc, vc, y_, as));
  return post(blk.post, x_, y_, batch_ * len);
}

Status GptSession::store_full_kv(size_t layer, int64_t first, int64_t n) {
  if (kv_dtype_ != DType::kBF16 || n <= 0) return {};
  const int64_t d = model_->config().n_embd;
  TESSERA_RETURN_IF_ERROR(
      dec_->convert_f32_to_bf16(k_cache16_[layer] + first * d, kj_ + first * d, n * d));
  return dec_->convert_f32_to_bf16(v_cache16_[layer] + first * d, vj_ + first * d, n * d);
}

Status GptSession::widen_cached_kv(size_t layer, int64_t first, int64_t n) {
  if (kv_dtype_ != DType::kBF16 || n <= 0) return {};
  const int64_t d = model_->config().n_embd;
  TESSERA_RETURN_IF_ERROR(
      dec_->convert_bf16_to_f32(kj_ + first * d, k_cache16_[layer] + first * d, n * d));
  return dec_->convert_bf16_to_f32(vj_ + first * d, v_cache16_[layer] + first * d, n * d);
}

Status GptSession::observe(const GptBlockObserver& observer, const std::string& name,
                           const float* data, int64_t n) const {
  if (!observer) return {};
  std::vector<float> host(static_cast<size_t>(n));
  TESSERA_RETURN_IF_ERROR(be_->download(host.data(), data, host.size() * 4));
  observer(name, host);
  return {};
}

Expected<bool> GptSession::cached_condition_matches(int64_t b) {
  if (!cache_condition_valid_[static_cast<size_t>(b)]) return false;
  const size_t n = condition_scratch_.size();
  TESSERA_RETURN_IF_ERROR(
      be_->download(condition_scratch_.data(), cond_ + static_cast<int64_t>(n) * b, n * 4));
  return std::memcmp(condition_scratch_.data(),
                     cache_condition_.data() + n * static_cast<size_t>(b), n * 4) == 0;
}

Status GptSession::remember_condition(int64_t rows) {
  const size_t n = condition_scratch_.size();
  if (rows > 0) {
    TESSERA_RETURN_IF_ERROR(
        be_->download(cache_condition_.data(), cond_, n * static_cast<size_t>(rows) * 4));
  }
  for (int64_t b = 0; b < rows; ++b) cache_condition_valid_[static_cast<size_t>(b)] = true;
  return {};
}

Status GptSession::run_full(const int32_t* ids, int64_t len, const GptBlockObserver& observer,
                            int64_t cond_rows) {
  const GptConfig& c = model_->config();
  if (!has_condition_)
    return invalid_argument("Cube GPT: no condition set (call set_condition first)");
  if (len < 1 || len > max_len_) {
    return invalid_argument("Cube GPT: " + std::to_string(len) +
                            " shape tokens outside the session's [1, " + std::to_string(max_len_) +
                            "]");
  }
  length_ = 0;
  const int64_t d = c.n_embd;
  // Rows [0, cond_rows) get new condition K/V; valid again only once they are complete.
  for (int64_t b = 0; b < cond_rows; ++b) cache_condition_valid_[static_cast<size_t>(b)] = false;
  TESSERA_RETURN_IF_ERROR(upload_ids(ids, batch_ * len));
  TESSERA_RETURN_IF_ERROR(be_->embedding_gather(model_->weights().wte, ids_, batch_ * len, x_));
  TESSERA_RETURN_IF_ERROR(be_->copy(c_, cond_, static_cast<size_t>(batch_ * cond_len_ * d) * 4));
  TESSERA_RETURN_IF_ERROR(upload_positions(len, 0));
  for (size_t i = 0; i < static_cast<size_t>(c.n_dual); ++i) {
    TESSERA_RETURN_IF_ERROR(dual_full(i, len, cond_rows));
    TESSERA_RETURN_IF_ERROR(
        observe(observer, "dual." + std::to_string(i) + ".x", x_, batch_ * len * d));
    if (!model_->weights().dual[i].cond_pre_only) {
      TESSERA_RETURN_IF_ERROR(
          observe(observer, "dual." + std::to_string(i) + ".c", c_, batch_ * cond_len_ * d));
    }
  }
  for (size_t i = 0; i < static_cast<size_t>(c.n_single); ++i) {
    TESSERA_RETURN_IF_ERROR(single_full(i, len));
    TESSERA_RETURN_IF_ERROR(
        observe(observer, "single." + std::to_string(i) + ".x", x_, batch_ * len * d));
  }
  if (observer) {
    TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_ * len, d, c.eps));
    TESSERA_RETURN_IF_ERROR(observe(observer, "ln_f", h_, batch_ * len * d));
  }
  TESSERA_RETURN_IF_ERROR(remember_condition(cond_rows));
  length_ = len;
  return {};
}

Status GptSession::forward_full(const int32_t* ids, int64_t len, float* logits_last,
                                float* logits_all, const GptBlockObserver& observer) {
  TESSERA_RETURN_IF_ERROR(run_full(ids, len, observer, batch_));
  const GptConfig& c = model_->config();
  const int64_t d = c.n_embd, v = c.vocab_size;
  const size_t row_bytes = static_cast<size_t>(d) * 4;
  if (logits_all) {
    std::vector<float> step(static_cast<size_t>(batch_ * v));
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t b = 0; b < batch_; ++b) {
        TESSERA_RETURN_IF_ERROR(be_->copy(y_ + b * d, x_ + (b * len + t) * d, row_bytes));
      }
      TESSERA_RETURN_IF_ERROR(head(y_, step.data()));
      for (int64_t b = 0; b < batch_; ++b) {
        std::copy(step.begin() + b * v, step.begin() + (b + 1) * v, logits_all + (b * len + t) * v);
      }
    }
  }
  if (logits_last) {
    for (int64_t b = 0; b < batch_; ++b) {
      TESSERA_RETURN_IF_ERROR(be_->copy(y_ + b * d, x_ + (b * len + len - 1) * d, row_bytes));
    }
    TESSERA_RETURN_IF_ERROR(head(y_, logits_last));
  }
  return {};
}

Status GptSession::prefill(const int32_t* ids, float* logits) {
  // Trailing rows whose cached condition K/V still hold: skip their condition stream.
  int64_t cond_rows = batch_;
  while (cond_rows > 0 && has_condition_) {
    TESSERA_ASSIGN_OR_RETURN(const bool same, cached_condition_matches(cond_rows - 1));
    if (!same) break;
    --cond_rows;
  }
  TESSERA_RETURN_IF_ERROR(run_full(ids, 1, {}, cond_rows));
  return head(x_, logits);  // len 1: x_ is [batch, D]
}

}  // namespace tessera::shape
