// Backend selection (kernels/backend.h): --device auto|cpu|cuda -> a Backend.
//
// Lives in tessera_kernels (next to the CPU backend) and calls make_cuda_backend() from
// tessera_kernels_cuda, which is either the real CUDA backend or, in a build without CUDA,
// kernels/cuda/no_cuda.cpp's version that says so.
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "kernels/backend.h"

namespace tessera::kernels {

const char* device_choice_name(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::kAuto:
      return "auto";
    case DeviceChoice::kCpu:
      return "cpu";
    case DeviceChoice::kCuda:
      return "cuda";
  }
  return "unknown";
}

Expected<DeviceChoice> parse_device_choice(std::string_view text) {
  for (DeviceChoice c : {DeviceChoice::kAuto, DeviceChoice::kCpu, DeviceChoice::kCuda}) {
    if (text == device_choice_name(c)) return c;
  }
  return invalid_argument("device '" + std::string(text) + "': expected auto, cpu or cuda");
}

Expected<BackendSelection> make_backend(DeviceChoice choice, int cuda_device) {
  BackendSelection selection;
  if (choice == DeviceChoice::kCpu) {
    selection.backend = make_cpu_backend();
    return selection;
  }
  Expected<std::unique_ptr<Backend>> cuda = make_cuda_backend(cuda_device);
  if (cuda.ok()) {
    selection.backend = std::move(cuda).value();
    return selection;
  }
  if (choice == DeviceChoice::kCuda) return cuda.status();
  // auto: any reason not to use the GPU (no driver, no device, old architecture, little memory,
  // built without CUDA) means the CPU, quietly; the reason is kept for verbose output.
  selection.backend = make_cpu_backend();
  selection.note = "using the CPU backend: " + cuda.status().message();
  return selection;
}

}  // namespace tessera::kernels
