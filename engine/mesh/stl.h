// STL (stereolithography), the printers' and slicers' mesh format: binary STL written, binary and
// ASCII STL read. STL has no shared vertices, no units and no colour: a triangle is three corners
// and a facet normal.
//
// Writing: an 80-byte header (starts "tessera binary STL"; never "solid", which some readers take
// for ASCII), the triangle count (uint32 LE), then per triangle the facet normal (right hand of the
// corners, unit length; zero for a zero-area triangle) and its three corners as float32 LE, and a
// zero attribute word. ExportOptions apply as for the other formats (scale, then up axis). STL
// has no unit: slicers read millimetres, Blender metres; scale picks the numbers. STL has no axis
// convention either: slicers and Blender take +Z as up (UpAxis::kZ). Built in memory and written
// atomically.
//
// Reading: binary when the size is exactly 84 + 50 x count (whatever the header says, "solid" or
// not: many binary exporters start their header with it); otherwise ASCII ("solid" ... "facet
// normal" / "outer loop" / 3 x "vertex x y z" / "endloop" / "endfacet" ... "endsolid"). Corners
// at exactly the same position become one vertex (STL's way of sharing them), so the mesh's
// topology is the file's. Facet normals are ignored (the winding is the orientation). Errors
// name the file: kCorruptData for a truncated or malformed file (with the ASCII line number),
// NaN/Inf coordinates, or a count beyond what the bytes hold; kNotFound for no triangles.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/mesh/export_options.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

Expected<std::string> to_stl(const Mesh& mesh, const ExportOptions& options = {});
Status write_stl(const Mesh& mesh, const std::string& path, const ExportOptions& options = {});
Expected<Mesh> parse_stl(std::string_view bytes, const std::string& name);

}  // namespace tessera::mesh
