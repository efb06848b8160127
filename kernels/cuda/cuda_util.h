// Helpers shared by the CUDA backend, its callers and the GPU tests:
// - cuda_error_status() / TESSERA_CUDA_RETURN_IF_ERROR: a cudaError_t becomes a Status whose
// message
//   names the operation and the CUDA error.
// - DeviceBuffer: move-only owner of one cudaMalloc allocation, with synchronous upload/download.
// - (nvcc only) small device helpers used by the kernels: warp/block reductions, bf16 loads.
//
// Needs the CUDA runtime headers (the CUDA::cudart target provides them); plain C++ callers that
// must build without CUDA include kernels/cuda/cuda_ops.h and kernels/cuda/device.h only.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/status.h"

namespace tessera::kernels::cuda {

// "cuda <what>: cudaErrorMemoryAllocation (out of memory)". Allocation failures map to
// kOutOfMemory, a missing driver or device to kUnsupported, the rest to kInternal.
inline Status cuda_error_status(cudaError_t err, const std::string& what) {
  std::string message =
      "cuda " + what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorMemoryAllocation:
      return out_of_memory(std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
      return unsupported(std::move(message));
    default:
      return internal_error(std::move(message));
  }
}

}  // namespace tessera::kernels::cuda

// Returns a Status from the enclosing function when `expr` (a cudaError_t) is not cudaSuccess.
// `what` names the operation for the message, e.g. "linear: gemv launch".
#define TESSERA_CUDA_RETURN_IF_ERROR(expr, what)                                   \
  do {                                                                             \
    const cudaError_t tessera_cuda_err_ = (expr);                                  \
    if (tessera_cuda_err_ != cudaSuccess) {                                        \
      return ::tessera::kernels::cuda::cuda_error_status(tessera_cuda_err_, what); \
    }                                                                              \
  } while (0)

// After a kernel launch: reports launch failures (bad configuration, no kernel image, ...).
#define TESSERA_CUDA_CHECK_LAUNCH(what) TESSERA_CUDA_RETURN_IF_ERROR(cudaGetLastError(), what)

namespace tessera::kernels::cuda {

// Owns `bytes` bytes of device memory from cudaMalloc (or nothing). Move-only; the destructor frees
// (errors from cudaFree at that point cannot be reported and are ignored). upload()/download() are
// synchronous cudaMemcpy calls, for load time and tests, not for the decode loop.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }

  // Allocates `bytes` (0 gives an empty buffer without touching the device). `what` names the
  // buffer in the error message.
  static Expected<DeviceBuffer> allocate(size_t bytes, const std::string& what) {
    DeviceBuffer buffer;
    if (bytes == 0) return Expected<DeviceBuffer>(std::move(buffer));
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();  // cudaMalloc failures are not sticky; keep them out of later checks
      return cuda_error_status(err, "allocating " + std::to_string(bytes) + " bytes for " + what);
    }
    buffer.data_ = ptr;
    buffer.bytes_ = bytes;
    // Explicit: C++17 (nvcc's dialect here) does not move a local into a converting constructor.
    return Expected<DeviceBuffer>(std::move(buffer));
  }

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }

  // Copies `bytes` from host memory to the start of the buffer; bytes must not exceed bytes().
  Status upload(const void* host, size_t bytes) {
    if (bytes > bytes_) {
      return invalid_argument("DeviceBuffer::upload: " + std::to_string(bytes) +
                              " bytes into a buffer of " + std::to_string(bytes_));
    }
    if (bytes == 0) return Status();
    TESSERA_CUDA_RETURN_IF_ERROR(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice),
                                 "DeviceBuffer::upload");
    return Status();
  }
  // Copies the first `bytes` of the buffer to host memory (waits for prior work on the legacy
  // default stream and on blocking streams).
  Status download(void* host, size_t bytes) const {
    if (bytes > bytes_) {
      return invalid_argument("DeviceBuffer::download: " + std::to_string(bytes) +
                              " bytes from a buffer of " + std::to_string(bytes_));
    }
    if (bytes == 0) return Status();
    TESSERA_CUDA_RETURN_IF_ERROR(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost),
                                 "DeviceBuffer::download");
    return Status();
  }

  void reset() {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tessera::kernels::cuda

#if defined(__CUDACC__)
// ---- device helpers (kernels only)
// ----------------------------------------------------------------
namespace tessera::kernels::cuda::detail {

inline constexpr unsigned kFullWarpMask = 0xffffffffu;

// Butterfly reductions: every lane ends with the same, bit-identical result (each step adds the
// same two values in either order, and float addition is commutative).
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullWarpMask, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(kFullWarpMask, v, offset));
  }
  return v;
}

// Block-wide sum / max for blockDim.x a multiple of 32 (at most 1024). Every thread of the block
// must call it (it synchronises) and gets the result. `scratch` is __shared__ float[33];
// consecutive calls may reuse it (the leading barrier keeps a call from overwriting what the
// previous one still reads).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float total = lane < warps ? scratch[lane] : 0.f;
    total = warp_sum(total);
    if (lane == 0) scratch[32] = total;
  }
  __syncthreads();
  return scratch[32];
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float total = lane < warps ? scratch[lane] : -INFINITY;
    total = warp_max(total);
    if (lane == 0) scratch[32] = total;
  }
  __syncthreads();
  return scratch[32];
}

// bf16 is the top half of an f32: widening is a shift, exact.
__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}
// Loads one weight element as f32 (T = float or uint16_t holding bf16 bits).
__device__ __forceinline__ float load_weight(const float* p) {
  return *p;
}
__device__ __forceinline__ float load_weight(const uint16_t* p) {
  return bf16_bits_to_float(*p);
}

// Blocks for a grid-stride loop over `n` items with `threads` per block: enough to fill any current
// GPU, small enough for gridDim.x.
inline unsigned grid_stride_blocks(int64_t n, int threads) {
  constexpr int64_t kMaxBlocks = 65535;
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? (blocks < 1 ? 1 : blocks) : kMaxBlocks);
}

// The current device's multiprocessors, queried once per process (132, an H100/H200 SXM's count,
// when the query fails): what the kernels size their grids by.
inline int multiprocessors() {
  static const int sms = [] {
    int device = 0, count = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      return 132;
    }
    return count;
  }();
  return sms;
}

}  // namespace tessera::kernels::cuda::detail
#endif  // __CUDACC__
