// Reference decode attention over a bf16 K/V cache (tests only): widens the keys and values of
// every (batch, head) exactly into f32 copies laid out with the same strides, rounds q to bf16,
// then runs ref::attention_decode on them.
#include <cassert>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace tessera::kernels::ref {

void attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, float* o,
                             const AttentionShape& s) {
  assert(s.q_len == 1);
  // The span of k/v that s addresses: the last element of the last batch row, token and head.
  auto span = [&](int64_t batch_stride, int64_t token_stride) {
    return (s.batch - 1) * batch_stride + (s.kv_len - 1) * token_stride + s.heads * s.head_dim;
  };
  const int64_t k_span = span(s.k_batch_stride, s.k_token_stride);
  const int64_t v_span = span(s.v_batch_stride, s.v_token_stride);
  if (s.batch <= 0 || s.kv_len <= 0 || k_span <= 0 || v_span <= 0) {
    attention_decode(q, nullptr, nullptr, o, s);
    return;
  }
  // Widening the whole span also widens any padding between rows: harmless, never read.
  std::vector<float> kf(static_cast<size_t>(k_span)), vf(static_cast<size_t>(v_span));
  for (size_t i = 0; i < kf.size(); ++i) kf[i] = bf16_to_f32(k[i]);
  for (size_t i = 0; i < vf.size(); ++i) vf[i] = bf16_to_f32(v[i]);
  // q rounded to bf16, over the same span of its strides.
  const int64_t q_span = (s.batch - 1) * s.q_batch_stride + s.heads * s.head_dim;
  std::vector<float> qr(static_cast<size_t>(q_span));
  for (size_t i = 0; i < qr.size(); ++i) qr[i] = bf16_to_f32(f32_to_bf16(q[i]));
  attention_decode(qr.data(), kf.data(), vf.data(), o, s);
}

}  // namespace tessera::kernels::ref
