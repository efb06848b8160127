// Device queries for a build without the CUDA backend.
#include "kernels/cuda/device.h"

namespace tessera::kernels::cuda {

bool built_with_cuda() { return false; }

Expected<DeviceInfo> probe_device() {
  return unsupported("this build of Tessera has no CUDA backend (configured with TESSERA_WITH_CUDA=OFF "
                     "or without nvcc); using the CPU backend");
}

}  // namespace tessera::kernels::cuda
