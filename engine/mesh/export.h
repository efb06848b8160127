// Mesh exporters: Wavefront OBJ (positions, normals, triangles) and binary glTF 2.0 (GLB).
//
// Both validate the mesh first (mesh.h invariants; kInvalidArgument), build the file in memory and
// write it with write_file_atomic, so a failure never leaves a partial file; I/O errors are
// kIoError naming the path. Meshes without normals are written without them.
#pragma once

#include <string>

#include "engine/core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

// OBJ: "v x y z", "vn x y z" (one per vertex, same index), "f a//a b//b c//c" (1-based).
std::string to_obj(const Mesh& mesh);
Status write_obj(const Mesh& mesh, const std::string& path);

// GLB: one mesh, one primitive (mode TRIANGLES) with POSITION (min/max set, as glTF requires),
// NORMAL (if present) and UNSIGNED_INT indices; JSON and BIN chunks padded to 4 bytes (spaces and
// zeros); all buffer views 4-byte aligned. Positions in metres per glTF (the object spans ~2 units).
Expected<std::string> to_glb(const Mesh& mesh);
Status write_glb(const Mesh& mesh, const std::string& path);

// Picks the writer from the extension (.obj or .glb, case-insensitive); kInvalidArgument otherwise.
Status write_mesh(const Mesh& mesh, const std::string& path);

}  // namespace tessera::mesh
