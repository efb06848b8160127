// libFuzzer target for the OBJ reader (engine/mesh/import.h parse_obj), built with ASan/UBSan when
// TESSERA_FUZZ=ON. No directory is given, so no MTL or image is read: the fuzzer exercises the
// parser, index resolution and uv-seam splitting. A success must be a valid Mesh (every index in
// range, finite positions, uvs in [0, 1]); a failure must name the file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/mesh/import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> warnings;
  auto mesh = tessera::mesh::parse_obj(text, "fuzz.obj", &warnings);
  if (!mesh.ok()) {
    if (mesh.status().message().find("fuzz.obj") == std::string::npos) __builtin_trap();
    return 0;
  }
  if (!tessera::mesh::validate(*mesh).ok() || mesh->empty()) __builtin_trap();
  for (const std::string& w : warnings) {
    if (w.find("fuzz.obj") == std::string::npos) __builtin_trap();
  }
  return 0;
}
