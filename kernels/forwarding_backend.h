// ForwardingBackend: a Backend that passes every call to an inner backend through one overridable
// hook, so a decorator (per-op timing in `tessera-bench shape`, the capture-semantics recorder of
// the generator tests, fault injection) overrides one function instead of re-forwarding every op.
//
// Every op becomes `run_op(label, run)`: `label` says what it is (for names and policies), `run`
// calls the inner backend. The kinds differ in what a hook may do with `run`:
// - kCompute (every kernel, copy, fill_zero): `run` captures its arguments BY VALUE (pointers,
//   scalars, Weight, AttentionShape, TokenChoice; linear_multi's parts array is copied), so a hook
//   may store it and call it later, any number of times (what a CUDA graph capture does).
// - kTransfer (upload, download) and kHost (allocate, allocate_host_visible, synchronize): `run`
//   refers to the caller's arguments and results; call it now or not at all.
// Not routed (load-time or bookkeeping): device, name, release, upload_weight, upload_f32, the
// facet queries, choose_conv_algo, bf16_compute, pack_linear_bf16, pack_conv2d_bf16,
// bf16_products_available, the tf32 state, linear_rows_invariant, and the recording calls
// (can_record, begin/end_recording, replay, drop).
//
// It has each facet its inner backend has (decode(), diffusion() and extraction() are this
// object or null as the inner's are), sectioned below facet by facet.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"

namespace tessera::kernels {

struct OpLabel {
  enum class Kind : uint8_t { kCompute, kTransfer, kHost };
  const char* op = "";
  Kind kind = Kind::kCompute;
  // linear: the weight (linear_swiglu: the gate's, the up weight has its shape); linear_multi: the
  // parts. Both point at the caller's data for the duration of run_op only: a hook may keep `run`,
  // never these pointers.
  const Weight* weight = nullptr;
  const LinearPart* parts = nullptr;
  int64_t n_parts = 0;

  // "rms_norm", "linear 1536->6144", "linear 1536->1536+1536+1536".
  std::string name() const {
    // append() throughout: GCC 12's -Wrestrict misfires on `" " + std::to_string(...)`.
    std::string s = op;
    if (weight != nullptr) {
      s.push_back(' ');
      s.append(std::to_string(weight->cols)).append("->").append(std::to_string(weight->rows));
    } else if (parts != nullptr && n_parts > 0) {
      s.push_back(' ');
      s.append(std::to_string(parts[0].w.cols)).append("->");
      for (int64_t p = 0; p < n_parts; ++p) {
        if (p > 0) s.push_back('+');
        s.append(std::to_string(parts[p].w.rows));
      }
    }
    return s;
  }
};

class ForwardingBackend : public Backend,
                          public DecodeOps,
                          public DiffusionOps,
                          public ExtractionOps {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  Backend& inner() const { return *inner_; }

  Device device() const override { return inner_->device(); }
  std::string name() const override { return inner_->name(); }

  // ---- memory and transfers ------------------------------------------------------------------
  Expected<DeviceBuffer> allocate(size_t bytes) override {
    return allocate_via("allocate", bytes, [&] { return inner_->allocate(bytes); });
  }
  Expected<DeviceBuffer> allocate_host_visible(size_t bytes) override {
    return allocate_via("allocate_host_visible", bytes,
                        [&] { return inner_->allocate_host_visible(bytes); });
  }
  void release(void* data) override { inner_->release(data); }
  Status upload(void* dst, const void* src, size_t bytes) override {
    return run_op({"upload", OpLabel::Kind::kTransfer},
                  [&] { return inner_->upload(dst, src, bytes); });
  }
  Status download(void* dst, const void* src, size_t bytes) override {
    return run_op({"download", OpLabel::Kind::kTransfer},
                  [&] { return inner_->download(dst, src, bytes); });
  }
  Status synchronize() override {
    return run_op({"synchronize", OpLabel::Kind::kHost}, [&] { return inner_->synchronize(); });
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    return run_op({"copy"}, [=, this] { return inner_->copy(dst, src, bytes); });
  }
  Status fill_zero(void* dst, size_t bytes) override {
    return run_op({"fill_zero"}, [=, this] { return inner_->fill_zero(dst, bytes); });
  }
  Expected<Weight> upload_weight(const Weight& host, DeviceBuffer* storage) override {
    return inner_->upload_weight(host, storage);
  }
  Expected<const float*> upload_f32(const float* host, int64_t n, DeviceBuffer* storage) override {
    return inner_->upload_f32(host, n, storage);
  }

  // ---- TensorOps -----------------------------------------------------------------------------
  bool linear_rows_invariant(const Weight& w, int64_t min_rows) const override {
    return inner_->linear_rows_invariant(w, min_rows);
  }
  Status linear(const float* x, int64_t m, const Weight& w, const float* bias, float* y) override {
    OpLabel label{"linear"};
    label.weight = &w;
    return run_op(label, [=, this] { return inner_->linear(x, m, w, bias, y); });
  }
  Status linear_multi(const float* x, int64_t m, const LinearPart* parts,
                      int64_t n_parts) override {
    OpLabel label{"linear"};
    label.parts = parts;
    label.n_parts = n_parts;
    std::vector<LinearPart> own(parts, parts + n_parts);  // the caller's array is a local
    return run_op(label, [=, this] { return inner_->linear_multi(x, m, own.data(), n_parts); });
  }
  Status layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                    int64_t dim, float eps) override {
    return run_op({"layer_norm"},
                  [=, this] { return inner_->layer_norm(x, weight, bias, y, rows, dim, eps); });
  }
  Status rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim,
                  float eps) override {
    return run_op({"rms_norm"},
                  [=, this] { return inner_->rms_norm(x, weight, y, rows, dim, eps); });
  }
  Status rope_interleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                          int64_t token_stride, const int32_t* positions, float theta) override {
    return run_op({"rope"}, [=, this] {
      return inner_->rope_interleaved(x, tokens, heads, head_dim, token_stride, positions, theta);
    });
  }
  Status add_layer_norm(float* x, const float* t, float* h, int64_t rows, int64_t dim,
                        float eps) override {
    return run_op({"add_layer_norm"},
                  [=, this] { return inner_->add_layer_norm(x, t, h, rows, dim, eps); });
  }
  Status linear_swiglu(const float* x, int64_t m, const Weight& gate, const float* gate_bias,
                       const Weight& up, const float* up_bias, float* gate_out, float* up_out,
                       float* y) override {
    return run_op({"linear_swiglu", OpLabel::Kind::kCompute, &gate}, [=, this] {
      return inner_->linear_swiglu(x, m, gate, gate_bias, up, up_bias, gate_out, up_out, y);
    });
  }
  Status rms_norm_rope_pair(float* q, const float* q_weight, float* k, const float* k_weight,
                            int64_t tokens, int64_t heads, int64_t head_dim, float eps,
                            const int32_t* positions, float theta) override {
    return run_op({"rms_norm_rope_pair"}, [=, this] {
      return inner_->rms_norm_rope_pair(q, q_weight, k, k_weight, tokens, heads, head_dim, eps,
                                        positions, theta);
    });
  }
  Status rms_norm_rope(float* x, const float* weight, int64_t tokens, int64_t heads,
                       int64_t head_dim, float eps, const int32_t* positions,
                       float theta) override {
    return run_op({"rms_norm_rope"}, [=, this] {
      return inner_->rms_norm_rope(x, weight, tokens, heads, head_dim, eps, positions, theta);
    });
  }
  Status softmax(const float* x, float* y, int64_t rows, int64_t cols) override {
    return run_op({"softmax"}, [=, this] { return inner_->softmax(x, y, rows, cols); });
  }
  Status silu(const float* x, float* y, int64_t n) override {
    return run_op({"silu"}, [=, this] { return inner_->silu(x, y, n); });
  }
  Status gelu_erf(const float* x, float* y, int64_t n) override {
    return run_op({"gelu_erf"}, [=, this] { return inner_->gelu_erf(x, y, n); });
  }
  Status gelu_tanh(const float* x, float* y, int64_t n) override {
    return run_op({"gelu_tanh"}, [=, this] { return inner_->gelu_tanh(x, y, n); });
  }
  Status quick_gelu(const float* x, float* y, int64_t n) override {
    return run_op({"quick_gelu"}, [=, this] { return inner_->quick_gelu(x, y, n); });
  }
  Status swiglu(const float* gate, const float* up, float* y, int64_t n) override {
    return run_op({"swiglu"}, [=, this] { return inner_->swiglu(gate, up, y, n); });
  }
  Status geglu(const float* x, float* y, int64_t rows, int64_t hidden) override {
    return run_op({"geglu"}, [=, this] { return inner_->geglu(x, y, rows, hidden); });
  }
  Status add(const float* a, const float* b, float* y, int64_t n) override {
    return run_op({"add"}, [=, this] { return inner_->add(a, b, y, n); });
  }
  Status attention(const float* q, const float* k, const float* v, float* o,
                   const AttentionShape& s) override {
    return run_op({"attention"}, [=, this] { return inner_->attention(q, k, v, o, s); });
  }
  Status attention_decode(const float* q, const float* k, const float* v, float* o,
                          const AttentionShape& s) override {
    return run_op({"attention_decode"},
                  [=, this] { return inner_->attention_decode(q, k, v, o, s); });
  }
  Status embedding_gather(const Weight& table, const int32_t* ids, int64_t n, float* out) override {
    return run_op({"embedding_gather"},
                  [=, this] { return inner_->embedding_gather(table, ids, n, out); });
  }

  // ---- DecodeOps -----------------------------------------------------------------------------
  Status convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n) override {
    return run_op({"to_bf16"},
                  [=, this] { return inner_->decode()->convert_f32_to_bf16(dst, src, n); });
  }
  Status convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n) override {
    return run_op({"from_bf16"},
                  [=, this] { return inner_->decode()->convert_bf16_to_f32(dst, src, n); });
  }
  Status attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, float* o,
                                 const AttentionShape& s) override {
    return run_op({"attention_decode_bf16kv"},
                  [=, this] { return inner_->decode()->attention_decode_bf16kv(q, k, v, o, s); });
  }
  Status store_kv_pair(void* k_cache, void* v_cache, DType cache_dtype, const float* k_rows,
                       const float* v_rows, int64_t batch, int64_t row_elems,
                       int64_t cache_batch_stride, int64_t slot_offset,
                       const int64_t* step) override {
    return run_op({"store_kv_pair"}, [=, this] {
      return inner_->decode()->store_kv_pair(k_cache, v_cache, cache_dtype, k_rows, v_rows, batch,
                                             row_elems, cache_batch_stride, slot_offset, step);
    });
  }
  Status store_kv_rows(void* cache, DType cache_dtype, const float* rows, int64_t batch,
                       int64_t row_elems, int64_t cache_batch_stride, int64_t slot_offset,
                       const int64_t* step) override {
    return run_op({"store_kv_rows"}, [=, this] {
      return inner_->decode()->store_kv_rows(cache, cache_dtype, rows, batch, row_elems,
                                             cache_batch_stride, slot_offset, step);
    });
  }
  Status set_positions(int32_t* positions, int64_t rows, int64_t len, const int64_t* step,
                       int64_t offset) override {
    return run_op({"set_positions"}, [=, this] {
      return inner_->decode()->set_positions(positions, rows, len, step, offset);
    });
  }
  Status attention_decode_at(const float* q, const void* k, const void* v, DType kv_dtype, float* o,
                             const AttentionShape& s, const int64_t* step,
                             int64_t kv_len_offset) override {
    return run_op({"attention_decode_at"}, [=, this] {
      return inner_->decode()->attention_decode_at(q, k, v, kv_dtype, o, s, step, kv_len_offset);
    });
  }
  Status choose_token(const float* logits, const TokenChoice& choice, int64_t* step, uint64_t* rng,
                      int32_t* ids, int64_t ids_count, int32_t* ring, int64_t ring_size) override {
    return run_op({"choose_token"}, [=, this] {
      return inner_->decode()->choose_token(logits, choice, step, rng, ids, ids_count, ring,
                                            ring_size);
    });
  }

  // ---- DiffusionOps --------------------------------------------------------------------------
  ConvAlgo choose_conv_algo(const Conv2dShape& s) const override {
    return inner_->diffusion()->choose_conv_algo(s);
  }
  bool bf16_compute() const override { return inner_->diffusion()->bf16_compute(); }
  bool tf32_products_available() const override {
    return inner_->diffusion()->tf32_products_available();
  }
  void set_tf32_products(bool on) override { inner_->diffusion()->set_tf32_products(on); }
  bool tf32_products() const override { return inner_->diffusion()->tf32_products(); }
  Status group_norm(const float* x, const float* gamma, const float* beta, float* y,
                    const ImageShape& s, int64_t groups, float eps, bool silu,
                    Fusion fusion) override {
    return run_op({"group_norm"}, [=, this] {
      return inner_->diffusion()->group_norm(x, gamma, beta, y, s, groups, eps, silu, fusion);
    });
  }
  Status conv2d(const float* x, const float* packed, const float* bias, float* y,
                const Conv2dShape& s, ConvAlgo algo) override {
    return run_op({"conv2d"},
                  [=, this] { return inner_->diffusion()->conv2d(x, packed, bias, y, s, algo); });
  }
  Status upsample_nearest2x(const float* x, float* y, const ImageShape& s) override {
    return run_op({"upsample_nearest2x"},
                  [=, this] { return inner_->diffusion()->upsample_nearest2x(x, y, s); });
  }
  Status geglu_ff(const float* x, float* y, int64_t rows, int64_t hidden, Fusion fusion) override {
    return run_op({"geglu_ff"},
                  [=, this] { return inner_->diffusion()->geglu_ff(x, y, rows, hidden, fusion); });
  }
  Status diffusion_attention(const float* q, const float* k, const float* v, float* o,
                             const AttentionShape& s, AttentionAlgo algo) override {
    return run_op({"diffusion_attention"}, [=, this] {
      return inner_->diffusion()->diffusion_attention(q, k, v, o, s, algo);
    });
  }
  Status add_per_image(float* y, const float* rows, int64_t batch, int64_t pixels,
                       int64_t channels) override {
    return run_op({"add_per_image"}, [=, this] {
      return inner_->diffusion()->add_per_image(y, rows, batch, pixels, channels);
    });
  }
  Status concat_channels(const float* a, int64_t a_channels, const float* b, int64_t b_channels,
                         float* y, int64_t pixels) override {
    return run_op({"concat_channels"}, [=, this] {
      return inner_->diffusion()->concat_channels(a, a_channels, b, b_channels, y, pixels);
    });
  }
  Status divide(const float* x, float divisor, float* y, int64_t n) override {
    return run_op({"divide"}, [=, this] { return inner_->diffusion()->divide(x, divisor, y, n); });
  }
  Status pointwise(const float* x, float* y, int64_t n, const Pointwise& f) override {
    return run_op({"pointwise"}, [=, this] { return inner_->diffusion()->pointwise(x, y, n, f); });
  }
  Expected<PackedWeight> pack_linear_bf16(const Weight& w) override {
    return inner_->diffusion()->pack_linear_bf16(w);
  }
  Expected<PackedWeight> pack_conv2d_bf16(const float* w, const Conv2dShape& s) override {
    return inner_->diffusion()->pack_conv2d_bf16(w, s);
  }
  // A PackedWeight copy shares the packing, so the captured call may outlive the caller's.
  Status linear_bf16(const float* x, int64_t rows, const PackedWeight& w, const float* bias,
                     float* y) override {
    return run_op({"linear_bf16"},
                  [=, this] { return inner_->diffusion()->linear_bf16(x, rows, w, bias, y); });
  }
  Status conv2d_bf16(const float* x, const PackedWeight& w, const float* bias, float* y,
                     const Conv2dShape& s) override {
    return run_op({"conv2d_bf16"},
                  [=, this] { return inner_->diffusion()->conv2d_bf16(x, w, bias, y, s); });
  }
  bool bf16_products_available() const override {
    return inner_->diffusion()->bf16_products_available();
  }
  Status conv2d_weight(const float* x, const Weight& w, const float* bias, float* y,
                       const Conv2dShape& s) override {
    return run_op({"conv2d_weight"},
                  [=, this] { return inner_->diffusion()->conv2d_weight(x, w, bias, y, s); });
  }

  // ---- ExtractionOps (polygonize_cells: host memory in and out, a transfer-like call, run now) -
  Status fourier_embed(const float* points, int64_t n, const float* freqs, const float* carrier_cs,
                       int64_t num_freqs, float* out) override {
    return run_op({"fourier_embed"}, [=, this] {
      return inner_->extraction()->fourier_embed(points, n, freqs, carrier_cs, num_freqs, out);
    });
  }
  Status polygonize_cells(const CellGrid& grid, const int64_t* cells, const float* corners,
                          int64_t n, std::vector<float>* positions,
                          std::vector<uint32_t>* triangles) override {
    return run_op({"polygonize_cells", OpLabel::Kind::kTransfer}, [&] {
      return inner_->extraction()->polygonize_cells(grid, cells, corners, n, positions, triangles);
    });
  }

  // ---- recording -----------------------------------------------------------------------------
  bool can_record() const override { return inner_->can_record(); }
  Status begin_recording() override { return inner_->begin_recording(); }
  Expected<int64_t> end_recording() override { return inner_->end_recording(); }
  Status replay(int64_t recording) override { return inner_->replay(recording); }
  void drop_recording(int64_t recording) override { inner_->drop_recording(recording); }

 protected:
  DecodeOps* decode_facet() override { return inner_->decode() != nullptr ? this : nullptr; }
  DiffusionOps* diffusion_facet() override {
    return inner_->diffusion() != nullptr ? this : nullptr;
  }
  ExtractionOps* extraction_facet() override {
    return inner_->extraction() != nullptr ? this : nullptr;
  }

  // The hook. The default runs the op.
  virtual Status run_op(const OpLabel& label, std::function<Status()> run) {
    (void)label;
    return run();
  }

 private:
  template <typename Fn>
  Expected<DeviceBuffer> allocate_via(const char* op, size_t bytes, const Fn& fn) {
    (void)bytes;
    DeviceBuffer out;
    Status st = run_op({op, OpLabel::Kind::kHost}, [&]() -> Status {
      auto r = fn();
      if (!r.ok()) return r.status();
      out = std::move(*r);
      return Status();
    });
    if (!st.ok()) return st;
    return out;
  }

  std::unique_ptr<Backend> inner_;
};

}  // namespace tessera::kernels
