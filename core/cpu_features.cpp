#include "core/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace tessera {

namespace {
CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  const bool ymm_os = (xcr0 & 0x6) == 0x6;
  const bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  if (!ymm_os) {
    f.fma = f.f16c = false;
    return f;
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = b & (1u << 5);
    if (zmm_os) {
      f.avx512f = b & (1u << 16);
      f.avx512bw = b & (1u << 30);
      f.avx512vl = b & (1u << 31);
      f.avx512vnni = c & (1u << 11);
    }
  }
  if (zmm_os && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = a & (1u << 5);
  if (f.avx512f && __get_cpuid(0, &a, &b, &c, &d)) {
    const bool amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "AuthenticAMD"
    __get_cpuid(1, &a, &b, &c, &d);
    const unsigned base = (a >> 8) & 0xf;
    const unsigned family = base == 0xf ? base + ((a >> 20) & 0xff) : base;
    f.avx512_half_width = amd && family == 0x19;
  }
#endif
  return f;
}

std::atomic<int>& simd_switch() {
  static std::atomic<int> s{[] {
    const char* env = std::getenv("TESSERA_NO_SIMD");
    return (env && std::strcmp(env, "0") != 0 && *env) ? 0 : 1;
  }()};
  return s;
}
}  // namespace

const CpuFeatures& cpu_features_detected() {
  static const CpuFeatures f = detect();
  return f;
}

CpuFeatures cpu_features() {
  return simd_enabled() ? cpu_features_detected() : CpuFeatures{};
}
void set_simd_enabled(bool enabled) {
  simd_switch().store(enabled ? 1 : 0);
}
bool simd_enabled() {
  return simd_switch().load() != 0;
}

std::string cpu_features_string(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512bf16, "avx512bf16");
  add(f.avx512vnni, "avx512vnni");
  add(f.avx512_half_width, "avx512-in-halves");
  return s.empty() ? "none" : s;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(line.find_first_not_of(" \t", pos + 1));
    }
  }
  return "unknown";
}

}  // namespace tessera
