#include "engine/runtime/capabilities.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/runtime/engine_types_internal.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/threads.h"
#include "kernels/cuda/device.h"

namespace tessera::runtime {

Expected<DeviceChoice> parse_device(std::string_view text) {
  TESSERA_ASSIGN_OR_RETURN(const kernels::DeviceChoice choice, kernels::parse_device_choice(text));
  return from_kernels(choice);
}

const char* device_name(DeviceChoice choice) {
  return kernels::device_choice_name(to_kernels(choice));
}

namespace {

std::string gib(uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.0f GiB", static_cast<double>(bytes) / (1u << 30));
  return buffer;
}

}  // namespace

Capabilities probe_capabilities() {
  Capabilities c;
  c.built_with_cuda = kernels::cuda::built_with_cuda();
  c.version = std::string(TESSERA_VERSION) + " (" + TESSERA_BUILD_TYPE +
              ", CUDA: " + (c.built_with_cuda ? "yes" : "no") + ")";
  c.cpu.usable = true;
  c.cpu.name = kernels::make_cpu_backend()->name();
  if (!c.built_with_cuda) {
    c.cuda.reason =
        "this build has no CUDA backend (configured with TESSERA_WITH_CUDA=OFF or no nvcc)";
  } else if (auto device = kernels::cuda::probe_device(); !device.ok()) {
    c.cuda.reason = device.status().message();
  } else {
    c.cuda.name = device->name + " (sm_" + std::to_string(device->compute_major) +
                  std::to_string(device->compute_minor) + ", " + gib(device->total_memory) + ", " +
                  std::to_string(device->multiprocessors) + " SMs)";
    if (device->compute_major < 8) {
      c.cuda.reason = device->name + " has compute capability " +
                      std::to_string(device->compute_major) + "." +
                      std::to_string(device->compute_minor) + "; Tessera needs 8.0 or newer";
    } else if (device->free_memory < kernels::kMinCudaFreeBytes) {
      c.cuda.reason = device->name + " has only " + std::to_string(device->free_memory >> 20) +
                      " MiB free; at least " + std::to_string(kernels::kMinCudaFreeBytes >> 20) +
                      " MiB are needed";
    } else {
      c.cuda.usable = true;
    }
  }
  c.decode_graphs_available = c.cuda.usable;
  if (!c.decode_graphs_available) {
    c.decode_graphs_reason =
        "decode graphs are recorded by the CUDA backend, which is not usable: " + c.cuda.reason;
  }
  c.auto_device = c.cuda.usable ? DeviceChoice::kCuda : DeviceChoice::kCpu;
  return c;
}

void set_cpu_threads(int n) {
  kernels::cpu::configure_cpu_threads(n);
}

int cpu_threads() {
  return kernels::cpu::cpu_pool().num_threads();
}

Status set_cpu_isa(std::string_view text) {
  std::string source = "--isa";
  std::string value(text);
  if (value.empty()) {
    const char* env = std::getenv("TESSERA_ISA");
    if (env == nullptr || *env == '\0') return Status();
    source = "TESSERA_ISA";
    value = env;
  }
  for (kernels::cpu::Isa isa :
       {kernels::cpu::Isa::kAvx512, kernels::cpu::Isa::kAvx2, kernels::cpu::Isa::kScalar}) {
    if (value == kernels::cpu::isa_name(isa)) {
      kernels::cpu::limit_isa(isa);
      return Status();
    }
  }
  return invalid_argument(source + ": '" + value +
                          "' is not an instruction set (avx512, avx2, scalar)");
}

const char* cpu_isa() {
  return kernels::cpu::isa_name(kernels::cpu::active_isa());
}

const char* cpu_blas_core() {
  return kernels::cpu::blas_core();
}

MemoryUse memory_use(bool with_device) {
  MemoryUse m;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    long long size = 0, resident = 0;
    if (std::fscanf(f, "%lld %lld", &size, &resident) == 2) {
      m.resident_bytes = resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
    }
    std::fclose(f);
  }
  if (with_device && kernels::cuda::built_with_cuda()) {
    if (auto device = kernels::cuda::probe_device(); device.ok()) {
      m.device_total_bytes = static_cast<int64_t>(device->total_memory);
      m.device_used_bytes = static_cast<int64_t>(device->total_memory - device->free_memory);
    }
  }
  return m;
}

}  // namespace tessera::runtime
