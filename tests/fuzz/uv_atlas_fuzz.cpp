// libFuzzer target for the UV atlas (engine/mesh/uv_atlas.h make_uv_atlas): the bytes become a
// mesh (a header byte picks the texture size and chart angle; then vertex count, int16 positions,
// and triangles as vertex indices taken modulo the count, so duplicates, slivers, flips,
// non-manifold fans and coincident vertices all occur), built with ASan/UBSan when TESSERA_FUZZ=ON.
// A success must be a valid mesh with the same triangles and an atlas with no overlapping and no
// flipped triangles; a failure must be kInvalidArgument with a message.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/mesh/uv_atlas.h"

// Enough triangles for every chart and packing case, few enough that an instrumented run stays
// well inside the fuzz runs' 10 s per input.
constexpr size_t kMaxTriangles = 200;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  if (size < 3) return 0;
  mesh::AtlasOptions options;
  options.size = 1024 << (data[0] % 3);
  options.max_chart_angle_deg = 20.0f + static_cast<float>(data[0] / 3 % 7) * 10.0f;
  options.replace_existing = true;
  const size_t vertices = 3 + data[1] % 250;
  size_t at = 2;
  mesh::Mesh m;
  for (size_t v = 0; v < vertices; ++v) {
    for (int a = 0; a < 3; ++a) {
      int16_t q = 0;
      if (at + 2 <= size) std::memcpy(&q, data + at, 2);
      at += 2;
      m.positions.push_back(static_cast<float>(q) / 4096.0f);
    }
  }
  while (at + 3 <= size && m.triangles.size() < 3 * kMaxTriangles) {
    for (int k = 0; k < 3; ++k) m.triangles.push_back(static_cast<uint32_t>(data[at++] % vertices));
  }
  mesh::AtlasReport report;
  auto out = mesh::make_uv_atlas(m, options, &report);
  if (!out.ok()) {
    if (out.status().code() != ErrorCode::kInvalidArgument || out.status().message().empty()) {
      __builtin_trap();
    }
    return 0;
  }
  if (!mesh::validate(*out).ok()) __builtin_trap();
  if (out->triangles.size() != m.triangles.size()) __builtin_trap();
  if (report.overlapping != 0 || report.flipped != 0) __builtin_trap();
  return 0;
}
