// bf16 GEMM driver (gemm_bf16.h): task split, scratch, and the calls into the AVX-512 BF16 pieces.
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/threads.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdlib>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm_tasks.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu::gemm_bf16 {

namespace {

constexpr int64_t kNr = 32;
constexpr int64_t kMr = 12;
// Bytes of converted A per row block: the block is re-read from L2 by every panel of the task.
constexpr int64_t kABlockBytes = 192 * 1024;
// A task of at least this many rows when the rows are split (few panels, many rows).
constexpr int64_t kMinTaskRows = 4 * kMr;

uint32_t* panel_scratch(int64_t words) {
  thread_local std::vector<uint32_t> buf;
  if (static_cast<int64_t>(buf.size()) < words) buf.resize(static_cast<size_t>(words));
  return buf.data();
}

uint16_t* a_scratch(int64_t elems) {
  thread_local std::vector<uint16_t> buf;
  if (static_cast<int64_t>(buf.size()) < elems) buf.resize(static_cast<size_t>(elems));
  return buf.data();
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("TESSERA_NO_BF16_GEMM");
    return !(env && env[0] == '1');
  }()};
  return flag;
}

}  // namespace

void set_enabled(bool enabled) {
  enabled_flag().store(enabled);
}

bool available() {
  return enabled_flag().load(std::memory_order_relaxed) && simd_enabled() &&
         cpu_features().avx512bf16 && isa_supported(Isa::kAvx512) && active_isa() == Isa::kAvx512;
}

void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const BMatrix& b,
          const float* bias, float* c, int64_t ldc, bool accumulate) {
  assert(available());
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // empty sum
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float base = accumulate ? c[i * ldc + j] : 0.0f;
        c[i * ldc + j] = base + (bias ? bias[j] : 0.0f);
      }
    }
    return;
  }
  const int64_t kpad = (k + 1) & ~int64_t{1};
  const int64_t kp = kpad / 2;
  const int64_t panels = (n + kNr - 1) / kNr;
  ThreadPool& pool = kernels::cpu::cpu_pool();
  const int64_t threads = pool.num_threads();
  // Column chunks: about two per thread (B is packed once per chunk); when there are too few
  // panels for that, the rows are split as well (each row chunk packs its own copy of B).
  const int64_t per_chunk = std::max<int64_t>(1, (panels + 2 * threads - 1) / (2 * threads));
  const int64_t n_chunks = (panels + per_chunk - 1) / per_chunk;
  int64_t m_chunks = 1;
  if (n_chunks < 2 * threads) {
    m_chunks =
        std::min((2 * threads + n_chunks - 1) / n_chunks, std::max<int64_t>(1, m / kMinTaskRows));
  }
  const int64_t rows_per_chunk = ((m + m_chunks - 1) / m_chunks + kMr - 1) / kMr * kMr;
  int64_t mc = kABlockBytes / (2 * kpad) / kMr * kMr;
  mc = std::clamp<int64_t>(mc, kMr, 16 * kMr);

  auto task = [&](int64_t t) {
    const int64_t nc = t % n_chunks;
    const int64_t mci = t / n_chunks;
    const int64_t p_begin = nc * per_chunk;
    const int64_t p_end = std::min(panels, p_begin + per_chunk);
    const int64_t i_begin = mci * rows_per_chunk;
    const int64_t i_end = std::min(m, i_begin + rows_per_chunk);
    if (i_begin >= i_end) return;
    uint32_t* packed = panel_scratch((p_end - p_begin) * kp * kNr);
    for (int64_t p = p_begin; p < p_end; ++p) {
      avx512bf16::pack_b(b, p * kNr, n, k, kpad, packed + (p - p_begin) * kp * kNr);
    }
    uint16_t* ablock = a_scratch(mc * kpad);
    for (int64_t i0 = i_begin; i0 < i_end; i0 += mc) {
      const int64_t rows = std::min(mc, i_end - i0);
      avx512bf16::convert_a(a + i0 * lda, lda, rows, k, ablock, kpad);
      for (int64_t p = p_begin; p < p_end; ++p) {
        const int64_t j0 = p * kNr;
        avx512bf16::panel_rows(ablock, rows, kpad, packed + (p - p_begin) * kp * kNr,
                               std::min(kNr, n - j0), bias ? bias + j0 : nullptr, c + i0 * ldc + j0,
                               ldc, accumulate);
      }
    }
  };
  const int64_t tasks = n_chunks * m_chunks;
  if (tasks == 1 || m * n * k < (int64_t{1} << 18)) {
    for (int64_t t = 0; t < tasks; ++t) task(t);
  } else {
    pool.run(tasks, task);
  }
}

namespace {

// Pairs of k per k block of the packed path: the block's slice of one panel (128 pairs x 32
// columns x 4 bytes = 16 KiB) stays in L1 while a row block's micro-kernels run over it.
constexpr int64_t kKcPairs = 128;
// Rows of A per task of the packed path (a multiple of kMr): the block's k slice (96 x 256 bf16 =
// 48 KiB) stays in L2 across the panels.
constexpr int64_t kPackedRows = 8 * kMr;

// The packed-B product for A given either as f32 (a32, converted per task) or as bf16 (a16).
void packed_driver(int64_t m, const float* a32, const uint16_t* a16, int64_t lda, const PackedB& b,
                   const float* bias, float* c, int64_t ldc, bool accumulate) {
  assert(available() && !b.empty());
  const int64_t n = b.n, k = b.k, kpad = b.kpad(), kp = kpad / 2;
  if (m <= 0 || n <= 0) return;
  const int64_t panels = (n + kNr - 1) / kNr;
  // Tasks: blocks of rows (each thread streams all of B through its L1/L2: B is shared in L3),
  // split further over columns when there are too few row blocks to balance (the deep layers
  // have few pixels and wide weights).
  run_row_panel_tasks(m, panels, kMr, kPackedRows, m * n * k, [&](const RowPanelTask& t) {
    const int64_t i0 = t.i0, rows = t.rows;
    const uint16_t* ablock;
    int64_t a_ld;
    if (a16 != nullptr) {
      ablock = a16 + i0 * lda;
      a_ld = lda;
    } else {
      uint16_t* conv = a_scratch(rows * kpad);
      avx512bf16::convert_a(a32 + i0 * lda, lda, rows, k, conv, kpad);
      ablock = conv;
      a_ld = kpad;
    }
    for (int64_t q0 = 0; q0 < kp; q0 += kKcPairs) {
      const int64_t q = std::min(kKcPairs, kp - q0);
      const bool first = q0 == 0;
      for (int64_t p = t.p_begin; p < t.p_end; ++p) {
        const int64_t j0 = p * kNr;
        avx512bf16::panel_rows_k(ablock + 2 * q0, a_ld, rows, q,
                                 b.panels.data() + (p * kp + q0) * kNr, std::min(kNr, n - j0),
                                 first && bias ? bias + j0 : nullptr, c + i0 * ldc + j0, ldc,
                                 accumulate || !first);
      }
    }
  });
}

}  // namespace

PackedB pack(const BMatrix& b, int64_t n, int64_t k) {
  assert(available() && n > 0 && k > 0);
  PackedB out;
  out.n = n;
  out.k = k;
  const int64_t kpad = out.kpad(), kp = kpad / 2;
  const int64_t panels = (n + kNr - 1) / kNr;
  out.panels.resize(static_cast<size_t>(panels * kp * kNr));
  uint32_t* dst = out.panels.data();
  kernels::cpu::cpu_pool().run(
      panels, [&](int64_t p) { avx512bf16::pack_b(b, p * kNr, n, k, kpad, dst + p * kp * kNr); });
  return out;
}

void gemm_packed(int64_t m, const float* a, int64_t lda, const PackedB& b, const float* bias,
                 float* c, int64_t ldc, bool accumulate) {
  packed_driver(m, a, nullptr, lda, b, bias, c, ldc, accumulate);
}

void gemm_packed_bf16a(int64_t m, const uint16_t* a, int64_t lda, const PackedB& b,
                       const float* bias, float* c, int64_t ldc, bool accumulate) {
  assert(lda % 2 == 0 && lda >= b.kpad());
  packed_driver(m, nullptr, a, lda, b, bias, c, ldc, accumulate);
}

}  // namespace tessera::kernels::cpu::gemm_bf16
