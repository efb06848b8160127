// DecodeOps: the facet of a backend that decodes tokens with its state in its own memory
// (docs/adding-an-op.md): the bf16 K/V cache, and the ops of a decode step that read a step
// counter where they run, so one recorded step (a CUDA graph, Backend::begin_recording) replays
// for every token with no host round trip. Backend::decode() is null where a backend has none;
// the CPU backend implements it on host memory, so the device-resident decode loop runs (and is
// tested) everywhere. Contracts: kernels/ops.h and kernels/cuda/cuda_ops.h's ops of the same names.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/ops.h"
#include "kernels/sampling.h"

namespace tessera::kernels {

class DecodeOps {
 public:
  virtual ~DecodeOps() = default;

  // ---- the bf16 K/V cache ----------------------------------------------------------------------
  // dst[i] = bf16(src[i]) (round to nearest even, as convert_f32_to_bf16), i < n: K/V cache writes.
  virtual Status convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n) = 0;
  // dst[i] = f32(src[i]) (exact), i < n.
  virtual Status convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n) = 0;
  // attention_decode over bf16 k/v (kernels/ops.h: attention_decode_bf16kv).
  virtual Status attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v,
                                         float* o, const AttentionShape& s) = 0;

  // ---- step-counter ops (*step: int64 in the backend's memory) ----------------------------------
  // rows (f32, [batch][row_elems]) -> cache (kF32, or kBF16 rounded to nearest even) at slot
  // slot_offset + *step of each batch row (cache_batch_stride elements apart).
  virtual Status store_kv_rows(void* cache, DType cache_dtype, const float* rows, int64_t batch,
                               int64_t row_elems, int64_t cache_batch_stride, int64_t slot_offset,
                               const int64_t* step) = 0;
  // store_kv_rows of a layer's K and V (same shapes and slot): the two calls by default, one
  // kernel on CUDA.
  virtual Status store_kv_pair(void* k_cache, void* v_cache, DType cache_dtype, const float* k_rows,
                               const float* v_rows, int64_t batch, int64_t row_elems,
                               int64_t cache_batch_stride, int64_t slot_offset,
                               const int64_t* step) {
    TESSERA_RETURN_IF_ERROR(store_kv_rows(k_cache, cache_dtype, k_rows, batch, row_elems,
                                          cache_batch_stride, slot_offset, step));
    return store_kv_rows(v_cache, cache_dtype, v_rows, batch, row_elems, cache_batch_stride,
                         slot_offset, step);
  }
  // positions[r * len + t] = *step + offset + t, r < rows, t < len.
  virtual Status set_positions(int32_t* positions, int64_t rows, int64_t len, const int64_t* step,
                               int64_t offset) = 0;
  // attention_decode (kv_dtype kF32) or attention_decode_bf16kv (kBF16) over the first
  // clamp(*step + kv_len_offset, 0, s.kv_len) keys; s.kv_len is the cache's capacity.
  virtual Status attention_decode_at(const float* q, const void* k, const void* v, DType kv_dtype,
                                     float* o, const AttentionShape& s, const int64_t* step,
                                     int64_t kv_len_offset) = 0;
  // Guidance mix + next token (kernels/sampling.h): step, rng, ids and ring are the backend's
  // memory; the ring may be host-visible memory from Backend::allocate_host_visible().
  virtual Status choose_token(const float* logits, const TokenChoice& choice, int64_t* step,
                              uint64_t* rng, int32_t* ids, int64_t ids_count, int32_t* ring,
                              int64_t ring_size) = 0;
};

}  // namespace tessera::kernels
