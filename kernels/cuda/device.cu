// Device discovery for a build with the CUDA backend (kernels/cuda/device.h).
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/device.h"

// nvcc defines __CUDA_ARCH_LIST__ (e.g. 800,900) with the architectures this file is compiled for;
// every .cu file of the backend is compiled for the same list.
#define TESSERA_STRINGIFY_INNER_(...) #__VA_ARGS__
#define TESSERA_STRINGIFY_(...) TESSERA_STRINGIFY_INNER_(__VA_ARGS__)
#if defined(__CUDA_ARCH_LIST__)
#define TESSERA_CUDA_ARCHES TESSERA_STRINGIFY_(__CUDA_ARCH_LIST__)
#else
#define TESSERA_CUDA_ARCHES "unknown"
#endif

namespace tessera::kernels::cuda {
namespace {

// Never launched: asking the runtime for its attributes tells whether this binary holds code (SASS,
// or PTX the driver can JIT) for the device, which the compute capability alone does not (sm_90a
// code runs on sm_90 only).
__global__ void probe_kernel() {}

std::string no_device_message(cudaError_t err, const char* call) {
  return std::string("no usable CUDA device: ") + call + " failed with " + cudaGetErrorName(err) +
         " (" + cudaGetErrorString(err) + ")";
}

}  // namespace

bool built_with_cuda() {
  return true;
}

Expected<DeviceInfo> probe_device() {
  return probe_device(0);
}

Expected<DeviceInfo> probe_device(int index) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return unsupported(no_device_message(err, "cudaGetDeviceCount"));
  }
  if (count <= 0) return unsupported("no usable CUDA device: the driver reports no CUDA device");
  if (index < 0 || index >= count) {
    return unsupported("no usable CUDA device: device " + std::to_string(index) +
                       " requested, the driver reports " + std::to_string(count) +
                       (count == 1 ? " device (index 0)"
                                   : " devices (indices 0.." + std::to_string(count - 1) + ")"));
  }

  const int device = index;
  const std::string index_text = std::to_string(index);
  const std::string properties_call = "cudaGetDeviceProperties(" + index_text + ")";
  const std::string set_call = "cudaSetDevice(" + index_text + ")";
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return unsupported(no_device_message(err, properties_call.c_str()));
  }
  DeviceInfo info;
  info.index = device;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.total_memory = prop.totalGlobalMem;
  info.multiprocessors = prop.multiProcessorCount;
  const std::string device_label = "device " + index_text + " (" + info.name +
                                   ", compute capability " + std::to_string(prop.major) + "." +
                                   std::to_string(prop.minor) + ")";

  if (prop.major < 8) {
    return unsupported(device_label +
                       " is older than 8.0 (Ampere), the oldest architecture the CUDA backend "
                       "supports (this build has code for " TESSERA_CUDA_ARCHES ")");
  }

  err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return unsupported(no_device_message(err, set_call.c_str()));
  }
  cudaFuncAttributes attributes{};
  err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return unsupported(device_label + " cannot run this build's kernels (compiled for " +
                       TESSERA_CUDA_ARCHES "): " + cudaGetErrorName(err) +
                       "; rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(prop.major) +
                       std::to_string(prop.minor));
  }

  size_t free_bytes = 0;
  size_t total_bytes = 0;
  err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return unsupported(device_label + ": " + no_device_message(err, "cudaMemGetInfo"));
  }
  info.free_memory = free_bytes;
  info.total_memory = total_bytes;
  return info;
}

Expected<DeviceMemory> device_memory() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return unsupported(no_device_message(err, "cudaMemGetInfo"));
  }
  return DeviceMemory{total_bytes - free_bytes, total_bytes};
}

}  // namespace tessera::kernels::cuda
