// The bf16 compute path of the diffusion ops (Precision::kBf16, kernels/diffusion_ops.h):
// convolutions and linear layers through gemm_bf16's packed-B GEMM (vdpbf16ps).
//
// 3x3 convolution: output pixels (flattened over the batch) in blocks of P; the pool copies each
// block's 3x3 neighbourhoods into col[P][kpad] as bf16 (one conversion of in_c floats per tap,
// zeros in the padding and in the odd-k pad column), and gemm_packed_bf16a multiplies the block by
// the weights packed at load ([9 * in_c] x [out_c] in pair panels) with the bias folded in. Writing
// the im2col rows as bf16 halves their bytes and skips the GEMM's own conversion pass over A.
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/diffusion_internal.h"
#include "kernels/cpu/diffusion_bf16.h"
#include "kernels/diffusion_ops.h"

namespace tessera::kernels::cpu {

namespace {

namespace g = gemm_bf16;

// Elements of bf16 im2col scratch per block (8 MiB): as in diffusion_conv.cpp, large blocks keep
// the packed weights from being re-read per small block.
constexpr int64_t kBlockElems = 4 * 1024 * 1024;

uint16_t* col_scratch(int64_t elems) {
  thread_local std::vector<uint16_t> buf;
  if (static_cast<int64_t>(buf.size()) < elems) buf.resize(static_cast<size_t>(elems));
  return buf.data();
}

}  // namespace

bool bf16_compute_available() {
  return g::available();
}

g::PackedB conv2d_pack_weights_bf16(const float* w, const Conv2dShape& s) {
  assert(s.kernel == 1 || s.kernel == 3);
  // The kGemm f32 order [out_c][ky][kx][in_c] is B stored [n][k] (kF32NK).
  std::vector<float> nk(static_cast<size_t>(conv2d_packed_floats(s, ConvAlgo::kGemm)));
  conv2d_pack_weights(w, s, ConvAlgo::kGemm, nk.data());
  const int64_t kdim = s.kernel * s.kernel * s.in_c;
  return g::pack(g::BMatrix{nk.data(), g::BLayout::kF32NK, kdim}, s.out_c, kdim);
}

void conv2d_bf16(const float* x, const g::PackedB& packed, const float* bias, float* y,
                 const Conv2dShape& s) {
  assert(s.kernel == 1 || s.kernel == 3);
  assert(s.stride == 1 || (s.stride == 2 && s.kernel == 3));
  assert(!s.upsample2x || (s.kernel == 3 && s.stride == 1));
  assert(!s.pad_end_only || (s.kernel == 3 && s.stride == 2));
  assert(packed.n == s.out_c && packed.k == s.kernel * s.kernel * s.in_c);
  if (s.batch <= 0 || s.in_h <= 0 || s.in_w <= 0 || s.out_c <= 0) return;
  const int64_t co = s.out_c;
  if (s.kernel == 1) {
    g::gemm_packed(s.batch * s.in_h * s.in_w, x, s.in_c, packed, bias, y, co, false);
    return;
  }
  const int64_t ci = s.in_c, kdim = 9 * ci, kpad = packed.kpad();
  // Taps are converted ci_even at a time (convert_a pads to an even count); with an odd ci the
  // extra zero lands where the next tap then writes, or in the pad column after the last tap.
  const int64_t ci_even = (ci + 1) & ~int64_t{1};
  const int64_t pixels = s.batch * s.out_h() * s.out_w();
  const int64_t block = std::clamp<int64_t>(kBlockElems / kpad, 16, pixels);
  uint16_t* col = col_scratch(block * kpad + 1);
  ThreadPool& pool = kernels::cpu::cpu_pool();
  for (int64_t p0 = 0; p0 < pixels; p0 += block) {
    const int64_t np = std::min(block, pixels - p0);
    pool.parallel_for(np, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        uint16_t* row = col + i * kpad;
        diffusion_detail::for_each_tap3x3(x, s, p0 + i, [&](int64_t t, const float* src) {
          uint16_t* dst = row + t * ci;
          if (src) {
            g::avx512bf16::convert_a(src, ci, 1, ci, dst, ci_even);
          } else {
            std::memset(dst, 0, sizeof(uint16_t) * static_cast<size_t>(ci_even));
          }
        });
        if (kpad > kdim) row[kdim] = 0;
      }
    });
    g::gemm_packed_bf16a(np, col, kpad, packed, bias, y + p0 * co, co, false);
  }
}

g::PackedB linear_pack_bf16(const Weight& w) {
  assert(w.dtype == DType::kF32 || w.dtype == DType::kBF16);
  const g::BMatrix b{w.data, w.dtype == DType::kBF16 ? g::BLayout::kBf16NK : g::BLayout::kF32NK,
                     w.cols};
  return g::pack(b, w.rows, w.cols);
}

void linear_bf16(const float* x, int64_t m, const g::PackedB& w, const float* bias, float* y) {
  if (m <= 0) return;
  g::gemm_packed(m, x, w.k, w, bias, y, w.n, false);
}

}  // namespace tessera::kernels::cpu
