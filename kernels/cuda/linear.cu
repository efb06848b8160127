// CUDA linear layer: y[m, n] = x[m, k] . w[n, k]^T (+ bias[n]).
//
// Three paths, chosen on the host:
// - m <= kGemvMaxRows (decode, up to 8 candidates with guidance): GEMV kernel, one warp per output
//   feature. Each weight row is read once, with 16-byte loads when alignment allows, and dotted
//   with every x row; bias fused. Decode is bound by weight bandwidth, so this is the path that
//   matters for tokens/s. A row's order of additions does not depend on the other rows (batch
//   invariance: CudaLinear.GemvIsBatchInvariant).
// - larger m, f32 weights: cublasSgemm (default math mode: no TF32, so f32 accuracy, unless the
//   thread set set_tf32_products: the diffusion im2col convolutions under Precision::kBf16), then a
//   bias kernel.
// - larger m, bf16 weights: x rounded to bf16 into a per-thread device scratch, then cuBLAS's bf16
//   GEMM on the tensor cores (f32 accumulation), then the bias kernel; the shared-memory tiled GEMM
//   (widens the bf16 tile to f32 while loading it, bias fused) when the scratch would have to grow
//   during a graph capture, and for int8 weights.
// With bf16 weights both kernels round x to bf16 as they read it: the one bf16 linear contract of
// ops.h that the CPU backend keeps too.
// int8 weights (kernels/int8.h: symmetric int8, an f32 scale per group of `group` weights along k)
// take the same two kernels, the weights dequantized while loading (q * scale in f32, x in f32: the
// CPU kernels' 16-bit x differs from f32 x by ~2^-16 relative): the GEMV reads 16 weights per
// 16-byte load, half the bytes of bf16, which is what a decode step is bound by.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"

namespace tessera::kernels::cuda {
namespace {

using detail::load_weight;
using detail::warp_sum;

// ---- GEMV
// ------------------------------------------------------------------------------------------
constexpr int kGemvWarps = 8;  // output features per block
constexpr int kGemvRowsConst = static_cast<int>(kGemvMaxRows);

__device__ __forceinline__ void load16(const float* p, float (&out)[4]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}
__device__ __forceinline__ void load16(const uint16_t* p, float (&out)[8]) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Little-endian: the element with the lower address is the low half of the word.
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// The warp's sums of its output feature `col` for each of the `rows` rows of x, bias added, written
// by lane 0 (`rows` is uniform, so the whole warp takes part in every shuffle).
__device__ __forceinline__ void store_gemv_rows(const float (&acc)[kGemvRowsConst], int rows,
                                                int lane, const float* __restrict__ bias,
                                                float* __restrict__ y, int64_t n, int64_t col) {
  const float b = bias != nullptr ? bias[col] : 0.f;
#pragma unroll
  for (int r = 0; r < kGemvRowsConst; ++r) {
    if (r < rows) {
      const float sum = warp_sum(acc[r]);
      if (lane == 0) y[r * n + col] = sum + b;
    }
  }
}

// The ops.h bf16 contract: with bf16 weights x is rounded to bf16 (nearest even, as
// core/dtype.h's f32_to_bf16 does on the host) before the products; other weights take x as
// it is.
__device__ __forceinline__ float round_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float((u | 0x00400000u) & 0xffff0000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float(u & 0xffff0000u);
}
template <typename WeightT>
__device__ __forceinline__ float x_operand(float v) {
  if constexpr (sizeof(WeightT) == 2) {
    return round_to_bf16(v);
  } else {
    return v;
  }
}

// Four elements of x as a GEMV's operand (16-byte load, rounded to bf16 for bf16 weights), and
// their dot product with four weights, in the one order every GEMV kernel adds them.
template <typename WeightT>
__device__ __forceinline__ void load_x4(const float* p, float (&xv)[4]) {
  load16(p, xv);
#pragma unroll
  for (int j = 0; j < 4; ++j) xv[j] = x_operand<WeightT>(xv[j]);
}
// Written with explicit roundings (the chain nvcc made of the plain expression before), so that
// every kernel instance adds in this order whatever the compiler would contract: the GEMV's
// instances for 1, 2 and 4 features a warp must give the same bits.
__device__ __forceinline__ float dot4(const float* w, const float (&xv)[4]) {
  return __fmaf_rn(w[3], xv[3],
                   __fmaf_rn(w[2], xv[2], __fmaf_rn(w[0], xv[0], __fmul_rn(w[1], xv[1]))));
}
// acc += d, one rounded addition (never contracted into the products).
__device__ __forceinline__ void accumulate(float& acc, float d) {
  acc = __fadd_rn(acc, d);
}

// One warp per output feature `col`; lanes stride over k. kVectorized requires 16-byte aligned x
// and w and k a multiple of the 16-byte element count (checked by the host), so every row start is
// aligned.
// Up to kMaxGemvParts weights over the same x (q/k/v, gate/up) in one launch: part p owns blocks
// [first_block[p], first_block[p + 1]); a block computes kGemvWarps features of one part.
constexpr int kMaxGemvParts = 4;
template <typename WeightT>
struct GemvParts {
  const WeightT* w[kMaxGemvParts];
  const float* bias[kMaxGemvParts];
  float* y[kMaxGemvParts];
  int64_t n[kMaxGemvParts];
  int64_t first_block[kMaxGemvParts + 1];
  int count;
};

// At least two blocks an SM (<= 128 registers a thread): the loads in flight of 16 warps an SM
// are what the GEMV's bandwidth is made of.
// kCols (vectorized only): output features a warp computes, kCols consecutive ones. Each x chunk
// is then read (and rounded) once for kCols weight rows instead of once each: with many rows x's
// re-reads through L1, not the weights, bound the kernel (8 rows: 16 bytes of x a byte of bf16
// weight). Every feature's sum is added in exactly the order of kCols 1 (chunks lane, lane + 32,
// ..., each as dot4 in order), so the bits do not depend on kCols either.
template <typename WeightT, bool kVectorized, int kCols>
__global__ void __launch_bounds__(kGemvWarps * 32, 2)
    linear_gemv_kernel(const float* __restrict__ x, GemvParts<WeightT> parts, int rows, int64_t k) {
  static_assert(kVectorized || kCols == 1, "several columns a warp need the vectorized layout");
  const int lane = threadIdx.x % 32;
  int p = 0;  // uniform per block
  while (p + 1 < parts.count && blockIdx.x >= parts.first_block[p + 1]) ++p;
  const int64_t n = parts.n[p];
  const float* __restrict__ bias = parts.bias[p];
  float* __restrict__ y = parts.y[p];
  const int64_t col0 =
      ((static_cast<int64_t>(blockIdx.x) - parts.first_block[p]) * kGemvWarps + threadIdx.x / 32) *
      kCols;
  if (col0 >= n) return;  // uniform per warp; the kernel has no block barrier
  // The warp's features col0 .. col0 + cols - 1 (fewer at the end of n).
  const int cols = static_cast<int>(n - col0 < kCols ? n - col0 : kCols);
  float acc[kCols][kGemvRowsConst];
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
#pragma unroll
    for (int r = 0; r < kGemvRowsConst; ++r) acc[j][r] = 0.f;
  }

  if constexpr (kVectorized) {
    constexpr int kPer = 16 / static_cast<int>(sizeof(WeightT));  // 4 f32 or 8 bf16
    // kUnroll * kCols 16-byte weight loads are issued before any is used: a decode GEMV is bound
    // by the bytes in flight (k = 1536 bf16 is 6 loads a lane), not by arithmetic. A lane still
    // adds its chunks lane, lane + 32, lane + 64, ... in that order, so the sums (and batch
    // invariance) are those of one load at a time.
    constexpr int kUnroll = kCols >= 4 ? 1 : 4 / kCols;
    const int64_t chunks = k / kPer;
    const WeightT* w_rows = parts.w[p] + col0 * k;
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
      float wv[kUnroll][kCols][kPer];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + 32 * u;
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          if (c < chunks && j < cols) load16(w_rows + j * k + c * kPer, wv[u][j]);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c >= chunks) break;
#pragma unroll
        for (int r = 0; r < kGemvRowsConst; ++r) {
          if (r < rows) {
            const float* x_chunk = x + r * k + c * kPer;
#pragma unroll
            for (int part = 0; part < kPer; part += 4) {
              float xv[4];
              load_x4<WeightT>(x_chunk + part, xv);
#pragma unroll
              for (int j = 0; j < kCols; ++j) accumulate(acc[j][r], dot4(wv[u][j] + part, xv));
            }
          }
        }
      }
    }
  } else {
    const WeightT* w_row = parts.w[p] + col0 * k;
    for (int64_t i = lane; i < k; i += 32) {
      const float wv = load_weight(w_row + i);
#pragma unroll
      for (int r = 0; r < kGemvRowsConst; ++r) {
        if (r < rows) acc[0][r] += wv * x_operand<WeightT>(x[r * k + i]);
      }
    }
  }

#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    if (j < cols) store_gemv_rows(acc[j], rows, lane, bias, y, n, col0 + j);
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// One block per kGemvWarps output features.
Expected<dim3> gemv_grid(int64_t n) {
  const int64_t blocks = (n + kGemvWarps - 1) / kGemvWarps;
  if (blocks > INT_MAX) {
    return invalid_argument("cuda linear: n = " + std::to_string(n) + " too large");
  }
  return dim3(static_cast<unsigned>(blocks));
}

// y[r, col] = silu(gate_row(col) . x_r + gate_bias) * (up_row(col) . x_r + up_bias): the GEMV above
// over two weights at once, one warp per output feature (kUnroll 2: two rows' loads in flight),
// with each sum in the order linear_gemv_kernel adds it. Needs the vectorized layout.
template <typename WeightT>
__global__ void __launch_bounds__(kGemvWarps * 32, 2)
    linear_gemv_swiglu_kernel(const float* __restrict__ x, const WeightT* __restrict__ wg,
                              const float* __restrict__ bg, const WeightT* __restrict__ wu,
                              const float* __restrict__ bu, float* __restrict__ y, int rows,
                              int64_t n, int64_t k) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(WeightT));
  constexpr int kUnroll = 2;
  const int lane = threadIdx.x % 32;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (col >= n) return;
  const WeightT* g_row = wg + col * k;
  const WeightT* u_row = wu + col * k;
  float acc_g[kGemvRowsConst], acc_u[kGemvRowsConst];
#pragma unroll
  for (int r = 0; r < kGemvRowsConst; ++r) acc_g[r] = acc_u[r] = 0.f;
  const int64_t chunks = k / kPer;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
    float gv[kUnroll][kPer], uv[kUnroll][kPer];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c < chunks) {
        load16(g_row + c * kPer, gv[u]);
        load16(u_row + c * kPer, uv[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= chunks) break;
#pragma unroll
      for (int r = 0; r < kGemvRowsConst; ++r) {
        if (r < rows) {
          const float* x_chunk = x + r * k + c * kPer;
#pragma unroll
          for (int part = 0; part < kPer; part += 4) {
            float xv[4];
            load_x4<WeightT>(x_chunk + part, xv);
            accumulate(acc_g[r], dot4(gv[u] + part, xv));
            accumulate(acc_u[r], dot4(uv[u] + part, xv));
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvRowsConst; ++r) {
    if (r < rows) {
      const float g = warp_sum(acc_g[r]) + (bg != nullptr ? bg[col] : 0.f);
      const float up = warp_sum(acc_u[r]) + (bu != nullptr ? bu[col] : 0.f);
      if (lane == 0) y[r * n + col] = g / (1.f + expf(-g)) * up;  // silu(g) * up
    }
  }
}

// One launch for parts.count weights of one dtype over the same x (each part's n and pointers set;
// first_block filled here).
template <typename WeightT>
Status launch_gemv_parts(const float* x, int64_t m, GemvParts<WeightT> parts, int64_t k,
                         cudaStream_t stream) {
  constexpr int64_t kPer = 16 / static_cast<int64_t>(sizeof(WeightT));
  bool vectorized = aligned16(x) && k % kPer == 0;
  int64_t features = 0;
  for (int p = 0; p < parts.count; ++p) {
    vectorized = vectorized && aligned16(parts.w[p]);
    features += parts.n[p];
  }
  // Columns a warp: with more rows, x's re-reads cost more than the weights (see the kernel), so a
  // warp takes 2 or 4 features, as long as the grid still gives every SM two blocks' worth of
  // loads in flight. Any choice gives the same bits.
  int cols = 1;
  if (vectorized) {
    const int64_t enough = 2 * static_cast<int64_t>(detail::multiprocessors()) * kGemvWarps;
    if (m >= 5 && features >= 4 * enough) {
      cols = 4;
    } else if (m >= 3 && features >= 2 * enough) {
      cols = 2;
    }
  }
  const int64_t per_block = static_cast<int64_t>(kGemvWarps) * cols;
  parts.first_block[0] = 0;
  for (int p = 0; p < parts.count; ++p) {
    parts.first_block[p + 1] = parts.first_block[p] + (parts.n[p] + per_block - 1) / per_block;
  }
  const int64_t blocks = parts.first_block[parts.count];
  if (blocks > INT_MAX) {
    return invalid_argument("cuda linear: " + std::to_string(blocks) + " GEMV blocks, too many");
  }
  const dim3 grid(static_cast<unsigned>(blocks));
  const dim3 block(kGemvWarps * 32);
  const int rows = static_cast<int>(m);
  if (!vectorized) {
    linear_gemv_kernel<WeightT, false, 1><<<grid, block, 0, stream>>>(x, parts, rows, k);
  } else if (cols == 4) {
    linear_gemv_kernel<WeightT, true, 4><<<grid, block, 0, stream>>>(x, parts, rows, k);
  } else if (cols == 2) {
    linear_gemv_kernel<WeightT, true, 2><<<grid, block, 0, stream>>>(x, parts, rows, k);
  } else {
    linear_gemv_kernel<WeightT, true, 1><<<grid, block, 0, stream>>>(x, parts, rows, k);
  }
  TESSERA_CUDA_CHECK_LAUNCH("linear: gemv kernel launch");
  return Status();
}

template <typename WeightT>
Status launch_gemv(const float* x, int64_t m, const WeightT* w, int64_t n, int64_t k,
                   const float* bias, float* y, cudaStream_t stream) {
  GemvParts<WeightT> parts{};
  parts.w[0] = w;
  parts.bias[0] = bias;
  parts.y[0] = y;
  parts.n[0] = n;
  parts.count = 1;
  return launch_gemv_parts(x, m, parts, k, stream);
}

// int8 weights: one warp per output feature as above; kVectorized: 16 weights per 16-byte load,
// needs 16-byte aligned x and w, k % 16 == 0 and group % 16 == 0 (a load never straddles groups).
template <bool kVectorized>
__global__ void __launch_bounds__(kGemvWarps * 32)
    linear_gemv_i8_kernel(const float* __restrict__ x, const int8_t* __restrict__ w,
                          const float* __restrict__ scales, int64_t group,
                          const float* __restrict__ bias, float* __restrict__ y, int rows,
                          int64_t n, int64_t k) {
  const int lane = threadIdx.x % 32;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (col >= n) return;  // uniform per warp; the kernel has no block barrier
  const int8_t* w_row = w + col * k;
  const float* s_row = scales + col * (k / group);
  float acc[kGemvRowsConst];
#pragma unroll
  for (int r = 0; r < kGemvRowsConst; ++r) acc[r] = 0.f;
  if constexpr (kVectorized) {
    // As in linear_gemv_kernel: kUnroll 16-byte loads in flight per lane, same order of additions.
    constexpr int kUnroll = 4;
    const int64_t chunks = k / 16;
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
      uint4 raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c < chunks) raw[u] = *reinterpret_cast<const uint4*>(w_row + c * 16);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c >= chunks) break;
        const uint32_t words[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
        float wv[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          wv[i] = static_cast<float>(static_cast<int8_t>((words[i / 4] >> (8 * (i % 4))) & 0xffu));
        }
        const float s = s_row[(c * 16) / group];
#pragma unroll
        for (int r = 0; r < kGemvRowsConst; ++r) {
          if (r < rows) {
            const float* x_chunk = x + r * k + c * 16;
            float dot = 0.f;
#pragma unroll
            for (int part = 0; part < 16; part += 4) {
              float xv[4];
              load16(x_chunk + part, xv);
              dot += wv[part] * xv[0] + wv[part + 1] * xv[1] + wv[part + 2] * xv[2] +
                     wv[part + 3] * xv[3];
            }
            acc[r] += s * dot;
          }
        }
      }
    }
  } else {
    for (int64_t i = lane; i < k; i += 32) {
      const float wv = static_cast<float>(w_row[i]) * s_row[i / group];
#pragma unroll
      for (int r = 0; r < kGemvRowsConst; ++r) {
        if (r < rows) acc[r] += wv * x[r * k + i];
      }
    }
  }
  store_gemv_rows(acc, rows, lane, bias, y, n, col);
}

Status launch_gemv_i8(const float* x, int64_t m, const Weight& w, const float* bias, float* y,
                      cudaStream_t stream) {
  const int64_t n = w.rows, k = w.cols;
  const bool vectorized = aligned16(x) && aligned16(w.data) && k % 16 == 0 && w.group % 16 == 0;
  TESSERA_ASSIGN_OR_RETURN(const dim3 grid, gemv_grid(n));
  const dim3 block(kGemvWarps * 32);
  const int rows = static_cast<int>(m);
  const auto* q = static_cast<const int8_t*>(w.data);
  if (vectorized) {
    linear_gemv_i8_kernel<true>
        <<<grid, block, 0, stream>>>(x, q, w.scales, w.group, bias, y, rows, n, k);
  } else {
    linear_gemv_i8_kernel<false>
        <<<grid, block, 0, stream>>>(x, q, w.scales, w.group, bias, y, rows, n, k);
  }
  TESSERA_CUDA_CHECK_LAUNCH("linear: int8 gemv kernel launch");
  return Status();
}

// ---- tiled GEMM for bf16 weights
// ------------------------------------------------------------------- Block: 64 rows of x by 64
// output features, 256 threads, each computing a 4x4 sub-tile with stride 16 in both directions (so
// neighbouring threads write neighbouring outputs). K advances 16 at a time; both tiles are stored
// k-major in shared memory, padded by one to soften bank conflicts on store.
constexpr int kTileM = 64;
constexpr int kTileN = 64;
constexpr int kTileK = 16;
constexpr int kTileThreads = 256;
constexpr int kSub = 4;  // outputs per thread in each direction; kTileM == 16 * kSub

// The weight element (row gn, column gk) in f32: bf16 widened, or int8 times its group's scale.
struct Bf16Rows {
  static constexpr bool kRoundsX = true;  // the ops.h bf16 contract
  const uint16_t* w;
  __device__ __forceinline__ float operator()(int64_t gn, int64_t gk, int64_t k) const {
    return load_weight(w + gn * k + gk);
  }
};
struct Int8Rows {
  static constexpr bool kRoundsX = false;
  const int8_t* q;
  const float* scales;
  int64_t group;
  __device__ __forceinline__ float operator()(int64_t gn, int64_t gk, int64_t k) const {
    return static_cast<float>(q[gn * k + gk]) * scales[gn * (k / group) + gk / group];
  }
};

template <typename Rows>
__global__ void __launch_bounds__(kTileThreads)
    linear_tiled_kernel(const float* __restrict__ x, Rows w, const float* __restrict__ bias,
                        float* __restrict__ y, int64_t m, int64_t n, int64_t k) {
  __shared__ float x_tile[kTileK][kTileM + 1];
  __shared__ float w_tile[kTileK][kTileN + 1];
  const int tid = threadIdx.x;
  const int tx = tid % 16;  // output feature offset
  const int ty = tid / 16;  // row offset
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTileN;

  float acc[kSub][kSub];
#pragma unroll
  for (int i = 0; i < kSub; ++i) {
#pragma unroll
    for (int j = 0; j < kSub; ++j) acc[i][j] = 0.f;
  }

  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    // 64 x 16 elements per tile, 4 per thread; consecutive threads read consecutive k.
    for (int e = tid; e < kTileM * kTileK; e += kTileThreads) {
      const int r = e / kTileK;
      const int kk = e % kTileK;
      const int64_t gk = k0 + kk;
      const int64_t gm = row0 + r;
      const int64_t gn = col0 + r;
      const float xv = (gm < m && gk < k) ? x[gm * k + gk] : 0.f;
      x_tile[kk][r] = Rows::kRoundsX ? round_to_bf16(xv) : xv;
      w_tile[kk][r] = (gn < n && gk < k) ? w(gn, gk, k) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[kSub];
      float b[kSub];
#pragma unroll
      for (int i = 0; i < kSub; ++i) a[i] = x_tile[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < kSub; ++j) b[j] = w_tile[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < kSub; ++i) {
#pragma unroll
        for (int j = 0; j < kSub; ++j) acc[i][j] += a[i] * b[j];
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kSub; ++i) {
    const int64_t gm = row0 + ty + 16 * i;
    if (gm >= m) continue;
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
      const int64_t gn = col0 + tx + 16 * j;
      if (gn < n) y[gm * n + gn] = acc[i][j] + (bias != nullptr ? bias[gn] : 0.f);
    }
  }
}

// ---- bias for the cuBLAS path / k == 0
// -------------------------------------------------------------
__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t m,
                                int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += bias[i % n];
  }
}

Status launch_add_bias(float* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  add_bias_kernel<<<detail::grid_stride_blocks(m * n, kThreads), kThreads, 0, stream>>>(y, bias, m,
                                                                                        n);
  TESSERA_CUDA_CHECK_LAUNCH("linear: bias kernel launch");
  return Status();
}

// ---- cuBLAS handle, one per host thread and device
// -------------------------------------------------
std::string cublas_error(cublasStatus_t st, const char* what) {
  return std::string("cuda linear: ") + what + " failed: " + cublas().status_name(st) + " (" +
         cublas().status_string(st) + ")";
}

struct ThreadCublasHandle {
  int device = -1;
  cublasHandle_t handle = nullptr;
  ~ThreadCublasHandle() {
    if (handle != nullptr) cublas().destroy(handle);
  }
};

thread_local bool t_tf32_products = false;

// Handles are bound to the device current at creation and are not safe to share between threads
// that issue work concurrently, hence one per thread, recreated if the thread switches devices.
Expected<cublasHandle_t> thread_cublas_handle() {
  TESSERA_ASSIGN_OR_RETURN(const CublasApi* blas, cublas_api());
  thread_local ThreadCublasHandle cached;
  int device = 0;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "linear: cudaGetDevice");
  if (cached.handle != nullptr && cached.device == device) return cached.handle;
  if (cached.handle != nullptr) {
    blas->destroy(cached.handle);
    cached.handle = nullptr;
  }
  cublasHandle_t handle = nullptr;
  const cublasStatus_t st = blas->create(&handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    if (st == CUBLAS_STATUS_ALLOC_FAILED) return out_of_memory(cublas_error(st, "cublasCreate"));
    return internal_error(cublas_error(st, "cublasCreate"));
  }
  cached.handle = handle;
  cached.device = device;
  return handle;
}

Status sgemm(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float* y,
             cudaStream_t stream) {
  TESSERA_ASSIGN_OR_RETURN(cublasHandle_t handle, thread_cublas_handle());
  cublasStatus_t st = cublas().set_stream(handle, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return internal_error(cublas_error(st, "cublasSetStream"));
  st = cublas().set_math_mode(handle,
                              tf32_products() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) return internal_error(cublas_error(st, "cublasSetMathMode"));
  // cuBLAS is column-major. Row-major y[m,n] is column-major C = y^T (n x m, ld n), and
  // y^T = w x^T: row-major w[n,k] is column-major k x n (ld k), used transposed (op T: n x k);
  // row-major x[m,k] is column-major k x m (ld k), used as is.
  const float alpha = 1.f;
  const float beta = 0.f;
  st = cublas().sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(k), &alpha, w, static_cast<int>(k), x, static_cast<int>(k),
                      &beta, y, static_cast<int>(n));
  if (st != CUBLAS_STATUS_SUCCESS) return internal_error(cublas_error(st, "cublasSgemm"));
  return Status();
}

// x rounded to bf16 bits (the ops.h contract), for the tensor-core GEMM.
__global__ void round_x_to_bf16_kernel(const float* __restrict__ x, uint16_t* __restrict__ out,
                                       int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = static_cast<uint16_t>(__float_as_uint(round_to_bf16(x[i])) >> 16);
  }
}

// One growing device buffer per thread (and device) for x in bf16. Null (the caller falls back to
// the tiled kernel) when it would have to grow while the stream is being captured into a graph,
// or when the memory is not there.
Expected<uint16_t*> thread_bf16_scratch(size_t elements, cudaStream_t stream) {
  struct Scratch {
    void* ptr = nullptr;
    size_t bytes = 0;
    int device = -1;
    ~Scratch() {
      if (ptr != nullptr) cudaFree(ptr);
    }
  };
  thread_local Scratch scratch;
  int device = 0;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "linear: cudaGetDevice");
  const size_t bytes = elements * sizeof(uint16_t);
  if (scratch.ptr != nullptr && scratch.device == device && scratch.bytes >= bytes) {
    return static_cast<uint16_t*>(scratch.ptr);
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture),
                               "linear: cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) return static_cast<uint16_t*>(nullptr);
  const size_t grown = std::max({bytes, 2 * scratch.bytes, size_t{1} << 20});  // few regrowths
  if (scratch.ptr != nullptr) {
    cudaFree(scratch.ptr);  // waits for the work that used it
    scratch.ptr = nullptr;
    scratch.bytes = 0;
  }
  if (cudaMalloc(&scratch.ptr, grown) != cudaSuccess) {
    cudaGetLastError();  // not sticky: the caller falls back to the tiled kernel
    scratch.ptr = nullptr;
    return static_cast<uint16_t*>(nullptr);
  }
  scratch.bytes = grown;
  scratch.device = device;
  return static_cast<uint16_t*>(scratch.ptr);
}

// y (m x n, f32) = xb (m x k, bf16 bits) . w^T (n x k, bf16): cuBLAS's bf16 GEMM, f32 sums.
Status gemm_bf16_operands(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k,
                          float* y, cudaStream_t stream);

// bf16 weights, m above the GEMV sizes: x rounded to bf16, then cuBLAS's bf16 GEMM on the tensor
// cores with f32 accumulation and f32 output (the ops.h contract: exact products, f32 sums).
// Returns false (nothing launched) when no scratch can be had during a graph capture.
Expected<bool> bf16_tensor_core_gemm(const float* x, int64_t m, const uint16_t* w, int64_t n,
                                     int64_t k, float* y, cudaStream_t stream) {
  TESSERA_ASSIGN_OR_RETURN(uint16_t * xb, thread_bf16_scratch(static_cast<size_t>(m * k), stream));
  if (xb == nullptr) return false;
  constexpr int kThreads = 256;
  round_x_to_bf16_kernel<<<detail::grid_stride_blocks(m * k, kThreads), kThreads, 0, stream>>>(
      x, xb, m * k);
  TESSERA_CUDA_CHECK_LAUNCH("linear: x to bf16 launch");
  TESSERA_RETURN_IF_ERROR(gemm_bf16_operands(xb, m, w, n, k, y, stream));
  return true;
}

Status gemm_bf16_operands(const uint16_t* xb, int64_t m, const uint16_t* w, int64_t n, int64_t k,
                          float* y, cudaStream_t stream) {
  TESSERA_ASSIGN_OR_RETURN(cublasHandle_t handle, thread_cublas_handle());
  cublasStatus_t st = cublas().set_stream(handle, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return internal_error(cublas_error(st, "cublasSetStream"));
  st = cublas().set_math_mode(handle, CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) return internal_error(cublas_error(st, "cublasSetMathMode"));
  // Column-major as in sgemm(): y^T (n x m) = w (k x n, op T) . x^T (k x m).
  const float alpha = 1.f;
  const float beta = 0.f;
  st = cublas().gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                        static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(k), xb,
                        CUDA_R_16BF, static_cast<int>(k), &beta, y, CUDA_R_32F, static_cast<int>(n),
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) return internal_error(cublas_error(st, "cublasGemmEx bf16"));
  return Status();
}

}  // namespace

void set_tf32_products(bool on) {
  t_tf32_products = on;
}
bool tf32_products() {
  return t_tf32_products;
}

Expected<bool> linear_swiglu(const float* x, int64_t m, const Weight& gate, const float* gate_bias,
                             const Weight& up, const float* up_bias, float* y,
                             cudaStream_t stream) {
  const bool same = gate.dtype == up.dtype && gate.rows == up.rows && gate.cols == up.cols;
  if (!same || (gate.dtype != DType::kBF16 && gate.dtype != DType::kF32) || m < 1 ||
      m > kGemvMaxRows || gate.rows < 1 || gate.cols < 1 || x == nullptr || y == nullptr ||
      gate.data == nullptr || up.data == nullptr || gate.rows > INT_MAX) {
    return false;
  }
  const int64_t kPer = gate.dtype == DType::kBF16 ? 8 : 4;
  if (!aligned16(x) || !aligned16(gate.data) || !aligned16(up.data) || gate.cols % kPer != 0) {
    return false;
  }
  TESSERA_ASSIGN_OR_RETURN(const dim3 grid, gemv_grid(gate.rows));
  const dim3 block(kGemvWarps * 32);
  if (gate.dtype == DType::kBF16) {
    linear_gemv_swiglu_kernel<uint16_t>
        <<<grid, block, 0, stream>>>(x, static_cast<const uint16_t*>(gate.data), gate_bias,
                                     static_cast<const uint16_t*>(up.data), up_bias, y,
                                     static_cast<int>(m), gate.rows, gate.cols);
  } else {
    linear_gemv_swiglu_kernel<float><<<grid, block, 0, stream>>>(
        x, static_cast<const float*>(gate.data), gate_bias, static_cast<const float*>(up.data),
        up_bias, y, static_cast<int>(m), gate.rows, gate.cols);
  }
  TESSERA_CUDA_CHECK_LAUNCH("linear_swiglu: kernel launch");
  return true;
}

Status linear_multi(const float* x, int64_t m, const LinearPart* parts, int64_t n_parts,
                    cudaStream_t stream) {
  // The decode GEMVs of one x (q/k/v, gate/up) in one launch when they share a dtype (f32 or
  // bf16), their k and a GEMV size; otherwise one linear() per part.
  bool fused =
      n_parts >= 2 && n_parts <= kMaxGemvParts && m >= 1 && m <= kGemvMaxRows && x != nullptr;
  for (int64_t p = 0; fused && p < n_parts; ++p) {
    const Weight& w = parts[p].w;
    fused = (w.dtype == DType::kF32 || w.dtype == DType::kBF16) && w.dtype == parts[0].w.dtype &&
            w.cols == parts[0].w.cols && w.cols > 0 && w.rows > 0 && w.data != nullptr &&
            parts[p].y != nullptr && w.cols <= INT_MAX && w.rows <= INT_MAX;
  }
  if (fused) {
    const int64_t k = parts[0].w.cols;
    if (parts[0].w.dtype == DType::kBF16) {
      GemvParts<uint16_t> g{};
      for (int64_t p = 0; p < n_parts; ++p) {
        g.w[p] = static_cast<const uint16_t*>(parts[p].w.data);
        g.bias[p] = parts[p].bias;
        g.y[p] = parts[p].y;
        g.n[p] = parts[p].w.rows;
      }
      g.count = static_cast<int>(n_parts);
      return launch_gemv_parts(x, m, g, k, stream);
    }
    GemvParts<float> g{};
    for (int64_t p = 0; p < n_parts; ++p) {
      g.w[p] = static_cast<const float*>(parts[p].w.data);
      g.bias[p] = parts[p].bias;
      g.y[p] = parts[p].y;
      g.n[p] = parts[p].w.rows;
    }
    g.count = static_cast<int>(n_parts);
    return launch_gemv_parts(x, m, g, k, stream);
  }
  for (int64_t p = 0; p < n_parts; ++p) {
    const Status st = linear(x, m, parts[p].w, parts[p].bias, parts[p].y, stream);
    if (!st.ok()) return st.with_context("linear_multi part " + std::to_string(p));
  }
  return Status();
}

Status linear_bf16_x(const uint16_t* xb, int64_t m, const Weight& w, const float* bias, float* y,
                     cudaStream_t stream) {
  if (w.dtype != DType::kBF16) {
    return invalid_argument(std::string("cuda linear_bf16_x: weight dtype ") + dtype_name(w.dtype) +
                            " (expected BF16)");
  }
  const int64_t n = w.rows, k = w.cols;
  if (m < 0 || n < 0 || k < 1) {
    return invalid_argument("cuda linear_bf16_x: sizes m " + std::to_string(m) + ", n " +
                            std::to_string(n) + ", k " + std::to_string(k) + " (k must be >= 1)");
  }
  if (m == 0 || n == 0) return Status();
  if (xb == nullptr || w.data == nullptr || y == nullptr) {
    return invalid_argument("cuda linear_bf16_x: null x, weight or y pointer");
  }
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return invalid_argument("cuda linear_bf16_x: sizes beyond 2^31-1");
  }
  TESSERA_RETURN_IF_ERROR(
      gemm_bf16_operands(xb, m, static_cast<const uint16_t*>(w.data), n, k, y, stream));
  return bias != nullptr ? launch_add_bias(y, bias, m, n, stream) : Status();
}

Status linear(const float* x, int64_t m, const Weight& w, const float* bias, float* y,
              cudaStream_t stream) {
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16 && w.dtype != DType::kI8) {
    return unsupported(std::string("cuda linear: weight dtype ") + dtype_name(w.dtype) +
                       " (expected F32, BF16 or I8)");
  }
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  if (w.dtype == DType::kI8 && (w.scales == nullptr || w.group <= 0 || k % w.group != 0)) {
    return invalid_argument("cuda linear: int8 weight without scales or with group " +
                            std::to_string(w.group) + " not dividing k = " + std::to_string(k));
  }
  if (m < 0 || n < 0 || k < 0) {
    return invalid_argument("cuda linear: negative size (m " + std::to_string(m) + ", n " +
                            std::to_string(n) + ", k " + std::to_string(k) + ")");
  }
  if (m == 0 || n == 0) return Status();
  if (y == nullptr || (k > 0 && (x == nullptr || w.data == nullptr))) {
    return invalid_argument("cuda linear: null x, weight or y pointer");
  }
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return invalid_argument("cuda linear: sizes beyond 2^31-1 (m " + std::to_string(m) + ", n " +
                            std::to_string(n) + ", k " + std::to_string(k) + ")");
  }
  if (k == 0) {  // an empty sum: y = bias (or 0)
    TESSERA_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(y, 0, static_cast<size_t>(m * n) * sizeof(float), stream),
        "linear: cudaMemsetAsync");
    return bias != nullptr ? launch_add_bias(y, bias, m, n, stream) : Status();
  }

  if (m <= kGemvMaxRows) {
    if (w.dtype == DType::kI8) return launch_gemv_i8(x, m, w, bias, y, stream);
    if (w.dtype == DType::kF32) {
      return launch_gemv(x, m, static_cast<const float*>(w.data), n, k, bias, y, stream);
    }
    return launch_gemv(x, m, static_cast<const uint16_t*>(w.data), n, k, bias, y, stream);
  }

  if (w.dtype == DType::kF32) {
    TESSERA_RETURN_IF_ERROR(sgemm(x, m, static_cast<const float*>(w.data), n, k, y, stream));
    return bias != nullptr ? launch_add_bias(y, bias, m, n, stream) : Status();
  }

  if (w.dtype == DType::kBF16) {
    TESSERA_ASSIGN_OR_RETURN(
        const bool done,
        bf16_tensor_core_gemm(x, m, static_cast<const uint16_t*>(w.data), n, k, y, stream));
    if (done) return bias != nullptr ? launch_add_bias(y, bias, m, n, stream) : Status();
  }

  const int64_t grid_y = (m + kTileM - 1) / kTileM;
  if (grid_y > 65535) {
    return invalid_argument("cuda linear: m = " + std::to_string(m) +
                            " rows exceed the tiled GEMM grid (at most 4194240)");
  }
  const dim3 grid(static_cast<unsigned>((n + kTileN - 1) / kTileN), static_cast<unsigned>(grid_y));
  if (w.dtype == DType::kI8) {
    linear_tiled_kernel<<<grid, kTileThreads, 0, stream>>>(
        x, Int8Rows{static_cast<const int8_t*>(w.data), w.scales, w.group}, bias, y, m, n, k);
    TESSERA_CUDA_CHECK_LAUNCH("linear: int8 tiled gemm launch");
    return Status();
  }
  linear_tiled_kernel<<<grid, kTileThreads, 0, stream>>>(
      x, Bf16Rows{static_cast<const uint16_t*>(w.data)}, bias, y, m, n, k);
  TESSERA_CUDA_CHECK_LAUNCH("linear: bf16 tiled gemm launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
