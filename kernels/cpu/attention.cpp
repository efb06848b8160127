// CPU attention, flash-style (Dao et al. 2022, "FlashAttention"; decode split as in
// "Flash-Decoding", Dao et al. 2023). Never materialises the score matrix:
//
// attention(): one task per (batch, head, query tile of up to 64 rows). The task packs its queries
// transposed and pre-scaled (qt[d][i] = q_i[d] * scale), then walks key tiles of 64:
//   st[j][i] = q_i . k_j  (st is [keys][queries], so the running max and sum are vertical vector
//   ops) causal mask on the diagonal tiles only; tiles past the last visible key are never visited
//   online softmax: m_new = max(m, max_j st), alpha = exp(m - m_new), p = exp(st - m_new),
//                   l = l * alpha + sum_j p
//   o_tile = o_tile * alpha + p^T v  (f32 tile on the stack, normalised by 1/l at the end)
// Keys and values are read in place through their strides (packed QKV works), no copies.
//
// attention_decode(): one query per (batch, head). With fewer (batch, head) pairs than threads the
// keys are split into chunks; each chunk yields (max, sum, unnormalised output) and a second pass
// merges them with weights exp(max_c - max). Otherwise one task per head accumulates directly in
// the output row.
// attention_decode_bf16kv(): the same split over a bf16 K/V cache; each tile of keys and values is
// widened exactly into f32 stack scratch (linear's expand_bf16 kernels) and then goes through the
// same f32 micro-kernels, so it computes attention_decode of the widened cache.
//
// s.allow_bf16 with a long non-causal shape on an AVX-512 BF16 CPU: attention_bf16.cpp instead.
//
// A query that sees no key (causal with q_len > kv_len) gets zeros. The micro-kernels (qk_tile,
// softmax_tile, pv_tile, dot_scores) exist as scalar versions (below) and SIMD ones, written once
// in attention_kernels.inc and compiled for AVX-512 and AVX2; the tiling, masking and merging
// above are shared by all three, so the scalar path (SIMD off) tests the same algorithm. Scratch is
// on the stack: ~160 KiB per task (tile sizes shrink as head_dim grows; beyond head_dim ~1200 each
// query row streams over the keys on its own, accumulating in its output row).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/threads.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_internal.h"
#include "kernels/cpu/simd_internal.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu {

namespace detail {
// The micro-kernels. bq (queries per tile, the row length of qt/st/pt) is a multiple of 16 and at
// most 64 for qk_tile and softmax_tile; pv_tile also accepts bq == 1 (decode).
#define TESSERA_ATTENTION_ISA_DECLS                                                                \
  /* st[j*bq + i] = sum_d qt[d*bq + i] * k[j*k_stride + d] for j < nk, i < bq. */                  \
  void qk_tile(const float* qt, int64_t bq, const float* k, int64_t k_stride, int64_t nk,          \
               int64_t dim, float* st);                                                            \
  /* Online-softmax step for every query column i of st[nk][bq]: m_new = max(m, max_j st[j][i]),   \
     alpha[i] = exp(m - m_new), st = exp(st - m_new), l = l*alpha + sum_j st; m = m_new. A column  \
     still all -inf keeps m = -inf, l = 0, st = 0 (no NaN). */                                     \
  void softmax_tile(float* st, int64_t nk, int64_t bq, float* m, float* l, float* alpha);          \
  /* o[r*ldo + d] = o[r*ldo + d] * alpha[r] + sum_j pt[j*bq + r] * v[j*v_stride + d], r < rows. */ \
  void pv_tile(const float* pt, int64_t bq, int64_t rows, const float* v, int64_t v_stride,        \
               int64_t nk, int64_t dim, const float* alpha, float* o, int64_t ldo);                \
  /* s[j] = scale * (q . k_j) for j < nk. */                                                       \
  void dot_scores(const float* q, const float* k, int64_t k_stride, int64_t nk, int64_t dim,       \
                  float scale, float* s);
namespace avx512 {
TESSERA_ATTENTION_ISA_DECLS
}  // namespace avx512
namespace avx2 {
TESSERA_ATTENTION_ISA_DECLS
}  // namespace avx2
// Defined in attention_bf16kv_avx512.cpp (AVX-512 only).
namespace avx512 {
// attention_decode_bf16kv's fold over keys [j_begin, j_end) of one (batch, head) for head_dim 32,
// 64, 128 or 256 (returns false for other sizes, touching nothing): scores and P.V straight from
// the bf16 rows (each 512-bit load split into even/odd f32 lanes with one shift and one mask:
// exact), online softmax per 32 keys, the output accumulated in registers. Same contract as
// accumulate_keys_bf16 (m, l, acc carried across calls). dot_bf16 (only where the CPU has
// AVX-512 BF16; q must then hold bf16 values): the scores through vdpbf16ps.
bool decode_fold_bf16(const float* q, const uint16_t* k, int64_t k_stride, const uint16_t* v,
                      int64_t v_stride, int64_t j_begin, int64_t j_end, int64_t dim, float scale,
                      bool dot_bf16, float* m, float* l, float* acc);
}  // namespace avx512
#undef TESSERA_ATTENTION_ISA_DECLS
}  // namespace detail

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kKeyTile = 64;       // keys per tile (st rows)
constexpr int64_t kMaxQueryTile = 64;  // queries per tile (st columns)
// Floats of stack scratch per attention task: qt [dim][bq] + o tile [bq][dim] + st [64][bq].
constexpr int64_t kTileScratch = 40 * 1024;
// Floats of partial results (dim + 2 per chunk) the decode split may keep on the caller's stack.
constexpr int64_t kDecodeScratch = 32 * 1024;
// The smallest key chunk worth a task of its own in the decode split.
constexpr int64_t kMinDecodeChunk = 64;
// decode_impl's row-major walk (all heads per tile of keys): from kRowMajorMinKeys keys, chunks of
// at least kMinRowChunk keys, tiles of kDecodeRowTile keys (K + V of a tile at v0.5's 12 heads of
// 128 in bf16: 192 KB, within L2 with the next tile's prefetch).
constexpr int64_t kRowMajorMinKeys = 256;
constexpr int64_t kMinRowChunk = 128;
constexpr int64_t kDecodeRowTile = 32;
// Floats of stack scratch for one widened tile of bf16 keys (and one of values) in
// attention_decode_bf16kv: 64 keys of head_dim 128; larger head dims get fewer keys per tile.
constexpr int64_t kBf16TileFloats = 64 * 128;

// ---- scalar micro-kernels (SIMD off; also the definition the SIMD versions are tested against) --

void qk_tile_scalar(const float* qt, int64_t bq, const float* k, int64_t k_stride, int64_t nk,
                    int64_t dim, float* st) {
  for (int64_t j = 0; j < nk; ++j) {
    float* row = st + j * bq;
    for (int64_t i = 0; i < bq; ++i) row[i] = 0.0f;
    const float* kj = k + j * k_stride;
    for (int64_t d = 0; d < dim; ++d) {
      const float kd = kj[d];
      const float* qd = qt + d * bq;
      for (int64_t i = 0; i < bq; ++i) row[i] += qd[i] * kd;
    }
  }
}

void softmax_tile_scalar(float* st, int64_t nk, int64_t bq, float* m, float* l, float* alpha) {
  for (int64_t i = 0; i < bq; ++i) {
    float m_new = m[i];
    for (int64_t j = 0; j < nk; ++j) m_new = std::max(m_new, st[j * bq + i]);
    const float m_safe = m_new == kNegInf ? 0.0f : m_new;
    alpha[i] = std::exp(m[i] - m_safe);
    float sum = 0.0f;
    for (int64_t j = 0; j < nk; ++j) {
      const float p = std::exp(st[j * bq + i] - m_safe);
      st[j * bq + i] = p;
      sum += p;
    }
    l[i] = l[i] * alpha[i] + sum;
    m[i] = m_new;
  }
}

void pv_tile_scalar(const float* pt, int64_t bq, int64_t rows, const float* v, int64_t v_stride,
                    int64_t nk, int64_t dim, const float* alpha, float* o, int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r) {
    float* orow = o + r * ldo;
    for (int64_t d = 0; d < dim; ++d) orow[d] *= alpha[r];
    for (int64_t j = 0; j < nk; ++j) {
      const float p = pt[j * bq + r];
      const float* vj = v + j * v_stride;
      for (int64_t d = 0; d < dim; ++d) orow[d] += p * vj[d];
    }
  }
}

void dot_scores_scalar(const float* q, const float* k, int64_t k_stride, int64_t nk, int64_t dim,
                       float scale, float* s) {
  for (int64_t j = 0; j < nk; ++j) {
    float dot = 0.0f;
    for (int64_t d = 0; d < dim; ++d) dot += q[d] * k[j * k_stride + d];
    s[j] = dot * scale;
  }
}

struct Kernels {
  decltype(&qk_tile_scalar) qk_tile;
  decltype(&softmax_tile_scalar) softmax_tile;
  decltype(&pv_tile_scalar) pv_tile;
  decltype(&dot_scores_scalar) dot_scores;
  decltype(&detail::scalar::exp_sub_sum) exp_sub_sum;
};

const Kernels& kernels_for(Isa isa) {
  static const Kernels kScalar{qk_tile_scalar, softmax_tile_scalar, pv_tile_scalar,
                               dot_scores_scalar, detail::scalar::exp_sub_sum};
  static const Kernels kAvx2{detail::avx2::qk_tile, detail::avx2::softmax_tile,
                             detail::avx2::pv_tile, detail::avx2::dot_scores,
                             detail::avx2::exp_sub_sum};
  static const Kernels kAvx512{detail::avx512::qk_tile, detail::avx512::softmax_tile,
                               detail::avx512::pv_tile, detail::avx512::dot_scores,
                               detail::avx512::exp_sub_sum};
  switch (isa) {
    case Isa::kAvx512:
      return kAvx512;
    case Isa::kAvx2:
      return kAvx2;
    case Isa::kScalar:
      break;
  }
  return kScalar;
}

int64_t round_up(int64_t x, int64_t to) {
  return (x + to - 1) / to * to;
}

// Largest query tile whose scratch fits kTileScratch, or 0 when even 16 rows do not (huge
// head_dim).
int64_t query_tile_for(int64_t dim) {
  for (int64_t bq = kMaxQueryTile; bq >= 16; bq /= 2) {
    if (2 * bq * dim + kKeyTile * bq + 16 <= kTileScratch) return bq;
  }
  return 0;
}

// Folds keys [j_begin, j_end) into one query's running (m, l, acc[dim]); acc is unnormalised and
// relative to m. Scores go through a 64-key buffer on the stack.
void accumulate_keys(const Kernels& kr, const float* q, const float* k, int64_t k_stride,
                     const float* v, int64_t v_stride, int64_t j_begin, int64_t j_end, int64_t dim,
                     float scale, float* m, float* l, float* acc) {
  alignas(64) float scores[kKeyTile];
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kKeyTile) {
    const int64_t nk = std::min(kKeyTile, j_end - j0);
    kr.dot_scores(q, k + j0 * k_stride, k_stride, nk, dim, scale, scores);
    float m_new = *m;
    for (int64_t j = 0; j < nk; ++j) m_new = std::max(m_new, scores[j]);
    const float m_safe = m_new == kNegInf ? 0.0f : m_new;
    const float alpha = std::exp(*m - m_safe);
    const float sum = kr.exp_sub_sum(scores, m_safe, scores, nk);
    kr.pv_tile(scores, 1, 1, v + j0 * v_stride, v_stride, nk, dim, &alpha, acc, dim);
    *l = *l * alpha + sum;
    *m = m_new;
  }
}

// accumulate_keys over bf16 keys/values: each tile of keys is first widened (exactly) into f32
// scratch on the stack, [keys][dim] for K and V, then scored and summed as in accumulate_keys.
// The cache is read once, at half the bytes of f32; the widened tile is reused from L1/L2.
void accumulate_keys_bf16(const Kernels& kr, linear_detail::ExpandBf16Fn expand, const float* q,
                          const uint16_t* k, int64_t k_stride, const uint16_t* v, int64_t v_stride,
                          int64_t j_begin, int64_t j_end, int64_t dim, float scale, float* m,
                          float* l, float* acc) {
  alignas(64) float stack_tiles[2 * kBf16TileFloats];
  alignas(64) float scores[kKeyTile];
  float* kt = stack_tiles;
  float* vt = stack_tiles + kBf16TileFloats;
  // A head too wide for even one key in the stack tile (head_dim > 8192; no model here) widens one
  // key at a time into heap scratch instead.
  std::vector<float> wide;
  if (dim > kBf16TileFloats) {
    wide.resize(static_cast<size_t>(2 * dim));
    kt = wide.data();
    vt = kt + dim;
  }
  const int64_t tile =
      std::clamp<int64_t>(kBf16TileFloats / std::max<int64_t>(1, dim), 1, kKeyTile);
  for (int64_t j0 = j_begin; j0 < j_end; j0 += tile) {
    const int64_t nk = std::min(tile, j_end - j0);
    expand(k + j0 * k_stride, k_stride, nk, dim, kt, dim);
    kr.dot_scores(q, kt, dim, nk, dim, scale, scores);
    float m_new = *m;
    for (int64_t j = 0; j < nk; ++j) m_new = std::max(m_new, scores[j]);
    const float m_safe = m_new == kNegInf ? 0.0f : m_new;
    const float alpha = std::exp(*m - m_safe);
    const float sum = kr.exp_sub_sum(scores, m_safe, scores, nk);
    expand(v + j0 * v_stride, v_stride, nk, dim, vt, dim);
    kr.pv_tile(scores, 1, 1, vt, dim, nk, dim, &alpha, acc, dim);
    *l = *l * alpha + sum;
    *m = m_new;
  }
}

// One (batch, head, query tile) of attention().
void attention_tile(const Kernels& kr, const float* q, const float* k, const float* v, float* o,
                    const AttentionShape& s, int64_t b, int64_t h, int64_t q0, int64_t rows) {
  const int64_t dim = s.head_dim;
  const int64_t bq = round_up(rows, 16);
  alignas(64) float scratch[kTileScratch];
  float* qt = scratch;                        // [dim][bq]
  float* ot = qt + dim * bq;                  // [rows][dim]
  float* st = ot + round_up(rows * dim, 16);  // [kKeyTile][bq]
  alignas(64) float m[kMaxQueryTile], l[kMaxQueryTile], alpha[kMaxQueryTile];

  for (int64_t i = 0; i < bq; ++i) {
    if (i < rows) {
      const float* qi = q + b * s.q_batch_stride + (q0 + i) * s.q_token_stride + h * dim;
      for (int64_t d = 0; d < dim; ++d) qt[d * bq + i] = qi[d] * s.scale;
    } else {
      for (int64_t d = 0; d < dim; ++d) qt[d * bq + i] = 0.0f;
    }
    m[i] = kNegInf;
    l[i] = 0.0f;
  }
  std::fill(ot, ot + rows * dim, 0.0f);

  const int64_t offset = s.kv_len - s.q_len;  // query i sees keys j <= i + offset when causal
  const int64_t kv_end = s.causal ? std::clamp<int64_t>(q0 + rows + offset, 0, s.kv_len) : s.kv_len;
  const float* kb = k + b * s.k_batch_stride + h * dim;
  const float* vb = v + b * s.v_batch_stride + h * dim;
  for (int64_t j0 = 0; j0 < kv_end; j0 += kKeyTile) {
    const int64_t nk = std::min(kKeyTile, kv_end - j0);
    kr.qk_tile(qt, bq, kb + j0 * s.k_token_stride, s.k_token_stride, nk, dim, st);
    if (s.causal && j0 + nk - 1 > q0 + offset) {  // a diagonal tile: mask j > i + offset
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t blind_rows = j0 + j - offset - q0;  // rows i < this cannot see key j0 + j
        for (int64_t i = 0; i < std::min(bq, blind_rows); ++i) st[j * bq + i] = kNegInf;
      }
    }
    kr.softmax_tile(st, nk, bq, m, l, alpha);
    kr.pv_tile(st, bq, rows, vb + j0 * s.v_token_stride, s.v_token_stride, nk, dim, alpha, ot, dim);
  }

  for (int64_t i = 0; i < rows; ++i) {
    float* oi = o + b * s.o_batch_stride + (q0 + i) * s.o_token_stride + h * dim;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    for (int64_t d = 0; d < dim; ++d) oi[d] = ot[i * dim + d] * inv;
  }
}

// Every query row on its own, accumulating in its output row: the path for head_dim too large
// for the tile scratch.
void attention_rows(const Kernels& kr, const float* q, const float* k, const float* v, float* o,
                    const AttentionShape& s) {
  const int64_t dim = s.head_dim;
  const int64_t offset = s.kv_len - s.q_len;
  kernels::cpu::cpu_pool().run(s.batch * s.heads * s.q_len, [&](int64_t task) {
    const int64_t i = task % s.q_len;
    const int64_t h = (task / s.q_len) % s.heads;
    const int64_t b = task / (s.q_len * s.heads);
    const float* qi = q + b * s.q_batch_stride + i * s.q_token_stride + h * dim;
    float* oi = o + b * s.o_batch_stride + i * s.o_token_stride + h * dim;
    const int64_t visible = s.causal ? std::clamp<int64_t>(i + offset + 1, 0, s.kv_len) : s.kv_len;
    std::fill(oi, oi + dim, 0.0f);
    float m = kNegInf, l = 0.0f;
    accumulate_keys(kr, qi, k + b * s.k_batch_stride + h * dim, s.k_token_stride,
                    v + b * s.v_batch_stride + h * dim, s.v_token_stride, 0, visible, dim, s.scale,
                    &m, &l, oi);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t d = 0; d < dim; ++d) oi[d] *= inv;
  });
}

// attention_decode over keys/values of element type T (float, or uint16_t = bf16); `fold` is
// accumulate_keys for f32 and accumulate_keys_bf16 for bf16 (same arguments).
template <typename T, typename Fold>
void decode_impl(const Fold& fold, const float* q, const T* k, const T* v, float* o,
                 const AttentionShape& s) {
  assert(s.q_len == 1);
  const int64_t dim = s.head_dim;
  const int64_t pairs = s.batch * s.heads;
  ThreadPool& pool = kernels::cpu::cpu_pool();
  auto q_of = [&](int64_t bh) {
    return q + (bh / s.heads) * s.q_batch_stride + (bh % s.heads) * dim;
  };
  auto o_of = [&](int64_t bh) {
    return o + (bh / s.heads) * s.o_batch_stride + (bh % s.heads) * dim;
  };
  auto k_of = [&](int64_t bh) {
    return k + (bh / s.heads) * s.k_batch_stride + (bh % s.heads) * dim;
  };
  auto v_of = [&](int64_t bh) {
    return v + (bh / s.heads) * s.v_batch_stride + (bh % s.heads) * dim;
  };
  // o of every pair from its chunks' partials [acc (dim) | m | l] at partials + (bh * chunks + c)
  // * (dim + 2): weights exp(m_c - max), then 1 / sum.
  auto merge_partials = [&](const float* partials, int64_t chunks) {
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const float* first = partials + bh * chunks * (dim + 2);
      float m_max = kNegInf;
      for (int64_t c = 0; c < chunks; ++c) m_max = std::max(m_max, first[c * (dim + 2) + dim]);
      float* oi = o_of(bh);
      std::fill(oi, oi + dim, 0.0f);
      if (m_max == kNegInf) continue;  // no visible key with a finite score
      float l_total = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) {
        const float* part = first + c * (dim + 2);
        const float w = std::exp(part[dim] - m_max);  // 0 for an empty chunk (m = -inf)
        l_total += w * part[dim + 1];
        for (int64_t d = 0; d < dim; ++d) oi[d] += w * part[d];
      }
      const float inv = l_total > 0.0f ? 1.0f / l_total : 0.0f;
      for (int64_t d = 0; d < dim; ++d) oi[d] *= inv;
    }
  };

  // Long contexts: tasks of (batch row, key chunk) walk their keys in tiles of kDecodeRowTile and
  // fold every head over a tile before the next, prefetching the next tile's K and V rows whole.
  // A cache row holds all heads ([slot][heads * dim]): head by head over all keys, each pass
  // reads one head's slice (256 bytes of bf16 at head_dim 128) of every 3 KB row, a page-strided
  // stream the hardware prefetchers do not follow (~11 GB/s at 1100 keys, v0.5's shape, against
  // ~35 GB/s of plain reads on the same machine).
  const int64_t row_chunks = std::min<int64_t>((2 * pool.num_threads() + s.batch - 1) / s.batch,
                                               std::max<int64_t>(1, s.kv_len / kMinRowChunk));
  if (s.heads > 1 && s.kv_len >= kRowMajorMinKeys &&
      s.batch * s.heads * row_chunks * (dim + 2) <= kDecodeScratch) {
    alignas(64) float partials[kDecodeScratch];
    const int64_t chunk_len = (s.kv_len + row_chunks - 1) / row_chunks;
    const int64_t row_bytes = s.heads * dim * static_cast<int64_t>(sizeof(T));
    pool.run(s.batch * row_chunks, [&](int64_t task) {
      const int64_t b = task / row_chunks, c = task % row_chunks;
      const int64_t j_begin = std::min(s.kv_len, c * chunk_len);
      const int64_t j_end = std::min(s.kv_len, j_begin + chunk_len);
      const T* k_row = k + b * s.k_batch_stride;
      const T* v_row = v + b * s.v_batch_stride;
      // Partial of (b, h, c) at ((b * heads + h) * row_chunks + c) * (dim + 2): merge_partials'.
      auto part_of = [&](int64_t h) {
        return partials + ((b * s.heads + h) * row_chunks + c) * (dim + 2);
      };
      for (int64_t h = 0; h < s.heads; ++h) {
        float* part = part_of(h);
        std::fill(part, part + dim, 0.0f);
        part[dim] = kNegInf;
        part[dim + 1] = 0.0f;
      }
      auto prefetch_rows = [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) {
          const char* kr = reinterpret_cast<const char*>(k_row + j * s.k_token_stride);
          const char* vr = reinterpret_cast<const char*>(v_row + j * s.v_token_stride);
          for (int64_t off = 0; off < row_bytes; off += 64) {
            __builtin_prefetch(kr + off, 0, 2);
            __builtin_prefetch(vr + off, 0, 2);
          }
        }
      };
      prefetch_rows(j_begin, std::min(j_end, j_begin + kDecodeRowTile));
      for (int64_t j0 = j_begin; j0 < j_end; j0 += kDecodeRowTile) {
        const int64_t j1 = std::min(j_end, j0 + kDecodeRowTile);
        const int64_t next = std::min(j_end, j1 + kDecodeRowTile) - j1;
        for (int64_t h = 0; h < s.heads; ++h) {
          // The next tile's rows, a share before each head's fold: a burst of a whole tile's
          // prefetches would stall the core until they land instead of overlapping the folds.
          prefetch_rows(j1 + next * h / s.heads, j1 + next * (h + 1) / s.heads);
          float* part = part_of(h);
          fold(q_of(b * s.heads + h), k_row + h * dim, s.k_token_stride, v_row + h * dim,
               s.v_token_stride, j0, j1, dim, s.scale, &part[dim], &part[dim + 1], part);
        }
      }
    });
    merge_partials(partials, row_chunks);
    return;
  }

  // Split the keys only when the heads alone cannot keep the threads busy: about two chunks per
  // thread in total, each at least kMinDecodeChunk keys, partials within kDecodeScratch.
  int64_t chunks = 1;
  if (pairs < pool.num_threads()) {
    chunks = (2 * pool.num_threads() + pairs - 1) / pairs;
    chunks = std::min(chunks, (s.kv_len + kMinDecodeChunk - 1) / kMinDecodeChunk);
    chunks = std::min(chunks, kDecodeScratch / (pairs * (dim + 2)));
  }

  if (chunks <= 1) {
    pool.run(pairs, [&](int64_t bh) {
      float* oi = o_of(bh);
      std::fill(oi, oi + dim, 0.0f);
      float m = kNegInf, l = 0.0f;
      fold(q_of(bh), k_of(bh), s.k_token_stride, v_of(bh), s.v_token_stride, 0, s.kv_len, dim,
           s.scale, &m, &l, oi);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      for (int64_t d = 0; d < dim; ++d) oi[d] *= inv;
    });
    return;
  }

  // Partial c of pair bh: [acc (dim) | m | l] at partials + (bh * chunks + c) * (dim + 2).
  alignas(64) float partials[kDecodeScratch];
  const int64_t chunk_len = (s.kv_len + chunks - 1) / chunks;
  pool.run(pairs * chunks, [&](int64_t task) {
    const int64_t bh = task / chunks, c = task % chunks;
    float* part = partials + task * (dim + 2);
    std::fill(part, part + dim, 0.0f);
    float m = kNegInf, l = 0.0f;
    const int64_t j_begin = std::min(s.kv_len, c * chunk_len);
    const int64_t j_end = std::min(s.kv_len, j_begin + chunk_len);
    fold(q_of(bh), k_of(bh), s.k_token_stride, v_of(bh), s.v_token_stride, j_begin, j_end, dim,
         s.scale, &m, &l, part);
    part[dim] = m;
    part[dim + 1] = l;
  });
  merge_partials(partials, chunks);
}

}  // namespace

void attention_decode(const float* q, const float* k, const float* v, float* o,
                      const AttentionShape& s) {
  const Kernels& kr = kernels_for(active_isa());
  decode_impl(
      [&](const float* qi, const float* kb, int64_t k_stride, const float* vb, int64_t v_stride,
          int64_t j_begin, int64_t j_end, int64_t dim, float scale, float* m, float* l,
          float* acc) {
        accumulate_keys(kr, qi, kb, k_stride, vb, v_stride, j_begin, j_end, dim, scale, m, l, acc);
      },
      q, k, v, o, s);
}

void attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, float* o,
                             const AttentionShape& s) {
  const Isa isa = active_isa();
  const Kernels& kr = kernels_for(isa);
  const linear_detail::ExpandBf16Fn expand = linear_detail::expand_bf16_for(isa);
  const bool dot_bf16 = gemm_bf16::available();
  // q rounded to bf16 like the cache (the contract in kernels/ops.h), packed [batch][heads * dim].
  const int64_t row = s.heads * s.head_dim;
  thread_local std::vector<float> q_bf16;
  if (s.batch > 0 && row > 0) {
    q_bf16.resize(static_cast<size_t>(s.batch * row));
    for (int64_t b = 0; b < s.batch; ++b) {
      const float* src = q + b * s.q_batch_stride;
      float* dst = q_bf16.data() + b * row;
      for (int64_t i = 0; i < row; ++i) dst[i] = bf16_to_f32(f32_to_bf16(src[i]));
    }
  }
  AttentionShape rounded = s;
  rounded.q_batch_stride = row;
  rounded.q_token_stride = row;
  decode_impl(
      [&](const float* qi, const uint16_t* kb, int64_t k_stride, const uint16_t* vb,
          int64_t v_stride, int64_t j_begin, int64_t j_end, int64_t dim, float scale, float* m,
          float* l, float* acc) {
        if (isa == Isa::kAvx512 &&
            detail::avx512::decode_fold_bf16(qi, kb, k_stride, vb, v_stride, j_begin, j_end, dim,
                                             scale, dot_bf16, m, l, acc)) {
          return;
        }
        accumulate_keys_bf16(kr, expand, qi, kb, k_stride, vb, v_stride, j_begin, j_end, dim, scale,
                             m, l, acc);
      },
      q_bf16.data(), k, v, o, rounded);
}

// attention_bf16.cpp: the bf16 path for s.allow_bf16 (returns false when it does not apply).
bool attention_bf16(const float* q, const float* k, const float* v, float* o,
                    const AttentionShape& s);

void attention(const float* q, const float* k, const float* v, float* o, const AttentionShape& s) {
  if (s.batch <= 0 || s.heads <= 0 || s.q_len <= 0 || s.head_dim <= 0) return;
  if (s.q_len == 1) {  // a single query sees every key, causal or not: the decode path
    attention_decode(q, k, v, o, s);
    return;
  }
  if (attention_bf16(q, k, v, o, s)) return;
  const Kernels& kr = kernels_for(active_isa());
  const int64_t bq = query_tile_for(s.head_dim);
  if (bq == 0) {
    attention_rows(kr, q, k, v, o, s);
    return;
  }
  const int64_t tiles = (s.q_len + bq - 1) / bq;
  kernels::cpu::cpu_pool().run(s.batch * s.heads * tiles, [&](int64_t task) {
    // Last query tiles first: under a causal mask they see the most keys, so the long tasks
    // start early and the short ones fill in at the end.
    const int64_t tile = tiles - 1 - task % tiles;
    const int64_t h = (task / tiles) % s.heads;
    const int64_t b = task / (tiles * s.heads);
    const int64_t q0 = tile * bq;
    attention_tile(kr, q, k, v, o, s, b, h, q0, std::min(bq, s.q_len - q0));
  });
}

}  // namespace tessera::kernels::cpu
