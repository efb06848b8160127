// Reading a mesh file for viewing (tessera-view, `tessera render`): Wavefront OBJ and binary glTF
// 2.0 (.glb), with small readers of our own rather than Assimp, because Debian's Assimp is built
// with assertions on and aborts on some malformed files; these readers check every count, index,
// offset and stride before use, so an untrusted file can only produce a Status.
//
// What is read: OBJ `v` positions and `f` faces (polygons fan-triangulated; 1-based, negative =
// relative indices; texture/normal indices ignored; normals recomputed by the renderer). GLB:
// every triangle primitive (mode 4, the default) of the meshes reached from the default scene
// (node matrices / TRS applied), POSITION as float VEC3, indices u8/u16/u32 or none; other
// primitive modes are skipped. Everything merges into one mesh::Mesh (no normals).
#pragma once

#include <string>

#include "engine/core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::render {

// By extension (.obj or .glb, case-insensitive). kIoError when the file cannot be read,
// kInvalidArgument for another extension, kCorruptData naming the path and the fault for a
// malformed file, kNotFound when it holds no triangles.
Expected<mesh::Mesh> load_mesh_file(const std::string& path);

// The parsers on bytes already in memory; `name` is used in error messages.
Expected<mesh::Mesh> parse_obj(const std::string& text, const std::string& name);
Expected<mesh::Mesh> parse_glb(const std::string& bytes, const std::string& name);

}  // namespace tessera::render
