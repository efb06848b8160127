// Mesh import for viewing (drag-and-drop, File > Open mesh): OBJ, GLB/glTF and binary FBX, merged
// into one mesh::Mesh with its base colour texture when the file has one.
//
// OBJ and GLB go through render::load_mesh_file (ui/render/mesh_file.h: our own bounds-checked
// readers, which also read `vt` + the MTL's map_Kd and TEXCOORD_0 + the embedded base colour
// PNG). glTF text and binary FBX go through Assimp (node transforms applied, polygons
// triangulated, identical vertices joined), with the first UV channel and the diffuse / base
// colour texture of the first textured mesh's material: an embedded image ("*N") or a PNG file
// named relative to the mesh file's folder (or by an absolute path that exists).
//
// Debian builds Assimp with assertions on and some importers abort() on odd input, so a file is
// handed to Assimp only when its extension is one of ours and its first bytes look like that
// format (OBJ: text without NUL bytes; GLB: the "glTF" magic; glTF: JSON; FBX: the binary
// "Kaydara FBX Binary" magic). Anything else comes back as kInvalidArgument with a message that
// says what the file is not; an unreadable file is kIoError and a file without triangles kNotFound,
// both naming the path.
//
// Texture problems are warnings, as in load_mesh_file: a missing or undecodable image, uvs on only
// some meshes or outside [0, 1] drop the texture (and those uvs) and append a message naming the
// file to `*warnings` (nullable); the geometry still opens.
#pragma once

#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::studio {

// File-dialog filter for the formats import_mesh_file() accepts.
inline constexpr const char* kImportFilter =
    "Meshes (*.obj *.glb *.gltf *.fbx);;Wavefront OBJ (*.obj);;glTF binary (*.glb);;glTF (*.gltf);;"
    "FBX binary (*.fbx)";

Expected<mesh::Mesh> import_mesh_file(const std::string& path,
                                      std::vector<std::string>* warnings = nullptr);

// "5.2.4": the Assimp library in use (for the About box).
std::string assimp_version();

}  // namespace tessera::studio
