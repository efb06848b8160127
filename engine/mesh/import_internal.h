// Pieces the mesh readers (import_*.cpp) share; internal to engine/mesh. Callers use import.h.
//
// - Warnings: append one message to a nullable vector.
// - UV seams: turning per-corner uv references into Mesh's one-uv-per-vertex form.
// - Texture images: resolving a relative file name from an untrusted file and decoding a PNG only
//   after its header passed a size budget (stb_image allocates from the header's dimensions before
//   it looks at the data, so a 100-byte PNG could otherwise ask for gigabytes).
#pragma once

#include <array>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

// The string value of the Properties70 entry `property` of the first FBX Model that has one
// (nullopt when none does); the file's parse errors (binary FBX only) as parse_fbx gives them.
Expected<std::optional<std::string>> fbx_model_string_property(std::string_view bytes,
                                                               const std::string& name,
                                                               std::string_view property);

}  // namespace tessera::mesh

namespace tessera::mesh::import_detail {

// Column-major 4x4 transforms of the scene graphs (glTF nodes, FBX Models).
using Mat4 = std::array<double, 16>;
Mat4 mat_identity();
Mat4 mat_mul(const Mat4& a, const Mat4& b);  // a * b
// m * (x, y, z, 1) into `out`; false when a coordinate is not finite or beyond float's range (the
// caller names the vertex).
bool transform_point(const Mat4& m, double x, double y, double z, float out[3]);

void warn(std::vector<std::string>* warnings, std::string message);

// UTF-16 text with a byte-order mark (some Windows exporters write OBJ, glTF and COLLADA so) as
// UTF-8; nullopt when `bytes` has no such mark or is not valid UTF-16 text.
std::optional<std::string> utf16_to_utf8(std::string_view bytes);

// Lower-case extension with the dot ("x/Y.OBJ" -> ".obj"); empty when there is none.
std::string lower_extension(const std::string& path);

// Mesh::uvs must lie in [0, 1]: values within 1e-5 outside (a float written with 7 digits) are
// clamped in place; false (uvs untouched beyond that) when any is further out or not finite.
bool uvs_in_unit_range(std::vector<float>& uvs);

// A face corner: the vertex it uses and the index of its uv in the caller's uv table (-1: none).
struct UvCorner {
  uint32_t vertex = 0;
  int64_t uv = -1;
};

// Fills mesh->triangles and mesh->uvs from `corners` (3 per triangle; vertex < vertex_count(),
// uv < uv_values.size() / 2, both checked by the caller) and the uv table (u, v pairs). The first
// uv a vertex is used with stays on it; a different uv on the same vertex gets a copy of the vertex
// appended (shared by every corner with that pair); vertices never given a uv get (0, 0). When no
// corner has a uv, mesh->uvs stays empty. kCorruptData naming `name` when the copies would pass
// 2^32 vertices.
Status assign_corner_uvs(const std::vector<UvCorner>& corners, const std::vector<float>& uv_values,
                         const std::string& name, Mesh* mesh);

// Largest texture an import decodes (pixels): 8192 x 8192.
inline constexpr int64_t kMaxImportTexturePixels = int64_t{8192} * 8192;

// Decodes PNG bytes to a texture after checking the IHDR: a PNG signature, dimensions >= 1, at most
// kMaxImportTexturePixels, and no more raw scanline bytes than zlib could inflate from the whole
// buffer (1032:1). kInvalidArgument naming `what` otherwise (the callers turn it into a warning).
Expected<TextureImage> decode_import_png(std::string_view bytes, const std::string& what);

// Reads a file named inside an untrusted mesh file: `reference` (backslashes read as '/', "%XX"
// decoded when `uri` is set) relative to `directory`; when that is not a file (or the reference is
// absolute, as exporters write the paths of the machine that made the file), its bare file name in
// `directory`. URI schemes ("http:", "file:") and empty references are refused. `*path` (nullable)
// receives the path tried last. kNotFound / kIoError / kInvalidArgument naming that path.
Expected<std::string> read_sidecar(const std::string& directory, const std::string& reference,
                                   bool uri, std::string* path);

}  // namespace tessera::mesh::import_detail
