// cpu::group_norm over NHWC activations (the paper's one-kernel GroupNorm + SiLU).
//
// Per image: (1) statistics. The pixels are split into chunks over cpu_pool(); a chunk
// accumulates per-channel sums of (x - shift) and (x - shift)^2, where shift is the chunk's first
// pixel (so a large common offset does not cancel the variance), in f32 over blocks of
// kStatBlock pixels (vector-wide across channels) and in double across blocks; it then reduces its
// channels to one (count, mean, M2) per group. The chunks' partials are merged with Chan et al.'s
// pairwise formula. (2) One pass writes y = (x - mean) * scale[c] + beta[c] (scale = gamma * rstd;
// the mean is subtracted first, as a double split into two floats hi + lo, rather than folded
// into the shift: a group whose spread is tiny next to its mean has a huge rstd, and
// x * scale + (beta - mean * scale) or an f32-rounded mean would amplify the rounding) in blocks of
// kRowBlock pixels and, when fused, applies SiLU to each block while it is still in L1: x is read
// twice and y written once, no intermediate tensor.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/diffusion_internal.h"
#include "kernels/diffusion_ops.h"

namespace tessera::kernels::cpu {

namespace {

using diffusion_detail::IsaKernels;

// Pixels per f32 accumulation block: the f32 sums then hold at most 64 terms each (relative error
// ~64 * 2^-24 of the block's magnitude) before they are added into double.
constexpr int64_t kStatBlock = 64;
// Minimum pixels per statistics chunk / normalisation task: enough work to amortise a hand-off.
constexpr int64_t kMinChunkPixels = 256;
constexpr int64_t kRowBlock = 16;

struct Moments {
  double count = 0, mean = 0, m2 = 0;
};

// Chan, Golub & LeVeque's pairwise update: exact in exact arithmetic, stable in floating point.
void merge(Moments& a, const Moments& b) {
  if (b.count == 0) return;
  if (a.count == 0) {
    a = b;
    return;
  }
  const double n = a.count + b.count;
  const double delta = b.mean - a.mean;
  a.mean += delta * (b.count / n);
  a.m2 += b.m2 + delta * delta * (a.count * b.count / n);
  a.count = n;
}

// Statistics of pixels [p_begin, p_end) of one image x (hw x channels), per group, into out.
void chunk_moments(const IsaKernels& kr, const float* x, int64_t channels, int64_t groups,
                   int64_t p_begin, int64_t p_end, Moments* out) {
  float* f = diffusion_detail::thread_scratch(0, 3 * channels);
  float* shift = f;
  float* s1 = f + channels;
  float* s2 = f + 2 * channels;
  double* d = diffusion_detail::thread_scratch_f64(0, 2 * channels);
  double* d1 = d;
  double* d2 = d + channels;
  std::copy(x + p_begin * channels, x + (p_begin + 1) * channels, shift);
  std::fill(d, d + 2 * channels, 0.0);
  for (int64_t p = p_begin; p < p_end; p += kStatBlock) {
    const int64_t n = std::min(kStatBlock, p_end - p);
    std::fill(s1, s1 + 2 * channels, 0.0f);
    kr.channel_sums(x + p * channels, n, channels, shift, s1, s2);
    for (int64_t c = 0; c < channels; ++c) {
      d1[c] += s1[c];
      d2[c] += s2[c];
    }
  }
  const double n = static_cast<double>(p_end - p_begin);
  const int64_t cg = channels / groups;
  for (int64_t g = 0; g < groups; ++g) {
    Moments m;
    for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
      // Channel c over this chunk: mean = shift + d1 / n, M2 = d2 - d1^2 / n (shifted data).
      const Moments mc{n, shift[c] + d1[c] / n, std::max(0.0, d2[c] - d1[c] * d1[c] / n)};
      merge(m, mc);
    }
    out[g] = m;
  }
}

}  // namespace

void group_norm(const float* x, const float* gamma, const float* beta, float* y,
                const ImageShape& s, int64_t groups, float eps, bool silu, Fusion fusion) {
  assert(groups > 0 && s.channels % groups == 0);
  const int64_t hw = s.height * s.width;
  const int64_t channels = s.channels;
  if (s.batch <= 0 || hw <= 0 || channels <= 0) return;
  const IsaKernels& kr = diffusion_detail::isa_kernels(active_isa());
  const bool fused_silu = silu && fusion == Fusion::kOn;
  ThreadPool& pool = kernels::cpu::cpu_pool();
  const int64_t chunks =
      std::clamp<int64_t>(hw / kMinChunkPixels, 1, 4 * static_cast<int64_t>(pool.num_threads()));
  const int64_t chunk_len = (hw + chunks - 1) / chunks;
  // The calling thread's scratch: the chunks' partials, and the per-channel center (hi + lo),
  // scale and shift in float slot 1 (tasks that run on this thread use slot 0).
  thread_local std::vector<Moments> partial_store;
  if (partial_store.size() < static_cast<size_t>(chunks * groups)) {
    partial_store.resize(static_cast<size_t>(chunks * groups));
  }
  Moments* partials = partial_store.data();
  float* coef = diffusion_detail::thread_scratch(1, 4 * channels);
  float* center_hi = coef;
  float* center_lo = coef + channels;
  float* scale = coef + 2 * channels;
  float* shift = coef + 3 * channels;

  for (int64_t n = 0; n < s.batch; ++n) {
    const float* xn = x + n * hw * channels;
    float* yn = y + n * hw * channels;
    pool.run(chunks, [&](int64_t c) {
      const int64_t begin = std::min(hw, c * chunk_len);
      const int64_t end = std::min(hw, begin + chunk_len);
      Moments* out = partials + c * groups;
      if (begin >= end) {
        std::fill(out, out + groups, Moments{});
        return;
      }
      chunk_moments(kr, xn, channels, groups, begin, end, out);
    });
    const int64_t cg = channels / groups;
    for (int64_t g = 0; g < groups; ++g) {
      Moments m;
      for (int64_t c = 0; c < chunks; ++c) merge(m, partials[c * groups + g]);
      const double rstd = 1.0 / std::sqrt(m.m2 / m.count + static_cast<double>(eps));
      for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
        const double sc = (gamma ? gamma[c] : 1.0) * rstd;
        center_hi[c] = static_cast<float>(m.mean);
        center_lo[c] = static_cast<float>(m.mean - static_cast<double>(center_hi[c]));
        scale[c] = static_cast<float>(sc);
        shift[c] = beta ? beta[c] : 0.0f;
      }
    }
    pool.parallel_for(hw, kMinChunkPixels, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; p += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, end - p);
        kr.affine_rows(xn + p * channels, yn + p * channels, rows, channels, center_hi, center_lo,
                       scale, shift);
        if (fused_silu) kr.silu(yn + p * channels, yn + p * channels, rows * channels);
      }
    });
  }
  if (silu && !fused_silu) cpu::silu(y, y, s.elements());
}

}  // namespace tessera::kernels::cpu
