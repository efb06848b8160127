// CUDA attention: a flash-style kernel for prefill / general q_len, and split-KV decode.
//
// Both stream keys and values through one shared-memory tile of kKeyTile keys and keep a running
// (max, sum, output) per query: the online softmax of Milakov & Gimelshein 2018, as used by
// FlashAttention (Dao et al. 2022). Work split inside a warp, which owns one query:
// - scoring: lane j computes the score of key j of the tile (a dot product over head_dim, q
// broadcast
//   from shared memory, the key tile padded to a stride of head_dim + 1 so lanes hit distinct
//   banks);
// - values: lane l owns output dims l, l + 32, l + 64, ... (kDimsPerLane of them), and adds
//   p_j * v[j][d] for every key j, p_j broadcast by shuffle.
// K and V of a tile share one buffer (K first, then V), which keeps shared memory under the 48 KiB
// a kernel gets without opting in, up to head_dim 256.
//
// Decode (q_len == 1) uses "flash-decoding" (Dao et al. 2023): the keys are cut into at most
// kMaxDecodeSplits splits per (batch, head), each split's block writes its partial (max, sum,
// unnormalised output) to the caller's workspace, and the partials are rescaled to the global max
// and normalised: by the last split block of each (batch, head) to finish (the vector kernel), or
// by a combine kernel (the tile kernel). Two split kernels, templated on the K/V element type (f32,
// or bf16: a bf16 K/V cache, widened to f32 in registers, half the bytes read):
// - the vector kernel (head_dim 32, 64 or 128 with 16-byte aligned rows, which every model here
//   has): 4 warps a block; a key's row is read by kLanesPerKey lanes with one 16-byte load each
//   (head_dim 128 bf16: 16 lanes, so a warp scores 2 keys at once), q sits in registers (each lane
//   its slice), a score is a shuffle reduction over the key's lanes, and each lane keeps the
//   online softmax of its own keys for its slice of dims; the lanes, then the warps, are merged
//   once at the end. The split count fills the GPU (about two blocks per SM) instead of a fixed
//   64 keys per split, so a decode step's 24 (batch x heads) slices do not leave 100 SMs idle.
// - the tile kernel (any other head_dim or alignment): one warp a block, the shared-memory tiles
//   above.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"

namespace tessera::kernels::cuda {
namespace {

using detail::kFullWarpMask;

constexpr int kKeyTile = 32;        // keys per tile: one per lane when scoring
constexpr int kFlashWarps = 8;      // queries per flash block, one warp each
constexpr int kDecodeThreads = 32;  // one warp per decode split block
constexpr int kCombineMaxThreads = 256;
constexpr int64_t kMaxDecodeSplits = 64;
constexpr int64_t kMinKeysPerSplit = 64;

// Running softmax state of one query, held by one warp (max and sum identical in every lane).
template <int kDimsPerLane>
struct RowState {
  float max;
  float sum;
  float acc[kDimsPerLane];
};

template <int kDimsPerLane>
__device__ __forceinline__ void init_row_state(RowState<kDimsPerLane>& st) {
  st.max = -INFINITY;
  st.sum = 0.f;
#pragma unroll
  for (int t = 0; t < kDimsPerLane; ++t) st.acc[t] = 0.f;
}

// Copies tokens [first, first + kKeyTile) of one (batch, head) slice into tile[j * (dim + 1) + d]
// as f32, zero-filling tokens at or beyond `limit`. KvT is float, or uint16_t holding bf16 bits
// (bf16 K/V cache: widened exactly here, so everything after the load is f32). All threads of the
// block take part; consecutive threads read consecutive elements of a token's row.
template <typename KvT>
__device__ __forceinline__ void load_tile(float* tile, const KvT* base, int64_t token_stride,
                                          int64_t first, int64_t limit, int dim) {
  for (int e = threadIdx.x; e < kKeyTile * dim; e += blockDim.x) {
    const int j = e / dim;
    const int d = e % dim;
    const int64_t token = first + j;
    tile[j * (dim + 1) + d] =
        token < limit ? detail::load_weight(base + token * token_stride + d) : 0.f;
  }
}

// Lane j's score against key j of the tile in shared memory; -inf when the key is not visible.
__device__ __forceinline__ float score_key(const float* q_row, const float* k_tile, int dim,
                                           bool visible, float scale) {
  if (!visible) return -INFINITY;
  const int lane = threadIdx.x % 32;
  const float* k_row = k_tile + lane * (dim + 1);
  float dot = 0.f;
  for (int d = 0; d < dim; ++d) dot += q_row[d] * k_row[d];
  return dot * scale;
}

// Folds one tile of scores into the running state; returns this lane's (key's) weight
// exp(score - new max), 0 for an invisible key. The output accumulators are rescaled here; the
// caller adds the tile's values with accumulate_values().
template <int kDimsPerLane>
__device__ __forceinline__ float online_softmax_step(float score, bool visible,
                                                     RowState<kDimsPerLane>& st) {
  const float tile_max = detail::warp_max(score);  // -inf if no key of the tile is visible
  const float new_max = fmaxf(st.max, tile_max);
  const float p = visible ? expf(score - new_max) : 0.f;
  // Until a visible key was seen the state is empty (max -inf, sum and acc 0): nothing to rescale,
  // and -inf - -inf would be NaN.
  const float correction = st.max == -INFINITY ? 0.f : expf(st.max - new_max);
  st.sum = st.sum * correction + detail::warp_sum(p);
#pragma unroll
  for (int t = 0; t < kDimsPerLane; ++t) st.acc[t] *= correction;
  st.max = new_max;
  return p;
}

template <int kDimsPerLane>
__device__ __forceinline__ void accumulate_values(const float* v_tile, int dim, float p,
                                                  RowState<kDimsPerLane>& st) {
  const int lane = threadIdx.x % 32;
  for (int j = 0; j < kKeyTile; ++j) {
    const float pj = __shfl_sync(kFullWarpMask, p, j);
    if (pj == 0.f) continue;  // uniform across the warp (a broadcast value)
    const float* v_row = v_tile + j * (dim + 1);
#pragma unroll
    for (int t = 0; t < kDimsPerLane; ++t) {
      const int d = lane + 32 * t;
      if (d < dim) st.acc[t] += pj * v_row[d];
    }
  }
}

__host__ __device__ __forceinline__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// Shared memory: q tile [kFlashWarps][dim], then one K/V tile [kKeyTile][dim + 1].
size_t flash_shared_bytes(int dim) {
  return (static_cast<size_t>(kFlashWarps) * dim + static_cast<size_t>(kKeyTile) * (dim + 1)) *
         sizeof(float);
}

// Grid (ceil(q_len / kFlashWarps), heads, batch); block kFlashWarps warps, warp w owns query
// blockIdx.x * kFlashWarps + w.
template <int kDimsPerLane>
__global__ void __launch_bounds__(kFlashWarps * 32)
    attention_flash_kernel(const float* __restrict__ q, const float* __restrict__ k,
                           const float* __restrict__ v, float* __restrict__ o, AttentionShape s) {
  extern __shared__ float smem[];
  const int dim = static_cast<int>(s.head_dim);
  float* q_tile = smem;
  float* kv_tile = smem + kFlashWarps * dim;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t b = blockIdx.z;
  const int64_t h = blockIdx.y;
  const int64_t q_first = static_cast<int64_t>(blockIdx.x) * kFlashWarps;
  const float* q_base = q + b * s.q_batch_stride + h * dim;
  const float* k_base = k + b * s.k_batch_stride + h * dim;
  const float* v_base = v + b * s.v_batch_stride + h * dim;
  float* o_base = o + b * s.o_batch_stride + h * dim;

  for (int e = threadIdx.x; e < kFlashWarps * dim; e += blockDim.x) {
    const int w = e / dim;
    const int d = e % dim;
    const int64_t token = q_first + w;
    q_tile[e] = token < s.q_len ? q_base[token * s.q_token_stride + d] : 0.f;
  }

  // Causal: query i sees keys j <= i + (kv_len - q_len).
  const int64_t causal_offset = s.kv_len - s.q_len;
  const int64_t query = q_first + warp;
  const bool active = query < s.q_len;
  int64_t visible_end = 0;  // this warp's query sees keys [0, visible_end)
  if (active) visible_end = s.causal ? clamp64(query + causal_offset + 1, 0, s.kv_len) : s.kv_len;
  int64_t block_end = s.kv_len;  // keys any query of the block sees (uniform across the block)
  if (s.causal) {
    const int64_t last_query =
        (q_first + kFlashWarps < s.q_len ? q_first + kFlashWarps : s.q_len) - 1;
    block_end = clamp64(last_query + causal_offset + 1, 0, s.kv_len);
  }

  RowState<kDimsPerLane> st;
  init_row_state(st);
  const float* q_row = q_tile + warp * dim;
  for (int64_t first = 0; first < block_end; first += kKeyTile) {
    __syncthreads();  // q tile stored (first pass) / every warp done with the previous V tile
    load_tile(kv_tile, k_base, s.k_token_stride, first, s.kv_len, dim);
    __syncthreads();
    const bool visible = first + lane < visible_end;
    const float score = score_key(q_row, kv_tile, dim, visible, s.scale);
    const float p = online_softmax_step(score, visible, st);
    __syncthreads();  // every warp done scoring against the K tile
    load_tile(kv_tile, v_base, s.v_token_stride, first, s.kv_len, dim);
    __syncthreads();
    accumulate_values(kv_tile, dim, p, st);
  }

  if (!active) return;
  const float inv_sum = st.sum > 0.f ? 1.f / st.sum : 0.f;
#pragma unroll
  for (int t = 0; t < kDimsPerLane; ++t) {
    const int d = lane + 32 * t;
    if (d < dim) o_base[query * s.o_token_stride + d] = st.acc[t] * inv_sum;
  }
}

// ---- decode
// ----------------------------------------------------------------------------------------
struct DecodeSplits {
  int64_t keys_per_split;
  int64_t splits;
};

// At least kMinKeysPerSplit keys per split (the combine is not free), at most kMaxDecodeSplits
// splits (bounds the workspace independently of kv_len).
DecodeSplits decode_splits(int64_t kv_len) {
  int64_t per_split = (kv_len + kMaxDecodeSplits - 1) / kMaxDecodeSplits;
  if (per_split < kMinKeysPerSplit) per_split = kMinKeysPerSplit;
  per_split = (per_split + kKeyTile - 1) / kKeyTile * kKeyTile;
  int64_t splits = (kv_len + per_split - 1) / per_split;
  if (splits < 1) splits = 1;
  return {per_split, splits};
}

// Workspace layout, for P = batch * heads * kMaxDecodeSplits partial slots (slot = (b * heads + h)
// * kMaxDecodeSplits + split): max[P], sum[P], acc[P][head_dim]. Sized for the largest split count
// so the size does not depend on kv_len.
// Before them, at a fixed place whatever the shape, kMaxFusedSlices arrival counters for the
// vector kernel's fused combine, one per (batch, head): zero between calls
// (attention_decode_workspace_bytes' contract), so a workspace reused for another shape never
// finds a partial where a counter is expected. More (batch, head) slices than that take the
// combine kernel.
constexpr int64_t kMaxFusedSlices = 4096;

struct DecodeWorkspace {
  unsigned int* arrivals;
  float* max;
  float* sum;
  float* acc;
};

DecodeWorkspace decode_workspace(void* base, int64_t slots) {
  auto* arrivals = static_cast<unsigned int*>(base);
  float* f = reinterpret_cast<float*>(arrivals + kMaxFusedSlices);
  return {arrivals, f, f + slots, f + 2 * slots};
}

// Merges the partials of (batch, head) bh over `splits` into o's row: every partial rescaled to the
// global max, normalised by the total. Threads tid, tid + nthreads, ... own the dims. The partials
// are read around L1 (__ldcg): in the fused combine other blocks wrote them.
__device__ __forceinline__ void combine_partials(const DecodeWorkspace& ws, int64_t bh,
                                                 int64_t splits, float* __restrict__ o_row, int dim,
                                                 int tid, int nthreads) {
  const int64_t slot0 = bh * kMaxDecodeSplits;
  float global_max = -INFINITY;
  for (int64_t sp = 0; sp < splits; ++sp)
    global_max = fmaxf(global_max, __ldcg(ws.max + slot0 + sp));
  float total = 0.f;
  for (int64_t sp = 0; sp < splits; ++sp) {
    const float m = __ldcg(ws.max + slot0 + sp);
    if (m != -INFINITY) total += __ldcg(ws.sum + slot0 + sp) * expf(m - global_max);
  }
  const float inv_total = total > 0.f ? 1.f / total : 0.f;
  for (int d = tid; d < dim; d += nthreads) {
    float out = 0.f;
    for (int64_t sp = 0; sp < splits; ++sp) {
      const float m = __ldcg(ws.max + slot0 + sp);
      if (m != -INFINITY) out += __ldcg(ws.acc + (slot0 + sp) * dim + d) * expf(m - global_max);
    }
    o_row[d] = out * inv_total;
  }
}

// Grid (splits, heads, batch), one warp per block: keys [split * keys_per_split, ...) of one query.
// q as the decode kernel uses it: f32 for an f32 K/V cache; rounded to bf16 (nearest even) for a
// bf16 one, as kernels/ops.h's attention_decode_bf16kv contract says.
template <typename KvT>
__device__ __forceinline__ float query_value(float x) {
  if constexpr (sizeof(KvT) == 2) {
    return __bfloat162float(__float2bfloat16_rn(x));
  } else {
    return x;
  }
}

// KvT: float (f32 K/V) or uint16_t (bf16 K/V, widened in load_tile).
template <int kDimsPerLane, typename KvT>
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_split_kernel(const float* __restrict__ q, const KvT* __restrict__ k,
                                  const KvT* __restrict__ v, AttentionShape s,
                                  int64_t keys_per_split, DecodeWorkspace ws,
                                  const int64_t* __restrict__ device_step, int64_t len_offset) {
  extern __shared__ float smem[];
  const int dim = static_cast<int>(s.head_dim);
  float* q_row = smem;
  float* kv_tile = smem + dim;
  const int lane = threadIdx.x % 32;
  const int64_t split = blockIdx.x;
  const int64_t h = blockIdx.y;
  const int64_t b = blockIdx.z;
  const float* q_base = q + b * s.q_batch_stride + h * dim;  // token 0: the only query
  const KvT* k_base = k + b * s.k_batch_stride + h * dim;
  const KvT* v_base = v + b * s.v_batch_stride + h * dim;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) q_row[d] = query_value<KvT>(q_base[d]);

  // Keys in use: s.kv_len, or (device-length variant) *device_step + len_offset read now, at most
  // s.kv_len (the capacity the split geometry was made for). Splits past it write an empty partial.
  const int64_t len =
      device_step != nullptr ? clamp64(*device_step + len_offset, 0, s.kv_len) : s.kv_len;
  const int64_t begin = split * keys_per_split;
  const int64_t end = clamp64(begin + keys_per_split, 0, len);
  RowState<kDimsPerLane> st;
  init_row_state(st);
  for (int64_t first = begin; first < end; first += kKeyTile) {
    __syncthreads();
    load_tile(kv_tile, k_base, s.k_token_stride, first, end, dim);
    __syncthreads();
    const bool visible = first + lane < end;
    const float score = score_key(q_row, kv_tile, dim, visible, s.scale);
    const float p = online_softmax_step(score, visible, st);
    __syncthreads();
    load_tile(kv_tile, v_base, s.v_token_stride, first, end, dim);
    __syncthreads();
    accumulate_values(kv_tile, dim, p, st);
  }

  const int64_t slot = (b * s.heads + h) * kMaxDecodeSplits + split;
  if (lane == 0) {
    ws.max[slot] = st.max;
    ws.sum[slot] = st.sum;
  }
#pragma unroll
  for (int t = 0; t < kDimsPerLane; ++t) {
    const int d = lane + 32 * t;
    if (d < dim) ws.acc[slot * dim + d] = st.acc[t];
  }
}

// ---- vector split kernel ----------------------------------------------------------------------
constexpr int kVecWarps = 4;
constexpr int kVecThreads = kVecWarps * 32;

template <typename KvT>
__device__ __forceinline__ void load_row16(const KvT* p, float (&out)[16 / sizeof(KvT)]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  if constexpr (sizeof(KvT) == 2) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(words[i] << 16);  // lower address: low half
      out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  } else {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  }
}

// Merges softmax state (m2, l2, acc2) into (m, l, acc); either may be empty (max -inf).
template <int kElems>
__device__ __forceinline__ void merge_state(float& m, float& l, float (&acc)[kElems], float m2,
                                            float l2, const float (&acc2)[kElems]) {
  const float nm = fmaxf(m, m2);
  const float c1 = m == -INFINITY ? 0.f : expf(m - nm);
  const float c2 = m2 == -INFINITY ? 0.f : expf(m2 - nm);
  l = l * c1 + l2 * c2;
#pragma unroll
  for (int e = 0; e < kElems; ++e) acc[e] = acc[e] * c1 + acc2[e] * c2;
  m = nm;
}

// Grid (splits, heads, batch), kVecThreads threads. head_dim == kLanesPerKey * kElems exactly;
// K/V rows 16-byte aligned (checked on the host).
template <int kLanesPerKey, typename KvT>
__global__ void __launch_bounds__(kVecThreads)
    attention_decode_vector_kernel(const float* __restrict__ q, const KvT* __restrict__ k,
                                   const KvT* __restrict__ v, float* __restrict__ o,
                                   AttentionShape s, int64_t keys_per_split, DecodeWorkspace ws,
                                   const int64_t* __restrict__ device_step, int64_t len_offset) {
  constexpr int kElems = 16 / static_cast<int>(sizeof(KvT));  // 8 bf16 or 4 f32 per load
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kDim = kLanesPerKey * kElems;
  __shared__ float part_m[kVecWarps], part_l[kVecWarps];
  __shared__ float part_acc[kVecWarps][kDim];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int sub = lane / kLanesPerKey;    // which of the warp's keys
  const int slice = lane % kLanesPerKey;  // which kElems dims of the row
  const int64_t split = blockIdx.x;
  const int64_t h = blockIdx.y;
  const int64_t b = blockIdx.z;
  const float* q_row = q + b * s.q_batch_stride + h * kDim + slice * kElems;
  const KvT* k_base = k + b * s.k_batch_stride + h * kDim + slice * kElems;
  const KvT* v_base = v + b * s.v_batch_stride + h * kDim + slice * kElems;
  float qv[kElems];
#pragma unroll
  for (int e = 0; e < kElems; ++e) qv[e] = query_value<KvT>(q_row[e]);

  const int64_t len =
      device_step != nullptr ? clamp64(*device_step + len_offset, 0, s.kv_len) : s.kv_len;
  const int64_t begin = split * keys_per_split;
  const int64_t end = clamp64(begin + keys_per_split, 0, len);
  float m = -INFINITY, l = 0.f, acc[kElems];
#pragma unroll
  for (int e = 0; e < kElems; ++e) acc[e] = 0.f;
  // Warp-uniform loop (every lane takes part in the shuffles); lanes past `end` score -inf.
  for (int64_t first = begin + warp * kKeysPerWarp; first < end;
       first += kVecWarps * kKeysPerWarp) {
    const int64_t key = first + sub;
    const bool visible = key < end;
    float kv[kElems];
    float dot = 0.f;
    if (visible) {
      load_row16(k_base + key * s.k_token_stride, kv);
#pragma unroll
      for (int e = 0; e < kElems; ++e) dot = fmaf(qv[e], kv[e], dot);
    }
#pragma unroll
    for (int off = kLanesPerKey / 2; off > 0; off /= 2) {
      dot += __shfl_xor_sync(kFullWarpMask, dot, off);
    }
    if (visible) {
      const float score = dot * s.scale;
      const float nm = fmaxf(m, score);
      const float c = m == -INFINITY ? 0.f : expf(m - nm);
      const float p = expf(score - nm);
      load_row16(v_base + key * s.v_token_stride, kv);
      l = l * c + p;
#pragma unroll
      for (int e = 0; e < kElems; ++e) acc[e] = fmaf(p, kv[e], acc[e] * c);
      m = nm;
    }
  }
  // The warp's key groups hold the same dims: merge them (lanes slice, slice + kLanesPerKey, ...).
#pragma unroll
  for (int off = kLanesPerKey; off < 32; off *= 2) {
    const float m2 = __shfl_xor_sync(kFullWarpMask, m, off);
    const float l2 = __shfl_xor_sync(kFullWarpMask, l, off);
    float acc2[kElems];
#pragma unroll
    for (int e = 0; e < kElems; ++e) acc2[e] = __shfl_xor_sync(kFullWarpMask, acc[e], off);
    merge_state<kElems>(m, l, acc, m2, l2, acc2);
  }
  // Then the warps, through shared memory; warp 0 writes the split's partial.
  if (lane < kLanesPerKey) {
    if (lane == 0) {
      part_m[warp] = m;
      part_l[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < kElems; ++e) part_acc[warp][slice * kElems + e] = acc[e];
  }
  __syncthreads();
  const int64_t bh = b * s.heads + h;
  const int64_t slot = bh * kMaxDecodeSplits + split;
  if (warp == 0 && lane < kLanesPerKey) {
    for (int w = 1; w < kVecWarps; ++w) {
      float acc2[kElems];
#pragma unroll
      for (int e = 0; e < kElems; ++e) acc2[e] = part_acc[w][slice * kElems + e];
      merge_state<kElems>(m, l, acc, part_m[w], part_l[w], acc2);
    }
    if (lane == 0) {
      ws.max[slot] = m;
      ws.sum[slot] = l;
    }
#pragma unroll
    for (int e = 0; e < kElems; ++e) ws.acc[slot * kDim + slice * kElems + e] = acc[e];
  }
  // The fused combine (the threadFenceReduction pattern), when o is given: the block that arrives
  // last for its (batch, head) merges every split's partial into o and sets the counter back to
  // zero for the next call (or graph replay). The order of arrival changes nothing: the merge
  // reads the splits in index order.
  if (o == nullptr) return;  // the combine kernel follows
  __shared__ bool last;
  __syncthreads();  // the block's partial is written
  if (threadIdx.x == 0) {
    __threadfence();  // ... and visible device-wide before the block counts itself in
    const unsigned int before = atomicAdd(ws.arrivals + bh, 1u);
    last = before + 1 == static_cast<unsigned int>(gridDim.x);
    if (last) {
      __threadfence();      // every other block's partial is visible to this block's reads
      ws.arrivals[bh] = 0;  // every block of this (batch, head) has counted itself
    }
  }
  __syncthreads();
  if (!last) return;
  combine_partials(ws, bh, gridDim.x, o + b * s.o_batch_stride + h * kDim, kDim,
                   static_cast<int>(threadIdx.x), kVecThreads);
}

// The tile kernel's combine. Grid batch * heads; threads over head_dim.
__global__ void __launch_bounds__(kCombineMaxThreads)
    attention_decode_combine_kernel(DecodeWorkspace ws, int64_t splits, float* __restrict__ o,
                                    AttentionShape s) {
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / s.heads;
  const int64_t h = bh % s.heads;
  const int dim = static_cast<int>(s.head_dim);
  combine_partials(ws, bh, splits, o + b * s.o_batch_stride + h * dim, dim,
                   static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

// ---- host side
// -------------------------------------------------------------------------------------
// k and v are f32 or bf16; only their nullness is checked here.
Status check_shape(const char* op, const float* q, const void* k, const void* v, const float* o,
                   const AttentionShape& s) {
  const std::string name = std::string("cuda ") + op;
  if (s.batch < 0 || s.heads < 0 || s.q_len < 0 || s.kv_len < 0) {
    return invalid_argument(name + ": negative size (batch " + std::to_string(s.batch) +
                            ", heads " + std::to_string(s.heads) + ", q_len " +
                            std::to_string(s.q_len) + ", kv_len " + std::to_string(s.kv_len) + ")");
  }
  if (s.head_dim < 1 || s.head_dim > kAttentionMaxHeadDim) {
    return unsupported(name + ": head_dim " + std::to_string(s.head_dim) + " (supported: 1.." +
                       std::to_string(kAttentionMaxHeadDim) + ")");
  }
  if (s.batch > 65535 || s.heads > 65535) {
    return invalid_argument(name + ": batch " + std::to_string(s.batch) + " or heads " +
                            std::to_string(s.heads) + " above 65535 (grid limit)");
  }
  if (s.batch == 0 || s.heads == 0 || s.q_len == 0) return Status();
  if (q == nullptr || o == nullptr || (s.kv_len > 0 && (k == nullptr || v == nullptr))) {
    return invalid_argument(name + ": null q, k, v or o");
  }
  return Status();
}

// kDimsPerLane = ceil(head_dim / 32) rounded up to a power of two: 1, 2, 4 or 8.
int dims_per_lane(int64_t head_dim) {
  if (head_dim <= 32) return 1;
  if (head_dim <= 64) return 2;
  if (head_dim <= 128) return 4;
  return 8;
}

template <int kDimsPerLane>
void launch_flash(const float* q, const float* k, const float* v, float* o, const AttentionShape& s,
                  cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((s.q_len + kFlashWarps - 1) / kFlashWarps),
                  static_cast<unsigned>(s.heads), static_cast<unsigned>(s.batch));
  attention_flash_kernel<kDimsPerLane>
      <<<grid, kFlashWarps * 32, flash_shared_bytes(static_cast<int>(s.head_dim)), stream>>>(
          q, k, v, o, s);
}

template <int kDimsPerLane, typename KvT>
void launch_decode_split(const float* q, const KvT* k, const KvT* v, const AttentionShape& s,
                         const DecodeSplits& geometry, const DecodeWorkspace& ws,
                         const int64_t* device_step, int64_t len_offset, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(geometry.splits), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.batch));
  const size_t shared =
      (static_cast<size_t>(s.head_dim) + static_cast<size_t>(kKeyTile) * (s.head_dim + 1)) *
      sizeof(float);
  attention_decode_split_kernel<kDimsPerLane, KvT><<<grid, kDecodeThreads, shared, stream>>>(
      q, k, v, s, geometry.keys_per_split, ws, device_step, len_offset);
}

// The vector kernel's lanes per key for this shape, or 0 when it does not apply: head_dim 32, 64
// or 128 (one 16-byte load per lane: 4, 8 or 16 lanes for bf16, 8, 16 or 32 for f32) and every
// row of K and V starting on 16 bytes.
template <typename KvT>
int vector_lanes_per_key(const KvT* k, const KvT* v, const AttentionShape& s) {
  constexpr int64_t kElems = 16 / static_cast<int64_t>(sizeof(KvT));
  if (s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 128) return 0;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned(k) || !aligned(v)) return 0;
  for (int64_t stride : {s.k_token_stride, s.v_token_stride, s.k_batch_stride, s.v_batch_stride}) {
    if (stride % kElems != 0) return 0;
  }
  return static_cast<int>(s.head_dim / kElems);
}

// Splits for the vector kernel: enough blocks to give every SM about two (batch * heads blocks
// per split), each split a whole number of the block's key groups, at most kMaxDecodeSplits.
// Depends only on the shape's capacity (kv_len) and the device, so a captured graph stays valid.
DecodeSplits vector_splits(const AttentionShape& s, int lanes_per_key) {
  const int sms = detail::multiprocessors();
  const int64_t group = static_cast<int64_t>(kVecWarps) * (32 / lanes_per_key);  // keys a round
  const int64_t slices = s.batch * s.heads;
  int64_t splits = (2 * static_cast<int64_t>(sms) + slices - 1) / slices;
  splits = splits < 1 ? 1 : (splits > kMaxDecodeSplits ? kMaxDecodeSplits : splits);
  int64_t per_split = (s.kv_len + splits - 1) / splits;
  per_split = (per_split + group - 1) / group * group;
  if (per_split < group) per_split = group;
  splits = (s.kv_len + per_split - 1) / per_split;
  if (splits < 1) splits = 1;
  return {per_split, splits};
}

template <typename KvT>
void launch_decode_vector(int lanes, const float* q, const KvT* k, const KvT* v, float* o,
                          const AttentionShape& s, const DecodeSplits& geometry,
                          const DecodeWorkspace& ws, const int64_t* device_step, int64_t len_offset,
                          cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(geometry.splits), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.batch));
  switch (lanes) {
    case 4:
      attention_decode_vector_kernel<4, KvT><<<grid, kVecThreads, 0, stream>>>(
          q, k, v, o, s, geometry.keys_per_split, ws, device_step, len_offset);
      break;
    case 8:
      attention_decode_vector_kernel<8, KvT><<<grid, kVecThreads, 0, stream>>>(
          q, k, v, o, s, geometry.keys_per_split, ws, device_step, len_offset);
      break;
    case 16:
      attention_decode_vector_kernel<16, KvT><<<grid, kVecThreads, 0, stream>>>(
          q, k, v, o, s, geometry.keys_per_split, ws, device_step, len_offset);
      break;
    default:
      attention_decode_vector_kernel<32, KvT><<<grid, kVecThreads, 0, stream>>>(
          q, k, v, o, s, geometry.keys_per_split, ws, device_step, len_offset);
      break;
  }
}

// attention_decode / attention_decode_bf16kv: checks, split kernel for KvT, combine kernel.
template <typename KvT>
Status decode_impl(const char* op, const float* q, const KvT* k, const KvT* v, float* o,
                   const AttentionShape& s, const int64_t* device_step, int64_t len_offset,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const std::string name = std::string("cuda ") + op;
  TESSERA_RETURN_IF_ERROR(check_shape(op, q, k, v, o, s));
  if (s.q_len != 1) {
    return invalid_argument(name + ": q_len " + std::to_string(s.q_len) +
                            " (decode takes exactly one query; use attention())");
  }
  if (s.batch == 0 || s.heads == 0) return Status();
  const size_t needed = attention_decode_workspace_bytes(s);
  if (workspace == nullptr || workspace_bytes < needed) {
    return invalid_argument(name + ": workspace of " + std::to_string(workspace_bytes) + " bytes" +
                            (workspace == nullptr ? " (null)" : "") + ", needs " +
                            std::to_string(needed) + " (attention_decode_workspace_bytes)");
  }
  if (reinterpret_cast<uintptr_t>(workspace) % alignof(float) != 0) {
    return invalid_argument(name + ": workspace not 4-byte aligned");
  }
  const DecodeWorkspace ws = decode_workspace(workspace, s.batch * s.heads * kMaxDecodeSplits);
  const int lanes = vector_lanes_per_key(k, v, s);
  const DecodeSplits geometry = lanes > 0 ? vector_splits(s, lanes) : decode_splits(s.kv_len);
  const bool fused = s.batch * s.heads <= kMaxFusedSlices;
  if (lanes > 0) {
    // fused: one launch, the last split block of each (batch, head) combines.
    launch_decode_vector(lanes, q, k, v, fused ? o : nullptr, s, geometry, ws, device_step,
                         len_offset, stream);
    TESSERA_CUDA_CHECK_LAUNCH(std::string(op) + ": vector kernel launch");
    if (fused) return Status();
  } else {
    switch (dims_per_lane(s.head_dim)) {
      case 1:
        launch_decode_split<1>(q, k, v, s, geometry, ws, device_step, len_offset, stream);
        break;
      case 2:
        launch_decode_split<2>(q, k, v, s, geometry, ws, device_step, len_offset, stream);
        break;
      case 4:
        launch_decode_split<4>(q, k, v, s, geometry, ws, device_step, len_offset, stream);
        break;
      default:
        launch_decode_split<8>(q, k, v, s, geometry, ws, device_step, len_offset, stream);
        break;
    }
  }
  if (lanes == 0) TESSERA_CUDA_CHECK_LAUNCH(std::string(op) + ": split kernel launch");
  const int combine_threads = static_cast<int>(
      s.head_dim >= kCombineMaxThreads ? kCombineMaxThreads : (s.head_dim + 31) / 32 * 32);
  attention_decode_combine_kernel<<<static_cast<unsigned>(s.batch * s.heads), combine_threads, 0,
                                    stream>>>(ws, geometry.splits, o, s);
  TESSERA_CUDA_CHECK_LAUNCH(std::string(op) + ": combine kernel launch");
  return Status();
}

}  // namespace

Status attention(const float* q, const float* k, const float* v, float* o, const AttentionShape& s,
                 cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_shape("attention", q, k, v, o, s));
  if (s.batch == 0 || s.heads == 0 || s.q_len == 0) return Status();
  if ((s.q_len + kFlashWarps - 1) / kFlashWarps > 0x7fffffff) {
    return invalid_argument("cuda attention: q_len " + std::to_string(s.q_len) + " too large");
  }
  switch (dims_per_lane(s.head_dim)) {
    case 1:
      launch_flash<1>(q, k, v, o, s, stream);
      break;
    case 2:
      launch_flash<2>(q, k, v, o, s, stream);
      break;
    case 4:
      launch_flash<4>(q, k, v, o, s, stream);
      break;
    default:
      launch_flash<8>(q, k, v, o, s, stream);
      break;
  }
  TESSERA_CUDA_CHECK_LAUNCH("attention: flash kernel launch");
  return Status();
}

size_t attention_decode_workspace_bytes(const AttentionShape& s) {
  if (s.batch <= 0 || s.heads <= 0 || s.head_dim <= 0) return 0;
  const int64_t slots = s.batch * s.heads * kMaxDecodeSplits;
  return static_cast<size_t>(kMaxFusedSlices) * sizeof(unsigned int) +
         static_cast<size_t>(slots) * static_cast<size_t>(s.head_dim + 2) * sizeof(float);
}

Status attention_decode(const float* q, const float* k, const float* v, float* o,
                        const AttentionShape& s, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  return decode_impl("attention_decode", q, k, v, o, s, nullptr, 0, workspace, workspace_bytes,
                     stream);
}

Status attention_decode_device_len(const float* q, const float* k, const float* v, float* o,
                                   const AttentionShape& s, const int64_t* step,
                                   int64_t kv_len_offset, void* workspace, size_t workspace_bytes,
                                   cudaStream_t stream) {
  if (step == nullptr) {
    return invalid_argument("cuda attention_decode_device_len: null step pointer");
  }
  return decode_impl("attention_decode_device_len", q, k, v, o, s, step, kv_len_offset, workspace,
                     workspace_bytes, stream);
}

Status attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, float* o,
                               const AttentionShape& s, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream) {
  return decode_impl("attention_decode_bf16kv", q, k, v, o, s, nullptr, 0, workspace,
                     workspace_bytes, stream);
}

Status attention_decode_bf16kv_device_len(const float* q, const uint16_t* k, const uint16_t* v,
                                          float* o, const AttentionShape& s, const int64_t* step,
                                          int64_t kv_len_offset, void* workspace,
                                          size_t workspace_bytes, cudaStream_t stream) {
  if (step == nullptr) {
    return invalid_argument("cuda attention_decode_bf16kv_device_len: null step pointer");
  }
  return decode_impl("attention_decode_bf16kv_device_len", q, k, v, o, s, step, kv_len_offset,
                     workspace, workspace_bytes, stream);
}

}  // namespace tessera::kernels::cuda
