// cuda::conv2d over NHWC activations: 1x1 as one GEMM, 3x3 as im2col + GEMM or Winograd
// F(4x4, 3x3) (Lavin & Gray 2016), nearest x2 upsampling read through the input indexing; and
// cuda::upsample_nearest2x, the unfused upsampling.
//
// Weights arrive packed by cpu::conv2d_pack_weights (the same bytes as the CPU path):
// kGemm [out_c][ky][kx][in_c] is exactly cuda::linear's [n = out_c][k = 9 * in_c] row-major
// weight, so a 3x3 convolution is an im2col kernel followed by cuda::linear (cuBLAS sgemm + bias)
// on blocks of output pixels. Winograd: per block of 4x4 output tiles, one thread per
// (tile, input channel) transforms its 6x6 input tile (V = B^T d B, stored V[36][tiles][in_c] so
// neighbouring threads write neighbouring channels), cublasSgemmStridedBatched runs the 36
// products M[p] = V[p] . U[p] ([tiles, in_c] x [in_c, out_c]), and one thread per (tile, output
// channel) writes A^T M A + bias for the output pixels inside the image.
//
// Matrices (interpolation points 0, 1, -1, 2, -2, inf), as kernels/cpu/diffusion_kernels.inc:
//   B^T = [4  0 -5  0 1 0]   A^T = [1 1  1 1  1 0]
//         [0 -4 -4  1 1 0]         [0 1 -1 2 -2 0]
//         [0  4 -4 -1 1 0]         [0 1  1 4  4 0]
//         [0 -2 -1  2 1 0]         [0 1 -1 8 -8 1]
//         [0  2 -1 -2 1 0]
//         [0  4  0 -5 0 1]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/diffusion_cuda_ops.h"
#include "kernels/cuda/diffusion_internal.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kConvThreads = 256;

// The geometry the kernels need, flattened for the launch.
struct ConvGeometry {
  int64_t in_h, in_w;      // x as stored
  int64_t conv_h, conv_w;  // after the optional upsampling
  int64_t out_h, out_w;
  int64_t in_c, out_c;
  int64_t stride;
  int up;   // 1 when upsampling: conv coordinate >> up is the stored coordinate
  int pad;  // zero rows / columns before the input (Conv2dShape::pad_begin)
};

ConvGeometry geometry_of(const Conv2dShape& s) {
  return {s.in_h,
          s.in_w,
          s.conv_in_h(),
          s.conv_in_w(),
          s.out_h(),
          s.out_w(),
          s.in_c,
          s.out_c,
          s.stride,
          s.upsample2x ? 1 : 0,
          static_cast<int>(s.pad_begin())};
}

// col[i][(ky * 3 + kx) * in_c + c] for the block's output pixels p0 + i, i < np: f32, or bf16 bits
// (OutT uint16_t: rounded to nearest even, the bf16 linear contract's x).
template <typename OutT>
__device__ __forceinline__ OutT col_value(float v) {
  if constexpr (sizeof(OutT) == 2) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  } else {
    return v;
  }
}

template <typename OutT>
__global__ void __launch_bounds__(kConvThreads)
    im2col_kernel(const float* __restrict__ x, OutT* __restrict__ col, ConvGeometry g, int64_t p0,
                  int64_t np) {
  const int64_t kdim = 9 * g.in_c;
  const int64_t total = np * kdim;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / kdim;
    const int64_t r = idx - i * kdim;
    const int64_t tap = r / g.in_c;
    const int64_t c = r - tap * g.in_c;
    const int64_t p = p0 + i;
    const int64_t n = p / (g.out_h * g.out_w);
    const int64_t oy = (p / g.out_w) % g.out_h;
    const int64_t ox = p % g.out_w;
    const int64_t iy = oy * g.stride + tap / 3 - g.pad;
    const int64_t ix = ox * g.stride + tap % 3 - g.pad;
    float v = 0.f;
    if (iy >= 0 && iy < g.conv_h && ix >= 0 && ix < g.conv_w) {
      v = x[((n * g.in_h + (iy >> g.up)) * g.in_w + (ix >> g.up)) * g.in_c + c];
    }
    col[idx] = col_value<OutT>(v);
  }
}

// B^T applied to six values (a column or a row of the tile).
__device__ __forceinline__ void bt6(const float (&d)[6], float (&r)[6]) {
  r[0] = 4.f * d[0] - 5.f * d[2] + d[4];
  r[1] = -4.f * (d[1] + d[2]) + (d[3] + d[4]);
  r[2] = 4.f * (d[1] - d[2]) + (d[4] - d[3]);
  r[3] = 2.f * (d[3] - d[1]) + (d[4] - d[2]);
  r[4] = 2.f * (d[1] - d[3]) + (d[4] - d[2]);
  r[5] = 4.f * d[1] - 5.f * d[3] + d[5];
}

// A^T applied to six values, into four.
__device__ __forceinline__ void at6(const float (&m)[6], float (&r)[4]) {
  const float s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];
  r[0] = m[0] + s12 + s34;
  r[1] = d12 + 2.f * d34;
  r[2] = s12 + 4.f * s34;
  r[3] = d12 + 8.f * d34 + m[5];
}

// Element idx of a block of tiles t0, t0 + 1, ... stored [tile][channel]: its channel, and its
// tile's image n, tile row ty and tile column tx (tiles_h x tiles_w tiles per image).
struct TileElement {
  int64_t channel, n, ty, tx;
};
__device__ __forceinline__ TileElement tile_element(int64_t idx, int64_t channels, int64_t t0,
                                                    int64_t tiles_h, int64_t tiles_w) {
  const int64_t i = idx / channels;
  const int64_t t = t0 + i;
  return {idx - i * channels, t / (tiles_h * tiles_w), (t / tiles_w) % tiles_h, t % tiles_w};
}

// v[(p * nt + i) * in_c + c] = (B^T d B)[p] for tile t0 + i and channel c.
__global__ void __launch_bounds__(kConvThreads)
    winograd_input_kernel(const float* __restrict__ x, float* __restrict__ v, ConvGeometry g,
                          int64_t tiles_h, int64_t tiles_w, int64_t t0, int64_t nt) {
  const int64_t total = nt * g.in_c;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto [c, n, ty, tx] = tile_element(idx, g.in_c, t0, tiles_h, tiles_w);
    float d[6][6];
#pragma unroll
    for (int a = 0; a < 6; ++a) {
      const int64_t iy = ty * 4 + a - 1;
#pragma unroll
      for (int b = 0; b < 6; ++b) {
        const int64_t ix = tx * 4 + b - 1;
        d[a][b] = (iy >= 0 && iy < g.conv_h && ix >= 0 && ix < g.conv_w)
                      ? x[((n * g.in_h + (iy >> g.up)) * g.in_w + (ix >> g.up)) * g.in_c + c]
                      : 0.f;
      }
    }
    float t_[6][6];  // B^T d (columns)
#pragma unroll
    for (int b = 0; b < 6; ++b) {
      const float col[6] = {d[0][b], d[1][b], d[2][b], d[3][b], d[4][b], d[5][b]};
      float r[6];
      bt6(col, r);
#pragma unroll
      for (int a = 0; a < 6; ++a) t_[a][b] = r[a];
    }
    const int64_t plane = nt * g.in_c;
#pragma unroll
    for (int a = 0; a < 6; ++a) {  // (B^T d) B (rows)
      float r[6];
      bt6(t_[a], r);
#pragma unroll
      for (int b = 0; b < 6; ++b) v[(a * 6 + b) * plane + idx] = r[b];
    }
  }
}

// y pixels of tile t0 + i, channel o: (A^T M A) + bias, only those inside the image.
__global__ void __launch_bounds__(kConvThreads)
    winograd_output_kernel(const float* __restrict__ m, const float* __restrict__ bias,
                           float* __restrict__ y, ConvGeometry g, int64_t tiles_h, int64_t tiles_w,
                           int64_t t0, int64_t nt) {
  const int64_t total = nt * g.out_c;
  const int64_t plane = total;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto [o, n, ty, tx] = tile_element(idx, g.out_c, t0, tiles_h, tiles_w);
    float u[4][6];  // A^T M (columns)
#pragma unroll
    for (int b = 0; b < 6; ++b) {
      float col[6];
#pragma unroll
      for (int a = 0; a < 6; ++a) col[a] = m[(a * 6 + b) * plane + idx];
      float r[4];
      at6(col, r);
#pragma unroll
      for (int a = 0; a < 4; ++a) u[a][b] = r[a];
    }
    const float b0 = bias != nullptr ? bias[o] : 0.f;
#pragma unroll
    for (int a = 0; a < 4; ++a) {  // (A^T M) A (rows)
      float r[4];
      at6(u[a], r);
      const int64_t oy = ty * 4 + a;
      if (oy >= g.out_h) continue;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int64_t ox = tx * 4 + b;
        if (ox < g.out_w) y[((n * g.out_h + oy) * g.out_w + ox) * g.out_c + o] = r[b] + b0;
      }
    }
  }
}

// One thread per output element (grid-stride): coalesced writes, each input read four times
// (from L2).
__global__ void __launch_bounds__(kConvThreads)
    upsample_nearest2x_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t height,
                              int64_t width, int64_t channels, int64_t total) {
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = idx % channels;
    const int64_t ox = (idx / channels) % (2 * width);
    const int64_t oy = (idx / (channels * 2 * width)) % (2 * height);
    const int64_t n = idx / (channels * 4 * width * height);
    y[idx] = x[((n * height + oy / 2) * width + ox / 2) * channels + c];
  }
}

bool winograd_ok(const Conv2dShape& s) {
  return s.kernel == 3 && s.stride == 1;
}

Status check_conv_shape(const Conv2dShape& s, ConvAlgo algo) {
  if (s.batch < 0 || s.in_h < 0 || s.in_w < 0 || s.in_c < 0 || s.out_c < 0) {
    return invalid_argument("cuda conv2d: negative size (batch " + std::to_string(s.batch) + ", " +
                            std::to_string(s.in_h) + "x" + std::to_string(s.in_w) + ", " +
                            std::to_string(s.in_c) + "->" + std::to_string(s.out_c) + ")");
  }
  if (s.kernel != 1 && s.kernel != 3) {
    return unsupported("cuda conv2d: kernel " + std::to_string(s.kernel) + " (1 or 3)");
  }
  if (s.stride != 1 && !(s.stride == 2 && s.kernel == 3)) {
    return unsupported("cuda conv2d: stride " + std::to_string(s.stride) + " with kernel " +
                       std::to_string(s.kernel) + " (1, or 2 with kernel 3)");
  }
  if (s.upsample2x && !(s.kernel == 3 && s.stride == 1)) {
    return unsupported("cuda conv2d: upsample2x needs kernel 3, stride 1");
  }
  if (s.pad_end_only && !(s.kernel == 3 && s.stride == 2)) {
    return unsupported("cuda conv2d: pad_end_only needs kernel 3, stride 2");
  }
  if (algo == ConvAlgo::kWinograd && !winograd_ok(s)) {
    return unsupported("cuda conv2d: Winograd needs kernel 3, stride 1 (got kernel " +
                       std::to_string(s.kernel) + ", stride " + std::to_string(s.stride) + ")");
  }
  return Status();
}

// Output pixels per im2col block / tiles per Winograd block (the workspace holds one block).
int64_t im2col_block(const Conv2dShape& s) {
  const int64_t pixels = s.batch * s.out_h() * s.out_w();
  return std::clamp<int64_t>(kConvWorkspaceMaxFloats / (9 * s.in_c), 1,
                             std::max<int64_t>(1, pixels));
}
int64_t winograd_tiles(const Conv2dShape& s) {
  return s.batch * ((s.out_h() + 3) / 4) * ((s.out_w() + 3) / 4);
}
int64_t winograd_block(const Conv2dShape& s) {
  return std::clamp<int64_t>(kConvWorkspaceMaxFloats / (36 * (s.in_c + s.out_c)), 1,
                             std::max<int64_t>(1, winograd_tiles(s)));
}

// The path that actually runs: no input channels (y = bias) is a GEMM with k = 0 whatever the
// algorithm, which needs no workspace.
bool empty_product(const Conv2dShape& s) {
  return s.in_c == 0 || s.batch * s.in_h * s.in_w == 0 || s.out_c == 0;
}

Status conv3x3_gemm(const float* x, const Weight& w, const float* bias, float* y,
                    const Conv2dShape& s, float* col, cudaStream_t stream) {
  const ConvGeometry g = geometry_of(s);
  const int64_t pixels = s.batch * g.out_h * g.out_w;
  const int64_t block = im2col_block(s);
  for (int64_t p0 = 0; p0 < pixels; p0 += block) {
    const int64_t np = std::min(block, pixels - p0);
    const unsigned blocks = detail::grid_stride_blocks(np * 9 * s.in_c, kConvThreads);
    if (w.dtype == DType::kBF16 && np > kGemvMaxRows) {
      // bf16 weights above the GEMV rows: the block written in bf16 (half the bytes, no separate
      // rounding pass), straight into the tensor-core GEMM. The workspace is sized for f32.
      auto* col_bf16 = reinterpret_cast<uint16_t*>(col);
      im2col_kernel<uint16_t><<<blocks, kConvThreads, 0, stream>>>(x, col_bf16, g, p0, np);
      TESSERA_CUDA_CHECK_LAUNCH("conv2d: im2col kernel launch");
      TESSERA_RETURN_IF_ERROR(cuda::linear_bf16_x(col_bf16, np, w, bias, y + p0 * s.out_c, stream));
      continue;
    }
    im2col_kernel<float><<<blocks, kConvThreads, 0, stream>>>(x, col, g, p0, np);
    TESSERA_CUDA_CHECK_LAUNCH("conv2d: im2col kernel launch");
    TESSERA_RETURN_IF_ERROR(cuda::linear(col, np, w, bias, y + p0 * s.out_c, stream));
  }
  return Status();
}

Status conv3x3_winograd(const float* x, const float* packed, const float* bias, float* y,
                        const Conv2dShape& s, float* work, cudaStream_t stream) {
  const ConvGeometry g = geometry_of(s);
  const int64_t tiles_h = (g.out_h + 3) / 4, tiles_w = (g.out_w + 3) / 4;
  const int64_t tiles = winograd_tiles(s);
  const int64_t block = winograd_block(s);
  if (s.in_c > INT_MAX || s.out_c > INT_MAX) {
    return invalid_argument("cuda conv2d: channels beyond 2^31-1 for cuBLAS");
  }
  TESSERA_ASSIGN_OR_RETURN(cublasHandle_t handle,
                           diffusion_detail::cublas_for_stream(stream, "conv2d"));
  float* v = work;
  float* m = work + 36 * block * s.in_c;
  const float alpha = 1.f, beta = 0.f;
  for (int64_t t0 = 0; t0 < tiles; t0 += block) {
    const int64_t nt = std::min(block, tiles - t0);
    winograd_input_kernel<<<detail::grid_stride_blocks(nt * s.in_c, kConvThreads), kConvThreads, 0,
                            stream>>>(x, v, g, tiles_h, tiles_w, t0, nt);
    TESSERA_CUDA_CHECK_LAUNCH("conv2d: winograd input transform launch");
    // Row-major M[p] [nt, out_c] = V[p] [nt, in_c] . U[p] [in_c, out_c]; in cuBLAS's column-major
    // terms M[p]^T (out_c x nt) = U[p]^T (out_c x in_c, ld out_c) . V[p]^T (in_c x nt, ld in_c).
    const cublasStatus_t st = cublas().sgemm_strided_batched(
        handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(s.out_c), static_cast<int>(nt),
        static_cast<int>(s.in_c), &alpha, packed, static_cast<int>(s.out_c),
        static_cast<long long>(s.in_c * s.out_c), v, static_cast<int>(s.in_c),
        static_cast<long long>(nt * s.in_c), &beta, m, static_cast<int>(s.out_c),
        static_cast<long long>(nt * s.out_c), 36);
    if (st != CUBLAS_STATUS_SUCCESS) {
      return diffusion_detail::cublas_status(st, "conv2d", "cublasSgemmStridedBatched");
    }
    winograd_output_kernel<<<detail::grid_stride_blocks(nt * s.out_c, kConvThreads), kConvThreads,
                             0, stream>>>(m, bias, y, g, tiles_h, tiles_w, t0, nt);
    TESSERA_CUDA_CHECK_LAUNCH("conv2d: winograd output transform launch");
  }
  return Status();
}

}  // namespace

size_t conv2d_workspace_bytes(const Conv2dShape& s, ConvAlgo algo) {
  if (!check_conv_shape(s, algo).ok() || empty_product(s) || s.kernel == 1) return 0;
  if (algo == ConvAlgo::kWinograd) {
    return static_cast<size_t>(36 * winograd_block(s) * (s.in_c + s.out_c)) * sizeof(float);
  }
  return static_cast<size_t>(im2col_block(s) * 9 * s.in_c) * sizeof(float);
}

Status conv2d(const float* x, const float* packed, const float* bias, float* y,
              const Conv2dShape& s, ConvAlgo algo, void* workspace, size_t workspace_bytes,
              cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_conv_shape(s, algo));
  if (s.batch * s.in_h * s.in_w == 0 || s.out_c == 0) return Status();
  if (x == nullptr || y == nullptr || (s.in_c > 0 && packed == nullptr)) {
    return invalid_argument("cuda conv2d: null x, packed weights or y");
  }
  const int64_t pixels = s.batch * s.out_h() * s.out_w();
  if (s.kernel == 1 || s.in_c == 0) {
    // 1x1: the packed weights are [out_c, in_c]; no input channels: y = bias (a GEMM with k = 0).
    const Weight w{packed, DType::kF32, s.out_c, s.kernel * s.kernel * s.in_c};
    return cuda::linear(x, pixels, w, bias, y, stream);
  }
  const size_t needed = conv2d_workspace_bytes(s, algo);
  if (workspace == nullptr || workspace_bytes < needed ||
      reinterpret_cast<uintptr_t>(workspace) % alignof(float) != 0) {
    return invalid_argument("cuda conv2d: workspace of " + std::to_string(workspace_bytes) +
                            " bytes" + (workspace == nullptr ? " (null)" : "") + ", needs " +
                            std::to_string(needed) + " (conv2d_workspace_bytes), 4-byte aligned");
  }
  float* work = static_cast<float*>(workspace);
  if (algo == ConvAlgo::kWinograd) return conv3x3_winograd(x, packed, bias, y, s, work, stream);
  return conv3x3_gemm(x, Weight{packed, DType::kF32, s.out_c, 9 * s.in_c}, bias, y, s, work,
                      stream);
}

Status conv2d_weight(const float* x, const Weight& w, const float* bias, float* y,
                     const Conv2dShape& s, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_conv_shape(s, ConvAlgo::kGemm));
  if (s.batch * s.in_h * s.in_w == 0 || s.out_c == 0) return Status();
  if (w.rows != s.out_c || w.cols != s.kernel * s.kernel * s.in_c) {
    return invalid_argument("cuda conv2d_weight: weight " + std::to_string(w.rows) + "x" +
                            std::to_string(w.cols) + ", the convolution needs " +
                            std::to_string(s.out_c) + "x" +
                            std::to_string(s.kernel * s.kernel * s.in_c));
  }
  if (s.kernel == 1 || s.in_c == 0) {
    return cuda::linear(x, s.batch * s.out_h() * s.out_w(), w, bias, y, stream);
  }
  if (x == nullptr || y == nullptr || w.data == nullptr) {
    return invalid_argument("cuda conv2d_weight: null x, weights or y");
  }
  const size_t needed = conv2d_workspace_bytes(s, ConvAlgo::kGemm);
  if (workspace == nullptr || workspace_bytes < needed ||
      reinterpret_cast<uintptr_t>(workspace) % alignof(float) != 0) {
    return invalid_argument("cuda conv2d_weight: workspace of " + std::to_string(workspace_bytes) +
                            " bytes, needs " + std::to_string(needed) +
                            " (conv2d_workspace_bytes), 4-byte aligned");
  }
  return conv3x3_gemm(x, w, bias, y, s, static_cast<float*>(workspace), stream);
}

Status upsample_nearest2x(const float* x, float* y, const ImageShape& s, cudaStream_t stream) {
  if (s.batch < 0 || s.height < 0 || s.width < 0 || s.channels < 0) {
    return invalid_argument("cuda upsample_nearest2x: negative size (batch " +
                            std::to_string(s.batch) + ", " + std::to_string(s.height) + "x" +
                            std::to_string(s.width) + ", channels " + std::to_string(s.channels) +
                            ")");
  }
  const int64_t total = 4 * s.elements();
  if (total == 0) return Status();
  if (x == nullptr || y == nullptr) return invalid_argument("cuda upsample_nearest2x: null x or y");
  upsample_nearest2x_kernel<<<detail::grid_stride_blocks(total, kConvThreads), kConvThreads, 0,
                              stream>>>(x, y, s.height, s.width, s.channels, total);
  TESSERA_CUDA_CHECK_LAUNCH("upsample_nearest2x: kernel launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
