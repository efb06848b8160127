// Tessera metadata in mesh files: how a mesh was made (prompt, seed, sampling, guidance,
// resolution, model name and checksum, Tessera version), as one JSON object, so that `tessera
// generate --from FILE` can make it again. The mesh layer only carries the text; the
// front ends decide what goes in it.
//
// Where it lives (ExportOptions::metadata_json): GLB asset.extras (the object itself;
// asset.generator is "Tessera <version>" always), FBX Model user properties (export_fbx.h), OBJ a
// comment line "# tessera {json}" after the header line, 3MF the metadata entry
// kThreeMfMetadataName (its JSON object must have a "tessera" member to count).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tessera::mesh {

// 3MF allows its well-known metadata names or namespaced ones, and lib3mf 1.8 cannot read back a
// namespace it did not declare ("tessera:settings" was written and then refused on reading), so
// the settings go into the well-known Description (a slicer shows them as the description).
inline constexpr const char* kThreeMfMetadataName = "Description";
inline constexpr const char* kObjMetadataPrefix = "# tessera ";

// The OBJ line for a metadata JSON text (newlines in it become spaces; JSON allows that).
std::string obj_metadata_line(const std::string& json_text);
// glTF's asset object: version 2.0, generator "Tessera <version>", extras = the metadata (when
// non-empty and a JSON object).
nlohmann::json glb_asset(const std::string& json_text);

// The metadata object a file carries (.glb, .fbx, .obj, .3mf). kNotFound "FILE has no Tessera
// metadata" when it has none (another program's file, or written with the metadata off);
// kCorruptData naming the file when the metadata is there but not a JSON object; the file's read
// errors as they are.
Expected<nlohmann::json> read_metadata(const std::string& path);

}  // namespace tessera::mesh
