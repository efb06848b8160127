// What this build and this machine can do, for front ends that must not know the kernels: which
// devices are usable and why not, whether decode graphs are available, memory in use, and where the
// default models are. Every answer is plain data (a snapshot), safe to show in a UI.
//
// Threads: every function may be called from any thread. probe_capabilities() asks the CUDA driver
// (tens of milliseconds the first time): call it once at start-up or when a settings page opens,
// not per frame.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/assets.h"
#include "core/status.h"

namespace tessera::runtime {

// Where a model runs (--device).
enum class DeviceChoice : uint8_t {
  kAuto,  // CUDA when a usable device exists, else the CPU (the reason goes to backend_note)
  kCpu,
  kCuda,  // CUDA or an error saying why not
};
// "auto", "cpu" or "cuda"; kInvalidArgument naming the text otherwise.
Expected<DeviceChoice> parse_device(std::string_view text);
const char* device_name(DeviceChoice choice);

struct DeviceStatus {
  bool usable = false;
  std::string name;    // "cpu (avx512, 2 threads)", "NVIDIA H200 (sm_90, 139 GiB, 132 SMs)"
  std::string reason;  // why not usable (empty when usable)
};

struct Capabilities {
  std::string version;  // "0.1.0 (Release, CUDA: yes)"
  bool built_with_cuda = false;
  DeviceStatus cpu;   // always usable
  DeviceStatus cuda;  // usable when this build has CUDA and a device of compute >= 8.0 is free
  // Recorded decode steps (CUDA graphs): available exactly when the CUDA device is usable.
  bool decode_graphs_available = false;
  std::string decode_graphs_reason;  // why not (empty when available)
  // The device DeviceChoice::kAuto picks on this machine.
  DeviceChoice auto_device = DeviceChoice::kCpu;
};

// Probes the build and the machine (never fails: what is missing is said in the reasons).
Capabilities probe_capabilities();

// The threads the CPU kernels use in this process (n <= 0: every core). Each front end passes its
// own choice once at start-up, before any job (tessera --threads, tessera-studio --threads: all
// cores but one for the UI); not safe while jobs run. cpu_threads(): the current count.
void set_cpu_threads(int n);
int cpu_threads();

// Caps the instruction set of the CPU kernels (tessera --isa, tessera-studio --isa, tessera-bench
// --isa): "avx512", "avx2" or "scalar"; the kernels use the best the CPU supports up to the cap (a
// cap above it changes nothing). Empty text: the environment's TESSERA_ISA when set, else no cap.
// Each front end calls it once at start-up, before any job, as set_cpu_threads. Errors:
// kInvalidArgument naming the text (or TESSERA_ISA and its value) and the choices; nothing changes.
Status set_cpu_isa(std::string_view text);
// What the CPU kernels use now: "avx512", "avx2" or "scalar".
const char* cpu_isa();
// The kernels OpenBLAS chose for the large f32 GEMMs (e.g. "SkylakeX", "Haswell"): its own choice
// at load or OPENBLAS_CORETYPE's, never the cap above, so front ends print it beside cpu_isa().
const char* cpu_blas_core();

// Memory in use, in bytes; -1 where unknown.
struct MemoryUse {
  int64_t resident_bytes = -1;     // this process's resident set (/proc/self/statm)
  int64_t device_used_bytes = -1;  // the CUDA device's memory in use (all processes), when usable
  int64_t device_total_bytes = -1;
};
// `with_device`: also ask the CUDA driver (skip it where no model runs on the GPU: it costs a
// driver call).
MemoryUse memory_use(bool with_device);

// The default models (core/assets.h is the one place that spells the paths).
using tessera::assets_dir;
using tessera::default_clip_vocab_file;
using tessera::default_diffusion_model_dir;
using tessera::default_shape_model_dir;

}  // namespace tessera::runtime
