// CUDA device discovery, usable from plain C++ whether or not the CUDA backend was built.
//
// probe_device() never throws or aborts: no driver, no device, an unsupported architecture or a
// build without CUDA all come back as an error Status whose message says why, and callers fall back
// to the CPU backend.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace tessera::kernels::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  uint64_t total_memory = 0;
  uint64_t free_memory = 0;
  int multiprocessors = 0;
};

bool built_with_cuda();
// Device `index` if it is usable by this build (driver present, index in range, compute
// capability >= 8.0, architecture compiled in); makes it the calling thread's current device.
Expected<DeviceInfo> probe_device(int index);
// probe_device(0).
Expected<DeviceInfo> probe_device();

// Memory of the calling thread's current device in use by every process (total - free, as
// cudaMemGetInfo reports it: this process's CUDA context, its allocations and the libraries'
// workspaces included) and its total, in bytes. One driver call, cheap enough to poll every few
// milliseconds (bench's peak device memory). kUnsupported without a usable device; the first call
// in a process creates its CUDA context.
struct DeviceMemory {
  uint64_t used = 0;
  uint64_t total = 0;
};
Expected<DeviceMemory> device_memory();

}  // namespace tessera::kernels::cuda
