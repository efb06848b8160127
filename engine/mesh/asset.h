// Assets that drop into an engine or a printer: the platform presets, closing small holes, and
// levels of detail. A front end turns a preset plus the user's overrides into ExportOptions
// (export.h: axes, unit, size, pivot) and AssetOptions (below: budget, LODs, closed), calls
// prepare_asset() on the finished mesh and writes the levels with write_mesh_lods().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/mesh/export.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

// What a target platform expects. Every field can be overridden by the user.
struct AssetPreset {
  std::string name;
  std::string summary;  // one line: what the platform is
  UpAxis up_axis = UpAxis::kY;
  bool front_x = false;
  LengthUnit unit = LengthUnit::kMetre;
  int64_t max_triangles = 0;  // the platform's limit; 0: none
  bool closed = false;        // the platform needs a closed, manifold mesh (holes are closed)
  std::vector<std::string> formats;  // accepted extensions (".fbx", ...), the first the default
  // The longest texture side the platform takes (a larger texture is shrunk on export); 0: any.
  int64_t max_texture_size = 0;
};

// roblox, unity, unreal, blender, godot, print (in that order). Texture rules (README, "Export
// presets"): Roblox 1024 (its image limit), Unity 2048 (its importer's default Max Size), Unreal
// and Godot 4096, Blender any; print formats carry no texture.
const std::vector<AssetPreset>& asset_presets();
// nullptr for an unknown name (case-insensitive).
const AssetPreset* find_preset(std::string_view name);
// "roblox, unity, unreal, blender, godot, print".
std::string preset_names();
// What the preset sets, for the CLI's and the studio's "what does it do": "Y-up, studs, at most
// 20000 triangles, closed and manifold, textures up to 1024, .fbx or .obj".
std::string describe_preset(const AssetPreset& preset);
// The preset's axes and unit for a file of extension `ext` (".glb": always Y-up metres, glTF's
// definition; the importers of Blender and Godot convert). Size, pivot, scale and metadata are
// left at their defaults.
ExportOptions preset_export_options(const AssetPreset& preset, const std::string& ext);

// What closing holes did (close_holes) and what is left (counted after welding coincident
// vertices, as a consumer sees it).
struct HoleReport {
  int64_t holes_found = 0;
  int64_t holes_closed = 0;
  int64_t triangles_added = 0;
  int64_t boundary_edges_left = 0;
  int64_t non_manifold_edges = 0;
  bool closed() const { return boundary_edges_left == 0 && non_manifold_edges == 0; }
};

// The largest hole (boundary loop length, in edges) close_holes fills by default.
inline constexpr int64_t kDefaultMaxHoleEdges = 512;

// Closes every boundary loop of at most `max_hole_edges` edges: a triangle for a loop of three,
// else a fan around a new vertex at the loop's centroid, oriented like the faces around it.
// Vertices at exactly the same position count as one (texture seams, unwelded imports); the new
// triangles use the loop's own vertices. Normals, when present, are recomputed. Non-manifold edges
// are not repaired (reported).
HoleReport close_holes(Mesh& mesh, int64_t max_hole_edges = kDefaultMaxHoleEdges);

struct AssetOptions {
  int64_t max_triangles = 0;  // budget of LOD0; 0: keep the mesh's count
  int lods = 0;               // extra levels: LOD1..LODn at halving budgets (0..kMaxLods)
  bool closed = false;        // close small holes; report when the mesh stays open
  int64_t max_hole_edges = kDefaultMaxHoleEdges;
  // The texture's longest side (0: keep it): a larger texture is shrunk, aspect kept (area average;
  // the atlas's dilated gutters keep the charts' borders clean at half or a quarter the size).
  int64_t max_texture_size = 0;
};
// The smallest texture limit accepted (a smaller one would blur any atlas to nothing).
inline constexpr int64_t kMinTextureLimit = 64;
inline constexpr int kMaxLods = 8;
// The fewest triangles of a closed mesh (a tetrahedron).
inline constexpr int64_t kMinClosedTriangles = 4;

// kInvalidArgument naming the option: lods outside [0, kMaxLods], a texture limit neither 0 nor
// at least kMinTextureLimit, a negative budget, a budget
// below kMinClosedTriangles for a closed mesh, or an LOD chain whose last level's budget would
// drop below that (1 for an open mesh). `triangles` is the mesh's count (for the LOD check
// without a budget; 0 to skip it).
Status validate_asset_options(const AssetOptions& options, int64_t triangles = 0);

struct AssetReport {
  std::vector<int64_t> lod_triangles;  // per level, as written
  std::vector<int64_t> lod_vertices;
  HoleReport holes;    // of LOD0
  bool closed = true;  // every level closed and manifold (when asked)
  // The texture as written (0 x 0: none) and, when the limit shrank it, its size before.
  int64_t texture_width = 0, texture_height = 0;
  int64_t texture_width_before = 0, texture_height_before = 0;
  bool texture_shrunk() const { return texture_width_before > 0; }
};

// Shrinks mesh->texture so that its longest side is at most `max_side` (0: no limit), the aspect
// kept; records the sizes in `report` (may be null). Uvs are untouched (they are relative).
void limit_texture_size(Mesh* mesh, int64_t max_side, AssetReport* report);

// The levels to write: LOD0 = `mesh` within the budget (and closed when asked, its texture within
// the limit), LOD1..n each decimated to half the previous budget from LOD0. Errors:
// validate_asset_options(), decimation.
Expected<std::vector<Mesh>> prepare_asset(const Mesh& mesh, const AssetOptions& options,
                                          AssetReport* report = nullptr);

}  // namespace tessera::mesh
