// Element types and scalar conversions.
//
// Storage types: f32, f16 (IEEE binary16), bf16 (bfloat16: the top 16 bits of an f32), i32, plus
// the other safetensors types so a checkpoint can be listed even when the engine cannot compute
// with it. Conversions to the narrow types round to nearest, ties to even; NaN stays NaN, overflow
// becomes inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tessera {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kF64, kI64, kI16, kI8, kU8, kBool };

// Bytes per element.
size_t dtype_size(DType t);
// Safetensors spelling: "F32", "F16", "BF16", "I32", ...
const char* dtype_name(DType t);
// Inverse of dtype_name; nullopt for an unknown name.
std::optional<DType> dtype_from_name(std::string_view name);
// True for the types the kernels compute with (f32, f16, bf16, i32).
bool dtype_is_compute(DType t);

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_f32(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Bulk conversions (n elements). Safe for any n; no alignment required.
void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t n);
void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n);
void convert_f16_to_f32(const uint16_t* src, float* dst, size_t n);
void convert_f32_to_f16(const float* src, uint16_t* dst, size_t n);

}  // namespace tessera
