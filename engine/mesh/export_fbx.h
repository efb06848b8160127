// Binary FBX 7.4 (version 7400) writer for one static triangle mesh, following
// the project's binary FBX notes (the structure Blender's own exporter writes, checked against
// Blender 3.4's importer).
//
// What the file holds: FBXHeaderExtension, FileId/CreationTime/Creator (the consistent triple the
// spec gives, tied to the footer ID), GlobalSettings (axes and units, below), Documents,
// References, Definitions (object counts), Objects { Geometry, Model, Material }, Connections
// (model -> scene root, geometry -> model, material -> model), Takes, then the top-level NULL
// record and the FBX SDK style footer (file length a multiple of 16).
// - Geometry: Vertices d[3N], PolygonVertexIndex i[3T] (the last corner of each triangle stored as
//   ~index), LayerElementNormal (ByPolygonVertex / Direct, the vertex normal of each corner) when
//   the mesh has normals, LayerElementMaterial (AllSame, material 0), and a Layer 0 that lists them
//   (Blender ignores Layer; Assimp and SDK importers need it). A mesh with uvs adds
//   LayerElementUV "UVMap" (ByPolygonVertex / IndexToDirect: the per-vertex uvs, indexed by each
//   corner's vertex).
// - Material: one Phong material, neutral grey (the same as the OBJ's MTL); white for a textured
//   mesh, whose texture goes to a Texture (TextureVideoClip) + Video object pair referencing the
//   PNG written beside the FBX (export.h texture_path_for; FileName absolute, RelativeFilename the
//   bare name, which is what Blender resolves first) and embedded in the Video as Content (so the
//   FBX alone shows its texture: Blender packs it), connected to the material's DiffuseColor.
// - Arrays are stored raw (encoding 0); the spec allows it and every reader accepts it.
// - Output is deterministic: fixed object ids and the spec's fixed creation time.
//
// Axes and units: ExportOptions (export.h) is applied to the data, and GlobalSettings describes
// the result: UpAxis::kY writes UpAxis=1 / FrontAxis=2 / CoordAxis=0 (all +), UpAxis::kZ writes
// UpAxis=2 / FrontAxis=1 (sign -1) / CoordAxis=0, so the mesh stands upright in Blender (Z-up)
// and in Y-up tools either way. UnitScaleFactor=100 (centimetres per file unit): file units are
// metres, as in GLB, so a coordinate of 1.0 imports as 1 m in Blender, Unity and Maya; another
// ExportOptions::unit writes its own factor (1 for centimetres, 28 for studs), so every importer
// shows the same size in metres. A front along +X (ExportOptions::front_x) is a rotation of the
// data inside the same Z-up frame.
//
// Metadata (ExportOptions::metadata_json): user properties on each Model (flags "A+U", the
// custom properties Blender shows): kFbxSettingsProperty with the whole JSON, and one
// tessera_<field> per scalar field (tessera_prompt, tessera_seed, tessera_guidance, ...).
//
// Levels of detail: one Model + Geometry per level, named "TesseraMesh_LOD<i>", sharing the
// material.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/mesh/export_options.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

// Checks that a mesh of this size fits binary FBX 7.4: corner indices are int32 (so at most
// INT32_MAX vertices), array element counts are uint32, and the whole file must stay below 4 GiB
// (node EndOffsets are uint32). kInvalidArgument naming the limit otherwise. Negative counts are
// kInvalidArgument too. Cheap: it looks at the counts only (to_fbx calls it before allocating).
Status check_fbx_limits(int64_t vertex_count, int64_t triangle_count, bool has_normals,
                        bool has_uvs = false);

// The whole file in memory. `texture_file` is where the texture's PNG is (or will be) written; a
// textured mesh with an empty `texture_file` gets its uvs but no Texture/Video objects. Errors:
// the mesh fails validate() or is empty, bad options, check_fbx_limits(), or a file over 4 GiB
// with its embedded texture (all kInvalidArgument).
Expected<std::string> to_fbx(const Mesh& mesh, const ExportOptions& options = {},
                             const std::string& texture_file = "");

// to_fbx() then write_file_atomic(); a textured mesh first writes its PNG to
// texture_path_for(path) and removes it again if the FBX cannot be written. Errors are prefixed
// with the path.
Status write_fbx(const Mesh& mesh, const std::string& path, const ExportOptions& options = {});

// The same for levels of detail (export.h write_mesh_lods): lods[0]'s texture and placement.
Expected<std::string> to_fbx_lods(const std::vector<const Mesh*>& lods,
                                  const ExportOptions& options = {},
                                  const std::string& texture_file = "");
Status write_fbx_lods(const std::vector<const Mesh*>& lods, const std::string& path,
                      const ExportOptions& options = {});

// The Model user property holding the metadata's JSON text.
inline constexpr const char* kFbxSettingsProperty = "tessera_settings";

}  // namespace tessera::mesh
