// Mesh exporters: Wavefront OBJ (+ MTL), binary glTF 2.0 (GLB), binary FBX 7.4 (export_fbx.h),
// binary STL (stl.h) and 3MF (threemf.h, through lib3mf).
//
// All of them validate the mesh first (mesh.h invariants; kInvalidArgument), build the file in
// memory and write it with write_file_atomic, so a failure never leaves a partial file; I/O errors
// are kIoError naming the path. Meshes without normals are written without them.
//
// Textured meshes (Mesh::uvs and Mesh::texture, e.g. from project_texture_front in texture.h):
// every format carries the uvs; the texture goes out as a PNG, embedded in the GLB and written
// beside the OBJ/FBX as texture_path_for(path) (written first; removed again if a later file
// fails, so nothing half-written stays behind). A mesh with uvs but no texture writes the uvs
// only.
//
// Placement, unit and axes: export_options.h.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/mesh/export_options.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

// OBJ text: "v x y z", "vt u v" and "vn x y z" (one per vertex, same index, vt only with uvs),
// "f a/a/a b/b/b c/c/c" (1-based; "a//a" without uvs, "a/a" without normals, "a" with neither).
// A non-empty `mtl_file` adds "mtllib <mtl_file>" and "usemtl <kObjMaterialName>" lines.
// Does not validate (write_obj does).
inline constexpr const char* kObjMaterialName = "tessera_default";
std::string to_obj(const Mesh& mesh, const ExportOptions& options = {},
                   const std::string& mtl_file = "");
// The MTL text that write_obj puts beside the OBJ: one neutral grey material, kObjMaterialName;
// with a non-empty `texture_file`, a white material whose diffuse map is "map_Kd <texture_file>".
std::string default_mtl(const std::string& texture_file = "");
// Writes `path` and, beside it, the same stem with ".mtl" (referenced by mtllib), all atomically;
// a textured mesh also writes texture_path_for(path) (referenced by the MTL's map_Kd).
// The PNG, then the MTL are written first; if a later file fails, the earlier ones are removed
// again, so a failure leaves none of them behind (pre-existing files of those names are
// overwritten either way).
Status write_obj(const Mesh& mesh, const std::string& path, const ExportOptions& options = {});

// GLB: one mesh, one primitive (mode TRIANGLES) with POSITION (min/max set, as glTF requires),
// NORMAL (if present), TEXCOORD_0 (if uvs; v flipped to glTF's top-left origin) and UNSIGNED_INT
// indices; a textured mesh also gets the PNG in a buffer view, an image, a sampler (linear,
// mip-mapped, clamp to edge), a texture and a material using it as baseColorTexture (metallic 0,
// roughness 1); JSON and BIN chunks padded to 4 bytes (spaces and
// zeros); all buffer views 4-byte aligned. Positions in metres per glTF (the object spans ~2 units
// at scale 1). glTF is Y-up by definition: UpAxis::kZ rotates the data, and glTF viewers will show
// it lying on its back (for pipelines that re-rotate on import).
Expected<std::string> to_glb(const Mesh& mesh, const ExportOptions& options = {});
Status write_glb(const Mesh& mesh, const std::string& path, const ExportOptions& options = {});

// Picks the writer from the extension (.obj, .glb, .fbx, .stl (stl.h) or .3mf (threemf.h),
// case-insensitive; STL and 3MF carry the geometry only); any other extension
// is kInvalidArgument naming the path and the accepted extensions.
Status write_mesh(const Mesh& mesh, const std::string& path, const ExportOptions& options = {});

// Levels of detail in one file: lods[0] the full mesh, each next one coarser, written as separate
// meshes named "TesseraMesh_LOD0", "TesseraMesh_LOD1", ... (the suffix Unity and Unreal group
// into LOD levels), all placed by lods[0]'s bounds. GLB and FBX only (kInvalidArgument naming the
// path for another format when there is more than one level); one level is write_mesh(). The
// texture, if any, is lods[0]'s, shared by all levels.
Status write_mesh_lods(const std::vector<Mesh>& lods, const std::string& path,
                       const ExportOptions& options = {});
Expected<std::string> to_glb_lods(const std::vector<const Mesh*>& lods,
                                  const ExportOptions& options = {});

// True when `path` ends in one of the extensions write_mesh accepts (case-insensitive).
bool is_supported_mesh_extension(const std::string& path);
inline constexpr const char* kSupportedMeshExtensions = ".obj, .glb, .fbx, .stl or .3mf";
// True when the format at `path` keeps a texture (.obj, .glb, .fbx; STL and 3MF drop it).
bool carries_texture(const std::string& path);

}  // namespace tessera::mesh
