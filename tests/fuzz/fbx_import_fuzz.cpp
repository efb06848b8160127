// libFuzzer target for the binary FBX reader (engine/mesh/import.h parse_fbx), built with
// ASan/UBSan when TESSERA_FUZZ=ON: node records (7400 and 7500 headers), property records, raw and
// zlib arrays, geometry, uv layers, Model transforms and embedded (Video Content) PNG textures.
// No directory is given, so no file beside the input is read. Run with -rss_limit_mb=2048: an
// array that claims more than its bytes can hold must be refused before anything is allocated.
// A success must be a valid Mesh; every error and warning must name the file. The same bytes also
// go through the Model user-property lookup `generate --from` uses (import_internal.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/mesh/import.h"
#include "engine/mesh/import_internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto settings = tessera::mesh::fbx_model_string_property(bytes, "fuzz.fbx", "tessera_settings");
  if (!settings.ok() && settings.status().message().find("fuzz.fbx") == std::string::npos) {
    __builtin_trap();
  }
  std::vector<std::string> warnings;
  auto mesh = tessera::mesh::parse_fbx(bytes, "fuzz.fbx", &warnings);
  if (!mesh.ok()) {
    if (mesh.status().message().find("fuzz.fbx") == std::string::npos) __builtin_trap();
    return 0;
  }
  if (!tessera::mesh::validate(*mesh).ok() || mesh->empty()) __builtin_trap();
  for (const std::string& w : warnings) {
    if (w.find("fuzz.fbx") == std::string::npos) __builtin_trap();
  }
  return 0;
}
