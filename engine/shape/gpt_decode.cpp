// GptSession's KV-cached decode (gpt.h): one token per row at the next position, from the host
// (decode) or device-resident for the CUDA-graph path (decode_at, advance), and the rows of several
// generations in one decode (copy_row, set_rows, load_logits).
#include "engine/shape/gpt.h"

#include <algorithm>
#include <cmath>

namespace tessera::shape {

Status GptSession::decode(const int32_t* ids, float* logits) {
  const GptConfig& c = model_->config();
  if (!has_condition_ || length_ == 0) {
    return invalid_argument("Cube GPT: decode before prefill (no condition in the cache)");
  }
  if (length_ >= max_len_) {
    return invalid_argument("Cube GPT: KV cache full (" + std::to_string(max_len_) +
                            " shape tokens)");
  }
  const int64_t d = c.n_embd, pos = length_, s = cond_len_, t = joint_len_;
  const size_t row_bytes = static_cast<size_t>(d) * 4;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  TESSERA_RETURN_IF_ERROR(upload_ids(ids, batch_));
  TESSERA_RETURN_IF_ERROR(be_->embedding_gather(model_->weights().wte, ids_, batch_, x_));
  TESSERA_RETURN_IF_ERROR(upload_positions(1, pos));
  // One query per (row, head) over layer's cache: q [batch, D], keys at row stride `slots` * D,
  // the new token's K/V (k_, v_ [batch, D]) first written at slot `at` of each row (rounded to
  // bf16 with a bf16 cache).
  auto attend = [&](size_t layer, int64_t slots, int64_t at, int64_t kv_len) -> Status {
    const bool bf16 = kv_dtype_ == DType::kBF16;
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t dst = (b * slots + at) * d;
      if (bf16) {
        TESSERA_RETURN_IF_ERROR(dec_->convert_f32_to_bf16(k_cache16_[layer] + dst, k_ + b * d, d));
        TESSERA_RETURN_IF_ERROR(dec_->convert_f32_to_bf16(v_cache16_[layer] + dst, v_ + b * d, d));
      } else {
        TESSERA_RETURN_IF_ERROR(be_->copy(k_cache_[layer] + dst, k_ + b * d, row_bytes));
        TESSERA_RETURN_IF_ERROR(be_->copy(v_cache_[layer] + dst, v_ + b * d, row_bytes));
      }
    }
    kernels::AttentionShape as;
    as.batch = batch_;
    as.heads = c.n_head;
    as.head_dim = c.head_dim;
    as.q_len = 1;
    as.kv_len = kv_len;
    as.q_token_stride = as.k_token_stride = as.v_token_stride = as.o_token_stride = d;
    as.q_batch_stride = as.o_batch_stride = d;
    as.k_batch_stride = as.v_batch_stride = slots * d;
    as.causal = false;  // one query at the end of the sequence sees every key
    as.scale = scale;
    if (bf16) {
      return dec_->attention_decode_bf16kv(q_, k_cache16_[layer], v_cache16_[layer], y_, as);
    }
    return be_->attention_decode(q_, k_cache_[layer], v_cache_[layer], y_, as);
  };
  const detail::GptWeights& w = model_->weights();
  for (size_t i = 0; i < w.dual.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_, d, c.eps));
    TESSERA_RETURN_IF_ERROR(project(w.dual[i].pre_x, h_, batch_, true, q_, k_, v_));
    TESSERA_RETURN_IF_ERROR(attend(i, t, s + pos, s + pos + 1));
    TESSERA_RETURN_IF_ERROR(post(w.dual[i].post_1, x_, y_, batch_));
  }
  for (size_t i = 0; i < w.single.size(); ++i) {
    const size_t layer = w.dual.size() + i;
    TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_, d, c.eps));
    TESSERA_RETURN_IF_ERROR(project(w.single[i].attn, h_, batch_, true, q_, k_, v_));
    TESSERA_RETURN_IF_ERROR(attend(layer, max_len_, pos, pos + 1));
    TESSERA_RETURN_IF_ERROR(post(w.single[i].post, x_, y_, batch_));
  }
  length_ = pos + 1;
  return head(x_, logits);
}

Status GptSession::decode_at(const int64_t* step) {
  const GptConfig& c = model_->config();
  if (!has_condition_ || length_ == 0) {
    return invalid_argument("Cube GPT: decode_at before prefill (no condition in the cache)");
  }
  if (dec_ == nullptr) {
    return unsupported("Cube GPT: backend " + be_->name() + " has no device-resident decoding");
  }
  const int64_t d = c.n_embd, s = cond_len_, t = joint_len_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  TESSERA_RETURN_IF_ERROR(be_->embedding_gather(model_->weights().wte, ids_, batch_, x_));
  TESSERA_RETURN_IF_ERROR(dec_->set_positions(positions_, batch_, 1, step, 0));
  const bool bf16 = kv_dtype_ == DType::kBF16;
  // As decode()'s attend, with the slot (slot_offset + *step) and the keys in use (*step +
  // kv_offset) read from *step: dual blocks s + step / s + step + 1, single blocks step / step + 1.
  auto attend = [&](size_t layer, int64_t slots, int64_t slot_offset, int64_t kv_offset) -> Status {
    void* kc = bf16 ? static_cast<void*>(k_cache16_[layer]) : static_cast<void*>(k_cache_[layer]);
    void* vc = bf16 ? static_cast<void*>(v_cache16_[layer]) : static_cast<void*>(v_cache_[layer]);
    TESSERA_RETURN_IF_ERROR(
        dec_->store_kv_pair(kc, vc, kv_dtype_, k_, v_, batch_, d, slots * d, slot_offset, step));
    kernels::AttentionShape as;
    as.batch = batch_;
    as.heads = c.n_head;
    as.head_dim = c.head_dim;
    as.q_len = 1;
    as.kv_len = slots;  // the capacity; the keys in use come from *step
    as.q_token_stride = as.k_token_stride = as.v_token_stride = as.o_token_stride = d;
    as.q_batch_stride = as.o_batch_stride = d;
    as.k_batch_stride = as.v_batch_stride = slots * d;
    as.causal = false;
    as.scale = scale;
    return dec_->attention_decode_at(q_, kc, vc, kv_dtype_, y_, as, step, kv_offset);
  };
  const detail::GptWeights& w = model_->weights();
  // Each block's input norm is made by the previous block's last residual add (post with
  // then_norm; one kernel on the GPU), the first by a layer_norm here, the head's by the last
  // block.
  TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_, d, c.eps));
  for (size_t i = 0; i < w.dual.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(project(w.dual[i].pre_x, h_, batch_, true, q_, k_, v_));
    TESSERA_RETURN_IF_ERROR(attend(i, t, s, s + 1));
    TESSERA_RETURN_IF_ERROR(post(w.dual[i].post_1, x_, y_, batch_, true));
  }
  for (size_t i = 0; i < w.single.size(); ++i) {
    const size_t layer = w.dual.size() + i;
    TESSERA_RETURN_IF_ERROR(project(w.single[i].attn, h_, batch_, true, q_, k_, v_));
    TESSERA_RETURN_IF_ERROR(attend(layer, max_len_, 0, 1));
    TESSERA_RETURN_IF_ERROR(post(w.single[i].post, x_, y_, batch_, true));
  }
  return be_->linear(h_, batch_, w.lm_head, nullptr, logits_);
}

Status GptSession::copy_row(int64_t src, int64_t dst) {
  if (src < 0 || src >= max_batch_ || dst < 0 || dst >= max_batch_) {
    return invalid_argument("GptSession::copy_row: rows " + std::to_string(src) + " -> " +
                            std::to_string(dst) + " outside [0, " + std::to_string(max_batch_) +
                            ")");
  }
  if (!has_condition_ || length_ == 0) {
    return invalid_argument("GptSession::copy_row: nothing cached yet (call prefill first)");
  }
  if (src == dst) return {};
  const GptConfig& c = model_->config();
  const int64_t d = c.n_embd, s = cond_len_;
  const size_t elem = kv_dtype_ == DType::kBF16 ? 2 : 4;
  const int64_t layers = c.n_dual + c.n_single;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const bool dual = layer < c.n_dual;
    const int64_t slots = dual ? joint_len_ : max_len_;
    const int64_t used = dual ? s + length_ : length_;
    const size_t bytes = static_cast<size_t>(used * d) * elem;
    const size_t from = static_cast<size_t>(src * slots * d) * elem;
    const size_t to = static_cast<size_t>(dst * slots * d) * elem;
    const size_t l = static_cast<size_t>(layer);
    auto* kc = kv_dtype_ == DType::kBF16 ? static_cast<void*>(k_cache16_[l])
                                         : static_cast<void*>(k_cache_[l]);
    auto* vc = kv_dtype_ == DType::kBF16 ? static_cast<void*>(v_cache16_[l])
                                         : static_cast<void*>(v_cache_[l]);
    TESSERA_RETURN_IF_ERROR(
        be_->copy(static_cast<char*>(kc) + to, static_cast<const char*>(kc) + from, bytes));
    TESSERA_RETURN_IF_ERROR(
        be_->copy(static_cast<char*>(vc) + to, static_cast<const char*>(vc) + from, bytes));
  }
  const size_t n = condition_scratch_.size();
  TESSERA_RETURN_IF_ERROR(be_->copy(cond_ + dst * s * d, cond_ + src * s * d, n * sizeof(float)));
  std::copy(
      cache_condition_.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(src)),
      cache_condition_.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(src + 1)),
      cache_condition_.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(dst)));
  cache_condition_valid_[static_cast<size_t>(dst)] =
      cache_condition_valid_[static_cast<size_t>(src)];
  return {};
}

Status GptSession::set_rows(int64_t rows) {
  if (rows < 1 || rows > max_batch_) {
    return invalid_argument("GptSession::set_rows: " + std::to_string(rows) + " rows outside [1, " +
                            std::to_string(max_batch_) + "]");
  }
  if (!has_condition_ || length_ == 0) {
    return invalid_argument("GptSession::set_rows: nothing cached yet (call prefill first)");
  }
  batch_ = rows;
  return {};
}

Status GptSession::load_logits(const float* logits, int64_t rows) {
  if (rows < 1 || rows > max_batch_ || logits == nullptr) {
    return invalid_argument("GptSession::load_logits: " + std::to_string(rows) +
                            " rows outside [1, " + std::to_string(max_batch_) + "] or no data");
  }
  return be_->upload(logits_, logits,
                     static_cast<size_t>(rows * model_->config().vocab_size) * sizeof(float));
}

Status GptSession::advance(int64_t steps) {
  if (steps < 0 || length_ + steps > max_len_) {
    return invalid_argument("Cube GPT: advance(" + std::to_string(steps) + ") from " +
                            std::to_string(length_) + " past the KV cache's " +
                            std::to_string(max_len_) + " shape tokens");
  }
  length_ += steps;
  return {};
}

}  // namespace tessera::shape
