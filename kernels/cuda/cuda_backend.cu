// The CUDA backend: kernels::Backend (kernels/backend.h) over tessera::kernels::cuda::* on one
// CUDA stream of one device.
//
// - Memory: cudaMalloc / cudaFree (256-byte aligned). An allocation failure is kOutOfMemory naming
//   the size and the free memory, never a crash.
// - Copies and ops are asynchronous on the backend's stream (created cudaStreamNonBlocking, so
//   work on the legacy default stream never serialises with it). upload() returns once the host
//   data has been taken (pageable memory is staged by the driver before cudaMemcpyAsync returns;
//   for page-locked memory upload waits for the copy), so callers may reuse the host buffer at
//   once, as with the CPU backend. download() and synchronize() wait for the stream; errors of
//   earlier kernels (illegal address, ...) surface there as Status.
// - Every entry point first makes the backend's device current on the calling thread (the
//   runtime::Session loads on one thread and generates on its worker thread).
// - attention_decode(_bf16kv) use a workspace owned by the backend, grown on demand (its size
//   depends on batch, heads and head_dim only, so it grows once per model).
// - The diffusion ops' convolution workspace and attention scratch are owned by the backend too,
//   grown on demand (once per image size).
// - Overlapping copy() (the CPU backend's memmove semantics) goes through a scratch buffer owned
//   by the backend, also grown on demand.
// - Not thread-safe: one thread at a time, like the models that use it.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/diffusion_cuda_ops.h"
#include "kernels/cuda/device.h"

namespace tessera::kernels {
namespace {

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// Every facet (kernels/backend.h).
class CudaBackend final : public Backend,
                          public DecodeOps,
                          public DiffusionOps,
                          public ExtractionOps {
 public:
  CudaBackend(const cuda::DeviceInfo& info, cudaStream_t stream)
      : device_(info.index), stream_(stream) {
    char text[160];
    std::snprintf(text, sizeof(text), "cuda (%s, sm_%d%d, %.1f GiB, device %d)", info.name.c_str(),
                  info.compute_major, info.compute_minor,
                  static_cast<double>(info.total_memory) / (1024.0 * 1024.0 * 1024.0), info.index);
    name_ = text;
  }

  ~CudaBackend() override {
    // Errors cannot be reported from a destructor; work in flight is waited for so that nothing
    // still uses the workspace when it is freed.
    if (bind().ok()) {
      cudaStreamSynchronize(stream_);
      if (workspace_ != nullptr) cudaFree(workspace_);
      if (scratch_ != nullptr) cudaFree(scratch_);
      if (conv_workspace_ != nullptr) cudaFree(conv_workspace_);
      if (attention_scratch_ != nullptr) cudaFree(attention_scratch_);
      for (cudaGraphExec_t graph : graphs_) {
        if (graph != nullptr) cudaGraphExecDestroy(graph);
      }
      cudaStreamDestroy(stream_);
    }
    cudaGetLastError();
  }

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }

  // ---- memory ----------------------------------------------------------------------------------
  Expected<DeviceBuffer> allocate(size_t bytes) override {
    TESSERA_RETURN_IF_ERROR(bind());
    void* data = nullptr;
    // cudaMalloc(0) gives no pointer; a zero-byte request still gets a unique, freeable one.
    const cudaError_t err = cudaMalloc(&data, bytes == 0 ? 1 : bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();  // allocation failures are not sticky; keep them out of later checks
      if (err == cudaErrorMemoryAllocation) {
        size_t free_bytes = 0, total_bytes = 0;
        std::string free_text;
        if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
          free_text = ", " + mib(free_bytes) + " of " + mib(total_bytes) + " free";
        }
        cudaGetLastError();
        return out_of_memory("cuda backend: out of device memory allocating " +
                             std::to_string(bytes) + " bytes (" + mib(bytes) + ") on device " +
                             std::to_string(device_) + free_text);
      }
      return cuda::cuda_error_status(err,
                                     "backend: allocating " + std::to_string(bytes) + " bytes");
    }
    return DeviceBuffer(this, data, bytes);
  }

  void release(void* data) override {
    if (data == nullptr || !bind().ok()) return;
    // cudaFree / cudaFreeHost wait for work that may still use the memory; their errors cannot be
    // reported here.
    if (host_visible_.erase(data) > 0) {
      cudaFreeHost(data);
    } else {
      cudaFree(data);
    }
    cudaGetLastError();
  }

  // Pinned host memory mapped into the device's address space (with unified addressing, the one
  // pointer serves both): the token ring the host reads while graphs run.
  Expected<DeviceBuffer> allocate_host_visible(size_t bytes) override {
    TESSERA_RETURN_IF_ERROR(bind());
    void* data = nullptr;
    TESSERA_CUDA_RETURN_IF_ERROR(
        cudaHostAlloc(&data, bytes == 0 ? 1 : bytes, cudaHostAllocMapped | cudaHostAllocPortable),
        "backend: allocating " + std::to_string(bytes) + " bytes of mapped host memory");
    host_visible_.insert(data);
    return DeviceBuffer(this, data, bytes);
  }

  // ---- recording: CUDA graphs captured from the stream
  bool can_record() const override { return true; }
  Status begin_recording() override {
    TESSERA_RETURN_IF_ERROR(bind());
    TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                                 "backend: begin recording (cudaStreamBeginCapture)");
    return Status();
  }
  Expected<int64_t> end_recording() override {
    TESSERA_RETURN_IF_ERROR(bind());
    cudaGraph_t graph = nullptr;
    const cudaError_t err = cudaStreamEndCapture(stream_, &graph);
    if (err != cudaSuccess || graph == nullptr) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      return cuda::cuda_error_status(
          err == cudaSuccess ? cudaErrorStreamCaptureInvalidated : err,
          "backend: end recording (an op could not be recorded, or one failed while recording)");
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t ierr = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (ierr != cudaSuccess) {
      cudaGetLastError();
      return cuda::cuda_error_status(ierr, "backend: instantiating the recorded graph");
    }
    graphs_.push_back(exec);
    return static_cast<int64_t>(graphs_.size()) - 1;
  }
  Status replay(int64_t recording) override {
    if (recording < 0 || recording >= static_cast<int64_t>(graphs_.size()) ||
        graphs_[static_cast<size_t>(recording)] == nullptr) {
      return invalid_argument("cuda backend: replay of unknown recording " +
                              std::to_string(recording));
    }
    TESSERA_RETURN_IF_ERROR(bind());
    TESSERA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_[static_cast<size_t>(recording)], stream_),
                                 "backend: replaying recording " + std::to_string(recording));
    return Status();
  }
  void drop_recording(int64_t recording) override {
    if (recording < 0 || recording >= static_cast<int64_t>(graphs_.size())) return;
    cudaGraphExec_t& graph = graphs_[static_cast<size_t>(recording)];
    if (graph != nullptr && bind().ok()) {
      cudaGraphExecDestroy(graph);
      cudaGetLastError();
    }
    graph = nullptr;
  }

  Status upload(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return Status();
    TESSERA_RETURN_IF_ERROR(enter("upload", dst, host_src));
    TESSERA_RETURN_IF_ERROR(memcpy_async("upload", dst, host_src, bytes, cudaMemcpyHostToDevice));
    // Page-locked host memory is copied by DMA after cudaMemcpyAsync returns: wait, so the
    // caller may reuse its buffer (pageable memory was staged before the call returned).
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, host_src) == cudaSuccess &&
        attributes.type != cudaMemoryTypeUnregistered) {
      TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "backend upload (pinned)");
    }
    cudaGetLastError();  // cudaPointerGetAttributes' own error, if any, is not ours to keep
    return Status();
  }

  Status download(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return synchronize();
    TESSERA_RETURN_IF_ERROR(enter("download", host_dst, src));
    TESSERA_RETURN_IF_ERROR(memcpy_async("download", host_dst, src, bytes, cudaMemcpyDeviceToHost));
    TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                                 "backend download (waiting for the stream)");
    return Status();
  }

  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return Status();
    TESSERA_RETURN_IF_ERROR(enter("copy", dst, src));
    const auto d = reinterpret_cast<uintptr_t>(dst);
    const auto s = reinterpret_cast<uintptr_t>(src);
    const bool overlap = d < s + bytes && s < d + bytes;
    if (!overlap) return memcpy_async("copy", dst, src, bytes, cudaMemcpyDeviceToDevice);
    // cudaMemcpy leaves overlapping ranges undefined: stage through the scratch buffer.
    TESSERA_RETURN_IF_ERROR(ensure(&scratch_, &scratch_bytes_, bytes, "copy scratch"));
    TESSERA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(scratch_, src, bytes, cudaMemcpyDeviceToDevice, stream_),
        "backend overlapping copy (to scratch)");
    TESSERA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, scratch_, bytes, cudaMemcpyDeviceToDevice, stream_),
        "backend overlapping copy (from scratch)");
    return Status();
  }

  Status fill_zero(void* dst, size_t bytes) override {
    if (bytes == 0) return Status();
    TESSERA_RETURN_IF_ERROR(enter("fill_zero", dst, dst));
    TESSERA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, 0, bytes, stream_),
                                 "backend fill_zero of " + std::to_string(bytes) + " bytes");
    return Status();
  }

  Status synchronize() override {
    TESSERA_RETURN_IF_ERROR(bind());
    TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "backend synchronize");
    return Status();
  }

  Expected<Weight> upload_weight(const Weight& host, DeviceBuffer* storage) override {
    if (host.dtype != DType::kF32 && host.dtype != DType::kBF16 && host.dtype != DType::kI8) {
      return invalid_argument(std::string("cuda backend: weight dtype ") + dtype_name(host.dtype) +
                              " is not supported (f32, bf16 or int8)");
    }
    if (host.dtype == DType::kI8) return upload_int8_weight(host, storage);
    if (host.rows < 0 || host.cols < 0) {
      return invalid_argument("cuda backend: weight of " + std::to_string(host.rows) + " x " +
                              std::to_string(host.cols));
    }
    if (storage == nullptr) return invalid_argument("cuda backend: upload_weight without storage");
    const size_t bytes =
        static_cast<size_t>(host.rows) * static_cast<size_t>(host.cols) * dtype_size(host.dtype);
    if (bytes > 0 && host.data == nullptr) {
      return invalid_argument("cuda backend: upload_weight of a null " + std::to_string(host.rows) +
                              " x " + std::to_string(host.cols) + " weight");
    }
    TESSERA_ASSIGN_OR_RETURN(*storage, allocate(bytes));
    TESSERA_RETURN_IF_ERROR(upload(storage->data(), host.data, bytes));
    Weight device = host;
    device.data = storage->data();
    return device;
  }

  // int8 weights (kernels/int8.h) with their scales, in one buffer: the rows x cols bytes, padded
  // to 256, then rows x (cols / group) f32 scales.
  Expected<Weight> upload_int8_weight(const Weight& host, DeviceBuffer* storage) {
    if (host.rows < 0 || host.cols < 0 || host.group <= 0 || host.cols % host.group != 0) {
      return invalid_argument("cuda backend: int8 weight of " + std::to_string(host.rows) + " x " +
                              std::to_string(host.cols) + " with group " +
                              std::to_string(host.group));
    }
    if (storage == nullptr) return invalid_argument("cuda backend: upload_weight without storage");
    const size_t bytes = static_cast<size_t>(host.rows) * static_cast<size_t>(host.cols);
    const size_t scale_count =
        static_cast<size_t>(host.rows) * static_cast<size_t>(host.cols / host.group);
    if (bytes > 0 && (host.data == nullptr || host.scales == nullptr)) {
      return invalid_argument(
          "cuda backend: upload_weight of an int8 weight without data or scales");
    }
    const size_t scale_offset = (bytes + 255) / 256 * 256;
    TESSERA_ASSIGN_OR_RETURN(*storage, allocate(scale_offset + scale_count * sizeof(float)));
    auto* base = static_cast<char*>(storage->data());
    TESSERA_RETURN_IF_ERROR(upload(base, host.data, bytes));
    TESSERA_RETURN_IF_ERROR(upload(base + scale_offset, host.scales, scale_count * sizeof(float)));
    Weight device = host;
    device.data = base;
    device.scales = reinterpret_cast<const float*>(base + scale_offset);
    return device;
  }

  Expected<const float*> upload_f32(const float* host, int64_t n, DeviceBuffer* storage) override {
    if (n < 0)
      return invalid_argument("cuda backend: upload_f32 of " + std::to_string(n) + " values");
    if (storage == nullptr) return invalid_argument("cuda backend: upload_f32 without storage");
    if (n > 0 && host == nullptr) return invalid_argument("cuda backend: upload_f32 of null data");
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    TESSERA_ASSIGN_OR_RETURN(*storage, allocate(bytes));
    TESSERA_RETURN_IF_ERROR(upload(storage->data(), host, bytes));
    return static_cast<const float*>(storage->as<float>());
  }

  // ---- ops
  // ---------------------------------------------------------------------------------------
  Status linear(const float* x, int64_t m, const Weight& w, const float* bias, float* y) override {
    return on_stream(cuda::linear, x, m, w, bias, y);
  }
  Status linear_multi(const float* x, int64_t m, const LinearPart* parts,
                      int64_t n_parts) override {
    TESSERA_RETURN_IF_ERROR(bind());
    return cuda::linear_multi(x, m, parts, n_parts, stream_);
  }
  Status layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                    int64_t dim, float eps) override {
    return on_stream(cuda::layer_norm, x, weight, bias, y, rows, dim, eps);
  }
  Status rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim,
                  float eps) override {
    return on_stream(cuda::rms_norm, x, weight, y, rows, dim, eps);
  }
  Status rope_interleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                          int64_t token_stride, const int32_t* positions, float theta) override {
    return on_stream(cuda::rope_interleaved, x, tokens, heads, head_dim, token_stride, positions,
                     theta);
  }
  Status add_layer_norm(float* x, const float* t, float* h, int64_t rows, int64_t dim,
                        float eps) override {
    return on_stream(cuda::add_layer_norm, x, t, h, rows, dim, eps);
  }
  Status linear_swiglu(const float* x, int64_t m, const Weight& gate, const float* gate_bias,
                       const Weight& up, const float* up_bias, float* gate_out, float* up_out,
                       float* y) override {
    TESSERA_RETURN_IF_ERROR(bind());
    TESSERA_ASSIGN_OR_RETURN(const bool fused,
                             cuda::linear_swiglu(x, m, gate, gate_bias, up, up_bias, y, stream_));
    if (fused) return Status();
    return TensorOps::linear_swiglu(x, m, gate, gate_bias, up, up_bias, gate_out, up_out, y);
  }
  Status fourier_embed(const float* points, int64_t n, const float* freqs, const float* carrier_cs,
                       int64_t num_freqs, float* out) override {
    return on_stream(cuda::fourier_embed, points, n, freqs, carrier_cs, num_freqs, out);
  }
  Status rms_norm_rope_pair(float* q, const float* q_weight, float* k, const float* k_weight,
                            int64_t tokens, int64_t heads, int64_t head_dim, float eps,
                            const int32_t* positions, float theta) override {
    return on_stream(cuda::rms_norm_rope_pair, q, q_weight, k, k_weight, tokens, heads, head_dim,
                     eps, positions, theta);
  }
  Status rms_norm_rope(float* x, const float* weight, int64_t tokens, int64_t heads,
                       int64_t head_dim, float eps, const int32_t* positions,
                       float theta) override {
    return on_stream(cuda::rms_norm_rope, x, weight, tokens, heads, head_dim, eps, positions,
                     theta);
  }
  Status softmax(const float* x, float* y, int64_t rows, int64_t cols) override {
    return on_stream(cuda::softmax, x, y, rows, cols);
  }
  Status silu(const float* x, float* y, int64_t n) override {
    return on_stream(cuda::silu, x, y, n);
  }
  Status gelu_erf(const float* x, float* y, int64_t n) override {
    return on_stream(cuda::gelu_erf, x, y, n);
  }
  Status gelu_tanh(const float* x, float* y, int64_t n) override {
    return on_stream(cuda::gelu_tanh, x, y, n);
  }
  Status quick_gelu(const float* x, float* y, int64_t n) override {
    return on_stream(cuda::quick_gelu, x, y, n);
  }
  Status swiglu(const float* gate, const float* up, float* y, int64_t n) override {
    return on_stream(cuda::swiglu, gate, up, y, n);
  }
  Status geglu(const float* x, float* y, int64_t rows, int64_t hidden) override {
    return on_stream(cuda::geglu, x, y, rows, hidden);
  }
  Status add(const float* a, const float* b, float* y, int64_t n) override {
    return on_stream(cuda::add, a, b, y, n);
  }
  Status attention(const float* q, const float* k, const float* v, float* o,
                   const AttentionShape& s) override {
    TESSERA_RETURN_IF_ERROR(bind());
    // Large non-causal shapes (the occupancy queries' cross-attention: thousands of queries over
    // the latents) take the naive algorithm (cuBLAS scores, softmax, cuBLAS P V), which beat the
    // flash kernel by 1.5x on the H200 at the diffusion shapes; the flash kernel stays for causal
    // and small shapes, and inside a graph capture that would need a larger scratch.
    if (!s.causal && s.batch > 0 && s.heads > 0 && s.q_len * s.kv_len >= kNaiveAttentionMinScores) {
      const size_t bytes =
          static_cast<size_t>(cuda::attention_scratch_floats(s, AttentionAlgo::kNaive)) *
          sizeof(float);
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream_, &capture),
                                   "attention: cudaStreamIsCapturing");
      if (capture == cudaStreamCaptureStatusNone || bytes <= attention_scratch_bytes_) {
        const Status naive = diffusion_attention(q, k, v, o, s, AttentionAlgo::kNaive);
        // An argument the naive path does not take (a stride, a size past cuBLAS's int), or no
        // memory for its scratch, is refused before anything runs: the flash kernel serves it.
        if (naive.ok() || (naive.code() != ErrorCode::kInvalidArgument &&
                           naive.code() != ErrorCode::kOutOfMemory)) {
          return naive;
        }
      }
    }
    return cuda::attention(q, k, v, o, s, stream_);
  }
  Status attention_decode(const float* q, const float* k, const float* v, float* o,
                          const AttentionShape& s) override {
    TESSERA_RETURN_IF_ERROR(enter_decode(s));
    return cuda::attention_decode(q, k, v, o, s, workspace_, workspace_bytes_, stream_);
  }
  Status embedding_gather(const Weight& table, const int32_t* ids, int64_t n, float* out) override {
    return on_stream(cuda::embedding_gather, table, ids, n, out);
  }
  Status convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n) override {
    return on_stream(cuda::convert_f32_to_bf16, dst, src, n);
  }
  Status convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n) override {
    return on_stream(cuda::convert_bf16_to_f32, dst, src, n);
  }
  Status attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, float* o,
                                 const AttentionShape& s) override {
    TESSERA_RETURN_IF_ERROR(enter_decode(s));
    return cuda::attention_decode_bf16kv(q, k, v, o, s, workspace_, workspace_bytes_, stream_);
  }

  // ---- device-resident decoding (kernels/cuda/cuda_ops.h)
  Status store_kv_rows(void* cache, DType cache_dtype, const float* rows, int64_t batch,
                       int64_t row_elems, int64_t cache_batch_stride, int64_t slot_offset,
                       const int64_t* step) override {
    return on_stream(cuda::store_kv_rows, cache, cache_dtype, rows, batch, row_elems,
                     cache_batch_stride, slot_offset, step);
  }
  Status store_kv_pair(void* k_cache, void* v_cache, DType cache_dtype, const float* k_rows,
                       const float* v_rows, int64_t batch, int64_t row_elems,
                       int64_t cache_batch_stride, int64_t slot_offset,
                       const int64_t* step) override {
    return on_stream(cuda::store_kv_pair, k_cache, v_cache, cache_dtype, k_rows, v_rows, batch,
                     row_elems, cache_batch_stride, slot_offset, step);
  }
  Status set_positions(int32_t* positions, int64_t rows, int64_t len, const int64_t* step,
                       int64_t offset) override {
    return on_stream(cuda::set_positions, positions, rows, len, step, offset);
  }
  Status attention_decode_at(const float* q, const void* k, const void* v, DType kv_dtype, float* o,
                             const AttentionShape& s, const int64_t* step,
                             int64_t kv_len_offset) override {
    TESSERA_RETURN_IF_ERROR(enter_decode(s));  // the workspace for the capacity s.kv_len
    if (kv_dtype == DType::kBF16) {
      return cuda::attention_decode_bf16kv_device_len(
          q, static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), o, s, step,
          kv_len_offset, workspace_, workspace_bytes_, stream_);
    }
    if (kv_dtype != DType::kF32) {
      return unsupported(std::string("cuda attention_decode_at: K/V dtype ") +
                         dtype_name(kv_dtype));
    }
    return cuda::attention_decode_device_len(q, static_cast<const float*>(k),
                                             static_cast<const float*>(v), o, s, step,
                                             kv_len_offset, workspace_, workspace_bytes_, stream_);
  }
  Status choose_token(const float* logits, const TokenChoice& choice, int64_t* step, uint64_t* rng,
                      int32_t* ids, int64_t ids_count, int32_t* ring, int64_t ring_size) override {
    return on_stream(cuda::choose_token, logits, choice, step, rng, ids, ids_count, ring,
                     ring_size);
  }
  // ---- diffusion ops: kernels::cuda (diffusion_cuda_ops.h)
  // ---------------------------------------
  bool tf32_products_available() const override { return true; }  // sm_80+ (make_cuda_backend)
  void set_tf32_products(bool on) override { tf32_ = on; }
  bool tf32_products() const override { return tf32_; }
  ConvAlgo choose_conv_algo(const Conv2dShape& s) const override {
    // Not measured on a GPU yet (the CPU's choice is by measurement): with TF32 products on,
    // im2col (tensor-core GEMMs; Winograd's transforms would amplify the TF32 rounding); else
    // Winograd where it applies and there are enough channels for its 36 batched products to
    // beat the transforms (the latent input's 4 channels stay im2col), im2col elsewhere.
    const bool winograd = !tf32_ && s.kernel == 3 && s.stride == 1 && s.in_c >= 32 && s.out_c >= 32;
    return winograd ? ConvAlgo::kWinograd : ConvAlgo::kGemm;
  }
  Status group_norm(const float* x, const float* gamma, const float* beta, float* y,
                    const ImageShape& s, int64_t groups, float eps, bool silu,
                    Fusion fusion) override {
    return on_stream(cuda::group_norm, x, gamma, beta, y, s, groups, eps, silu, fusion);
  }
  Status conv2d(const float* x, const float* packed, const float* bias, float* y,
                const Conv2dShape& s, ConvAlgo algo) override {
    TESSERA_RETURN_IF_ERROR(bind());
    TESSERA_RETURN_IF_ERROR(ensure(&conv_workspace_, &conv_workspace_bytes_,
                                   cuda::conv2d_workspace_bytes(s, algo), "convolution workspace"));
    // TF32 for this convolution's GEMM only (im2col), never for Winograd, attention or the
    // linear layers; the per-thread cuBLAS flag is off again before returning.
    cuda::set_tf32_products(tf32_ && algo == ConvAlgo::kGemm);
    const Status st =
        cuda::conv2d(x, packed, bias, y, s, algo, conv_workspace_, conv_workspace_bytes_, stream_);
    cuda::set_tf32_products(false);
    return st;
  }
  bool bf16_products_available() const override { return true; }  // sm_80+
  Status conv2d_weight(const float* x, const Weight& w, const float* bias, float* y,
                       const Conv2dShape& s) override {
    TESSERA_RETURN_IF_ERROR(bind());
    TESSERA_RETURN_IF_ERROR(ensure(&conv_workspace_, &conv_workspace_bytes_,
                                   cuda::conv2d_workspace_bytes(s, ConvAlgo::kGemm),
                                   "convolution workspace"));
    return cuda::conv2d_weight(x, w, bias, y, s, conv_workspace_, conv_workspace_bytes_, stream_);
  }
  Status upsample_nearest2x(const float* x, float* y, const ImageShape& s) override {
    return on_stream(cuda::upsample_nearest2x, x, y, s);
  }
  Status geglu_ff(const float* x, float* y, int64_t rows, int64_t hidden, Fusion fusion) override {
    return on_stream(cuda::geglu_ff, x, y, rows, hidden, fusion);
  }
  Status diffusion_attention(const float* q, const float* k, const float* v, float* o,
                             const AttentionShape& s, AttentionAlgo algo) override {
    TESSERA_RETURN_IF_ERROR(bind());
    const int64_t floats = cuda::attention_scratch_floats(s, algo);
    if (floats > 0) {
      TESSERA_RETURN_IF_ERROR(ensure(&attention_scratch_, &attention_scratch_bytes_,
                                     static_cast<size_t>(floats) * sizeof(float),
                                     "attention scratch"));
    }
    // Under Precision::kBf16 (tf32_ on) the score and P V products are TF32 tensor-core products;
    // the flag is off again before returning.
    cuda::set_tf32_products(tf32_);
    const Status st = cuda::diffusion_attention(
        q, k, v, o, s, algo, floats > 0 ? static_cast<float*>(attention_scratch_) : nullptr,
        static_cast<int64_t>(attention_scratch_bytes_ / sizeof(float)), stream_);
    cuda::set_tf32_products(false);
    return st;
  }
  Status add_per_image(float* y, const float* rows, int64_t batch, int64_t pixels,
                       int64_t channels) override {
    return on_stream(cuda::add_per_image, y, rows, batch, pixels, channels);
  }
  Status concat_channels(const float* a, int64_t a_channels, const float* b, int64_t b_channels,
                         float* y, int64_t pixels) override {
    return on_stream(cuda::concat_channels, a, a_channels, b, b_channels, y, pixels);
  }
  Status divide(const float* x, float divisor, float* y, int64_t n) override {
    return on_stream(cuda::divide, x, divisor, y, n);
  }
  Status pointwise(const float* x, float* y, int64_t n, const Pointwise& f) override {
    return on_stream(cuda::pointwise, x, y, n, f);
  }

  Status polygonize_cells(const CellGrid& grid, const int64_t* cells, const float* corners,
                          int64_t n, std::vector<float>* positions,
                          std::vector<uint32_t>* triangles) override {
    return on_stream(cuda::polygonize_cells, grid, cells, corners, n, positions, triangles);
  }

 protected:
  DecodeOps* decode_facet() override { return this; }
  DiffusionOps* diffusion_facet() override { return this; }
  ExtractionOps* extraction_facet() override { return this; }

 private:
  // Makes device_ current on the calling thread (cheap when it already is).
  Status bind() const {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == device_) return Status();
    cudaGetLastError();
    TESSERA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_),
                                 "backend: cudaSetDevice(" + std::to_string(device_) + ")");
    return Status();
  }

  // How attention_decode(_bf16kv) start: device_ current, the workspace large enough for `s`.
  Status enter_decode(const AttentionShape& s) {
    TESSERA_RETURN_IF_ERROR(bind());
    return ensure(&workspace_, &workspace_bytes_, cuda::attention_decode_workspace_bytes(s),
                  "decode workspace");
  }

  // Makes device_ current, then runs a cuda:: op on the backend's stream (its last parameter).
  template <typename... Params, typename... Args>
  Status on_stream(Status (*op)(Params...), const Args&... args) {
    TESSERA_RETURN_IF_ERROR(bind());
    return op(args..., stream_);
  }

  // How the memory entry points start: a null pointer is an error naming `op`, then the backend's
  // device is made current.
  Status enter(const char* op, const void* a, const void* b) const {
    if (a == nullptr || b == nullptr) {
      return invalid_argument(std::string("cuda backend ") + op + ": null pointer");
    }
    return bind();
  }

  // cudaMemcpyAsync on the backend's stream; an error names `op` and the size.
  Status memcpy_async(const char* op, void* dst, const void* src, size_t bytes,
                      cudaMemcpyKind kind) const {
    TESSERA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, bytes, kind, stream_),
        std::string("backend ") + op + " of " + std::to_string(bytes) + " bytes");
    return Status();
  }

  // Grows a backend-owned device buffer to at least `bytes`. The old buffer may still be read by
  // queued kernels: the stream is drained before it is freed (growth happens once or twice per
  // model, never per token once sizes are stable).
  Status ensure(void** buffer, size_t* capacity, size_t bytes, const char* what) {
    if (bytes <= *capacity && *buffer != nullptr) return Status();
    if (*buffer != nullptr) {
      TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                                   std::string("backend: growing the ") + what);
      cudaFree(*buffer);
      *buffer = nullptr;
      *capacity = 0;
    }
    const size_t size = bytes == 0 ? 256 : bytes;
    const cudaError_t err = cudaMalloc(buffer, size);
    if (err != cudaSuccess) {
      cudaGetLastError();
      *buffer = nullptr;
      return cuda::cuda_error_status(err, std::string("backend: allocating ") +
                                              std::to_string(size) + " bytes for the " + what);
    }
    // Zeroed once: the decode workspace's arrival counters must start at zero (every call leaves
    // them so; cuda::attention_decode_workspace_bytes), and no other buffer minds.
    const cudaError_t zero = cudaMemsetAsync(*buffer, 0, size, stream_);
    if (zero != cudaSuccess) {
      cudaGetLastError();
      return cuda::cuda_error_status(zero, std::string("backend: zeroing the ") + what);
    }
    *capacity = size;
    return Status();
  }

  // Scores (q_len x kv_len of one head) from which attention() takes the naive algorithm.
  static constexpr int64_t kNaiveAttentionMinScores = int64_t{1} << 20;

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::string name_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  bool tf32_ = false;               // Precision::kBf16 of the diffusion models (conv2d)
  void* conv_workspace_ = nullptr;  // diffusion convolutions (im2col / Winograd blocks)
  size_t conv_workspace_bytes_ = 0;
  void* attention_scratch_ = nullptr;  // diffusion attention scores (kPartialFused, kNaive)
  size_t attention_scratch_bytes_ = 0;
  std::unordered_set<void*> host_visible_;  // allocate_host_visible()'s pointers (cudaFreeHost)
  std::vector<cudaGraphExec_t> graphs_;     // recordings (null once dropped)
};

}  // namespace

Expected<std::unique_ptr<Backend>> make_cuda_backend(int device, uint64_t min_free_bytes) {
  TESSERA_ASSIGN_OR_RETURN(const cuda::DeviceInfo info, cuda::probe_device(device));
  if (info.free_memory < min_free_bytes) {
    return unsupported("CUDA device " + std::to_string(device) + " (" + info.name + ") has " +
                       mib(info.free_memory) + " of " + mib(info.total_memory) +
                       " free; the CUDA backend needs at least " + mib(min_free_bytes));
  }
  // probe_device made `device` current on this thread.
  cudaStream_t stream = nullptr;
  const cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return cuda::cuda_error_status(
        err, "backend: creating a stream on device " + std::to_string(device));
  }
  return Expected<std::unique_ptr<Backend>>(std::make_unique<CudaBackend>(info, stream));
}

}  // namespace tessera::kernels
