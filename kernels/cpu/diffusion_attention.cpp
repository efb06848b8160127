// cpu::diffusion_attention: the UNet/VAE attention with a per-shape algorithm (diffusion_ops.h).
//
// kPartialFused (Chen et al. 2023, "partially fused softmax"), one task per (batch, head, block
// of R queries):
//   S[R][kv_len] = scale * Q_blk K^T          one sgemm, S written once (per-thread scratch)
//   m[r] = max_j S[r][j], l[r] = sum_j exp(S[r][j] - m[r])   reduced into two R-vectors
//   for key tiles of kExpKeyTile keys:
//     P = exp(S[:, tile] - m) into an L1 buffer, O_blk += P V_tile   (sgemm)
//   O_blk[r] *= 1 / l[r]                      the normalisation folded into the product's rows
// so the normalised score matrix never exists. R is chosen so S stays within ~kScoreBlockFloats
// (L2-sized), which bounds the scratch for any kv_len.
// kNaive: the unfused baseline the paper starts from (S for a whole head in memory, softmax in
// place, P V). kFlash: ops.h's cpu::attention.
#include <algorithm>
#include <cassert>
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/diffusion_internal.h"
#include "kernels/diffusion_ops.h"

namespace tessera::kernels::cpu {

namespace {

using diffusion_detail::IsaKernels;
using diffusion_detail::sgemm;

// Score block per task: 128K floats (512 KiB), half of a Zen 4 core's L2.
constexpr int64_t kScoreBlockFloats = 128 * 1024;
constexpr int64_t kMaxQueryBlock = 64;
// Keys per exp tile: P is [R][kExpKeyTile] <= 64 KiB, the V tile [kExpKeyTile][head_dim].
constexpr int64_t kExpKeyTile = 256;

int64_t query_block(const AttentionShape& s) {
  int64_t r =
      std::clamp<int64_t>(kScoreBlockFloats / std::max<int64_t>(1, s.kv_len), 1, kMaxQueryBlock);
  if (r >= 8) r &= ~int64_t{7};
  return std::min(r, s.q_len);
}

void partial_fused(const float* q, const float* k, const float* v, float* o,
                   const AttentionShape& s) {
  const IsaKernels& kr = diffusion_detail::isa_kernels(active_isa());
  const int64_t d = s.head_dim, kv = s.kv_len;
  const int64_t rb = query_block(s);
  const int64_t blocks = (s.q_len + rb - 1) / rb;
  kernels::cpu::cpu_pool().run(s.batch * s.heads * blocks, [&](int64_t task) {
    const int64_t blk = task % blocks;
    const int64_t h = (task / blocks) % s.heads;
    const int64_t b = task / (blocks * s.heads);
    const int64_t q0 = blk * rb;
    const int64_t rows = std::min(rb, s.q_len - q0);
    const float* qb = q + b * s.q_batch_stride + q0 * s.q_token_stride + h * d;
    const float* kb = k + b * s.k_batch_stride + h * d;
    const float* vb = v + b * s.v_batch_stride + h * d;
    float* ob = o + b * s.o_batch_stride + q0 * s.o_token_stride + h * d;
    float* sc = diffusion_detail::thread_scratch(0, rows * kv);
    float* p = diffusion_detail::thread_scratch(1, rows * kExpKeyTile + 2 * kMaxQueryBlock);
    float* row_m = p + rows * kExpKeyTile;
    float* row_inv_l = row_m + kMaxQueryBlock;
    sgemm(rows, kv, d, s.scale, qb, s.q_token_stride, kb, s.k_token_stride, /*b_trans=*/true, 0.0f,
          sc, kv);
    for (int64_t r = 0; r < rows; ++r) {
      const float* sr = sc + r * kv;
      row_m[r] = kr.row_max(sr, kv);
      // The exponentials only feed the sum: they go through the first P row (L1), not memory.
      float l = 0.0f;
      for (int64_t j = 0; j < kv; j += kExpKeyTile) {
        l += kr.exp_sub_sum(sr + j, row_m[r], p, std::min(kExpKeyTile, kv - j));
      }
      row_inv_l[r] = 1.0f / l;
    }
    for (int64_t j0 = 0; j0 < kv; j0 += kExpKeyTile) {
      const int64_t nk = std::min(kExpKeyTile, kv - j0);
      for (int64_t r = 0; r < rows; ++r) {
        kr.exp_sub_sum(sc + r * kv + j0, row_m[r], p + r * kExpKeyTile, nk);
      }
      sgemm(rows, d, nk, 1.0f, p, kExpKeyTile, vb + j0 * s.v_token_stride, s.v_token_stride,
            /*b_trans=*/false, j0 == 0 ? 0.0f : 1.0f, ob, s.o_token_stride);
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* orow = ob + r * s.o_token_stride;
      for (int64_t i = 0; i < d; ++i) orow[i] *= row_inv_l[r];
    }
  });
}

void naive(const float* q, const float* k, const float* v, float* o, const AttentionShape& s,
           float* scores) {
  const int64_t d = s.head_dim, kv = s.kv_len, n = s.q_len;
  ThreadPool& pool = kernels::cpu::cpu_pool();
  constexpr int64_t kRows = 64;  // rows per GEMM task
  const int64_t tasks = (n + kRows - 1) / kRows;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const float* qb = q + b * s.q_batch_stride + h * d;
      const float* kb = k + b * s.k_batch_stride + h * d;
      const float* vb = v + b * s.v_batch_stride + h * d;
      float* ob = o + b * s.o_batch_stride + h * d;
      pool.run(tasks, [&](int64_t t) {
        const int64_t r0 = t * kRows, rows = std::min(kRows, n - r0);
        sgemm(rows, kv, d, s.scale, qb + r0 * s.q_token_stride, s.q_token_stride, kb,
              s.k_token_stride, true, 0.0f, scores + r0 * kv, kv);
      });
      softmax(scores, scores, n, kv);
      pool.run(tasks, [&](int64_t t) {
        const int64_t r0 = t * kRows, rows = std::min(kRows, n - r0);
        sgemm(rows, d, kv, 1.0f, scores + r0 * kv, kv, vb, s.v_token_stride, false, 0.0f,
              ob + r0 * s.o_token_stride, s.o_token_stride);
      });
    }
  }
}

}  // namespace

AttentionAlgo choose_attention_algo(const AttentionShape& s) {
  // Measured on 2 Zen 4 cores (shared and loaded machine, medians of 3; flash / partially fused /
  // naive, ms, 8 heads): self 4096 d40 500 / 203-389 / 221-465; cross 4096x77 d40 5-16 / 4-11 /
  // 4-14; self 1024 d80 25-50 / 39-41 / 40-47; cross 1024x77 d80 5-6 / 1.6-4.1 / 1.6-4.4; self
  // 256 d160 7.0 / 4.6-6.0 / 5.9-6.0; cross 256x77 d160 1.0-2.5 / 0.7-1.3 / 0.7-2.3. The
  // partially fused path runs its two products through OpenBLAS's sgemm, which outpaces the
  // flash tiles' micro-kernels at these head dims (40 / 80 / 160 are not multiples of their
  // 64-wide tiles either); it won or tied in all but one noisy run, so it serves every
  // non-causal shape. Flash keeps causal attention (which the partial path does not mask).
  return s.causal ? AttentionAlgo::kFlash : AttentionAlgo::kPartialFused;
}

int64_t attention_scratch_floats(const AttentionShape& s, AttentionAlgo algo) {
  return algo == AttentionAlgo::kNaive ? s.q_len * s.kv_len : 0;
}

// attention_bf16.cpp: cpu::attention's bf16 path; false (nothing written) where it does not apply.
bool attention_bf16(const float* q, const float* k, const float* v, float* o,
                    const AttentionShape& s);

void diffusion_attention(const float* q, const float* k, const float* v, float* o,
                         const AttentionShape& s, AttentionAlgo algo, float* scratch) {
  if (s.batch <= 0 || s.heads <= 0 || s.q_len <= 0 || s.head_dim <= 0) return;
  // bf16 compute (s.allow_bf16): the bf16 path serves kAuto wherever it applies (long enough
  // non-causal shapes on AVX-512 BF16); the explicit algorithms stay f32 (the ablation's rows).
  if (algo == AttentionAlgo::kAuto && s.allow_bf16 && attention_bf16(q, k, v, o, s)) return;
  if (algo == AttentionAlgo::kAuto) algo = choose_attention_algo(s);
  if (s.kv_len <= 0) algo = AttentionAlgo::kFlash;  // no keys: zeros, as every backend
  switch (algo) {
    case AttentionAlgo::kPartialFused:
      assert(!s.causal);
      partial_fused(q, k, v, o, s);
      return;
    case AttentionAlgo::kNaive:
      assert(!s.causal && scratch != nullptr);
      naive(q, k, v, o, s, scratch);
      return;
    case AttentionAlgo::kFlash:
    case AttentionAlgo::kAuto:
      break;
  }
  attention(q, k, v, o, s);
}

}  // namespace tessera::kernels::cpu
