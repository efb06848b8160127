// 3MF (3D Manufacturing Format), the printers' modern mesh format, written and read through lib3mf,
// the 3MF Consortium's library (Debian's lib3mf-dev 1.8), not a zip and XML writer of our own.
//
// Writing: one mesh object (named "tessera") with one build item, the unit "meter" so that every
// consumer shows the same physical size as the GLB/FBX exports (ExportOptions: scale, then up
// axis; a print preset picks scale and unit for millimetres), and metadata: "Application" =
// "Tessera <version>" plus the given name/value pairs (3MF allows its own names - Title,
// Designer, Description, Copyright, LicenseTerms, Rating, CreationDate, ModificationDate - and
// namespaced ones). Built in memory and written atomically.
//
// Reading: every build item's mesh object (components objects are skipped), its build transform
// applied; the file's unit is reported in `unit_metres` (metres per file unit) and not applied.
// lib3mf checks the package and the XML; its errors come back as kCorruptData naming the file.
//
// Without lib3mf at build time (TESSERA_HAVE_LIB3MF unset) every function is kUnsupported.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/mesh/export_options.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

using Metadata = std::vector<std::pair<std::string, std::string>>;

bool have_3mf();
Expected<std::string> to_3mf(const Mesh& mesh, const ExportOptions& options = {},
                             const Metadata& metadata = {});
Status write_3mf(const Mesh& mesh, const std::string& path, const ExportOptions& options = {},
                 const Metadata& metadata = {});

struct ThreeMfFile {
  Mesh mesh;
  double unit_metres = 1e-3;  // the file's unit (3MF's default: millimetre)
  Metadata metadata;
};
Expected<ThreeMfFile> parse_3mf(std::string_view bytes, const std::string& name);

}  // namespace tessera::mesh
