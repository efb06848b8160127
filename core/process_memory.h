// The process's resident memory (Linux /proc), for the benchmarks and the studio's overlay.
#pragma once

#include <cstdint>

namespace tessera {

// Resident set size now, in bytes (/proc/self/statm); 0 when it cannot be read.
int64_t resident_memory_bytes();
// Peak resident set size since the start or the last reset_peak_resident_memory(), in bytes
// (VmHWM of /proc/self/status); 0 when it cannot be read.
int64_t peak_resident_memory_bytes();
// Starts a new peak from the current resident size (writes 5 to /proc/self/clear_refs). Returns
// false where the kernel does not allow it (then the peak keeps counting from the start).
bool reset_peak_resident_memory();

}  // namespace tessera
