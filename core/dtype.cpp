#include "core/dtype.h"

#include <cmath>

namespace tessera {

namespace {
struct DTypeInfo {
  DType type;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kInfos[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4},   {DType::kF64, "F64", 8}, {DType::kI64, "I64", 8},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};
}  // namespace

size_t dtype_size(DType t) {
  return kInfos[static_cast<int>(t)].size;
}
const char* dtype_name(DType t) {
  return kInfos[static_cast<int>(t)].name;
}
std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& info : kInfos)
    if (name == info.name) return info.type;
  return std::nullopt;
}
bool dtype_is_compute(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kI32;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: value = mant * 2^-24
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                        // below the smallest normal 2^-14
    // subnormal: round abs * 2^24 to an integer, ties to even
    const float scaled = f32_from_bits(abs) * 16777216.0f;  // exact (power of two)
    const float r = std::nearbyint(scaled);                 // default rounding mode: ties to even
    return sign | static_cast<uint16_t>(r);
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits, ties to even
  uint32_t v = abs - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return sign | static_cast<uint16_t>(v >> 13);
}

void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}
void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}
void convert_f16_to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
void convert_f32_to_f16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace tessera
