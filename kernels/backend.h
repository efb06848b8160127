// Backend: the op interface as an object, so model code is written once and never branches on the
// device (docs/architecture.md). A model holds a Backend& and calls its ops on buffers the backend
// allocated; the CPU backend calls tessera::kernels::cpu::*, the CUDA backend (issue: CUDA backend)
// tessera::kernels::cuda::* on its stream.
//
// Contract:
// - Every pointer passed to an op is memory of this backend (host memory for the CPU backend,
//   device memory for CUDA). Weights from a memory-mapped checkpoint are host memory: backends that
//   are not on the host upload them once at load time (upload_weight).
// - Ops have exactly the semantics documented in kernels/ops.h. They return Status: the CPU backend
//   always returns ok (shapes are validated by the model at load time); device backends report
//   launch failures and out-of-memory.
// - Ops may run asynchronously (CUDA streams); synchronize() waits for all of them. Copies to the
//   host (download) synchronize.
// - Memory comes from allocate(); each backend buffer is freed by the DeviceBuffer that owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/diffusion_ops.h"
#include "kernels/marching_tets.h"
#include "kernels/ops.h"
#include "kernels/sampling.h"

namespace tessera::kernels {

class Backend;

// Move-only owner of one backend allocation. Inline, so that every backend library (the CPU one,
// the CUDA one) can hand out buffers without depending on another.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* backend, void* data, size_t bytes)
      : backend_(backend), data_(data), bytes_(bytes) {}
  inline ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : backend_(std::exchange(o.backend_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  inline DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  // Frees the allocation now; the buffer is empty afterwards.
  inline void reset();

 private:
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // "cpu (avx512, 2 threads)", "cuda (NVIDIA H200, sm_90)"
  virtual std::string name() const = 0;

  // ---- memory
  // ------------------------------------------------------------------------------------ `bytes` of
  // backend memory, 64-byte aligned, uninitialised; kOutOfMemory naming the size.
  virtual Expected<DeviceBuffer> allocate(size_t bytes) = 0;
  virtual void release(void* data) = 0;  // called by DeviceBuffer
  virtual Status upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual Status download(void* host_dst, const void* src, size_t bytes) = 0;  // synchronizes
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;           // backend -> backend
  virtual Status fill_zero(void* dst, size_t bytes) = 0;
  virtual Status synchronize() = 0;
  // A weight for ops from host memory (e.g. a memory-mapped checkpoint). The CPU backend returns a
  // view of the same memory (zero-copy; `storage` stays empty); device backends copy it into
  // `storage`, which must outlive the returned Weight.
  virtual Expected<Weight> upload_weight(const Weight& host, DeviceBuffer* storage) = 0;
  // Same for a plain f32 vector (norm scales, biases).
  virtual Expected<const float*> upload_f32(const float* host, int64_t n,
                                            DeviceBuffer* storage) = 0;

  // ---- ops (semantics: kernels/ops.h)
  // ------------------------------------------------------------
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

  // Fourier features of n points for the shape decoder's queries (engine/shape/shape_decoder.h's
  // FourierEmbedder): out[i] (3 + 6 F floats) = p, then cos(p_d f_dj) + cos(p_d pi/2 + c_j) for
  // d < 3, j < F, then the same with sin; freqs [3][F], carrier_cs the carrier's cos [F] then sin
  // [F]; all in this backend's memory. Optional: the default reports kUnsupported and the caller
  // embeds on the host (the CPU backend's memory is the host's).
  virtual Status fourier_embed(const float* points, int64_t n, const float* freqs,
                               const float* carrier_cs, int64_t num_freqs, float* out) {
    (void)points, (void)n, (void)freqs, (void)carrier_cs, (void)num_freqs, (void)out;
    return unsupported(name() + ": no device Fourier features");
  }

  // ---- bf16 K/V cache (optional; the defaults report kUnsupported) ------------------------------
  // dst[i] = bf16(src[i]) (round to nearest even, as convert_f32_to_bf16), i < n: K/V cache writes.
  virtual Status convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n) {
    (void)dst, (void)src, (void)n;
    return unsupported(name() + ": no bf16 conversion (bf16 K/V cache)");
  }
  // dst[i] = f32(src[i]) (exact), i < n.
  virtual Status convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n) {
    (void)dst, (void)src, (void)n;
    return unsupported(name() + ": no bf16 conversion (bf16 K/V cache)");
  }
  // attention_decode over bf16 k/v (kernels/ops.h: attention_decode_bf16kv).
  virtual Status attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v,
                                         float* o, const AttentionShape& s) {
    (void)q, (void)k, (void)v, (void)o, (void)s;
    return unsupported(name() + ": no decode attention over a bf16 K/V cache");
  }

  // ---- Device-resident decoding (optional; the defaults report kUnsupported) --------------------
  // True when the four ops below are implemented.
  virtual bool device_resident() const { return false; }
  // Ops that read a step counter (*step: int64 in this backend's memory) when they run, so one
  // recorded decode step (a CUDA graph) replays for every token with no host round trip. Contracts
  // as kernels/cuda/cuda_ops.h's ops of the same names; the CPU backend implements them on host
  // memory, so the device-resident decode loop runs (and is tested) everywhere.
  // rows (f32, [batch][row_elems]) -> cache (kF32, or kBF16 rounded to nearest even) at slot
  // slot_offset + *step of each batch row (cache_batch_stride elements apart).
  virtual Status store_kv_rows(void* cache, DType cache_dtype, const float* rows, int64_t batch,
                               int64_t row_elems, int64_t cache_batch_stride, int64_t slot_offset,
                               const int64_t* step) {
    (void)cache, (void)cache_dtype, (void)rows, (void)batch, (void)row_elems,
        (void)cache_batch_stride, (void)slot_offset, (void)step;
    return unsupported(name() + ": no device-resident decoding (store_kv_rows)");
  }
  // store_kv_rows of a layer's K and V (same shapes and slot): the two calls by default, one
  // kernel on CUDA.
  virtual Status store_kv_pair(void* k_cache, void* v_cache, DType cache_dtype, const float* k_rows,
                               const float* v_rows, int64_t batch, int64_t row_elems,
                               int64_t cache_batch_stride, int64_t slot_offset,
                               const int64_t* step) {
    TESSERA_RETURN_IF_ERROR(store_kv_rows(k_cache, cache_dtype, k_rows, batch, row_elems,
                                          cache_batch_stride, slot_offset, step));
    return store_kv_rows(v_cache, cache_dtype, v_rows, batch, row_elems, cache_batch_stride,
                         slot_offset, step);
  }
  // positions[r * len + t] = *step + offset + t, r < rows, t < len.
  virtual Status set_positions(int32_t* positions, int64_t rows, int64_t len, const int64_t* step,
                               int64_t offset) {
    (void)positions, (void)rows, (void)len, (void)step, (void)offset;
    return unsupported(name() + ": no device-resident decoding (set_positions)");
  }
  // attention_decode (kv_dtype kF32) or attention_decode_bf16kv (kBF16) over the first
  // clamp(*step + kv_len_offset, 0, s.kv_len) keys; s.kv_len is the cache's capacity.
  virtual Status attention_decode_at(const float* q, const void* k, const void* v, DType kv_dtype,
                                     float* o, const AttentionShape& s, const int64_t* step,
                                     int64_t kv_len_offset) {
    (void)q, (void)k, (void)v, (void)kv_dtype, (void)o, (void)s, (void)step, (void)kv_len_offset;
    return unsupported(name() + ": no device-resident decoding (attention_decode_at)");
  }
  // Guidance mix + next token (kernels/sampling.h): step, rng, ids and ring are this backend's
  // memory; the ring may be host-visible memory from allocate_host_visible().
  virtual Status choose_token(const float* logits, const TokenChoice& choice, int64_t* step,
                              uint64_t* rng, int32_t* ids, int64_t ids_count, int32_t* ring,
                              int64_t ring_size) {
    (void)logits, (void)choice, (void)step, (void)rng, (void)ids, (void)ids_count, (void)ring,
        (void)ring_size;
    return unsupported(name() + ": no device-resident decoding (choose_token)");
  }

  // ---- Recording (optional: CUDA graphs) --------------------------------------------------------
  // Between begin_recording() and end_recording() the ops are recorded, not run; replay() then runs
  // the recording as one launch. Only device-resident work may be recorded (no upload, download,
  // synchronize or allocation: run the same calls once eagerly first, so workspaces exist). A
  // failed op while recording leaves the recording unusable: end_recording() then reports it.
  virtual bool can_record() const { return false; }
  virtual Status begin_recording() { return unsupported(name() + ": cannot record ops"); }
  virtual Expected<int64_t> end_recording() { return unsupported(name() + ": cannot record ops"); }
  virtual Status replay(int64_t recording) {
    (void)recording;
    return unsupported(name() + ": cannot record ops");
  }
  virtual void drop_recording(int64_t recording) { (void)recording; }
  // Memory of this backend that the host may also read and write directly (pinned and mapped for
  // CUDA; what the host sees of the device's writes is complete after synchronize()). Default:
  // allocate() (the CPU backend's memory is the host's).
  virtual Expected<DeviceBuffer> allocate_host_visible(size_t bytes) { return allocate(bytes); }

  // ---- diffusion ops (optional; the defaults report kUnsupported) -------------------------------
  // The UNet / VAE layers of engine/diffusion (layers.h) run through these. Semantics: the ops of
  // the same names in kernels/diffusion_ops.h (namespace cpu); the CUDA backend runs
  // kernels/cuda/diffusion_cuda_ops.h. Scratch (im2col / Winograd blocks, attention scores) is
  // the backend's own, grown on demand.
  // True when every op of this section except the bf16 pair is implemented.
  virtual bool can_diffuse() const { return false; }
  // The algorithm conv2d runs best for s on this backend (ConvPolicy::kAuto). Default: im2col.
  virtual ConvAlgo choose_conv_algo(const Conv2dShape& s) const {
    (void)s;
    return ConvAlgo::kGemm;
  }
  // GroupNorm(+SiLU) over NHWC x; `fusion` kOff runs the SiLU as a second pass.
  virtual Status group_norm(const float* x, const float* gamma, const float* beta, float* y,
                            const ImageShape& s, int64_t groups, float eps, bool silu,
                            Fusion fusion) {
    (void)x, (void)gamma, (void)beta, (void)y, (void)s, (void)groups, (void)eps, (void)silu,
        (void)fusion;
    return unsupported(name() + ": no diffusion ops (group_norm)");
  }
  // A 3x3 / 1x1 convolution with weights packed for `algo` by cpu::conv2d_pack_weights (the packed
  // floats copied to this backend's memory as they are).
  virtual Status conv2d(const float* x, const float* packed, const float* bias, float* y,
                        const Conv2dShape& s, ConvAlgo algo) {
    (void)x, (void)packed, (void)bias, (void)y, (void)s, (void)algo;
    return unsupported(name() + ": no diffusion ops (conv2d)");
  }
  virtual Status upsample_nearest2x(const float* x, float* y, const ImageShape& s) {
    (void)x, (void)y, (void)s;
    return unsupported(name() + ": no diffusion ops (upsample_nearest2x)");
  }
  // GEGLU feed-forward split: x [rows, 2 hidden] (value | gate) -> y [rows, hidden].
  virtual Status geglu_ff(const float* x, float* y, int64_t rows, int64_t hidden, Fusion fusion) {
    (void)x, (void)y, (void)rows, (void)hidden, (void)fusion;
    return unsupported(name() + ": no diffusion ops (geglu_ff)");
  }
  // Non-causal attention with `algo` (kAuto: the backend's own choice per shape).
  virtual Status diffusion_attention(const float* q, const float* k, const float* v, float* o,
                                     const AttentionShape& s, AttentionAlgo algo) {
    (void)q, (void)k, (void)v, (void)o, (void)s, (void)algo;
    return unsupported(name() + ": no diffusion ops (diffusion_attention)");
  }
  // y[n, p, c] += rows[n, c] for n < batch, p < pixels, c < channels (a ResBlock's timestep
  // projection added to every pixel of its image).
  virtual Status add_per_image(float* y, const float* rows, int64_t batch, int64_t pixels,
                               int64_t channels) {
    (void)y, (void)rows, (void)batch, (void)pixels, (void)channels;
    return unsupported(name() + ": no diffusion ops (add_per_image)");
  }
  // y[p] = [a[p] (a_channels) | b[p] (b_channels)] per pixel p < pixels (NHWC channel
  // concatenation, torch.cat(dim=1) of NCHW). y must not alias a or b.
  virtual Status concat_channels(const float* a, int64_t a_channels, const float* b,
                                 int64_t b_channels, float* y, int64_t pixels) {
    (void)a, (void)a_channels, (void)b, (void)b_channels, (void)y, (void)pixels;
    return unsupported(name() + ": no diffusion ops (concat_channels)");
  }
  // y[i] = x[i] / divisor (a division, as PyTorch's z / scale), i < n; in place OK.
  virtual Status divide(const float* x, float divisor, float* y, int64_t n) {
    (void)x, (void)divisor, (void)y, (void)n;
    return unsupported(name() + ": no diffusion ops (divide)");
  }
  // bf16 compute (Precision::kBf16): whether the pair below runs here (the CPU backend on AVX-512
  // BF16 CPUs); the layers fall back to f32 otherwise. Weights are packed on the host
  // (cpu::linear_pack_bf16 / conv2d_pack_weights_bf16), so only host-memory backends can.
  virtual bool bf16_compute() const { return false; }
  // Precision::kBf16 on a device: TF32 tensor-core products (the CUDA backend: cuBLAS TF32 math
  // for the im2col convolution GEMMs only, as PyTorch, whose default allows TF32 in convolutions
  // and not in matmuls; with it on, choose_conv_algo picks im2col, since Winograd's transforms
  // would amplify the TF32 rounding). A state of the backend until switched off: the models
  // switch it on for one forward and restore the previous state after it.
  virtual bool tf32_products_available() const { return false; }
  virtual void set_tf32_products(bool on) { (void)on; }
  virtual bool tf32_products() const { return false; }
  // Precision::kBf16 on a device, the weight products: bf16 tensor-core products for the linear
  // layers (linear() with a bf16 Weight from upload_weight) and the im2col convolutions
  // (conv2d_weight below): x rounded to bf16 as ops.h's bf16 linear contract, f32 sums and
  // outputs. The models use them instead of TF32 for every product with a weight; TF32 (above)
  // is left for the activation-by-activation products of attention.
  virtual bool bf16_products_available() const { return false; }
  // conv2d's contract (ConvAlgo::kGemm) with the weights as a backend Weight of out_c rows and
  // kernel^2 * in_c columns in cpu::conv2d_pack_weights' kGemm order ([out_c][ky][kx][in_c]), in
  // any dtype linear() takes (bf16 on a device: the tensor cores).
  virtual Status conv2d_weight(const float* x, const Weight& w, const float* bias, float* y,
                               const Conv2dShape& s) {
    (void)x, (void)w, (void)bias, (void)y, (void)s;
    return unsupported(name() + ": no convolution with backend weights (conv2d_weight)");
  }
  virtual Status linear_bf16(const float* x, int64_t rows, const cpu::gemm_bf16::PackedB& w,
                             const float* bias, float* y) {
    (void)x, (void)rows, (void)w, (void)bias, (void)y;
    return unsupported(name() + ": no bf16 compute (linear_bf16)");
  }
  virtual Status conv2d_bf16(const float* x, const cpu::gemm_bf16::PackedB& w, const float* bias,
                             float* y, const Conv2dShape& s) {
    (void)x, (void)w, (void)bias, (void)y, (void)s;
    return unsupported(name() + ": no bf16 compute (conv2d_bf16)");
  }

  // ---- surface extraction
  // ------------------------------------------------------------------------ Whether
  // polygonize_cells runs here (the CUDA backend); the CPU backend says no and the extractor keeps
  // its host polygonizer (engine/mesh/extraction.h).
  virtual bool can_polygonize() const { return false; }
  // kernels::cpu::polygonize_cells' contract (kernels/marching_tets.h), host memory in and out.
  virtual Status polygonize_cells(const CellGrid& grid, const int64_t* cells, const float* corners,
                                  int64_t n, std::vector<float>* positions,
                                  std::vector<uint32_t>* triangles) {
    (void)grid, (void)cells, (void)corners, (void)n, (void)positions, (void)triangles;
    return unsupported(name() + ": no polygonize_cells");
  }
};

inline void DeviceBuffer::reset() {
  if (backend_ != nullptr && data_ != nullptr) backend_->release(data_);
  backend_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}
inline DeviceBuffer::~DeviceBuffer() {
  reset();
}
inline DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    backend_ = std::exchange(o.backend_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

// The CPU backend (kernels/cpu, cpu_pool()).
std::unique_ptr<Backend> make_cpu_backend();

// ---- the CUDA backend and backend selection ---------------------------------------------------

// Free device memory below which make_cuda_backend() refuses a device (the tiny model needs a few
// MiB, the full-size v0.5 GPT ~4 GiB in bf16; below this nothing useful fits next to the CUDA
// context, cuBLAS workspaces and the activations).
inline constexpr uint64_t kMinCudaFreeBytes = uint64_t{512} << 20;

// The CUDA backend (kernels/cuda/cuda_backend.cu) on device `device`: one CUDA stream, every op
// through kernels::cuda::*, memory from cudaMalloc. Never crashes on a machine without a usable
// GPU: the error Status (kUnsupported) says why: built without CUDA, no driver, no device, device
// index out of range, compute capability below 8.0, no code for the architecture in this build,
// or less than `min_free_bytes` free device memory. Other CUDA failures while creating the
// stream are kInternal.
Expected<std::unique_ptr<Backend>> make_cuda_backend(int device = 0,
                                                     uint64_t min_free_bytes = kMinCudaFreeBytes);

// Which backend a user asked for (--device).
enum class DeviceChoice : uint8_t {
  kAuto,  // CUDA when a usable device exists, else the CPU (silently: the reason goes to `note`)
  kCpu,
  kCuda,  // CUDA or an error saying why not
};
const char* device_choice_name(DeviceChoice choice);  // "auto", "cpu", "cuda"
// "auto", "cpu" or "cuda" (case-sensitive); kInvalidArgument naming `text` otherwise.
Expected<DeviceChoice> parse_device_choice(std::string_view text);

struct BackendSelection {
  std::unique_ptr<Backend> backend;  // never null on success
  // kAuto that ended on the CPU: one line saying why CUDA was not used (for verbose / info
  // output; callers must not print it by default). Empty otherwise.
  std::string note;
};
// kCpu: the CPU backend. kCuda: make_cuda_backend(cuda_device), its error as is. kAuto: the CUDA
// backend when make_cuda_backend() succeeds, else the CPU backend with `note` set (never an error).
Expected<BackendSelection> make_backend(DeviceChoice choice, int cuda_device = 0);

}  // namespace tessera::kernels
