// f32 <-> bf16 conversion on the device (kernels/cuda/cuda_ops.h), for the bf16 K/V cache: K/V
// rows are rounded when they are written to the cache and widened back for full passes.
//
// Rounding is done on the bit pattern exactly as core/dtype.h's f32_to_bf16 (nearest even,
// NaN kept quiet), not with __float2bfloat16, so the CPU and CUDA caches hold the same bits.
// Grid-stride loops, 4 elements per thread per iteration when the pointers allow 16-byte (f32) and
// 8-byte (bf16) accesses, else one.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint16_t round_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// n4 groups of 4 elements (16-byte f32 loads, 8-byte bf16 stores).
__global__ void f32_to_bf16_vec4(uint2* __restrict__ dst, const float4* __restrict__ src,
                                 int64_t n4) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 v = src[i];
    uint2 out;
    out.x = static_cast<uint32_t>(round_to_bf16(v.x)) |
            (static_cast<uint32_t>(round_to_bf16(v.y)) << 16);
    out.y = static_cast<uint32_t>(round_to_bf16(v.z)) |
            (static_cast<uint32_t>(round_to_bf16(v.w)) << 16);
    dst[i] = out;
  }
}

__global__ void f32_to_bf16_scalar(uint16_t* __restrict__ dst, const float* __restrict__ src,
                                   int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = round_to_bf16(src[i]);
  }
}

__global__ void bf16_to_f32_vec4(float4* __restrict__ dst, const uint2* __restrict__ src,
                                 int64_t n4) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint2 v = src[i];
    // Little-endian: the lower address is the low half of each word.
    dst[i] = make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
                         __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
  }
}

__global__ void bf16_to_f32_scalar(float* __restrict__ dst, const uint16_t* __restrict__ src,
                                   int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = detail::bf16_bits_to_float(src[i]);
  }
}

bool aligned(const void* p, uintptr_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

Status check_args(const char* op, const void* dst, const void* src, int64_t n) {
  if (n > 0 && (dst == nullptr || src == nullptr)) {
    return invalid_argument(std::string("cuda ") + op + ": null dst or src for " +
                            std::to_string(n) + " elements");
  }
  return Status();
}

// store_kv_rows: grid (blocks over row_elems, batch); the slot is read once per thread. gridDim.z
// 2: z = 1 writes (cache_second, rows_second), the V of a K/V pair, in the same launch.
template <bool kBf16>
__global__ void store_kv_rows_kernel(void* cache_first, const float* rows_first, int64_t row_elems,
                                     int64_t cache_batch_stride, int64_t slot_offset,
                                     const int64_t* __restrict__ slot, void* cache_second,
                                     const float* rows_second) {
  void* __restrict__ cache = blockIdx.z == 1 ? cache_second : cache_first;
  const float* __restrict__ rows = blockIdx.z == 1 ? rows_second : rows_first;
  const int64_t b = blockIdx.y;
  const int64_t base = b * cache_batch_stride + (slot_offset + *slot) * row_elems;
  const float* src = rows + b * row_elems;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < row_elems;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (kBf16) {
      static_cast<uint16_t*>(cache)[base + i] = round_to_bf16(src[i]);
    } else {
      static_cast<float*>(cache)[base + i] = src[i];
    }
  }
}

__global__ void set_positions_kernel(int32_t* __restrict__ positions, int64_t n, int64_t len,
                                     const int64_t* __restrict__ step, int64_t offset) {
  const int64_t first = *step + offset;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    positions[i] = static_cast<int32_t>(first + i % len);
  }
}

}  // namespace

Status convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n, cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_args("convert_f32_to_bf16", dst, src, n));
  if (n <= 0) return Status();
  if (aligned(src, 16) && aligned(dst, 8)) {
    const int64_t n4 = n / 4;
    if (n4 > 0) {
      f32_to_bf16_vec4<<<detail::grid_stride_blocks(n4, kThreads), kThreads, 0, stream>>>(
          reinterpret_cast<uint2*>(dst), reinterpret_cast<const float4*>(src), n4);
      TESSERA_CUDA_CHECK_LAUNCH("convert_f32_to_bf16: kernel launch");
    }
    const int64_t tail = n - 4 * n4;
    if (tail > 0) {
      f32_to_bf16_scalar<<<1, kThreads, 0, stream>>>(dst + 4 * n4, src + 4 * n4, tail);
      TESSERA_CUDA_CHECK_LAUNCH("convert_f32_to_bf16: tail kernel launch");
    }
    return Status();
  }
  f32_to_bf16_scalar<<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  TESSERA_CUDA_CHECK_LAUNCH("convert_f32_to_bf16: kernel launch");
  return Status();
}

Status convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n, cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_args("convert_bf16_to_f32", dst, src, n));
  if (n <= 0) return Status();
  if (aligned(src, 8) && aligned(dst, 16)) {
    const int64_t n4 = n / 4;
    if (n4 > 0) {
      bf16_to_f32_vec4<<<detail::grid_stride_blocks(n4, kThreads), kThreads, 0, stream>>>(
          reinterpret_cast<float4*>(dst), reinterpret_cast<const uint2*>(src), n4);
      TESSERA_CUDA_CHECK_LAUNCH("convert_bf16_to_f32: kernel launch");
    }
    const int64_t tail = n - 4 * n4;
    if (tail > 0) {
      bf16_to_f32_scalar<<<1, kThreads, 0, stream>>>(dst + 4 * n4, src + 4 * n4, tail);
      TESSERA_CUDA_CHECK_LAUNCH("convert_bf16_to_f32: tail kernel launch");
    }
    return Status();
  }
  bf16_to_f32_scalar<<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  TESSERA_CUDA_CHECK_LAUNCH("convert_bf16_to_f32: kernel launch");
  return Status();
}

namespace {

// store_kv_rows, and with cache2/rows2 the second cache of a pair in the same launch.
Status store_rows(const char* name, void* cache, void* cache2, DType cache_dtype, const float* rows,
                  const float* rows2, int64_t batch, int64_t row_elems, int64_t cache_batch_stride,
                  int64_t slot_offset, const int64_t* slot, cudaStream_t stream) {
  const std::string op = std::string("cuda ") + name + ": ";
  const bool pair = cache2 != nullptr || rows2 != nullptr;
  if (pair && batch > 0 && row_elems > 0 && (cache2 == nullptr || rows2 == nullptr)) {
    return invalid_argument(op + "null second cache or rows pointer");
  }
  if (cache_dtype != DType::kF32 && cache_dtype != DType::kBF16) {
    return unsupported(op + "cache dtype " + dtype_name(cache_dtype) + " (F32 or BF16)");
  }
  if (batch < 0 || row_elems < 0 || cache_batch_stride < 0 || slot_offset < 0) {
    return invalid_argument(op + "negative batch, row_elems, stride or slot_offset");
  }
  if (batch > 65535) {
    return invalid_argument(op + "batch " + std::to_string(batch) + " above 65535 (grid limit)");
  }
  if (batch == 0 || row_elems == 0) return Status();
  if (cache == nullptr || rows == nullptr || slot == nullptr) {
    return invalid_argument(op + "null cache, rows or slot pointer");
  }
  const unsigned blocks = detail::grid_stride_blocks(row_elems, kThreads);
  const dim3 grid(blocks < 64u ? blocks : 64u, static_cast<unsigned>(batch), pair ? 2u : 1u);
  if (cache_dtype == DType::kBF16) {
    store_kv_rows_kernel<true><<<grid, kThreads, 0, stream>>>(
        cache, rows, row_elems, cache_batch_stride, slot_offset, slot, cache2, rows2);
  } else {
    store_kv_rows_kernel<false><<<grid, kThreads, 0, stream>>>(
        cache, rows, row_elems, cache_batch_stride, slot_offset, slot, cache2, rows2);
  }
  TESSERA_CUDA_CHECK_LAUNCH(std::string(name) + ": kernel launch");
  return Status();
}

}  // namespace

Status store_kv_rows(void* cache, DType cache_dtype, const float* rows, int64_t batch,
                     int64_t row_elems, int64_t cache_batch_stride, int64_t slot_offset,
                     const int64_t* slot, cudaStream_t stream) {
  return store_rows("store_kv_rows", cache, nullptr, cache_dtype, rows, nullptr, batch, row_elems,
                    cache_batch_stride, slot_offset, slot, stream);
}

Status store_kv_pair(void* k_cache, void* v_cache, DType cache_dtype, const float* k_rows,
                     const float* v_rows, int64_t batch, int64_t row_elems,
                     int64_t cache_batch_stride, int64_t slot_offset, const int64_t* slot,
                     cudaStream_t stream) {
  if (batch > 0 && row_elems > 0 && (v_cache == nullptr || v_rows == nullptr)) {
    return invalid_argument("cuda store_kv_pair: null v cache or rows pointer");
  }
  return store_rows("store_kv_pair", k_cache, v_cache, cache_dtype, k_rows, v_rows, batch,
                    row_elems, cache_batch_stride, slot_offset, slot, stream);
}

Status set_positions(int32_t* positions, int64_t rows, int64_t len, const int64_t* step,
                     int64_t offset, cudaStream_t stream) {
  if (rows < 0 || len < 0) {
    return invalid_argument("cuda set_positions: negative rows " + std::to_string(rows) +
                            " or len " + std::to_string(len));
  }
  const int64_t n = rows * len;
  if (n == 0) return Status();
  if (positions == nullptr || step == nullptr) {
    return invalid_argument("cuda set_positions: null positions or step pointer");
  }
  set_positions_kernel<<<detail::grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
      positions, n, len, step, offset);
  TESSERA_CUDA_CHECK_LAUNCH("set_positions: kernel launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
