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
// Coordinates: the engine's meshes are Y-up (the shape decoder's frame, also glTF's and the FBX
// SDK's default), their front facing +Z. ExportOptions converts them on the way out, the same way
// for every format (transform_for_export):
//   1. placement: the pivot (Pivot::kBase puts the centre of the bottom of the bounding box at the
//      origin, kCenter the box's centre, kOrigin leaves the model's origin) and the size: `scale`
//      metres per model unit, or the scale that makes the largest extent `size_m` metres (or the
//      height `height_m` metres);
//   2. the unit: numbers in `unit`s (metres, centimetres, millimetres or Roblox studs);
//   3. the axes: for UpAxis::kZ a +90 degree rotation about X, (x, y, z) -> (x, -z, y), which takes
//      +Y to +Z and the front to -Y (Blender's front view); with `front_x` (Z-up only) the front
//      goes to +X instead, (x, y, z) -> (z, x, y) (Unreal's forward). Both keep the handedness (and
//      so the winding and the outward normals). Normals are rotated too.
// Units in the files: GLB positions are metres by the glTF spec (another unit is refused), FBX
// declares its unit (GlobalSettings UnitScaleFactor, centimetres per file unit), 3MF too (its
// model unit; studs are refused), OBJ and STL have none (an OBJ header comment says which).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

enum class UpAxis { kY, kZ };

// The unit of the numbers a file holds.
enum class LengthUnit { kMetre, kCentimetre, kMillimetre, kStud };
// Roblox's stud as its documentation relates it to metres (1 stud = 0.28 m).
inline constexpr double kMetresPerStud = 0.28;
double metres_per_unit(LengthUnit unit);
const char* unit_name(LengthUnit unit);  // "m", "cm", "mm", "studs"
// "m", "cm", "mm", "studs" (also "metres", "meters", "stud", ...); nullopt otherwise.
std::optional<LengthUnit> parse_unit(std::string_view text);

// Where the model's origin goes in the file.
enum class Pivot { kOrigin, kBase, kCenter };
const char* pivot_name(Pivot pivot);  // "origin", "base", "center"
std::optional<Pivot> parse_pivot(std::string_view text);

struct ExportOptions {
  UpAxis up_axis = UpAxis::kY;  // kY: as the engine produces it; kZ: Blender / 3ds Max style
  bool front_x = false;         // Z-up only: the object's front faces +X (Unreal), not -Y
  float scale = 1.0f;           // metres per model unit; finite and > 0 (size_m / height_m win)
  double size_m = 0.0;          // > 0: the largest extent becomes this many metres
  double height_m = 0.0;        // > 0: the height becomes this many metres (not with size_m)
  Pivot pivot = Pivot::kOrigin;
  // Model-unit translation applied before the scale (resolve_placement sets it from the pivot).
  std::array<double, 3> offset{0.0, 0.0, 0.0};
  LengthUnit unit = LengthUnit::kMetre;  // unit of the numbers in the file
  // How the mesh was made (prompt, seed, settings, model...: a JSON object's text, see
  // metadata.h), carried in the file so that it can be made again: GLB asset.extras, FBX user
  // properties on the model, an OBJ "# tessera {json}" line, 3MF metadata Description. Empty:
  // none (the privacy switch). STL does not carry it.
  std::string metadata_json;
};

// kInvalidArgument for a scale that is not finite and > 0 (a negative scale would mirror the mesh
// and turn it inside out), a size or height that is negative or not finite, both a size and a
// height, front_x without UpAxis::kZ.
Status validate_export_options(const ExportOptions& options);

// `options` with the pivot and the size resolved against `reference`'s bounds into `offset` and
// `scale` (pivot kOrigin, size_m and height_m 0 on return), so that several meshes (LODs) get the
// same placement. kInvalidArgument when a size or height is asked of a mesh that has no extent
// there, or validate_export_options() fails.
Expected<ExportOptions> resolve_placement(const Mesh& reference, const ExportOptions& options);

// `mesh` with `options` applied (placed, scaled into the unit, then rotated; normals rotated); the
// placement is resolved against `mesh` itself unless `options` is already resolved. Does not
// validate either argument (a size asked of a flat mesh leaves the scale as it is).
Mesh transform_for_export(const Mesh& mesh, const ExportOptions& options);

// "up-axis y" / "up-axis z" style names for messages and the CLI ("y", "z").
const char* up_axis_name(UpAxis axis);

// The PNG a textured mesh's texture is written to beside `mesh_path`: the same directory and stem
// plus "_texture.png" (so "out.obj" -> "out_texture.png"; never the stem's own ".png", which could
// be the image the texture was made from).
std::string texture_path_for(const std::string& mesh_path);
// Writes mesh.texture as a PNG to texture_path_for(mesh_path) atomically (nothing for an
// untextured mesh), with the PNG text png.h's tessera_png_text(metadata_json) gives. Errors
// (kIoError, or kInvalidArgument for a bad texture) name mesh_path.
Status write_texture_beside(const Mesh& mesh, const std::string& mesh_path,
                            const std::string& metadata_json = "");

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
inline constexpr const char* kMeshObjectName = "TesseraMesh";
// "TesseraMesh" for a single level, "TesseraMesh_LOD<i>" otherwise.
std::string lod_object_name(size_t level, size_t levels);

// True when `path` ends in one of the extensions write_mesh accepts (case-insensitive).
bool is_supported_mesh_extension(const std::string& path);
inline constexpr const char* kSupportedMeshExtensions = ".obj, .glb, .fbx, .stl or .3mf";

}  // namespace tessera::mesh
