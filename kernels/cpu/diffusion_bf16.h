// The CPU's bf16 products for the diffusion layers (Precision::kBf16, kernels/diffusion_ops.h):
// weights packed once into gemm_bf16's layout, activations rounded to bf16 as they are read. The
// CPU backend's DiffusionOps (pack_linear_bf16, pack_conv2d_bf16, linear_bf16, conv2d_bf16) wraps
// these; nothing outside kernels/cpu, its tests and the benchmark names the packed type.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm_bf16.h"
#include "kernels/diffusion_ops.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu {

// Every call below requires cpu::bf16_compute_available() (kernels/diffusion_ops.h).
// Packs PyTorch conv weights w[out_c][in_c][k][k] (kernel 1 or 3) once for conv2d_bf16: B(k, o)
// with k = (ky * kernel + kx) * in_c + ci, rounded to bf16, in the GEMM's pair-panel layout
// (about 2 bytes per weight).
gemm_bf16::PackedB conv2d_pack_weights_bf16(const float* w, const Conv2dShape& s);
// ref::conv2d's contract (kernel 1 or 3, stride, upsample2x as Conv2dShape says) with x and the
// weights rounded to bf16 and f32 accumulation. 3x3: blocks of output pixels' neighbourhoods are
// copied as bf16 (im2col, [pixels, 9 * in_c]; the thread-local scratch holds up to 8 MiB) and
// multiplied by the packed weights; 1x1: one GEMM over the pixels. bias may be null; y must not
// alias x.
void conv2d_bf16(const float* x, const gemm_bf16::PackedB& packed, const float* bias, float* y,
                 const Conv2dShape& s);
// A linear layer's weight (f32 or bf16, [rows = out][cols = in]) packed once for linear_bf16.
gemm_bf16::PackedB linear_pack_bf16(const Weight& w);
// y[m, out] = bf16(x) . W^T (+ bias) with f32 accumulation; x [m, in] contiguous.
void linear_bf16(const float* x, int64_t m, const gemm_bf16::PackedB& w, const float* bias,
                 float* y);

}  // namespace tessera::kernels::cpu
