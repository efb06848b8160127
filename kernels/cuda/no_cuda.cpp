// Device queries and make_cuda_backend() for a build without the CUDA backend: everything reports
// that CUDA is not compiled in, so callers (make_backend(auto)) fall back to the CPU.
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda/device.h"

namespace tessera::kernels {
namespace {

const char* const kNoCuda =
    "this build of Tessera has no CUDA backend (configured with TESSERA_WITH_CUDA=OFF or without "
    "nvcc)";

}  // namespace

namespace cuda {

bool built_with_cuda() {
  return false;
}

Expected<DeviceInfo> probe_device(int /*index*/) {
  return unsupported(std::string(kNoCuda) + "; using the CPU backend");
}

Expected<DeviceInfo> probe_device() {
  return probe_device(0);
}

Expected<DeviceMemory> device_memory() {
  return unsupported(kNoCuda);
}

}  // namespace cuda

Expected<std::unique_ptr<Backend>> make_cuda_backend(int /*device*/, uint64_t /*min_free_bytes*/) {
  return unsupported(kNoCuda);
}

}  // namespace tessera::kernels
