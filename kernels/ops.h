// The op interface: argument types shared by every backend of every op.
//
// Each op exists three times with the same signature (plus a stream on CUDA):
//   tessera::kernels::ref::OP   plain loops, the reference (kernels/ref/, tests and benchmarks
//   only) tessera::kernels::cpu::OP   SIMD + threads, run-time dispatch on CPU features
//   (kernels/cpu/) tessera::kernels::cuda::OP  device pointers, asynchronous on a stream
//   (kernels/cuda/)
// Model code calls one backend through the engine's backend layer and never branches on the device.
//
// Conventions (all backends):
// - Activations are f32, row-major, contiguous unless a stride argument says otherwise. Sizes and
//   strides are element counts (int64_t).
// - Weights of linear layers use PyTorch's nn.Linear layout: W is [N, K] (out_features,
//   in_features), stored f32, bf16 or int8; accumulation is always f32.
// - THE bf16 linear contract, kept by every backend (ref, CPU on every ISA, CUDA) for every m: x is
//   rounded to bf16 (nearest even) before the products, as PyTorch's bf16 matmul does; each product
//   of two bf16 values is exact in f32 and the sums are f32 (their order may differ between
//   kernels, so results agree to f32 summation error, not bit for bit). This is what lets the CPU
//   use vdpbf16ps and the GPU its bf16 tensor cores. f32 weights keep f32 x; int8 weights
//   (kernels/int8.h) keep x to at least 16 bits.
// - Outputs are owned by the caller; ops allocate nothing (CPU ops may use per-thread stack
// scratch).
// - Unless stated, an output must not alias an input. Ops marked "in place OK" allow y == x.
// - Ops do not validate sizes beyond asserts: the caller (model code) checked shapes when it
// loaded.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels {

// A linear layer's weight matrix [rows = N out features, cols = K in features], row-major.
// kI8 weights (kernels/int8.h): symmetric 8-bit, w[n, k] = q[n, k] * scales[n * (K / group) +
// k / group] with q in [-127, 127] (data points at int8 values).
struct Weight {
  const void* data = nullptr;     // f32, bf16 or int8 elements; host or device memory
  DType dtype = DType::kF32;      // kF32, kBF16 or kI8
  int64_t rows = 0;               // N
  int64_t cols = 0;               // K
  const float* scales = nullptr;  // kI8: rows * (cols / group) scales
  int64_t group = 0;              // kI8: weights per scale along a row (divides cols)
};

// Scaled dot-product attention over layout [batch][token][head][head_dim]: element (b, t, h, d) of
// q is q[b*q_batch_stride + t*q_token_stride + h*head_dim + d] (same for k, v, o with their
// strides), so q, k and v may be interleaved slices of one packed QKV buffer.
struct AttentionShape {
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t q_len = 1;
  int64_t kv_len = 1;
  int64_t head_dim = 64;
  int64_t q_batch_stride = 0, q_token_stride = 0;
  int64_t k_batch_stride = 0, k_token_stride = 0;
  int64_t v_batch_stride = 0, v_token_stride = 0;
  int64_t o_batch_stride = 0, o_token_stride = 0;
  // Causal: query i sees keys j <= i + (kv_len - q_len), i.e. the queries are the last q_len
  // positions of the key sequence (prefill: q_len == kv_len; decode: q_len == 1 sees all keys).
  bool causal = false;
  float scale = 0.125f;  // usually 1/sqrt(head_dim)
  // May round q, k, v and the probabilities to bf16 (f32 accumulation, f32 softmax) where that is
  // faster: cpu::attention does for long non-causal shapes on CPUs with AVX-512 BF16
  // (attention_bf16.cpp). Set by models whose weights are bf16 (their activations already carry
  // bf16 error); false keeps every backend exact to f32 rounding.
  bool allow_bf16 = false;
};

// Fills the strides for contiguous q/k/v/o of the given sizes ([batch][len][heads][head_dim]).
inline AttentionShape contiguous_attention(int64_t batch, int64_t heads, int64_t q_len,
                                           int64_t kv_len, int64_t head_dim, bool causal,
                                           float scale) {
  AttentionShape s;
  s.batch = batch;
  s.heads = heads;
  s.q_len = q_len;
  s.kv_len = kv_len;
  s.head_dim = head_dim;
  s.q_token_stride = s.o_token_stride = heads * head_dim;
  s.k_token_stride = s.v_token_stride = heads * head_dim;
  s.q_batch_stride = s.o_batch_stride = q_len * heads * head_dim;
  s.k_batch_stride = s.v_batch_stride = kv_len * heads * head_dim;
  s.causal = causal;
  s.scale = scale;
  return s;
}

}  // namespace tessera::kernels

// Declares the op set of one backend inside the current namespace. The CUDA backend declares its
// own list (kernels/cuda/cuda_ops.h) with a stream argument and device pointers.
#define TESSERA_DECLARE_HOST_OPS                                                                   \
  /* y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n] if bias != nullptr). m == 1 is the GEMV path. */ \
  void linear(const float* x, int64_t m, const ::tessera::kernels::Weight& w, const float* bias,   \
              float* y);                                                                           \
  /* LayerNorm over the last dim; weight/bias may be null (no affine). In place OK. */             \
  void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,  \
                  int64_t dim, float eps);                                                         \
  /* RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight (weight may be null). In place OK. */         \
  void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim,          \
                float eps);                                                                        \
  /* In-place rotary embedding, interleaved pairs (2i, 2i+1) rotate by pos * theta^(-2i/head_dim). \
     x[t*token_stride + h*head_dim + d]; positions[t] is token t's position. */                    \
  void rope_interleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim,                 \
                        int64_t token_stride, const int32_t* positions, float theta);              \
  /* Row-wise softmax over cols. In place OK. */                                                   \
  void softmax(const float* x, float* y, int64_t rows, int64_t cols);                              \
  /* Elementwise; in place OK. gelu_erf is exact GELU, gelu_tanh the tanh approximation. */        \
  void silu(const float* x, float* y, int64_t n);                                                  \
  void gelu_erf(const float* x, float* y, int64_t n);                                              \
  void gelu_tanh(const float* x, float* y, int64_t n);                                             \
  /* quick_gelu(x) = x * sigmoid(1.702 x), CLIP's activation. In place OK. */                      \
  void quick_gelu(const float* x, float* y, int64_t n);                                            \
  /* y = a + b elementwise over n (residual connections). y may alias a or b. */                   \
  void add(const float* a, const float* b, float* y, int64_t n);                                   \
  /* y = silu(gate) * up, elementwise over n. y may alias gate or up. */                           \
  void swiglu(const float* gate, const float* up, float* y, int64_t n);                            \
  /* x rows are [value (hidden) | gate (hidden)]; y[r, i] = value * gelu_erf(gate). */             \
  void geglu(const float* x, float* y, int64_t rows, int64_t hidden);                              \
  /* Attention; o must not alias q/k/v. Flash-style tiling with online softmax on fast backends.   \
   */                                                                                              \
  void attention(const float* q, const float* k, const float* v, float* o,                         \
                 const ::tessera::kernels::AttentionShape& s);                                     \
  /* Single-query attention (s.q_len == 1) for decode: keys split across threads/blocks, partial   \
     results merged with their max and sum. */                                                     \
  void attention_decode(const float* q, const float* k, const float* v, float* o,                  \
                        const ::tessera::kernels::AttentionShape& s);                              \
  /* out[i, :] = table row ids[i] (f32 or bf16 table, f32 out). Every id must be < table.rows:     \
     callers validate ids (the engine reports out-of-range ids as errors before calling). */       \
  void embedding_gather(const ::tessera::kernels::Weight& table, const int32_t* ids, int64_t n,    \
                        float* out);

namespace tessera::kernels::ref {
TESSERA_DECLARE_HOST_OPS
}  // namespace tessera::kernels::ref

namespace tessera::kernels::cpu {
TESSERA_DECLARE_HOST_OPS
}  // namespace tessera::kernels::cpu

// ---- Decode attention over a bf16 K/V cache (appended; ref and cpu only) ------------------------
// Same contract as attention_decode (s.q_len == 1, every key visible, strides of s), except that k
// and v are bf16 (the upper 16 bits of an f32, e.g. from convert_f32_to_bf16 in
// core/dtype.h) and q is rounded to bf16 (nearest even) as well: the result is
// attention_decode of the rounded q over the widened K/V, with f32 accumulation and softmax (what
// PyTorch's bf16 attention computes for the scores; q.k then runs through vdpbf16ps on CPUs with
// AVX-512 BF16). Halves the bytes a decode step's attention reads from the cache.
namespace tessera::kernels::ref {
void attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, float* o,
                             const ::tessera::kernels::AttentionShape& s);
}  // namespace tessera::kernels::ref
namespace tessera::kernels::cpu {
void attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, float* o,
                             const ::tessera::kernels::AttentionShape& s);
}  // namespace tessera::kernels::cpu

// ---- Several linear layers over the same input (appended; ref and cpu only) --------------------
namespace tessera::kernels {
// One output of linear_multi: y[m, w.rows] = x[m, :] . w^T (+ bias[n] when bias != nullptr).
struct LinearPart {
  Weight w;
  const float* bias = nullptr;
  float* y = nullptr;  // must not alias x or another part's y
};
}  // namespace tessera::kernels
// y_p = linear(x, m, parts[p].w, parts[p].bias) for every p < n_parts; every w has the same cols
// (K). Same results as n_parts linear() calls; the CPU version runs the small-m (decode GEMV) case
// as one parallel pass over all parts' rows (q/k/v, or gate/up: one thread hand-off instead of
// several, one load-balancing tail) and x is prepared once per thread.
namespace tessera::kernels::ref {
void linear_multi(const float* x, int64_t m, const ::tessera::kernels::LinearPart* parts,
                  int64_t n_parts);
}  // namespace tessera::kernels::ref
namespace tessera::kernels::cpu {
void linear_multi(const float* x, int64_t m, const ::tessera::kernels::LinearPart* parts,
                  int64_t n_parts);
// Whether cpu::linear / linear_multi compute every row of x with this weight the same way for any
// m >= min_rows (the same bits as the row alone in a call of min_rows or more): int8 weights
// (batch-invariant dot kernels for every m) and bf16 weights through gemm_bf16 (min_rows above its
// threshold; each output accumulates over k in one fixed order). False for f32 weights (OpenBLAS
// picks kernels and splits by m) and for bf16 without AVX-512 BF16. Callers that must give the
// same bits whatever else is in the batch (the GPT's condition stream) may then stack rows.
bool linear_rows_invariant(const ::tessera::kernels::Weight& w, int64_t min_rows);
}  // namespace tessera::kernels::cpu
