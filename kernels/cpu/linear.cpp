// cpu::linear: dispatch, threading, the portable kernels and the sgemm (prefill) path.
// The plan is described in linear_internal.h, with the measurements behind its constants.
//
// Threads and OpenBLAS: OpenBLAS has its own thread pool, whose threads busy-wait for a while after
// each call. Next to cpu_pool() (whose workers also spin between kernels) that would put
// up to twice as many busy threads as cores on the machine. So all parallelism is ours: OpenBLAS is
// set to one thread (by cpu_pool(), kernels/cpu/threads.h, before any kernel runs) and
// each pool task runs its own sgemm on a column block of y. Measured on 2 cores (Zen 4, busy
// machine) this is within 5% of one 2-thread OpenBLAS call on the prefill shapes (69-95 vs 66-101
// GFLOP/s, either way round), without the extra spinning threads, and it lets the bf16 expansion of
// a panel overlap with the other thread's sgemm.
#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/threads.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_int8.h"
#include "kernels/cpu/linear_internal.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu {
namespace linear_detail {

namespace {

// Row-block path: a task gets at least this many multiply-adds, so that tiny layers run inline on
// the calling thread instead of paying the pool's hand-off (a few microseconds).
constexpr int64_t kMinTaskMacs = int64_t{1} << 16;

template <typename T>
inline float weight_at(const T* w, int64_t i);
template <>
inline float weight_at<float>(const float* w, int64_t i) {
  return w[i];
}
template <>
inline float weight_at<uint16_t>(const uint16_t* w, int64_t i) {
  return bf16_to_f32(w[i]);
}

template <typename T>
void dot_rows_scalar_typed(const float* x, int64_t rows, const T* w, int64_t k_dim,
                           const float* bias, float* y, int64_t ldy, int64_t n_begin,
                           int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    const T* w_row = w + n * k_dim;
    for (int64_t i = 0; i < rows; ++i) {
      const float* x_row = x + i * k_dim;
      // Four partial sums: shorter dependency chains, and the same error bound as one.
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t k = 0;
      for (; k + 4 <= k_dim; k += 4) {
        s0 += x_row[k] * weight_at(w_row, k);
        s1 += x_row[k + 1] * weight_at(w_row, k + 1);
        s2 += x_row[k + 2] * weight_at(w_row, k + 2);
        s3 += x_row[k + 3] * weight_at(w_row, k + 3);
      }
      for (; k < k_dim; ++k) s0 += x_row[k] * weight_at(w_row, k);
      y[i * ldy + n] = (s0 + s1) + (s2 + s3) + (bias ? bias[n] : 0.0f);
    }
  }
}

// The batch-invariant GEMV kernel of `isa` for weights of `dtype` (linear_internal.h: gemv_rows).
DotRowsFn gemv_rows_for(Isa isa, bool bf16x, DType dtype) {
  if (bf16x && isa == Isa::kAvx512 && dtype == DType::kBF16) return dot_rows_bf16x_avx512;
  switch (isa) {
    case Isa::kAvx512:
      return avx512::gemv_rows;
    case Isa::kAvx2:
      return avx2::gemv_rows;
    case Isa::kScalar:
      break;
  }
  return dot_rows_scalar;
}

DotRowsFn dot_rows_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::dot_rows;
    case Isa::kAvx2:
      return avx2::dot_rows;
    case Isa::kScalar:
      break;
  }
  return dot_rows_scalar;
}

// y rows [0, m) x columns [n_begin, n_end) through the dot kernels: weight blocks of kRowBlock
// rows, each reused (from cache) by every pass of kMaxRowsPerPass rows of x (m > kMaxRowsPerPass;
// smaller m is gemv_parts' case).
void row_block_range(DotRowsFn dot, const float* x, int64_t m, const Weight& w, const float* bias,
                     float* y, int64_t n_begin, int64_t n_end) {
  const int64_t n_out = w.rows;
  const int64_t k_dim = w.cols;
  for (int64_t nb = n_begin; nb < n_end; nb += kRowBlock) {
    const int64_t ne = std::min(n_end, nb + kRowBlock);
    for (int64_t i = 0; i < m; i += kMaxRowsPerPass) {
      const int64_t rows = std::min(kMaxRowsPerPass, m - i);
      dot(x + i * k_dim, rows, w, bias, y + i * n_out, n_out, nb, ne);
    }
  }
}

// The GEMV case (m <= kMaxGemvRows) of one or more layers over the same x: one pool.run over
// tasks of about kGemvTaskBytes of weights each (whole multiples of 4 rows, the long-row kernels'
// block), every part's rows in order. With q/k/v and gate/up as one call each, a full-size v0.5
// decode step makes 97 pool hand-offs for its GEMVs instead of 169, with one load-balancing tail
// per call. Measured (all GEMVs of that step, m = 2, bf16, interleaved with the previous
// per-layer 4-chunks-per-thread split, 2 threads, quiet machine): within +-2 % of it; the step is
// bound by the dot kernels, not by hand-offs. Each output row is computed by the same kernel
// whatever the split, so linear_multi equals per-layer linear bit for bit.
// x (m rows of the parts' cols) rounded to bf16, nearest even, and widened back to f32, for the
// bf16 parts whose kernel takes f32 x; null when no part needs it. One thread-local buffer: the
// caller's thread waits for the tasks that read it.
const float* bf16_rounded_rows(Isa isa, bool bf16x, const float* x, int64_t m,
                               const LinearPart* parts, int64_t n_parts) {
  if (bf16x && isa == Isa::kAvx512) return nullptr;  // the vdpbf16ps kernel rounds x itself
  bool any = false;
  for (int64_t p = 0; p < n_parts; ++p) any = any || parts[p].w.dtype == DType::kBF16;
  if (!any) return nullptr;
  thread_local std::vector<float> rounded;
  const size_t n = static_cast<size_t>(m * parts[0].w.cols);
  rounded.resize(n);
  for (size_t i = 0; i < n; ++i) rounded[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return rounded.data();
}

void gemv_parts(Isa isa, bool bf16x, const float* x, int64_t m, const LinearPart* parts,
                int64_t n_parts) {
  // bf16x (LinearConfig::bf16_gemm, only set where gemm_bf16::available(), which implies the
  // AVX-512 ISA): the vdpbf16ps kernel for bf16 weights; it hands f32 weights to avx512::dot_rows.
  assert(!bf16x || gemm_bf16::available());
  assert(m <= kMaxGemvRows);
  constexpr int64_t kMaxParts = 8;
  if (n_parts > kMaxParts) {  // not used by the engine; keeps the task table on the stack
    for (int64_t p = 0; p < n_parts; p += kMaxParts) {
      gemv_parts(isa, bf16x, x, m, parts + p, std::min(kMaxParts, n_parts - p));
    }
    return;
  }
  int64_t first_task[kMaxParts + 1];
  int64_t rows_per_task[kMaxParts];
  int64_t total_bytes = 0;
  first_task[0] = 0;
  for (int64_t p = 0; p < n_parts; ++p) {
    const Weight& w = parts[p].w;
    const int64_t row_bytes =
        std::max<int64_t>(1, w.cols * static_cast<int64_t>(dtype_size(w.dtype)));
    total_bytes += w.rows * row_bytes;
    const int64_t rows = (kGemvTaskBytes + row_bytes - 1) / row_bytes;
    rows_per_task[p] = std::max<int64_t>(4, (rows + 3) / 4 * 4);
    first_task[p + 1] = first_task[p] + (w.rows + rows_per_task[p] - 1) / rows_per_task[p];
  }
  // bf16 parts on the vdpbf16ps kernel: x rounded to bf16 once per call here (all m rows; every
  // part of a call has the same cols, ops.h), read by every task of every part.
  thread_local std::vector<uint16_t> bf16_x;
  const uint16_t* xb[kMaxParts] = {};
  if (bf16x && isa == Isa::kAvx512) {
    uint16_t* aligned = nullptr;
    for (int64_t p = 0; p < n_parts; ++p) {
      const Weight& w = parts[p].w;
      if (w.dtype != DType::kBF16) continue;
      assert(w.cols == parts[0].w.cols);
      if (aligned == nullptr) {
        // The kernel reads xb with aligned loads: 64-byte aligned start (32 spare elements).
        bf16_x.resize(static_cast<size_t>(m * bf16x_kpad(w.cols) + 32));
        const auto addr = reinterpret_cast<uintptr_t>(bf16_x.data());
        aligned = bf16_x.data() + ((64 - addr % 64) % 64) / sizeof(uint16_t);
        prepare_bf16x_avx512(x, m, w.cols, aligned);
      }
      xb[p] = aligned;
    }
  }
  // Other bf16 parts (no AVX-512 BF16): x rounded to bf16 and widened back once here, so that every
  // bf16 linear computes the ops.h contract (bf16 x times bf16 w, f32 sums); f32 parts keep x.
  const float* x_bf16 = bf16_rounded_rows(isa, bf16x, x, m, parts, n_parts);
  // int8 parts: x quantized once here (all m rows), read by every task; parts with the same group
  // and preparation (q/k/v, gate/up: one x, one cols) share it.
  thread_local std::vector<int16_t> i8_q;
  thread_local std::vector<float> i8_scale;
  Int8Rows i8_rows[kMaxParts];
  Int8Kernel i8_kernel[kMaxParts];
  {
    int64_t shared_with[kMaxParts];
    size_t q_len = 0, s_len = 0;
    for (int64_t p = 0; p < n_parts; ++p) {
      const Weight& w = parts[p].w;
      shared_with[p] = -1;
      if (w.dtype != DType::kI8) continue;
      i8_kernel[p] = int8_kernel_for(static_cast<int>(isa), w);
      for (int64_t r = 0; r < p && shared_with[p] < 0; ++r) {
        if (parts[r].w.dtype == DType::kI8 && parts[r].w.group == w.group &&
            i8_kernel[r].prepare == i8_kernel[p].prepare) {
          shared_with[p] = r;
        }
      }
      if (shared_with[p] >= 0) continue;
      q_len += static_cast<size_t>(m * w.cols);
      s_len += static_cast<size_t>(m * (w.cols / w.group));
    }
    i8_q.resize(q_len);
    i8_scale.resize(s_len);
    size_t q_at = 0, s_at = 0;
    for (int64_t p = 0; p < n_parts; ++p) {
      const Weight& w = parts[p].w;
      if (w.dtype != DType::kI8) continue;
      if (shared_with[p] >= 0) {
        i8_rows[p] = i8_rows[shared_with[p]];
        continue;
      }
      i8_kernel[p].prepare(x, m, w, i8_q.data() + q_at, i8_scale.data() + s_at);
      i8_rows[p] = Int8Rows{m, w.cols, w.group, i8_q.data() + q_at, i8_scale.data() + s_at};
      q_at += static_cast<size_t>(m * w.cols);
      s_at += static_cast<size_t>(m * (w.cols / w.group));
    }
  }
  auto run_task = [&](int64_t t) {
    int64_t p = 0;
    while (t >= first_task[p + 1]) ++p;
    const Weight& w = parts[p].w;
    const int64_t n_begin = (t - first_task[p]) * rows_per_task[p];
    const int64_t n_end = std::min(w.rows, n_begin + rows_per_task[p]);
    // Passes of kMaxRowsPerPass rows of x over the task's weight rows (L2-resident after the
    // first).
    if (w.dtype == DType::kI8) {
      for (int64_t i = 0; i < m; i += kMaxRowsPerPass) {
        i8_kernel[p].dot(int8_rows_slice(i8_rows[p], i, std::min(kMaxRowsPerPass, m - i)), w,
                         parts[p].bias, parts[p].y + i * w.rows, w.rows, n_begin, n_end);
      }
      return;
    }
    if (xb[p] != nullptr) {
      const int64_t kpad = bf16x_kpad(w.cols);
      for (int64_t i = 0; i < m; i += kMaxRowsPerPass) {
        dot_prepared_bf16x_avx512(xb[p] + i * kpad, std::min(kMaxRowsPerPass, m - i), w,
                                  parts[p].bias, parts[p].y + i * w.rows, w.rows, n_begin, n_end);
      }
      return;
    }
    const DotRowsFn dot = gemv_rows_for(isa, bf16x, w.dtype);
    const float* xp = w.dtype == DType::kBF16 && x_bf16 != nullptr ? x_bf16 : x;
    for (int64_t i = 0; i < m; i += kMaxRowsPerPass) {
      dot(xp + i * w.cols, std::min(kMaxRowsPerPass, m - i), w, parts[p].bias,
          parts[p].y + i * w.rows, w.rows, n_begin, n_end);
    }
  };
  if (total_bytes <= kGemvTaskBytes) {  // small layers: inline, no hand-off
    for (int64_t t = 0; t < first_task[n_parts]; ++t) run_task(t);
    return;
  }
  kernels::cpu::cpu_pool().run(first_task[n_parts], run_task);
}

void row_block_path(Isa isa, bool bf16x, const float* x, int64_t m, const Weight& w,
                    const float* bias, float* y) {
  if (m <= kMaxGemvRows) {
    const LinearPart part{w, bias, y};
    gemv_parts(isa, bf16x, x, m, &part, 1);
    return;
  }
  if (w.dtype == DType::kI8) {
    // x quantized once for the call, then one kernel call per kMaxRowsPerPass rows of x over a
    // task of >= 128 weight rows (re-read from L2 by the later passes).
    const Int8Kernel kernel = int8_kernel_for(static_cast<int>(isa), w);
    std::vector<int16_t> q(static_cast<size_t>(m * w.cols));
    std::vector<float> scale(static_cast<size_t>(m * (w.cols / w.group)));
    kernel.prepare(x, m, w, q.data(), scale.data());
    const Int8Rows all{m, w.cols, w.group, q.data(), scale.data()};
    kernels::cpu::cpu_pool().parallel_for(w.rows, 128, [&](int64_t n_begin, int64_t n_end) {
      for (int64_t i = 0; i < m; i += kMaxRowsPerPass) {
        kernel.dot(int8_rows_slice(all, i, std::min(kMaxRowsPerPass, m - i)), w, bias,
                   y + i * w.rows, w.rows, n_begin, n_end);
      }
    });
    return;
  }
  const DotRowsFn dot = dot_rows_for(isa);
  const int64_t macs_per_row = std::max<int64_t>(1, m * w.cols);
  const int64_t grain = std::max<int64_t>(kRowBlock, kMinTaskMacs / macs_per_row);
  kernels::cpu::cpu_pool().parallel_for(w.rows, grain, [&](int64_t n_begin, int64_t n_end) {
    row_block_range(dot, x, m, w, bias, y, n_begin, n_end);
  });
}

// Per-thread f32 panel for expanded bf16 weights; allocated on a thread's first sgemm-path call and
// kept for the life of the thread (the engine owns scratch; decode steps never get here).
float* thread_panel() {
  thread_local std::unique_ptr<float[]> panel(new float[kPanelRows * kPanelCols]);
  return panel.get();
}

// Writes bias (or nothing) into y[:, n_begin:n_end) and returns the beta for the first sgemm: the
// bias is added by sgemm's beta = 1 while this block of y is still in cache.
float init_block(const float* bias, int64_t m, int64_t n_out, float* y, int64_t n_begin,
                 int64_t n_end) {
  if (!bias) return 0.0f;
  for (int64_t i = 0; i < m; ++i) std::copy(bias + n_begin, bias + n_end, y + i * n_out + n_begin);
  return 1.0f;
}

void blas_path(Isa isa, const float* x, int64_t m, const Weight& w, const float* bias, float* y) {
  const int64_t n_out = w.rows;
  const int64_t k_dim = w.cols;
  ThreadPool& pool = kernels::cpu::cpu_pool();
  if (w.dtype == DType::kF32) {
    // One column block per thread (rounded to 16 columns): the fewer, larger sgemm calls, the less
    // packing of x is repeated; measured faster than smaller blocks on the prefill shapes.
    const int64_t per_thread = (n_out + pool.num_threads() - 1) / pool.num_threads();
    const int64_t per = std::max<int64_t>(16, (per_thread + 15) & ~int64_t{15});
    const int64_t blocks = (n_out + per - 1) / per;
    const auto* w_f32 = static_cast<const float*>(w.data);
    pool.run(blocks, [&](int64_t b) {
      const int64_t n_begin = b * per;
      const int64_t n_end = std::min(n_out, n_begin + per);
      const float beta = init_block(bias, m, n_out, y, n_begin, n_end);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                  static_cast<blasint>(n_end - n_begin), static_cast<blasint>(k_dim), 1.0f, x,
                  static_cast<blasint>(k_dim), w_f32 + n_begin * k_dim, static_cast<blasint>(k_dim),
                  beta, y + n_begin, static_cast<blasint>(n_out));
    });
    return;
  }
  const ExpandBf16Fn expand = expand_bf16_for(isa);
  const auto* w_bf16 = static_cast<const uint16_t*>(w.data);
  const int64_t blocks = (n_out + kPanelRows - 1) / kPanelRows;
  pool.run(blocks, [&](int64_t b) {
    float* panel = thread_panel();
    const int64_t n_begin = b * kPanelRows;
    const int64_t n_end = std::min(n_out, n_begin + kPanelRows);
    float beta = init_block(bias, m, n_out, y, n_begin, n_end);
    for (int64_t k_begin = 0; k_begin < k_dim; k_begin += kPanelCols) {
      const int64_t k_width = std::min(kPanelCols, k_dim - k_begin);
      expand(w_bf16 + n_begin * k_dim + k_begin, k_dim, n_end - n_begin, k_width, panel, k_width);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                  static_cast<blasint>(n_end - n_begin), static_cast<blasint>(k_width), 1.0f,
                  x + k_begin, static_cast<blasint>(k_dim), panel, static_cast<blasint>(k_width),
                  beta, y + n_begin, static_cast<blasint>(n_out));
      beta = 1.0f;
    }
  });
}

}  // namespace

void dot_rows_scalar(const float* x, int64_t rows, const Weight& w, const float* bias, float* y,
                     int64_t ldy, int64_t n_begin, int64_t n_end) {
  if (w.dtype == DType::kBF16) {
    dot_rows_scalar_typed(x, rows, static_cast<const uint16_t*>(w.data), w.cols, bias, y, ldy,
                          n_begin, n_end);
  } else {
    dot_rows_scalar_typed(x, rows, static_cast<const float*>(w.data), w.cols, bias, y, ldy, n_begin,
                          n_end);
  }
}

void expand_bf16_scalar(const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                        int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r) {
    convert_bf16_to_f32(src + r * ld_src, dst + r * ld_dst, static_cast<size_t>(cols));
  }
}

ExpandBf16Fn expand_bf16_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::expand_bf16;
    case Isa::kAvx2:
      return avx2::expand_bf16;
    case Isa::kScalar:
      break;
  }
  return expand_bf16_scalar;
}

bool rounds_x_to_bf16(const LinearConfig& /*config*/, DType dtype, int64_t /*m*/) {
  return dtype == DType::kBF16;  // every path, every ISA (ops.h)
}

LinearConfig default_linear_config() {
  LinearConfig config;
  config.isa = active_isa();
  config.use_blas = simd_enabled();
  config.bf16_gemm = gemm_bf16::available();
  return config;
}

void linear_with_config(const LinearConfig& config, const float* x, int64_t m, const Weight& w,
                        const float* bias, float* y) {
  assert(w.dtype == DType::kF32 || w.dtype == DType::kBF16 || w.dtype == DType::kI8);
  assert(w.dtype != DType::kI8 || (w.group > 0 && w.cols % w.group == 0 && w.scales != nullptr));
  assert(isa_supported(config.isa));
  if (m <= 0 || w.rows <= 0) return;
  if (w.cols == 0) {  // empty sum: y = bias (or 0)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t n = 0; n < w.rows; ++n) y[i * w.rows + n] = bias ? bias[n] : 0.0f;
    }
    return;
  }
  if (config.bf16_gemm && (w.dtype == DType::kBF16 || w.dtype == DType::kI8) &&
      m > kBf16GemmMinRows) {
    // int8 weights too (the prefill, the no-cache baseline): the int8 dot kernels read the whole
    // weight once per 4 rows of x, bound by memory at these m; packed as bf16(q * scale) panels
    // once per call, they run at the bf16 GEMM's rate.
    assert(gemm_bf16::available());
    gemm_bf16::BMatrix b{w.data, gemm_bf16::BLayout::kBf16NK, w.cols};
    if (w.dtype == DType::kI8) {
      b.layout = gemm_bf16::BLayout::kI8NK;
      b.scales = w.scales;
      b.group = w.group;
    }
    gemm_bf16::gemm(m, w.rows, w.cols, x, w.cols, b, bias, y, w.rows, false);
    return;
  }
  // bf16 weights on the f32 paths below (row blocks above the GEMV sizes, BLAS): x rounded to bf16
  // first, the ops.h contract. The GEMV sizes are rounded in gemv_parts.
  thread_local std::vector<float> rounded_x;
  if (w.dtype == DType::kBF16 && m > kMaxGemvRows) {
    rounded_x.resize(static_cast<size_t>(m * w.cols));
    for (size_t i = 0; i < rounded_x.size(); ++i) rounded_x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    x = rounded_x.data();
  }
  const int64_t blocked_max = w.dtype == DType::kBF16 ? kBlockedMaxRowsBf16 : kBlockedMaxRowsF32;
  // int8 weights always take the row-block path: its int8 dot kernels serve every m.
  if (w.dtype != DType::kI8 && config.use_blas && m > std::max(blocked_max, kMaxGemvRows)) {
    blas_path(config.isa, x, m, w, bias, y);
  } else {
    row_block_path(config.isa, config.bf16_gemm, x, m, w, bias, y);
  }
}

void linear_multi_with_config(const LinearConfig& config, const float* x, int64_t m,
                              const LinearPart* parts, int64_t n_parts) {
  assert(isa_supported(config.isa));
  if (m <= 0 || n_parts <= 0) return;
  const int64_t k_dim = parts[0].w.cols;
  bool gemv = m <= kMaxGemvRows && k_dim > 0;
  for (int64_t p = 0; p < n_parts; ++p) {
    assert(parts[p].w.cols == k_dim);
    assert(parts[p].w.dtype == DType::kF32 || parts[p].w.dtype == DType::kBF16 ||
           parts[p].w.dtype == DType::kI8);
    gemv = gemv && parts[p].w.rows > 0;
  }
  if (!gemv) {  // GEMM (or degenerate) sizes: one layer at a time, as linear() would
    for (int64_t p = 0; p < n_parts; ++p) {
      linear_with_config(config, x, m, parts[p].w, parts[p].bias, parts[p].y);
    }
    return;
  }
  gemv_parts(config.isa, config.bf16_gemm, x, m, parts, n_parts);
}

}  // namespace linear_detail

void linear(const float* x, int64_t m, const Weight& w, const float* bias, float* y) {
  linear_detail::linear_with_config(linear_detail::default_linear_config(), x, m, w, bias, y);
}

void linear_multi(const float* x, int64_t m, const LinearPart* parts, int64_t n_parts) {
  linear_detail::linear_multi_with_config(linear_detail::default_linear_config(), x, m, parts,
                                          n_parts);
}

bool linear_rows_invariant(const Weight& w, int64_t min_rows) {
  const linear_detail::LinearConfig config = linear_detail::default_linear_config();
  const bool gemm_from =
      min_rows > linear_detail::kBf16GemmMinRows && min_rows > linear_detail::kMaxGemvRows;
  // int8: the row-block dot kernels for every m without the bf16 GEMM, the bf16 GEMM above its
  // threshold with it (the two differ, so only m on one side of it).
  if (w.dtype == DType::kI8) return !config.bf16_gemm || gemm_from;
  return w.dtype == DType::kBF16 && config.bf16_gemm && gemm_from;
}

}  // namespace tessera::kernels::cpu
