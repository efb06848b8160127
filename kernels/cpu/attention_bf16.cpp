// cpu::attention's bf16 path (AttentionShape::allow_bf16, AVX-512 BF16): long non-causal
// attention, e.g. the shape decoder's occupancy queries (thousands of queries x 512-1024 latents,
// 12 heads of 64), through the bf16 GEMM pieces of gemm_bf16.h:
//   1. K and V of every (batch, head) are packed once per call into the vdpbf16ps pair layout
//      (K as [keys] x [head_dim] panels for S = Q K^T, V as [head_dim] x [keys] for P V);
//   2. tasks of kRows queries of one (batch, head): Q rows -> bf16, S = Q K^T (f32), row softmax in
//      f32 (scale, max, exp, sum), P = exp(...) -> bf16, O = P V, O *= 1 / sum.
// The score block (kRows x kv_len f32) is the only intermediate; it stays in L2 for kv_len up to
// a few thousand. q, k, v and p are rounded to bf16 (8 significant bits), accumulation and the
// softmax are f32: for bf16 models only (the caller opts in).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

constexpr int64_t kNr = 32;
constexpr int64_t kRows = 96;  // queries per task (a multiple of the micro-kernel's 12 rows)
// Below these sizes the f32 flash path is as fast (packing and conversions dominate).
constexpr int64_t kMinQueries = 64;
constexpr int64_t kMinKeys = 32;

}  // namespace

// Runs attention through the bf16 path and returns true, or returns false (nothing written) when
// the shape or the CPU does not qualify.
bool attention_bf16(const float* q, const float* k, const float* v, float* o,
                    const AttentionShape& s) {
  if (!s.allow_bf16 || s.causal || s.q_len < kMinQueries || s.kv_len < kMinKeys ||
      !gemm_bf16::available()) {
    return false;
  }
  namespace g = gemm_bf16;
  const int64_t d = s.head_dim, kv = s.kv_len;
  const int64_t dpad = (d + 1) & ~int64_t{1};
  const int64_t kvpad = (kv + 1) & ~int64_t{1};
  const int64_t key_panels = (kv + kNr - 1) / kNr;
  const int64_t dim_panels = (d + kNr - 1) / kNr;
  const int64_t k_words = key_panels * (dpad / 2) * kNr;  // packed K of one (batch, head)
  const int64_t v_words = dim_panels * (kvpad / 2) * kNr;
  const int64_t pairs = s.batch * s.heads;
  std::vector<uint32_t> kpack(static_cast<size_t>(pairs * k_words));
  std::vector<uint32_t> vpack(static_cast<size_t>(pairs * v_words));
  ThreadPool& pool = kernels::cpu::cpu_pool();
  pool.run(pairs, [&](int64_t bh) {
    const int64_t b = bh / s.heads, h = bh % s.heads;
    const g::BMatrix kb{k + b * s.k_batch_stride + h * d, g::BLayout::kF32NK, s.k_token_stride};
    for (int64_t p = 0; p < key_panels; ++p) {
      g::avx512bf16::pack_b(kb, p * kNr, kv, d, dpad,
                            kpack.data() + bh * k_words + p * (dpad / 2) * kNr);
    }
    const g::BMatrix vb{v + b * s.v_batch_stride + h * d, g::BLayout::kF32KN, s.v_token_stride};
    for (int64_t p = 0; p < dim_panels; ++p) {
      g::avx512bf16::pack_b(vb, p * kNr, d, kv, kvpad,
                            vpack.data() + bh * v_words + p * (kvpad / 2) * kNr);
    }
  });

  const int64_t tiles = (s.q_len + kRows - 1) / kRows;
  pool.run(pairs * tiles, [&](int64_t task) {
    const int64_t bh = task / tiles, tile = task % tiles;
    const int64_t b = bh / s.heads, h = bh % s.heads;
    const int64_t q0 = tile * kRows;
    const int64_t rows = std::min(kRows, s.q_len - q0);
    thread_local std::vector<uint16_t> qbuf, pbuf;
    thread_local std::vector<float> scores, sums;
    qbuf.resize(static_cast<size_t>(kRows * dpad));
    pbuf.resize(static_cast<size_t>(kRows * kvpad));
    scores.resize(static_cast<size_t>(kRows * kv));
    sums.resize(static_cast<size_t>(kRows));
    const float* qt = q + b * s.q_batch_stride + q0 * s.q_token_stride + h * d;
    g::avx512bf16::convert_a(qt, s.q_token_stride, rows, d, qbuf.data(), dpad);
    for (int64_t p = 0; p < key_panels; ++p) {
      g::avx512bf16::panel_rows(
          qbuf.data(), rows, dpad, kpack.data() + bh * k_words + p * (dpad / 2) * kNr,
          std::min(kNr, kv - p * kNr), nullptr, scores.data() + p * kNr, kv, false);
    }
    g::avx512bf16::softmax_rows(scores.data(), kv, rows, kv, s.scale, sums.data());
    g::avx512bf16::convert_a(scores.data(), kv, rows, kv, pbuf.data(), kvpad);
    float* ot = o + b * s.o_batch_stride + q0 * s.o_token_stride + h * d;
    for (int64_t p = 0; p < dim_panels; ++p) {
      g::avx512bf16::panel_rows(
          pbuf.data(), rows, kvpad, vpack.data() + bh * v_words + p * (kvpad / 2) * kNr,
          std::min(kNr, d - p * kNr), nullptr, ot + p * kNr, s.o_token_stride, false);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = sums[r] > 0.0f ? 1.0f / sums[r] : 0.0f;
      float* orow = ot + r * s.o_token_stride;
      for (int64_t c = 0; c < d; ++c) orow[c] *= inv;
    }
  });
  return true;
}

}  // namespace tessera::kernels::cpu
