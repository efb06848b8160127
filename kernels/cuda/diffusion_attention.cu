// cuda::diffusion_attention: the UNet/VAE attention with its algorithm switch.
// kFlash: cuda::attention (attention.cu). kNaive: per (batch, head), S = scale Q K^T (cuBLAS) into
// scratch, cuda::softmax in place, O = P V (cuBLAS): the normalised matrix goes through memory
// twice more. kPartialFused (Chen et al. 2023): S written once the same way; a row-statistics
// kernel reduces each row's max and sum of exp into two vectors; the P V kernel, a tiled GEMM,
// normalises each S tile as it loads it into shared memory (exp(S - max) / sum), so the
// normalised matrix is never written.
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/diffusion_cuda_ops.h"
#include "kernels/cuda/diffusion_internal.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kStatsWarps = 8;  // rows per row-statistics block, one warp each

// P V tiles: 64 queries x 64 output dims per block, 256 threads of 4x4 outputs each (stride 16 in
// both directions, so neighbouring threads write neighbouring dims), 16 keys per step.
constexpr int kPvTileQ = 64;
constexpr int kPvTileD = 64;
constexpr int kPvTileK = 16;
constexpr int kPvThreads = 256;
constexpr int kPvSub = 4;

// row_max[r] = max_j s[r, j]; row_inv[r] = 1 / sum_j exp(s[r, j] - row_max[r]).
__global__ void __launch_bounds__(kStatsWarps * 32)
    row_stats_kernel(const float* __restrict__ s, float* __restrict__ row_max,
                     float* __restrict__ row_inv, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kStatsWarps + threadIdx.x / 32;
  if (r >= rows) return;  // uniform per warp; no block barrier below
  const float* sr = s + r * cols;
  float m = -INFINITY;
  for (int64_t j = lane; j < cols; j += 32) m = fmaxf(m, sr[j]);
  m = detail::warp_max(m);
  float sum = 0.f;
  for (int64_t j = lane; j < cols; j += 32) sum += expf(sr[j] - m);
  sum = detail::warp_sum(sum);
  if (lane == 0) {
    row_max[r] = m;
    row_inv[r] = 1.f / sum;
  }
}

// o[i * o_stride + d] = sum_j exp(s[i, j] - row_max[i]) * row_inv[i] * v[j * v_stride + d].
__global__ void __launch_bounds__(kPvThreads)
    softmax_pv_kernel(const float* __restrict__ s, const float* __restrict__ row_max,
                      const float* __restrict__ row_inv, const float* __restrict__ v,
                      float* __restrict__ o, int64_t q_len, int64_t kv_len, int64_t dim,
                      int64_t v_stride, int64_t o_stride) {
  __shared__ float p_tile[kPvTileK][kPvTileQ + 1];
  __shared__ float v_tile[kPvTileK][kPvTileD + 1];
  const int tid = threadIdx.x;
  const int tx = tid % 16;  // dim offset
  const int ty = tid / 16;  // query offset
  const int64_t q0 = static_cast<int64_t>(blockIdx.y) * kPvTileQ;
  const int64_t d0 = static_cast<int64_t>(blockIdx.x) * kPvTileD;

  float acc[kPvSub][kPvSub];
#pragma unroll
  for (int i = 0; i < kPvSub; ++i) {
#pragma unroll
    for (int j = 0; j < kPvSub; ++j) acc[i][j] = 0.f;
  }

  for (int64_t k0 = 0; k0 < kv_len; k0 += kPvTileK) {
    // Scores: consecutive threads read consecutive keys of a query row; normalised on the way in.
    for (int e = tid; e < kPvTileQ * kPvTileK; e += kPvThreads) {
      const int r = e / kPvTileK;
      const int kk = e % kPvTileK;
      const int64_t gq = q0 + r;
      const int64_t gk = k0 + kk;
      p_tile[kk][r] =
          (gq < q_len && gk < kv_len) ? expf(s[gq * kv_len + gk] - row_max[gq]) * row_inv[gq] : 0.f;
    }
    // Values: consecutive threads read consecutive dims of a key row.
    for (int e = tid; e < kPvTileD * kPvTileK; e += kPvThreads) {
      const int kk = e / kPvTileD;
      const int c = e % kPvTileD;
      const int64_t gk = k0 + kk;
      const int64_t gd = d0 + c;
      v_tile[kk][c] = (gk < kv_len && gd < dim) ? v[gk * v_stride + gd] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kPvTileK; ++kk) {
      float a[kPvSub];
      float b[kPvSub];
#pragma unroll
      for (int i = 0; i < kPvSub; ++i) a[i] = p_tile[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < kPvSub; ++j) b[j] = v_tile[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < kPvSub; ++i) {
#pragma unroll
        for (int j = 0; j < kPvSub; ++j) acc[i][j] += a[i] * b[j];
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kPvSub; ++i) {
    const int64_t gq = q0 + ty + 16 * i;
    if (gq >= q_len) continue;
#pragma unroll
    for (int j = 0; j < kPvSub; ++j) {
      const int64_t gd = d0 + tx + 16 * j;
      if (gd < dim) o[gq * o_stride + gd] = acc[i][j];
    }
  }
}

// Zero output rows (no keys): o[b, t, h, :] = 0.
__global__ void zero_rows_kernel(float* __restrict__ o, AttentionShape s) {
  const int64_t total = s.batch * s.q_len * s.heads * s.head_dim;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = i % s.head_dim;
    const int64_t h = (i / s.head_dim) % s.heads;
    const int64_t t = (i / (s.head_dim * s.heads)) % s.q_len;
    const int64_t b = i / (s.head_dim * s.heads * s.q_len);
    o[b * s.o_batch_stride + t * s.o_token_stride + h * s.head_dim + d] = 0.f;
  }
}

Status check_args(const float* q, const float* k, const float* v, const float* o,
                  const AttentionShape& s, AttentionAlgo algo) {
  const char* name = "cuda diffusion_attention";
  if (s.batch < 0 || s.heads < 0 || s.q_len < 0 || s.kv_len < 0 || s.head_dim < 0) {
    return invalid_argument(
        std::string(name) + ": negative size (batch " + std::to_string(s.batch) + ", heads " +
        std::to_string(s.heads) + ", q_len " + std::to_string(s.q_len) + ", kv_len " +
        std::to_string(s.kv_len) + ", head_dim " + std::to_string(s.head_dim) + ")");
  }
  if (algo != AttentionAlgo::kFlash && s.causal) {
    return unsupported(std::string(name) +
                       ": causal masking needs kFlash (kPartialFused and kNaive do not mask)");
  }
  if (s.batch == 0 || s.heads == 0 || s.q_len == 0 || s.head_dim == 0) return Status();
  if (q == nullptr || o == nullptr || (s.kv_len > 0 && (k == nullptr || v == nullptr))) {
    return invalid_argument(std::string(name) + ": null q, k, v or o");
  }
  if (algo == AttentionAlgo::kFlash) return Status();  // cuda::attention checks the rest
  if (s.q_token_stride < s.head_dim || s.k_token_stride < s.head_dim ||
      s.v_token_stride < s.head_dim || s.o_token_stride < s.head_dim) {
    return invalid_argument(std::string(name) + ": a token stride is below head_dim " +
                            std::to_string(s.head_dim));
  }
  const int64_t limits[] = {s.q_len,          s.kv_len,         s.head_dim,      s.q_token_stride,
                            s.k_token_stride, s.v_token_stride, s.o_token_stride};
  for (int64_t n : limits) {
    if (n > INT_MAX) {
      return invalid_argument(std::string(name) + ": size or stride " + std::to_string(n) +
                              " beyond 2^31-1 (cuBLAS)");
    }
  }
  if ((s.q_len + kPvTileQ - 1) / kPvTileQ > 65535) {
    return invalid_argument(std::string(name) + ": q_len " + std::to_string(s.q_len) +
                            " beyond the P V grid (at most 4194240)");
  }
  return Status();
}

AttentionAlgo resolve(const AttentionShape& s, AttentionAlgo algo) {
  return algo == AttentionAlgo::kAuto ? choose_attention_algo(s) : algo;
}

}  // namespace

AttentionAlgo choose_attention_algo(const AttentionShape& s) {
  if (s.causal) return AttentionAlgo::kFlash;
  return AttentionAlgo::kNaive;
}

int64_t attention_scratch_floats(const AttentionShape& s, AttentionAlgo algo) {
  switch (resolve(s, algo)) {
    case AttentionAlgo::kNaive:
      return s.q_len * s.kv_len;
    case AttentionAlgo::kPartialFused:
      return s.q_len * s.kv_len + 2 * s.q_len;
    default:
      return 0;
  }
}

Status diffusion_attention(const float* q, const float* k, const float* v, float* o,
                           const AttentionShape& s, AttentionAlgo algo, float* scratch,
                           int64_t scratch_floats, cudaStream_t stream) {
  algo = resolve(s, algo);
  TESSERA_RETURN_IF_ERROR(check_args(q, k, v, o, s, algo));
  if (algo == AttentionAlgo::kFlash) return cuda::attention(q, k, v, o, s, stream);
  if (s.batch == 0 || s.heads == 0 || s.q_len == 0 || s.head_dim == 0) return Status();
  if (s.kv_len == 0) {  // no keys: zero rows, as every backend
    constexpr int kThreads = 256;
    zero_rows_kernel<<<detail::grid_stride_blocks(s.batch * s.q_len * s.heads * s.head_dim,
                                                  kThreads),
                       kThreads, 0, stream>>>(o, s);
    TESSERA_CUDA_CHECK_LAUNCH("diffusion_attention: zero rows kernel launch");
    return Status();
  }
  const int64_t needed = attention_scratch_floats(s, algo);
  if (scratch == nullptr || scratch_floats < needed) {
    return invalid_argument("cuda diffusion_attention: scratch of " +
                            std::to_string(scratch_floats) + " floats" +
                            (scratch == nullptr ? " (null)" : "") + ", needs " +
                            std::to_string(needed) + " (attention_scratch_floats)");
  }
  TESSERA_ASSIGN_OR_RETURN(cublasHandle_t handle,
                           diffusion_detail::cublas_for_stream(stream, "diffusion_attention"));
  const int qn = static_cast<int>(s.q_len), kvn = static_cast<int>(s.kv_len);
  const int dn = static_cast<int>(s.head_dim);
  const float zero = 0.f, one = 1.f, scale = s.scale;
  float* scores = scratch;
  float* row_max = scratch + s.q_len * s.kv_len;
  float* row_inv = row_max + s.q_len;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const float* qh = q + b * s.q_batch_stride + h * s.head_dim;
      const float* kh = k + b * s.k_batch_stride + h * s.head_dim;
      const float* vh = v + b * s.v_batch_stride + h * s.head_dim;
      float* oh = o + b * s.o_batch_stride + h * s.head_dim;
      // Row-major S [q_len, kv_len] = scale Q K^T; column-major S^T (kv x q, ld kv_len) =
      // K (op T of the column-major head_dim x kv view, ld k_token_stride) . Q^T (head_dim x q,
      // ld q_token_stride).
      cublasStatus_t st = cublas().sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, kvn, qn, dn, &scale, kh,
                                         static_cast<int>(s.k_token_stride), qh,
                                         static_cast<int>(s.q_token_stride), &zero, scores, kvn);
      if (st != CUBLAS_STATUS_SUCCESS) {
        return diffusion_detail::cublas_status(st, "diffusion_attention", "cublasSgemm (Q K^T)");
      }
      if (algo == AttentionAlgo::kNaive) {
        TESSERA_RETURN_IF_ERROR(cuda::softmax(scores, scores, s.q_len, s.kv_len, stream));
        // Row-major O [q, head_dim] (ld o_token_stride) = P V; column-major O^T = V^T . P^T.
        st = cublas().sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, dn, qn, kvn, &one, vh,
                            static_cast<int>(s.v_token_stride), scores, kvn, &zero, oh,
                            static_cast<int>(s.o_token_stride));
        if (st != CUBLAS_STATUS_SUCCESS) {
          return diffusion_detail::cublas_status(st, "diffusion_attention", "cublasSgemm (P V)");
        }
        continue;
      }
      row_stats_kernel<<<static_cast<unsigned>((s.q_len + kStatsWarps - 1) / kStatsWarps),
                         kStatsWarps * 32, 0, stream>>>(scores, row_max, row_inv, s.q_len,
                                                        s.kv_len);
      TESSERA_CUDA_CHECK_LAUNCH("diffusion_attention: row statistics kernel launch");
      const dim3 grid(static_cast<unsigned>((s.head_dim + kPvTileD - 1) / kPvTileD),
                      static_cast<unsigned>((s.q_len + kPvTileQ - 1) / kPvTileQ));
      softmax_pv_kernel<<<grid, kPvThreads, 0, stream>>>(scores, row_max, row_inv, vh, oh, s.q_len,
                                                         s.kv_len, s.head_dim, s.v_token_stride,
                                                         s.o_token_stride);
      TESSERA_CUDA_CHECK_LAUNCH("diffusion_attention: softmax P V kernel launch");
    }
  }
  return Status();
}

}  // namespace tessera::kernels::cuda
