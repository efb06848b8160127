// The CPU backend: kernels::Backend over tessera::kernels::cpu::* (SIMD + cpu_pool()).
//
// Memory is plain host memory (64-byte aligned: one cache line, one AVX-512 vector), copies are
// memcpy, weights are used where they lie (zero-copy from a memory-mapped checkpoint). Ops run
// synchronously on the calling thread (and the pool), so synchronize() has nothing to wait for.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/threads.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/cpu/diffusion_bf16.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels {

namespace {

constexpr size_t kAlignment = 64;

// Every facet but extraction (the host embeds the queries and polygonizes: engine/mesh).
class CpuBackend final : public Backend, public DecodeOps, public DiffusionOps {
 public:
  Device device() const override { return Device::kCpu; }

  std::string name() const override {
    const int threads = kernels::cpu::cpu_pool().num_threads();
    return std::string("cpu (") + cpu::isa_name(cpu::active_isa()) + ", " +
           std::to_string(threads) + (threads == 1 ? " thread)" : " threads)");
  }

  Expected<DeviceBuffer> allocate(size_t bytes) override {
    // aligned_alloc needs a multiple of the alignment; a zero-byte request still gets a unique,
    // freeable pointer (one line), so callers need no special case.
    const size_t rounded =
        bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded < bytes) {
      return out_of_memory("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    void* data = std::aligned_alloc(kAlignment, rounded);
    if (data == nullptr) {
      return out_of_memory("cpu backend: out of memory allocating " + std::to_string(bytes) +
                           " bytes");
    }
    return DeviceBuffer(this, data, bytes);
  }

  void release(void* data) override { std::free(data); }

  Status upload(void* dst, const void* host_src, size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, host_src, bytes);
    return Status();
  }
  Status download(void* host_dst, const void* src, size_t bytes) override {
    if (bytes != 0) std::memcpy(host_dst, src, bytes);
    return Status();
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    // memmove: an overlapping copy within one buffer (e.g. shifting a window) is well defined.
    if (bytes != 0) std::memmove(dst, src, bytes);
    return Status();
  }
  Status fill_zero(void* dst, size_t bytes) override {
    if (bytes != 0) std::memset(dst, 0, bytes);
    return Status();
  }
  Status synchronize() override { return Status(); }

  Expected<Weight> upload_weight(const Weight& host, DeviceBuffer* /*storage*/) override {
    if (host.dtype == DType::kI8) {
      if (host.group <= 0 || host.cols % host.group != 0 || host.scales == nullptr) {
        return invalid_argument("cpu backend: int8 weight without scales or with a group of " +
                                std::to_string(host.group) + " that does not divide its " +
                                std::to_string(host.cols) + " columns");
      }
      return host;
    }
    if (host.dtype != DType::kF32 && host.dtype != DType::kBF16) {
      return invalid_argument(std::string("cpu backend: weight dtype ") + dtype_name(host.dtype) +
                              " is not supported (f32, bf16 or int8)");
    }
    return host;
  }
  Expected<const float*> upload_f32(const float* host, int64_t /*n*/,
                                    DeviceBuffer* /*storage*/) override {
    return host;
  }

  Status linear(const float* x, int64_t m, const Weight& w, const float* bias, float* y) override {
    cpu::linear(x, m, w, bias, y);
    return Status();
  }
  bool linear_rows_invariant(const Weight& w, int64_t min_rows) const override {
    return cpu::linear_rows_invariant(w, min_rows);
  }
  Status linear_multi(const float* x, int64_t m, const LinearPart* parts,
                      int64_t n_parts) override {
    cpu::linear_multi(x, m, parts, n_parts);
    return Status();
  }
  Status layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                    int64_t dim, float eps) override {
    cpu::layer_norm(x, weight, bias, y, rows, dim, eps);
    return Status();
  }
  Status rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim,
                  float eps) override {
    cpu::rms_norm(x, weight, y, rows, dim, eps);
    return Status();
  }
  Status rope_interleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                          int64_t token_stride, const int32_t* positions, float theta) override {
    cpu::rope_interleaved(x, tokens, heads, head_dim, token_stride, positions, theta);
    return Status();
  }
  Status softmax(const float* x, float* y, int64_t rows, int64_t cols) override {
    cpu::softmax(x, y, rows, cols);
    return Status();
  }
  Status silu(const float* x, float* y, int64_t n) override {
    cpu::silu(x, y, n);
    return Status();
  }
  Status gelu_erf(const float* x, float* y, int64_t n) override {
    cpu::gelu_erf(x, y, n);
    return Status();
  }
  Status gelu_tanh(const float* x, float* y, int64_t n) override {
    cpu::gelu_tanh(x, y, n);
    return Status();
  }
  Status quick_gelu(const float* x, float* y, int64_t n) override {
    cpu::quick_gelu(x, y, n);
    return Status();
  }
  Status swiglu(const float* gate, const float* up, float* y, int64_t n) override {
    cpu::swiglu(gate, up, y, n);
    return Status();
  }
  Status geglu(const float* x, float* y, int64_t rows, int64_t hidden) override {
    cpu::geglu(x, y, rows, hidden);
    return Status();
  }
  Status add(const float* a, const float* b, float* y, int64_t n) override {
    cpu::add(a, b, y, n);
    return Status();
  }
  Status attention(const float* q, const float* k, const float* v, float* o,
                   const AttentionShape& s) override {
    cpu::attention(q, k, v, o, s);
    return Status();
  }
  Status attention_decode(const float* q, const float* k, const float* v, float* o,
                          const AttentionShape& s) override {
    cpu::attention_decode(q, k, v, o, s);
    return Status();
  }
  Status embedding_gather(const Weight& table, const int32_t* ids, int64_t n, float* out) override {
    cpu::embedding_gather(table, ids, n, out);
    return Status();
  }
  Status convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n) override {
    if (n > 0) ::tessera::convert_f32_to_bf16(src, dst, static_cast<size_t>(n));
    return Status();
  }
  Status convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n) override {
    if (n > 0) ::tessera::convert_bf16_to_f32(src, dst, static_cast<size_t>(n));
    return Status();
  }
  Status attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, float* o,
                                 const AttentionShape& s) override {
    cpu::attention_decode_bf16kv(q, k, v, o, s);
    return Status();
  }

  // ---- device-resident decoding: the "device" is host memory here
  Status store_kv_rows(void* cache, DType cache_dtype, const float* rows, int64_t batch,
                       int64_t row_elems, int64_t cache_batch_stride, int64_t slot_offset,
                       const int64_t* step) override {
    if (cache_dtype != DType::kF32 && cache_dtype != DType::kBF16) {
      return unsupported(std::string("cpu store_kv_rows: cache dtype ") + dtype_name(cache_dtype) +
                         " (F32 or BF16)");
    }
    const int64_t slot = slot_offset + *step;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t at = b * cache_batch_stride + slot * row_elems;
      const float* src = rows + b * row_elems;
      if (cache_dtype == DType::kBF16) {
        ::tessera::convert_f32_to_bf16(src, static_cast<uint16_t*>(cache) + at,
                                       static_cast<size_t>(row_elems));
      } else {
        std::memcpy(static_cast<float*>(cache) + at, src, static_cast<size_t>(row_elems) * 4);
      }
    }
    return Status();
  }
  Status set_positions(int32_t* positions, int64_t rows, int64_t len, const int64_t* step,
                       int64_t offset) override {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < len; ++t) {
        positions[r * len + t] = static_cast<int32_t>(*step + offset + t);
      }
    }
    return Status();
  }
  Status attention_decode_at(const float* q, const void* k, const void* v, DType kv_dtype, float* o,
                             const AttentionShape& s, const int64_t* step,
                             int64_t kv_len_offset) override {
    AttentionShape used = s;
    used.kv_len = std::clamp<int64_t>(*step + kv_len_offset, 0, s.kv_len);
    if (kv_dtype == DType::kBF16) {
      cpu::attention_decode_bf16kv(q, static_cast<const uint16_t*>(k),
                                   static_cast<const uint16_t*>(v), o, used);
      return Status();
    }
    if (kv_dtype != DType::kF32) {
      return unsupported(std::string("cpu attention_decode_at: K/V dtype ") + dtype_name(kv_dtype));
    }
    cpu::attention_decode(q, static_cast<const float*>(k), static_cast<const float*>(v), o, used);
    return Status();
  }
  Status choose_token(const float* logits, const TokenChoice& choice, int64_t* step, uint64_t* rng,
                      int32_t* ids, int64_t ids_count, int32_t* ring, int64_t ring_size) override {
    // Per calling thread: generators on several threads may share this backend.
    thread_local ChooseTokenScratch scratch;
    return choose_token_host(logits, choice, step, rng, ids, ids_count, ring, ring_size, &scratch);
  }

  // ---- diffusion ops: kernels::cpu (diffusion_ops.h)
  // ---------------------------------------------
  ConvAlgo choose_conv_algo(const Conv2dShape& s) const override {
    return cpu::choose_conv_algo(s);
  }
  Status group_norm(const float* x, const float* gamma, const float* beta, float* y,
                    const ImageShape& s, int64_t groups, float eps, bool silu,
                    Fusion fusion) override {
    cpu::group_norm(x, gamma, beta, y, s, groups, eps, silu, fusion);
    return Status();
  }
  Status conv2d(const float* x, const float* packed, const float* bias, float* y,
                const Conv2dShape& s, ConvAlgo algo) override {
    cpu::conv2d(x, packed, bias, y, s, algo);
    return Status();
  }
  Status upsample_nearest2x(const float* x, float* y, const ImageShape& s) override {
    cpu::upsample_nearest2x(x, y, s);
    return Status();
  }
  Status geglu_ff(const float* x, float* y, int64_t rows, int64_t hidden, Fusion fusion) override {
    cpu::geglu_ff(x, y, rows, hidden, fusion);
    return Status();
  }
  Status diffusion_attention(const float* q, const float* k, const float* v, float* o,
                             const AttentionShape& s, AttentionAlgo algo) override {
    // Per calling thread, like the kernels' own scratch: only the naive baseline needs it.
    thread_local std::vector<float> scratch;
    const int64_t floats = cpu::attention_scratch_floats(s, algo);
    if (static_cast<int64_t>(scratch.size()) < floats) scratch.resize(static_cast<size_t>(floats));
    cpu::diffusion_attention(q, k, v, o, s, algo, floats > 0 ? scratch.data() : nullptr);
    return Status();
  }
  Status add_per_image(float* y, const float* rows, int64_t batch, int64_t pixels,
                       int64_t channels) override {
    for (int64_t n = 0; n < batch; ++n) {
      const float* r = rows + n * channels;
      float* yn = y + n * pixels * channels;
      for (int64_t p = 0; p < pixels; ++p) {
        float* row = yn + p * channels;
        for (int64_t c = 0; c < channels; ++c) row[c] += r[c];
      }
    }
    return Status();
  }
  Status concat_channels(const float* a, int64_t a_channels, const float* b, int64_t b_channels,
                         float* y, int64_t pixels) override {
    const int64_t yc = a_channels + b_channels;
    for (int64_t p = 0; p < pixels; ++p) {
      std::memcpy(y + p * yc, a + p * a_channels, sizeof(float) * static_cast<size_t>(a_channels));
      std::memcpy(y + p * yc + a_channels, b + p * b_channels,
                  sizeof(float) * static_cast<size_t>(b_channels));
    }
    return Status();
  }
  Status divide(const float* x, float divisor, float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] / divisor;
    return Status();
  }
  Status pointwise(const float* x, float* y, int64_t n, const Pointwise& f) override {
    if (n > 0) cpu::pointwise(x, y, n, f);
    return Status();
  }
  bool bf16_compute() const override { return cpu::bf16_compute_available(); }
  Expected<PackedWeight> pack_linear_bf16(const Weight& w) override {
    TESSERA_RETURN_IF_ERROR(require_bf16("pack_linear_bf16"));
    return PackedWeight(std::make_shared<const cpu::gemm_bf16::PackedB>(cpu::linear_pack_bf16(w)),
                        maker());
  }
  Expected<PackedWeight> pack_conv2d_bf16(const float* w, const Conv2dShape& s) override {
    TESSERA_RETURN_IF_ERROR(require_bf16("pack_conv2d_bf16"));
    return PackedWeight(
        std::make_shared<const cpu::gemm_bf16::PackedB>(cpu::conv2d_pack_weights_bf16(w, s)),
        maker());
  }
  Status linear_bf16(const float* x, int64_t rows, const PackedWeight& w, const float* bias,
                     float* y) override {
    TESSERA_RETURN_IF_ERROR(require_packed(w, "linear_bf16"));
    cpu::linear_bf16(x, rows, w.as<cpu::gemm_bf16::PackedB>(), bias, y);
    return Status();
  }
  Status conv2d_bf16(const float* x, const PackedWeight& w, const float* bias, float* y,
                     const Conv2dShape& s) override {
    TESSERA_RETURN_IF_ERROR(require_packed(w, "conv2d_bf16"));
    cpu::conv2d_bf16(x, w.as<cpu::gemm_bf16::PackedB>(), bias, y, s);
    return Status();
  }

 protected:
  DecodeOps* decode_facet() override { return this; }
  DiffusionOps* diffusion_facet() override { return this; }

 private:
  // The tag of this backend's packings (PackedWeight::maker).
  const void* maker() const { return static_cast<const DiffusionOps*>(this); }
  Status require_bf16(const char* op) const {
    if (cpu::bf16_compute_available()) return Status();
    return unsupported(name() + ": no bf16 compute on this CPU (" + op + ")");
  }
  // A packing of this backend's, on a CPU that runs it.
  Status require_packed(const PackedWeight& w, const char* op) const {
    TESSERA_RETURN_IF_ERROR(require_bf16(op));
    if (w.empty() || w.maker() != maker()) {
      return invalid_argument(name() + ": " + op +
                              " got a weight this backend did not pack (pack_*_bf16 first)");
    }
    return Status();
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace tessera::kernels
