// libFuzzer target for the STL reader (engine/mesh/stl.h parse_stl: binary and ASCII), built with
// ASan/UBSan when TESSERA_FUZZ=ON. A success must be a valid, non-empty Mesh (every index in
// range, finite positions); a failure must name the file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/mesh/stl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto mesh = tessera::mesh::parse_stl(bytes, "fuzz.stl");
  if (!mesh.ok()) {
    if (mesh.status().message().find("fuzz.stl") == std::string::npos) __builtin_trap();
    return 0;
  }
  if (!tessera::mesh::validate(*mesh).ok() || mesh->empty()) __builtin_trap();
  return 0;
}
