// bf16 GEMM on AVX-512 BF16 (vdpbf16ps): C[m, n] (+)= A[m, k] . B[k, n] (+ bias[n]), f32 in and
// out, both operands rounded to bf16 (round to nearest even) and multiplied with f32 accumulation.
//
// Why: on CPUs with AVX-512 BF16 (Zen 4, Sapphire Rapids) vdpbf16ps does two multiply-adds per f32
// lane, twice the f32 FMA rate, and halves the bytes of every operand. The large-m layers of bf16
// models (the occupancy decoder's query MLPs, prefill, the diffusion convolutions in bf16 compute
// mode) are compute-bound, so this is ~2x their f32 speed. The price is bf16 rounding of the
// activations (8 significant bits, as PyTorch's bf16 matmul does); callers that need f32 inputs
// keep the f32 paths (cpu::linear uses this only for bf16 weights, where the weights already carry
// bf16 error, and only where LinearConfig allows it).
//
// Plan: tasks over column chunks of C (whole 32-column panels). A task packs its panels of B once
// into the vdpbf16ps pair layout (pairs of consecutive k for 32 columns: [k/2][32] x 32 bits, zero
// padded past n and past an odd k), then walks A in blocks of rows (converted to bf16 into thread
// scratch), and for each panel runs a 12 x 32 register-blocked micro-kernel (24 accumulators) over
// all of k. B panels stay in L2 across the row blocks, the A block in L2 across the panels.
//
// Threads: cpu_pool(). Scratch: thread-local, grown on demand and kept.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::kernels::cpu::gemm_bf16 {

// How B is stored.
enum class BLayout {
  kBf16NK,  // uint16_t bf16 [n][ldb]: a weight matrix W[out][in], C = A . W^T (cpu::linear)
  kF32NK,   // float [n][ldb] (rounded to bf16 when packed)
  kF32KN,   // float [k][ldb]
  // int8 [n][ldb] with f32 scales [n][ld / group] (kernels/int8.h), dequantized when packed:
  // bf16(q * scale). q needs 8 bits, so the only rounding is that of the product.
  kI8NK,
};

struct BMatrix {
  const void* data = nullptr;
  BLayout layout = BLayout::kBf16NK;
  int64_t ld = 0;                 // elements between consecutive rows of the stored matrix
  const float* scales = nullptr;  // kI8NK only
  int64_t group = 0;              // kI8NK only: weights per scale along a row (divides ld)
};

// True when this CPU has AVX-512 F/BW/VL + BF16, SIMD is enabled, active_isa() is AVX-512
// (limit_isa() below AVX-512 turns this path off too) and set_enabled(false) was not called.
bool available();

// Process-wide off switch of this path (benchmarks' same-run A/B; the environment variable
// TESSERA_NO_BF16_GEMM=1 sets it off at start-up). Not for use while kernels run.
void set_enabled(bool enabled);

// C[i, j] = sum_k bf16(A[i, k]) * bf16(B(k, j)) (+ bias[j]) (+ C[i, j] when accumulate), for i < m,
// j < n. lda/ldc in floats. bias may be null. Requires available(); m, n, k >= 0 (k == 0 gives
// bias / C unchanged). A and C must not overlap; B may be any of the layouts above.
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const BMatrix& b,
          const float* bias, float* c, int64_t ldc, bool accumulate);

// ---- B packed once (weights)
// --------------------------------------------------------------------- Packing B costs a pass over
// it per call (a conversion for f32 B): for weights used many times (the diffusion convolutions and
// linear layers in bf16 compute mode) pack once at load and multiply with gemm_packed /
// gemm_packed_bf16a. These calls block k as well (kKcPairs pairs of k at a time, the 32-column
// slice of B then stays in L1 across a block of A rows; C is accumulated across the k blocks in
// f32), so long k (a 3x3 convolution's 9 * in_c) no longer streams B from L2 in the micro-kernel.
struct PackedB {
  int64_t n = 0, k = 0;
  // (n + 31) / 32 panels of kpad / 2 pairs x 32 columns (kpad = k rounded up to even), each in
  // pack_b's pair layout, panel after panel.
  std::vector<uint32_t> panels;
  bool empty() const { return panels.empty(); }
  int64_t kpad() const { return (k + 1) & ~int64_t{1}; }
};
// Packs B(k, j) (k x n, any BMatrix layout) over cpu_pool(). Requires available();
// n, k >= 1.
PackedB pack(const BMatrix& b, int64_t n, int64_t k);
// gemm() with a packed B: C[i, j] = sum_k bf16(A[i, k]) * B(k, j) (+ bias[j]) (+ C when
// accumulate). a f32 [m][lda]. Requires available() and !b.empty().
void gemm_packed(int64_t m, const float* a, int64_t lda, const PackedB& b, const float* bias,
                 float* c, int64_t ldc, bool accumulate);
// The same with A already bf16 (uint16_t [m][lda], e.g. an im2col block written as bf16): lda even
// and >= b.kpad(); when k is odd, column k of every row must be 0 (the pair's other half).
void gemm_packed_bf16a(int64_t m, const uint16_t* a, int64_t lda, const PackedB& b,
                       const float* bias, float* c, int64_t ldc, bool accumulate);

// The AVX-512 BF16 pieces (gemm_bf16_avx512.cpp, compiled with those flags; they use no inline
// library templates, so no AVX-512 copy of a shared inline function can leak into portable code).
// gemm() (gemm_bf16.cpp) does the threading and scratch around them.
namespace avx512bf16 {
// dst[r * kpad + c] = bf16(a[r * lda + c]) for c < k, 0 for k <= c < kpad (kpad even, >= k).
void convert_a(const float* a, int64_t lda, int64_t rows, int64_t k, uint16_t* dst, int64_t kpad);
// One panel of 32 columns j0 .. j0 + 31 of B(k, j) in pair layout: panel[p * 32 + j] holds
// bf16(B(2p, j0 + j)) in its low and bf16(B(2p + 1, j0 + j)) in its high half, for p < kpad / 2;
// zero past n and past k.
void pack_b(const BMatrix& b, int64_t j0, int64_t n, int64_t k, int64_t kpad, uint32_t* panel);
// C rows [0, rows) x columns [0, cols) (cols <= 32) from a converted A block (rows x kpad) and one
// packed panel; bias (already offset to the panel's first column) may be null.
void panel_rows(const uint16_t* a, int64_t rows, int64_t kpad, const uint32_t* panel, int64_t cols,
                const float* bias, float* c, int64_t ldc, bool accumulate);
// The same over kp pairs of k only (a k block): A rows have stride lda (elements, even) and start
// at the block's first k; the panel pointer points at the block's first pair.
void panel_rows_k(const uint16_t* a, int64_t lda, int64_t rows, int64_t kp, const uint32_t* panel,
                  int64_t cols, const float* bias, float* c, int64_t ldc, bool accumulate);
// For each of `rows` rows of s (row stride lds, n entries): s = exp(scale * s - max_j(scale * s)),
// l[r] = the row's sum. Used by the bf16 attention (attention_bf16.cpp).
void softmax_rows(float* s, int64_t lds, int64_t rows, int64_t n, float scale, float* l);
}  // namespace avx512bf16

}  // namespace tessera::kernels::cpu::gemm_bf16
