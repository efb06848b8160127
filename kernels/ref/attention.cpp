// Reference attention (tests only): materialises each query's score row, softmax in double, then
// the weighted sum of values. Follows AttentionShape's strides and causal offset exactly.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace tessera::kernels::ref {

// A query that sees no key at all (causal with q_len > kv_len, rows i < q_len - kv_len) gets a zero
// output row: an empty softmax has no weights. Every backend does the same.
void attention(const float* q, const float* k, const float* v, float* o, const AttentionShape& s) {
  const int64_t d_head = s.head_dim;
  const int64_t offset = s.kv_len - s.q_len;
  std::vector<double> scores(static_cast<size_t>(s.kv_len));
  std::vector<double> acc(static_cast<size_t>(d_head));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < s.q_len; ++i) {
        const float* qi = q + b * s.q_batch_stride + i * s.q_token_stride + h * d_head;
        float* oi = o + b * s.o_batch_stride + i * s.o_token_stride + h * d_head;
        int64_t visible = s.kv_len;
        if (s.causal) visible = std::max<int64_t>(0, std::min(s.kv_len, i + offset + 1));
        double mx = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          const float* kj = k + b * s.k_batch_stride + j * s.k_token_stride + h * d_head;
          double dot = 0.0;
          for (int64_t d = 0; d < d_head; ++d) dot += static_cast<double>(qi[d]) * kj[d];
          scores[static_cast<size_t>(j)] = dot * s.scale;
          mx = std::fmax(mx, scores[static_cast<size_t>(j)]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < visible; ++j) {
          scores[static_cast<size_t>(j)] = std::exp(scores[static_cast<size_t>(j)] - mx);
          sum += scores[static_cast<size_t>(j)];
        }
        for (auto& a : acc) a = 0.0;
        for (int64_t j = 0; j < visible; ++j) {
          const float* vj = v + b * s.v_batch_stride + j * s.v_token_stride + h * d_head;
          const double p = scores[static_cast<size_t>(j)];
          for (int64_t d = 0; d < d_head; ++d) acc[static_cast<size_t>(d)] += p * vj[d];
        }
        for (int64_t d = 0; d < d_head; ++d)
          oi[d] = visible > 0 ? static_cast<float>(acc[static_cast<size_t>(d)] / sum) : 0.0f;
      }
    }
  }
}

void attention_decode(const float* q, const float* k, const float* v, float* o,
                      const AttentionShape& s) {
  assert(s.q_len == 1);
  attention(q, k, v, o, s);
}

}  // namespace tessera::kernels::ref
