// libFuzzer target for the glTF readers (engine/mesh/import.h parse_glb / parse_gltf), built with
// ASan/UBSan when TESSERA_FUZZ=ON. Input starting with "glTF" goes to the binary reader, anything
// else to the JSON text reader (data: URIs only: no directory is given). Embedded PNG textures are
// decoded, so the PNG size checks are exercised too. A success must be a valid Mesh; every error
// and warning must name the file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/mesh/import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const bool binary = bytes.substr(0, 4) == "glTF";
  const std::string name = binary ? "fuzz.glb" : "fuzz.gltf";
  std::vector<std::string> warnings;
  auto mesh = binary ? tessera::mesh::parse_glb(bytes, name, &warnings)
                     : tessera::mesh::parse_gltf(bytes, name, &warnings);
  if (!mesh.ok()) {
    if (mesh.status().message().find(name) == std::string::npos) __builtin_trap();
    return 0;
  }
  if (!tessera::mesh::validate(*mesh).ok() || mesh->empty()) __builtin_trap();
  for (const std::string& w : warnings) {
    if (w.find(name) == std::string::npos) __builtin_trap();
  }
  return 0;
}
