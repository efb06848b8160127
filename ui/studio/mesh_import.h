// Mesh import for viewing (drag-and-drop, File > Open mesh): OBJ, GLB/glTF and binary FBX through
// Assimp, merged into one mesh::Mesh (node transforms applied, polygons triangulated, identical
// vertices joined).
//
// Debian builds Assimp with assertions on and some importers abort() on odd input, so a file is
// handed to Assimp only when its extension is one of ours and its first bytes look like that
// format (OBJ: text without NUL bytes; GLB: the "glTF" magic; glTF: JSON; FBX: the binary
// "Kaydara FBX Binary" magic). Anything else comes back as kInvalidArgument with a message that
// says what the file is not; an unreadable file is kIoError and a file without triangles kNotFound,
// both naming the path.
#pragma once

#include <string>

#include "engine/core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::studio {

// File-dialog filter for the formats import_mesh_file() accepts.
inline constexpr const char* kImportFilter =
    "Meshes (*.obj *.glb *.gltf *.fbx);;Wavefront OBJ (*.obj);;glTF binary (*.glb);;glTF (*.gltf);;"
    "FBX binary (*.fbx)";

Expected<mesh::Mesh> import_mesh_file(const std::string& path);

// "5.2.4": the Assimp library in use (for the About box).
std::string assimp_version();

}  // namespace tessera::studio
