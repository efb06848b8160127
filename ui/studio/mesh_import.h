// Studio mesh import: a thin forwarder to engine/mesh/import.h (kept so that main_window compiles
// unchanged while it is being split; it goes away once main_window includes engine/mesh/import.h).
//
// import_mesh_file() is mesh::import_mesh_file(): OBJ, GLB, glTF and binary FBX through the
// engine's own bounds-checked, fuzzed readers (no Assimp: Debian's is built with assertions on and
// aborts on odd input). The contract (formats, what is read, texture warnings vs errors, error
// codes) is in engine/mesh/import.h.
#pragma once

#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/mesh/import.h"
#include "engine/mesh/mesh.h"

namespace tessera::studio {

// File-dialog filter for the formats import_mesh_file() accepts.
inline constexpr const char* kImportFilter = mesh::kImportFilter;

inline Expected<mesh::Mesh> import_mesh_file(const std::string& path,
                                             std::vector<std::string>* warnings = nullptr) {
  return mesh::import_mesh_file(path, warnings);
}

// For the About box: mesh import no longer uses Assimp.
inline std::string assimp_version() { return "not used"; }

}  // namespace tessera::studio
