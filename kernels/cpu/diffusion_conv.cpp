// cpu::conv2d over NHWC activations: 1x1 as one GEMM (cpu::linear), 3x3 as im2col + GEMM or
// Winograd F(4x4, 3x3) (Lavin & Gray 2016), nearest x2 upsampling read through the input indexing.
//
// im2col + GEMM: output pixels (flattened over the batch) in blocks of P (the whole image unless
// col would pass kBlockFloats); the pool copies the block's 3x3 neighbourhoods into
// col[P][9 * in_c] (one memcpy of in_c floats per tap, zeros in the padding), then
// y[P][out_c] = col . W^T (W packed [out_c][ky][kx][in_c]) runs as one sgemm per thread on a band
// of output channels, so the weights are read once per block.
// Winograd: 4x4 output tiles (6x6 input tiles at stride 4) in blocks of T tiles; the pool
// transforms the block's inputs into V[36][T][in_c], runs the 36 GEMMs M[p] = V[p] . U[p]
// ([T, in_c] x [in_c, out_c], U the filters transformed at pack time) as 36 tasks, then
// transforms M[36][T][out_c] back into output tiles (+ bias), writing only pixels inside the
// image. The transforms vectorise across channels (diffusion_kernels.inc).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/diffusion_internal.h"
#include "kernels/diffusion_ops.h"

namespace tessera::kernels::cpu {

namespace {

using diffusion_detail::IsaKernels;
using diffusion_detail::sgemm;

// Scratch budget per block (on the calling thread): the im2col matrix, or Winograd's V and M
// together, at most 4M floats (16 MiB). Blocks this large are what keep the weights from being
// re-read: each block streams the packed weights (GEMM: out_c * 9 * in_c floats; Winograd: 4x
// that) once, so small blocks made the deep layers memory-bound (measured on 2 cores: 16x16
// 1280->1280 im2col went from 41 to ~100 GFLOP/s with whole-image blocks).
constexpr int64_t kBlockFloats = 4 * 1024 * 1024;

int64_t round_up16(int64_t x) {
  return (x + 15) / 16 * 16;
}

// Splits c[rows, cols] = a . b over cpu_pool(): bands of columns (one sgemm each, so
// each task reads its band of the weights once), or bands of rows when there are too few columns
// to share. gemm(r0, r1, c0, c1) computes c[r0:r1, c0:c1].
template <class Gemm>
void parallel_gemm(int64_t rows, int64_t cols, const Gemm& gemm) {
  ThreadPool& pool = kernels::cpu::cpu_pool();
  const int64_t threads = pool.num_threads();
  if (cols >= 32 * threads || rows < 64 * threads) {
    const int64_t per = std::max<int64_t>(16, round_up16((cols + threads - 1) / threads));
    const int64_t blocks = (cols + per - 1) / per;
    pool.run(blocks, [&](int64_t b) {
      const int64_t c0 = b * per;
      gemm(0, rows, c0, std::min(cols, c0 + per));
    });
  } else {
    const int64_t per = (rows + threads - 1) / threads;
    pool.run(threads, [&](int64_t b) {
      const int64_t r0 = std::min(rows, b * per);
      gemm(r0, std::min(rows, r0 + per), 0, cols);
    });
  }
}

void conv3x3_gemm(const float* x, const float* packed, const float* bias, float* y,
                  const Conv2dShape& s) {
  const int64_t ci = s.in_c, co = s.out_c, kdim = 9 * ci;
  const int64_t pixels = s.batch * s.out_h() * s.out_w();
  const int64_t block = std::clamp<int64_t>(kBlockFloats / kdim, 16, pixels);
  float* col = diffusion_detail::thread_scratch(0, block * kdim);
  ThreadPool& pool = kernels::cpu::cpu_pool();
  for (int64_t p0 = 0; p0 < pixels; p0 += block) {
    const int64_t np = std::min(block, pixels - p0);
    pool.parallel_for(np, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t p = p0 + i;
        float* row = col + i * kdim;
        diffusion_detail::for_each_tap3x3(x, s, p, [&](int64_t t, const float* src) {
          float* dst = row + t * ci;
          if (src) {
            std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(ci));
          } else {
            std::fill(dst, dst + ci, 0.0f);
          }
        });
        if (bias) std::copy(bias, bias + co, y + p * co);
      }
    });
    float* yb = y + p0 * co;
    const float beta = bias ? 1.0f : 0.0f;
    parallel_gemm(np, co, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      sgemm(r1 - r0, c1 - c0, kdim, 1.0f, col + r0 * kdim, kdim, packed + c0 * kdim, kdim,
            /*b_trans=*/true, beta, yb + r0 * co + c0, co);
    });
  }
}

void conv3x3_winograd(const float* x, const float* packed, const float* bias, float* y,
                      const Conv2dShape& s) {
  const IsaKernels& kr = diffusion_detail::isa_kernels(active_isa());
  const int64_t ih = s.conv_in_h(), iw = s.conv_in_w(), oh = s.out_h(), ow = s.out_w();
  const int64_t up = s.upsample2x ? 1 : 0;
  const int64_t ci = s.in_c, co = s.out_c;
  const int64_t th = (oh + 3) / 4, tw = (ow + 3) / 4;
  const int64_t tiles = s.batch * th * tw;
  const int64_t block = std::clamp<int64_t>(kBlockFloats / (36 * (ci + co)), 16, tiles);
  float* vbuf = diffusion_detail::thread_scratch(0, 36 * block * ci);
  float* mbuf = diffusion_detail::thread_scratch(1, 36 * block * co);
  ThreadPool& pool = kernels::cpu::cpu_pool();
  for (int64_t t0 = 0; t0 < tiles; t0 += block) {
    const int64_t nt = std::min(block, tiles - t0);
    pool.parallel_for(nt, 4, [&](int64_t begin, int64_t end) {
      const float* src[36];
      for (int64_t i = begin; i < end; ++i) {
        const int64_t t = t0 + i;
        const int64_t n = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
        for (int64_t a = 0; a < 6; ++a) {
          const int64_t iy = ty * 4 + a - 1;
          for (int64_t b = 0; b < 6; ++b) {
            const int64_t ix = tx * 4 + b - 1;
            const bool inside = iy >= 0 && iy < ih && ix >= 0 && ix < iw;
            src[a * 6 + b] =
                inside ? x + ((n * s.in_h + (iy >> up)) * s.in_w + (ix >> up)) * ci : nullptr;
          }
        }
        kr.winograd_input_tile(src, ci, vbuf + i * ci, nt * ci);
      }
    });
    // The 36 independent GEMMs, each reading its U[p] once per block.
    pool.run(36, [&](int64_t p) {
      sgemm(nt, co, ci, 1.0f, vbuf + p * nt * ci, ci, packed + p * ci * co, co,
            /*b_trans=*/false, 0.0f, mbuf + p * nt * co, co);
    });
    pool.parallel_for(nt, 4, [&](int64_t begin, int64_t end) {
      float* dst[16];
      for (int64_t i = begin; i < end; ++i) {
        const int64_t t = t0 + i;
        const int64_t n = t / (th * tw), ty = (t / tw) % th, tx = t % tw;
        for (int64_t a = 0; a < 4; ++a) {
          const int64_t oy = ty * 4 + a;
          for (int64_t b = 0; b < 4; ++b) {
            const int64_t ox = tx * 4 + b;
            dst[a * 4 + b] = (oy < oh && ox < ow) ? y + ((n * oh + oy) * ow + ox) * co : nullptr;
          }
        }
        kr.winograd_output_tile(mbuf + i * co, nt * co, co, bias, dst);
      }
    });
  }
}

}  // namespace

bool winograd_applies(const Conv2dShape& s) {
  return s.kernel == 3 && s.stride == 1;
}

ConvAlgo choose_conv_algo(const Conv2dShape& s) {
  // Measured on 2 Zen 4 cores (shared machine, medians of 3), im2col vs Winograd in ms:
  //   64x64 320->320 87 vs 30; 32x32 640->640 80 vs 29; 16x16 1280->1280 80 vs 48;
  //   64x64 320->4 13.9 vs 2.0; 32x32 32->32 0.26 vs 0.12; but 64x64 4->320 0.74 vs 2.5 (the
  //   transforms cost more than 4 input channels' products) and 8x8 1280->1280 24 vs 30 (4 tiles:
  //   the transformed filters, 4x the bytes of the plain ones, are read once for little work).
  if (!winograd_applies(s) || s.in_c < 32) return ConvAlgo::kGemm;
  const int64_t tiles = s.batch * ((s.out_h() + 3) / 4) * ((s.out_w() + 3) / 4);
  return tiles >= 16 ? ConvAlgo::kWinograd : ConvAlgo::kGemm;
}

int64_t conv2d_packed_floats(const Conv2dShape& s, ConvAlgo algo) {
  if (algo == ConvAlgo::kWinograd) return 36 * s.in_c * s.out_c;
  return s.out_c * s.in_c * s.kernel * s.kernel;
}

void conv2d_pack_weights(const float* w, const Conv2dShape& s, ConvAlgo algo, float* packed) {
  const int64_t k = s.kernel, ci = s.in_c, co = s.out_c;
  if (algo == ConvAlgo::kGemm) {
    for (int64_t o = 0; o < co; ++o) {
      for (int64_t tap = 0; tap < k * k; ++tap) {
        for (int64_t i = 0; i < ci; ++i)
          packed[(o * k * k + tap) * ci + i] = w[(o * ci + i) * k * k + tap];
      }
    }
    return;
  }
  assert(winograd_applies(s));
  static constexpr double kG[6][3] = {{1.0 / 4, 0, 0},
                                      {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                      {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                      {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                      {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                      {0, 0, 1}};
  // Blocks of output channels in parallel; within one, input channel by input channel, so that the
  // 36 rows of U[a][b][i][*] are written in runs of kPackBlock and the block's filters stay in
  // cache (one filter at a time, writing across all 36 planes, ran at a cache miss per value: tens
  // of seconds for SD 1.5's UNet).
  constexpr int64_t kPackBlock = 32;
  const int64_t blocks = (co + kPackBlock - 1) / kPackBlock;
  kernels::cpu::cpu_pool().parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      const int64_t o0 = blk * kPackBlock, o1 = std::min(co, o0 + kPackBlock);
      for (int64_t i = 0; i < ci; ++i) {
        for (int64_t o = o0; o < o1; ++o) {
          const float* g = w + (o * ci + i) * 9;
          double t[6][3];  // G g
          for (int a = 0; a < 6; ++a) {
            for (int c = 0; c < 3; ++c) {
              t[a][c] = kG[a][0] * g[0 * 3 + c] + kG[a][1] * g[1 * 3 + c] + kG[a][2] * g[2 * 3 + c];
            }
          }
          for (int a = 0; a < 6; ++a) {
            for (int b = 0; b < 6; ++b) {
              const double u = t[a][0] * kG[b][0] + t[a][1] * kG[b][1] + t[a][2] * kG[b][2];
              packed[((a * 6 + b) * ci + i) * co + o] = static_cast<float>(u);
            }
          }
        }
      }
    }
  });
}

void conv2d(const float* x, const float* packed, const float* bias, float* y, const Conv2dShape& s,
            ConvAlgo algo) {
  assert(s.kernel == 1 || s.kernel == 3);
  assert(s.stride == 1 || (s.stride == 2 && s.kernel == 3));
  assert(!s.upsample2x || (s.kernel == 3 && s.stride == 1));
  assert(!s.pad_end_only || (s.kernel == 3 && s.stride == 2));
  if (s.batch <= 0 || s.in_h <= 0 || s.in_w <= 0 || s.out_c <= 0) return;
  if (s.kernel == 1) {
    const Weight w{packed, DType::kF32, s.out_c, s.in_c};
    linear(x, s.batch * s.in_h * s.in_w, w, bias, y);
    return;
  }
  if (algo == ConvAlgo::kWinograd) {
    assert(winograd_applies(s));
    conv3x3_winograd(x, packed, bias, y, s);
  } else {
    conv3x3_gemm(x, packed, bias, y, s);
  }
}

void upsample_nearest2x(const float* x, float* y, const ImageShape& s) {
  const int64_t c = s.channels, w2 = 2 * s.width;
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(c);
  kernels::cpu::cpu_pool().parallel_for(s.batch * s.height, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {  // r = n * height + i: source row i of image n
      float* out = y + 2 * r * w2 * c;       // output rows 2i and 2i + 1 of image n
      const float* in = x + r * s.width * c;
      for (int64_t j = 0; j < s.width; ++j) {
        std::memcpy(out + 2 * j * c, in + j * c, row_bytes);
        std::memcpy(out + (2 * j + 1) * c, in + j * c, row_bytes);
      }
      std::memcpy(out + w2 * c, out, row_bytes * static_cast<size_t>(w2));
    }
  });
}

void pointwise(const float* x, float* y, int64_t n, const Pointwise& f) {
  const float a = f.a, b = f.b;
  kernels::cpu::cpu_pool().parallel_for(n, 16384, [&](int64_t begin, int64_t end) {
    switch (f.kind) {
      case Pointwise::Kind::kRelu:
        for (int64_t i = begin; i < end; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
      case Pointwise::Kind::kScaledTanh:
        for (int64_t i = begin; i < end; ++i) y[i] = a * std::tanh(x[i] / a);
        break;
      case Pointwise::Kind::kAffine:
        for (int64_t i = begin; i < end; ++i) y[i] = a * x[i] + b;
        break;
    }
  });
}

}  // namespace tessera::kernels::cpu
