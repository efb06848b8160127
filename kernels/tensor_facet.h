// TensorOps: the facet every backend implements (docs/adding-an-op.md). The dense ops of a
// transformer on f32 activations: linear layers, norms, RoPE, activations, attention, embedding
// lookup, and a few fusions of them whose defaults run the unfused ops (a backend overrides a
// fusion where one kernel beats the two; the result must be the same up to summation order).
//
// Semantics: the ops of the same names in kernels/ops.h. Every pointer is memory of the backend
// that implements the facet (kernels/backend.h: Backend). Ops return Status: the CPU backend
// always returns ok (the model validated the shapes when it loaded); a device reports launch
// failures and out-of-memory.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/ops.h"

namespace tessera::kernels {

class TensorOps {
 public:
  virtual ~TensorOps() = default;

  virtual Status linear(const float* x, int64_t m, const Weight& w, const float* bias,
                        float* y) = 0;
  virtual Status layer_norm(const float* x, const float* weight, const float* bias, float* y,
                            int64_t rows, int64_t dim, float eps) = 0;
  virtual Status rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim,
                          float eps) = 0;
  virtual Status rope_interleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                                  int64_t token_stride, const int32_t* positions, float theta) = 0;
  virtual Status softmax(const float* x, float* y, int64_t rows, int64_t cols) = 0;
  virtual Status silu(const float* x, float* y, int64_t n) = 0;
  virtual Status gelu_erf(const float* x, float* y, int64_t n) = 0;
  virtual Status gelu_tanh(const float* x, float* y, int64_t n) = 0;
  virtual Status quick_gelu(const float* x, float* y, int64_t n) = 0;
  virtual Status swiglu(const float* gate, const float* up, float* y, int64_t n) = 0;
  virtual Status geglu(const float* x, float* y, int64_t rows, int64_t hidden) = 0;
  // y = a + b elementwise (residual connections); y may alias a or b.
  virtual Status add(const float* a, const float* b, float* y, int64_t n) = 0;
  virtual Status attention(const float* q, const float* k, const float* v, float* o,
                           const AttentionShape& s) = 0;
  virtual Status attention_decode(const float* q, const float* k, const float* v, float* o,
                                  const AttentionShape& s) = 0;
  virtual Status embedding_gather(const Weight& table, const int32_t* ids, int64_t n,
                                  float* out) = 0;

  // Whether linear()/linear_multi() give every row the same bits for any m >= min_rows, whatever
  // the other rows (cpu::linear_rows_invariant). False by default: a backend whose library picks
  // its algorithm by m (cuBLAS, OpenBLAS) cannot promise it.
  virtual bool linear_rows_invariant(const Weight& w, int64_t min_rows) const {
    (void)w, (void)min_rows;
    return false;
  }

  // ---- fusions (defaults: the unfused ops) -----------------------------------------------------
  // Several linear layers over the same x (kernels/ops.h: linear_multi). The default runs them one
  // by one; the CPU backend as one parallel pass for small m.
  virtual Status linear_multi(const float* x, int64_t m, const LinearPart* parts, int64_t n_parts) {
    for (int64_t p = 0; p < n_parts; ++p) {
      TESSERA_RETURN_IF_ERROR(linear(x, m, parts[p].w, parts[p].bias, parts[p].y));
    }
    return Status();
  }

  // Per-head RMSNorm of x in place ([tokens][heads][head_dim], contiguous; weight [head_dim] or
  // null), then, when positions is not null, the interleaved RoPE at positions[t] (token stride
  // heads * head_dim): the GPT's q/k normalisation. The default runs rms_norm and
  // rope_interleaved; the CUDA backend fuses them into one kernel (one warp per head).
  virtual Status rms_norm_rope(float* x, const float* weight, int64_t tokens, int64_t heads,
                               int64_t head_dim, float eps, const int32_t* positions, float theta) {
    TESSERA_RETURN_IF_ERROR(rms_norm(x, weight, x, tokens * heads, head_dim, eps));
    if (positions == nullptr) return Status();
    return rope_interleaved(x, tokens, heads, head_dim, heads * head_dim, positions, theta);
  }

  // x += t, then h = LayerNorm(x) without affine (the transformer's residual add and the next
  // norm): the two ops below by default; the CUDA backend fuses them into one kernel with the same
  // arithmetic (same bits). x and t are [rows, dim]; h must not alias x or t.
  virtual Status add_layer_norm(float* x, const float* t, float* h, int64_t rows, int64_t dim,
                                float eps) {
    TESSERA_RETURN_IF_ERROR(add(x, t, x, rows * dim));
    return layer_norm(x, nullptr, nullptr, h, rows, dim, eps);
  }

  // rms_norm_rope of q and of k (each with its weight; same shapes and positions): the two calls
  // by default, one kernel on CUDA.
  virtual Status rms_norm_rope_pair(float* q, const float* q_weight, float* k,
                                    const float* k_weight, int64_t tokens, int64_t heads,
                                    int64_t head_dim, float eps, const int32_t* positions,
                                    float theta) {
    TESSERA_RETURN_IF_ERROR(
        rms_norm_rope(q, q_weight, tokens, heads, head_dim, eps, positions, theta));
    return rms_norm_rope(k, k_weight, tokens, heads, head_dim, eps, positions, theta);
  }

  // The SwiGLU MLP's first half: y = silu(x . gate^T + gate_bias) * (x . up^T + up_bias), y
  // [m, gate.rows] (gate and up: same shape; biases nullable). gate_out and up_out are scratch of
  // m * gate.rows floats each that the default (linear_multi, then swiglu) writes; y may alias
  // gate_out. The CUDA backend computes the GEMV sizes in one kernel that writes only y.
  virtual Status linear_swiglu(const float* x, int64_t m, const Weight& gate,
                               const float* gate_bias, const Weight& up, const float* up_bias,
                               float* gate_out, float* up_out, float* y) {
    const LinearPart parts[2] = {{gate, gate_bias, gate_out}, {up, up_bias, up_out}};
    TESSERA_RETURN_IF_ERROR(linear_multi(x, m, parts, 2));
    return swiglu(gate_out, up_out, y, m * gate.rows);
  }
};

}  // namespace tessera::kernels
