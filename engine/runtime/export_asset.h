// export_asset: the one way a mesh becomes a file, for every front end (CLI generate / decode /
// batch / convert, the studio's Export, the coming server). A mesh and how it was made go in; a
// file ready for its target comes out: the triangle budget, closing and LODs (mesh/asset.h), a
// texture projected onto every level when one is given (mesh/texture.h), the placement and unit
// (mesh/export.h), and the metadata that lets `tessera generate --from` and the studio's Open make
// it again (the shape's settings plus an "export" record of how it was exported).
//
// Files are written atomically (a temporary file, fsync, rename): a failure or a kill at any
// moment leaves the previous file, or none, never half of one; files already written stay.
// Errors name the path (or the option) and what was wrong; nothing throws on bad input, text
// included (every string that reaches the metadata passes the text rule, user_text.h).
// Threads: pure; safe to call from any thread on distinct paths.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/mesh/asset.h"
#include "engine/mesh/export.h"
#include "engine/mesh/mesh.h"
#include "engine/mesh/texture.h"

namespace tessera::runtime {

struct AssetExport {
  // Frame, unit, size, pivot and scale. Its metadata_json is not used: see `settings`.
  mesh::ExportOptions options;
  mesh::AssetOptions asset;  // triangle budget of LOD0, LODs, closing
  std::string preset;        // the platform preset asked for ("": none), recorded in the metadata
  // Projected onto every level from the front when not null; else the mesh keeps its own texture.
  std::shared_ptr<const mesh::TextureImage> texture;
  mesh::ProjectionOptions projection;
  // How the shape was made: an object (shape_settings_json(), or the metadata of the file it was
  // read from); the file carries it with an "export" record added. Null: the file carries no
  // metadata (the privacy switch, or a mesh with no history).
  nlohmann::json settings;
};

// Writes `mesh` to `path` (.obj / .glb / .fbx / .stl / .3mf, mesh/export.h) as `request` says.
// The report: each level's counts, and whether the mesh is closed when closing was asked.
// Errors: kInvalidArgument for bad options or an unknown extension (naming the path), the
// preparation's and the writer's (naming the path).
Expected<mesh::AssetReport> export_asset(const mesh::Mesh& mesh, const std::string& path,
                                         const AssetExport& request);

// The "export" record a file carries: up_axis, scale, max_faces, closed_asked always; preset,
// forward, unit, size, height, pivot, lods when they differ from the plain defaults; max_texture
// when set or under a preset; with a
// report, lod_triangles and closed (what was reached). Read back by `generate --from`.
nlohmann::json export_record(const AssetExport& request, const mesh::AssetReport* report);

}  // namespace tessera::runtime
