// int8 GEMM with 8-bit activations (gemm_i8.h): packing, the scalar reference, the task split.
#include "kernels/cpu/gemm_i8.h"

#include <algorithm>
#include <limits>
#include <cassert>
#include <cmath>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm_tasks.h"
#include "kernels/cpu/isa.h"
#include "kernels/int8.h"

namespace tessera::kernels::cpu::gemm_i8 {

namespace {

constexpr int64_t kNr = 32;
constexpr int64_t kMr = 12;
// Rows of A per task (a multiple of kMr): their quantized bytes (96 x 3072 = 288 KiB for the widest
// layer) stay in L2 while the task walks its panels.
constexpr int64_t kTaskRows = 8 * kMr;

float weight_value(const Weight& w, int64_t j, int64_t kk) {
  const int64_t at = j * w.cols + kk;
  if (w.dtype == DType::kBF16) return bf16_to_f32(static_cast<const uint16_t*>(w.data)[at]);
  return static_cast<const float*>(w.data)[at];
}

uint8_t* a_scratch(int64_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (static_cast<int64_t>(buf.size()) < bytes) buf.resize(static_cast<size_t>(bytes));
  return buf.data();
}

float* s_scratch(int64_t n) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

}  // namespace

bool available() {
  return simd_enabled() && cpu_features().avx512vnni && isa_supported(Isa::kAvx512) &&
         active_isa() == Isa::kAvx512;
}

PackedI8 pack(const Weight& w) {
  assert((w.dtype == DType::kF32 || w.dtype == DType::kBF16) && w.rows > 0 && w.cols > 0);
  PackedI8 out;
  out.n = w.rows;
  out.k = w.cols;
  const int64_t kpad = out.kpad(), kq = kpad / 4;
  const int64_t panels = (out.n + kNr - 1) / kNr;
  out.panels.assign(static_cast<size_t>(panels * kq * kNr * 4), 0);
  out.scales.assign(static_cast<size_t>(panels * kNr), 0.0f);
  out.offset.assign(static_cast<size_t>(panels * kNr), 0);
  std::vector<float> row(static_cast<size_t>(out.k));
  for (int64_t j = 0; j < out.n; ++j) {
    for (int64_t kk = 0; kk < out.k; ++kk) row[static_cast<size_t>(kk)] = weight_value(w, j, kk);
    const float s = int8_abs_max(row.data(), out.k) / static_cast<float>(kInt8MaxQ);
    const float inv = s >= std::numeric_limits<float>::min() ? 1.0f / s : 0.0f;
    int8_t* panel = out.panels.data() + (j / kNr) * kq * kNr * 4;
    const int64_t col = j % kNr;
    int32_t sum = 0;
    for (int64_t kk = 0; kk < out.k; ++kk) {
      const float v = std::nearbyint(row[static_cast<size_t>(kk)] * inv);
      const auto q = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      panel[((kk / 4) * kNr + col) * 4 + kk % 4] = q;
      sum += q;
    }
    out.scales[static_cast<size_t>(j)] = s;
    out.offset[static_cast<size_t>(j)] = 128 * sum;
  }
  return out;
}

float packed_weight_at(const PackedI8& b, int64_t j, int64_t kk) {
  const int64_t kq = b.kpad() / 4;
  const int8_t q = b.panels[static_cast<size_t>((j / kNr) * kq * kNr * 4 +
                                                ((kk / 4) * kNr + j % kNr) * 4 + kk % 4)];
  return static_cast<float>(q) * b.scales[static_cast<size_t>(j)];
}

void quantize_rows_reference(const float* a, int64_t lda, int64_t rows, int64_t k, int64_t kpad,
                             uint8_t* dst, float* scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = a + r * lda;
    const float s = int8_abs_max(src, k) / static_cast<float>(kInt8MaxQ);
    const float inv = s >= std::numeric_limits<float>::min() ? 1.0f / s : 0.0f;
    uint8_t* out = dst + r * kpad;
    for (int64_t c = 0; c < k; ++c) {
      const float v = std::clamp(std::nearbyint(src[c] * inv), -127.0f, 127.0f);
      out[c] = static_cast<uint8_t>(static_cast<int32_t>(v) + 128);
    }
    for (int64_t c = k; c < kpad; ++c) out[c] = 128;
    scale[r] = s;
  }
}

void gemm_reference(int64_t m, const float* a, int64_t lda, const PackedI8& b, const float* bias,
                    float* c, int64_t ldc) {
  const int64_t kpad = b.kpad(), kq = kpad / 4;
  std::vector<uint8_t> qa(static_cast<size_t>(std::max<int64_t>(m, 1) * kpad));
  std::vector<float> sx(static_cast<size_t>(std::max<int64_t>(m, 1)));
  quantize_rows_reference(a, lda, m, b.k, kpad, qa.data(), sx.data());
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* ar = qa.data() + i * kpad;
    for (int64_t j = 0; j < b.n; ++j) {
      const int8_t* panel = b.panels.data() + (j / kNr) * kq * kNr * 4;
      const int64_t col = j % kNr;
      int32_t acc = 0;
      for (int64_t p = 0; p < kq; ++p) {
        for (int64_t e = 0; e < 4; ++e) {
          acc += static_cast<int32_t>(ar[p * 4 + e]) *
                 static_cast<int32_t>(panel[(p * kNr + col) * 4 + e]);
        }
      }
      const int32_t d = acc - b.offset[static_cast<size_t>(j)];
      const float t = sx[static_cast<size_t>(i)] * b.scales[static_cast<size_t>(j)];
      c[i * ldc + j] = std::fma(static_cast<float>(d), t, bias ? bias[j] : 0.0f);
    }
  }
}

void gemm(int64_t m, const float* a, int64_t lda, const PackedI8& b, const float* bias, float* c,
          int64_t ldc) {
  assert(available() && !b.empty());
  if (m <= 0) return;
  const int64_t n = b.n, kpad = b.kpad(), kq = kpad / 4;
  const int64_t panels = (n + kNr - 1) / kNr;
  // Each task quantizes its block of rows once, then walks its panels.
  run_row_panel_tasks(m, panels, kMr, kTaskRows, m * n * b.k, [&](const RowPanelTask& t) {
    uint8_t* qa = a_scratch(t.rows * kpad);
    float* sx = s_scratch(t.rows);
    vnni::quantize_rows(a + t.i0 * lda, lda, t.rows, b.k, kpad, qa, sx);
    for (int64_t p = t.p_begin; p < t.p_end; ++p) {
      const int64_t j0 = p * kNr;
      vnni::panel_rows(qa, sx, t.rows, kpad, b.panels.data() + p * kq * kNr * 4,
                       b.scales.data() + j0, b.offset.data() + j0, bias ? bias + j0 : nullptr,
                       std::min(kNr, n - j0), c + t.i0 * ldc + j0, ldc);
    }
  });
}

}  // namespace tessera::kernels::cpu::gemm_i8
