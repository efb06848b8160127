// Backend: the op interface as an object, so model code is written once and never branches on the
// device (docs/architecture.md). A model holds a Backend& and calls its ops on buffers the backend
// allocated; the CPU backend calls tessera::kernels::cpu::*, the CUDA backend
// tessera::kernels::cuda::* on its stream.
//
// A backend is memory, recording and a few facets (docs/adding-an-op.md says how an op joins one):
// - TensorOps (kernels/tensor_facet.h): every backend; a Backend is one.
// - DecodeOps (kernels/decode_facet.h): the bf16 K/V cache and the device-resident decode step.
// - DiffusionOps (kernels/diffusion_facet.h): the UNet / VAE layers.
// - ExtractionOps (kernels/extraction_facet.h): query embedding and polygonizing on the device.
// decode(), diffusion() and extraction() return the facet, or null where the backend has none.
//
// Contract:
// - Every pointer passed to an op is memory of this backend (host memory for the CPU backend,
//   device memory for CUDA). Weights from a memory-mapped checkpoint are host memory: backends that
//   are not on the host upload them once at load time (upload_weight).
// - Ops have exactly the semantics documented in kernels/ops.h and kernels/diffusion_ops.h. They
//   return Status: the CPU backend always returns ok (shapes are validated by the model at load
//   time); device backends report launch failures and out-of-memory.
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
#include "kernels/decode_facet.h"
#include "kernels/diffusion_facet.h"
#include "kernels/extraction_facet.h"
#include "kernels/ops.h"
#include "kernels/tensor_facet.h"

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

class Backend : public TensorOps {
 public:
  ~Backend() override = default;

  virtual Device device() const = 0;
  // "cpu (avx512, 2 threads)", "cuda (NVIDIA H200, sm_90)"
  virtual std::string name() const = 0;

  // ---- the optional facets: null where this backend has none ------------------------------------
  DecodeOps* decode() { return decode_facet(); }
  const DecodeOps* decode() const { return const_cast<Backend*>(this)->decode_facet(); }
  DiffusionOps* diffusion() { return diffusion_facet(); }
  const DiffusionOps* diffusion() const { return const_cast<Backend*>(this)->diffusion_facet(); }
  ExtractionOps* extraction() { return extraction_facet(); }
  const ExtractionOps* extraction() const { return const_cast<Backend*>(this)->extraction_facet(); }

  // ---- memory ----------------------------------------------------------------------------------
  // `bytes` of backend memory, 64-byte aligned, uninitialised; kOutOfMemory naming the size.
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
  // Memory of this backend that the host may also read and write directly (pinned and mapped for
  // CUDA; what the host sees of the device's writes is complete after synchronize()). Default:
  // allocate() (the CPU backend's memory is the host's).
  virtual Expected<DeviceBuffer> allocate_host_visible(size_t bytes) { return allocate(bytes); }

  // ---- recording (optional: CUDA graphs) --------------------------------------------------------
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

 protected:
  // What decode(), diffusion() and extraction() return: a backend that implements a facet
  // returns itself (or a member) here.
  virtual DecodeOps* decode_facet() { return nullptr; }
  virtual DiffusionOps* diffusion_facet() { return nullptr; }
  virtual ExtractionOps* extraction_facet() { return nullptr; }
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
