// How every exporter places a mesh in its file: the placement (pivot, size, scale), the unit of
// the numbers and the axes (ExportOptions, transform_for_export). Shared by every format's writer
// (export.h, export_fbx.h, stl.h, threemf.h), which include this and not each other; also the
// object names and the texture file beside a mesh that they share.
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

#include "core/status.h"
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
  // FBX: the texture's PNG is written beside the file as well as inside it (tools that read only
  // linked files find it). False: inside only, one self-contained file (what `tessera serve`
  // hands out). OBJ always writes it (its MTL can only link).
  bool texture_beside = true;
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

// Names and files every writer shares.
inline constexpr const char* kMeshObjectName = "TesseraMesh";
// "TesseraMesh" for a single level, "TesseraMesh_LOD<i>" otherwise.
std::string lod_object_name(size_t level, size_t levels);

// The PNG a textured mesh's texture is written to beside `mesh_path`: the same directory and stem
// plus "_texture.png" (so "out.obj" -> "out_texture.png"; never the stem's own ".png", which could
// be the image the texture was made from).
std::string texture_path_for(const std::string& mesh_path);
// The PNG file of mesh.texture as every exporter writes it (beside an OBJ or FBX, inside a GLB or,
// as the Video's Content, an FBX): the pixels plus the PNG text png.h's
// tessera_png_text(metadata_json) gives. Errors (kInvalidArgument for a bad texture) name nothing;
// callers add the mesh's path.
Expected<std::string> texture_png_file(const Mesh& mesh, const std::string& metadata_json);
// Writes mesh.texture as a PNG to texture_path_for(mesh_path) atomically (nothing for an
// untextured mesh), with the PNG text png.h's tessera_png_text(metadata_json) gives. Errors
// (kIoError, or kInvalidArgument for a bad texture) name mesh_path.
Status write_texture_beside(const Mesh& mesh, const std::string& mesh_path,
                            const std::string& metadata_json = "");

}  // namespace tessera::mesh
