// CUDA versions of the diffusion ops (kernels/diffusion_ops.h, namespace cpu): GroupNorm(+SiLU),
// GEGLU, 3x3 / 1x1 convolution (im2col + GEMM or Winograd F(4x4,3x3)) and UNet/VAE attention, each
// with the same off switch as its CPU version (Fusion / ConvAlgo / AttentionAlgo), so the
// ablation runs on the GPU too. Same NHWC layouts and math contracts as the CPU ops (f32; the
// references in namespace ref are the tests' ground truth).
//
// Contract (every op below), as kernels/cuda/cuda_ops.h:
// - Tensor pointers (x, y, gamma, beta, bias, packed weights, q/k/v/o, workspace) are device
//   memory; the shape structs are read on the host.
// - Ops are asynchronous on `stream` (nullptr = the legacy default stream) and allocate nothing:
//   scratch comes from the caller (the *_workspace_bytes / *_scratch_floats functions size it).
// - They return a non-ok Status whose message names the op when the arguments are rejected
//   (negative or unsupported sizes, null pointers, a workspace too small, sizes beyond what a
//   launch or cuBLAS can address) or when a launch / cuBLAS call fails. Arguments are checked
//   before any CUDA call. Errors raised while a kernel runs surface at the next synchronisation.
// - Products go through cuBLAS sgemm (CUBLAS_DEFAULT_MATH: no TF32, f32 accuracy, unless the
//   calling thread set cuda::set_tf32_products, which the CUDA backend does for im2col
//   convolutions under Precision::kBf16) on a handle
//   created lazily per host thread and device (the first call on a thread must not be inside a
//   CUDA graph capture).
//
// Plain C++ may include this header without the CUDA headers (cudaStream_t is forward-declared
// as in cuda_ops.h); the definitions exist only in builds with the CUDA backend, so CPU-only code
// must not call them (engine code does not include this header today).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "kernels/diffusion_ops.h"
#include "kernels/ops.h"

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // as driver_types.h declares it

namespace tessera::kernels::cuda {

// ---- GroupNorm(+SiLU) ---------------------------------------------------------------------------
// ref::group_norm's contract (NHWC x, statistics per image and group of channels / groups
// consecutive channels, biased variance, eps inside the square root; gamma/beta may be null).
// In place (y == x) OK. groups >= 1 must divide s.channels.
// kOn: one kernel, one block per (image, group): the block's threads accumulate Welford
//   (count, mean, M2) triples over the group's elements, merged across the block with Chan's
//   formula (no E[x^2] - mean^2 cancellation), then the same block writes
//   y = (x - mean) * rstd * gamma + beta with the SiLU applied before the store.
// kOff (only differs when silu): the same kernel without SiLU, then cuda::silu over y as a second
//   kernel (one more read and write of the activation).
Status group_norm(const float* x, const float* gamma, const float* beta, float* y,
                  const ImageShape& s, int64_t groups, float eps, bool silu, Fusion fusion,
                  cudaStream_t stream);

// ---- GEGLU --------------------------------------------------------------------------------------
// x rows are [value (hidden) | gate (hidden)] (diffusers' order); y[r, i] = value *
// gelu_erf(gate), y is [rows, hidden] and must not alias x.
// kOn: cuda::geglu (one elementwise kernel). kOff: gelu_erf(gate) written to y by one kernel, then
// a second kernel y *= value.
Status geglu_ff(const float* x, float* y, int64_t rows, int64_t hidden, Fusion fusion,
                cudaStream_t stream);

// ---- Convolution --------------------------------------------------------------------------------
// Weights: packed on the host by cpu::conv2d_pack_weights (kGemm [out_c][ky][kx][in_c], kWinograd
// U[36][in_c][out_c], cpu::conv2d_packed_floats(s, algo) floats), once at load time, then copied
// to the device as they are (e.g. DeviceBuffer::upload): the same packed bytes serve both
// backends. (This library does not call the CPU packer itself: tessera_kernels_cuda links
// tessera_core only, tessera_kernels links it.)

// Bytes of device workspace conv2d(s, algo) needs (4-byte aligned): 0 for kernel 1, an empty
// product (no input channels or pixels) or a shape conv2d rejects; kGemm 3x3:
// an im2col block [pixels, 9 * in_c]; kWinograd: V[36][tiles][in_c] and M[36][tiles][out_c] for a
// block of tiles. Blocks are capped at kConvWorkspaceMaxFloats floats (256 MiB), so larger
// convolutions run as several blocks.
inline constexpr int64_t kConvWorkspaceMaxFloats = int64_t{64} * 1024 * 1024;
size_t conv2d_workspace_bytes(const Conv2dShape& s, ConvAlgo algo);

// ref::conv2d's contract with weights packed for `algo` (see above); bias may be null. x is
// [batch, in_h, in_w, in_c] (read through nearest x2 upsampling when s.upsample2x: never expanded
// in memory), y [batch, out_h, out_w, out_c]; y must not alias x or the workspace.
// Kernel 1: one GEMM over pixels (cuda::linear with the packed [out_c, in_c] weights).
// kGemm 3x3 (stride 1 or 2): per block of output pixels an im2col kernel writes the 3x3
//   neighbourhoods (zeros in the padding), then cuda::linear multiplies them by the packed
//   [out_c, 9 * in_c] weights (+ bias).
// kWinograd (kernel 3, stride 1): per block of 4x4 output tiles an input-transform kernel writes
//   V = B^T d B, one cublasSgemmStridedBatched runs the 36 products M[p] = V[p] U[p], an output
//   kernel writes A^T M A + bias for the pixels inside the image.
// Rejected: kernel other than 1/3, stride other than 1/2 (2 only with kernel 3), upsample2x other
// than with kernel 3 stride 1, kWinograd where it does not apply, a workspace smaller than
// conv2d_workspace_bytes(s, algo).
Status conv2d(const float* x, const float* packed, const float* bias, float* y,
              const Conv2dShape& s, ConvAlgo algo, void* workspace, size_t workspace_bytes,
              cudaStream_t stream);

// conv2d (ConvAlgo::kGemm, its workspace) with the weights as a Weight [out_c, kernel^2 * in_c]
// in the kGemm packing, any dtype cuda::linear takes: with bf16 weights each im2col block is
// written in bf16 (x rounded to nearest even) and multiplied by cuBLAS's bf16 GEMM on the tensor
// cores (cuda::linear_bf16_x: f32 sums); blocks of at most kGemvMaxRows pixels take cuda::linear.
Status conv2d_weight(const float* x, const Weight& w, const float* bias, float* y,
                     const Conv2dShape& s, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream);

// Nearest x2 upsampling, ref::upsample_nearest2x's contract: y[n, 2i + a, 2j + b, c] =
// x[n, i, j, c]; s is x's shape, y is [batch, 2 * height, 2 * width, channels] and must not alias
// x. The unfused form of Conv2dShape::upsample2x (KernelOptions::upsample = kOff): x expanded in
// memory, then a plain convolution.
Status upsample_nearest2x(const float* x, float* y, const ImageShape& s, cudaStream_t stream);

// ---- Attention ----------------------------------------------------------------------------------
// The algorithm kAuto runs on the GPU, by the H200 ablation of 2026-12-04 (SD 1.5 512x512,
// `tessera-bench diffusion --device cuda`): kNaive (cuBLAS scores, softmax, cuBLAS P V) for every
// non-causal shape: UNet step 75.4 ms against 116.5 ms with kFlash, VAE 57.9 against 58.8 ms with
// kPartialFused; kFlash for causal shapes (the only one that takes them).
AttentionAlgo choose_attention_algo(const AttentionShape& s);
// Floats of device scratch `algo` needs for s: kNaive q_len * kv_len (one (batch, head)'s score
// matrix), kPartialFused q_len * kv_len + 2 * q_len (scores, row max, row sum), kFlash 0; kAuto
// that of choose_attention_algo(s).
int64_t attention_scratch_floats(const AttentionShape& s, AttentionAlgo algo);
// ops.h's attention contract (strided [batch][token][head][head_dim] q/k/v/o, scale) with the
// chosen algorithm. Per (batch, head):
// kFlash: cuda::attention (online softmax, no score matrix; head_dim <= kAttentionMaxHeadDim).
// kPartialFused: S = scale Q K^T written once to scratch (cuBLAS); one kernel reduces each row's
//   max and sum of exp into two small vectors; the P V kernel loads S tile by tile, normalises it
//   (exp(S - max) / sum) in shared memory and multiplies by V: the normalised matrix is never
//   written (Chen et al.'s partially fused softmax).
// kNaive: S = scale Q K^T into scratch, cuda::softmax in place, O = P V (cuBLAS): the unfused
//   baseline.
// s.causal must be false for kPartialFused and kNaive (rejected otherwise). Token strides must be
// >= head_dim. kv_len == 0 gives zero output rows. scratch: attention_scratch_floats(s, algo)
// floats (device), may be null when that is 0; scratch_floats is its size, checked. o must not
// alias q, k, v or scratch.
Status diffusion_attention(const float* q, const float* k, const float* v, float* o,
                           const AttentionShape& s, AttentionAlgo algo, float* scratch,
                           int64_t scratch_floats, cudaStream_t stream);

// ---- Small elementwise ops of the engine (diffusion_misc.cu) -----------------------------------
// Backend::add_per_image / concat_channels / divide (kernels/backend.h): y[n, p, c] +=
// rows[n, c]; y[p] = [a[p] | b[p]] per pixel (y must not alias a or b); y[i] = x[i] / divisor
// (in place OK). Rejected: negative sizes, null pointers with a non-empty extent.
Status add_per_image(float* y, const float* rows, int64_t batch, int64_t pixels, int64_t channels,
                     cudaStream_t stream);
Status concat_channels(const float* a, int64_t a_channels, const float* b, int64_t b_channels,
                       float* y, int64_t pixels, cudaStream_t stream);
Status divide(const float* x, float divisor, float* y, int64_t n, cudaStream_t stream);
Status pointwise(const float* x, float* y, int64_t n, const Pointwise& f, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
