// cpu::linear: dispatch, threading, the portable kernels and the sgemm (prefill) path.
// The plan is described in linear_internal.h, with the measurements behind its constants.
//
// Threads and OpenBLAS: OpenBLAS has its own thread pool, whose threads busy-wait for a while after
// each call. Next to default_thread_pool() (whose workers also spin between kernels) that would put
// up to twice as many busy threads as cores on the machine. So all parallelism is ours: OpenBLAS is
// set to one thread (openblas_set_num_threads(1), process-wide, on the first sgemm-path call) and
// each pool task runs its own sgemm on a column block of y. Measured on 2 cores (Zen 4, busy
// machine) this is within 5% of one 2-thread OpenBLAS call on the prefill shapes (69-95 vs 66-101
// GFLOP/s, either way round), without the extra spinning threads, and it lets the bf16 expansion of
// a panel overlap with the other thread's sgemm.
#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <memory>
#include <mutex>

#include "engine/core/cpu_features.h"
#include "engine/core/dtype.h"
#include "engine/core/thread_pool.h"
#include "kernels/cpu/isa.h"
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

DotRowsFn dot_rows_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return dot_rows_avx512;
    case Isa::kAvx2:
      return dot_rows_avx2;
    case Isa::kScalar:
      break;
  }
  return dot_rows_scalar;
}

// y rows [0, m) x columns [n_begin, n_end) through the dot kernels: weight blocks of kRowBlock
// rows, each reused (from cache) by every pass of kMaxRowsPerPass rows of x.
void row_block_range(DotRowsFn dot, const float* x, int64_t m, const Weight& w, const float* bias,
                     float* y, int64_t n_begin, int64_t n_end) {
  const int64_t n_out = w.rows;
  const int64_t k_dim = w.cols;
  if (m <= kMaxRowsPerPass) {
    // One pass: the GEMV case. The kernel streams the whole range in order (and may prepare x
    // once per call, see linear_avx512.cpp).
    dot(x, m, w, bias, y, n_out, n_begin, n_end);
    return;
  }
  for (int64_t nb = n_begin; nb < n_end; nb += kRowBlock) {
    const int64_t ne = std::min(n_end, nb + kRowBlock);
    for (int64_t i = 0; i < m; i += kMaxRowsPerPass) {
      const int64_t rows = std::min(kMaxRowsPerPass, m - i);
      dot(x + i * k_dim, rows, w, bias, y + i * n_out, n_out, nb, ne);
    }
  }
}

void row_block_path(Isa isa, const float* x, int64_t m, const Weight& w, const float* bias,
                    float* y) {
  const DotRowsFn dot = dot_rows_for(isa);
  const int64_t macs_per_row = std::max<int64_t>(1, m * w.cols);
  const int64_t grain = std::max<int64_t>(kRowBlock, kMinTaskMacs / macs_per_row);
  default_thread_pool().parallel_for(w.rows, grain, [&](int64_t n_begin, int64_t n_end) {
    row_block_range(dot, x, m, w, bias, y, n_begin, n_end);
  });
}

void ensure_openblas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
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
  ensure_openblas_single_threaded();
  const int64_t n_out = w.rows;
  const int64_t k_dim = w.cols;
  ThreadPool& pool = default_thread_pool();
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
      return expand_bf16_avx512;
    case Isa::kAvx2:
      return expand_bf16_avx2;
    case Isa::kScalar:
      break;
  }
  return expand_bf16_scalar;
}

LinearConfig default_linear_config() {
  LinearConfig config;
  config.isa = active_isa();
  config.use_blas = simd_enabled();
  return config;
}

void linear_with_config(const LinearConfig& config, const float* x, int64_t m, const Weight& w,
                        const float* bias, float* y) {
  assert(w.dtype == DType::kF32 || w.dtype == DType::kBF16);
  assert(isa_supported(config.isa));
  if (m <= 0 || w.rows <= 0) return;
  if (w.cols == 0) {  // empty sum: y = bias (or 0)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t n = 0; n < w.rows; ++n) y[i * w.rows + n] = bias ? bias[n] : 0.0f;
    }
    return;
  }
  const int64_t blocked_max = w.dtype == DType::kBF16 ? kBlockedMaxRowsBf16 : kBlockedMaxRowsF32;
  if (config.use_blas && m > blocked_max) {
    blas_path(config.isa, x, m, w, bias, y);
  } else {
    row_block_path(config.isa, x, m, w, bias, y);
  }
}

}  // namespace linear_detail

void linear(const float* x, int64_t m, const Weight& w, const float* bias, float* y) {
  linear_detail::linear_with_config(linear_detail::default_linear_config(), x, m, w, bias, y);
}

}  // namespace tessera::kernels::cpu
