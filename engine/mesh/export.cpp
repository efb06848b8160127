#include "engine/mesh/export.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "engine/core/mapped_file.h"

namespace tessera::mesh {
namespace {

void append_u32(std::string& s, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  s.append(b, 4);
}

void append_bytes(std::string& s, const void* data, size_t n) {
  s.append(static_cast<const char*>(data), n);  // little-endian host (x86-64, aarch64)
}

}  // namespace

std::string to_obj(const Mesh& mesh) {
  std::string out;
  out.reserve(static_cast<size_t>(mesh.vertex_count()) * 80 + static_cast<size_t>(mesh.triangle_count()) * 40);
  out += "# Tessera mesh: " + std::to_string(mesh.vertex_count()) + " vertices, " +
         std::to_string(mesh.triangle_count()) + " triangles\n";
  char line[128];
  for (int64_t v = 0; v < mesh.vertex_count(); ++v) {
    const int n = std::snprintf(line, sizeof line, "v %.7g %.7g %.7g\n", mesh.positions[3 * v],
                                mesh.positions[3 * v + 1], mesh.positions[3 * v + 2]);
    out.append(line, static_cast<size_t>(n));
  }
  const bool normals = !mesh.normals.empty();
  if (normals) {
    for (int64_t v = 0; v < mesh.vertex_count(); ++v) {
      const int n = std::snprintf(line, sizeof line, "vn %.6g %.6g %.6g\n", mesh.normals[3 * v],
                                  mesh.normals[3 * v + 1], mesh.normals[3 * v + 2]);
      out.append(line, static_cast<size_t>(n));
    }
  }
  for (int64_t t = 0; t < mesh.triangle_count(); ++t) {
    const uint32_t a = mesh.triangles[3 * t] + 1, b = mesh.triangles[3 * t + 1] + 1,
                   c = mesh.triangles[3 * t + 2] + 1;
    const int n = normals ? std::snprintf(line, sizeof line, "f %u//%u %u//%u %u//%u\n", a, a, b, b, c, c)
                          : std::snprintf(line, sizeof line, "f %u %u %u\n", a, b, c);
    out.append(line, static_cast<size_t>(n));
  }
  return out;
}

Status write_obj(const Mesh& mesh, const std::string& path) {
  TESSERA_RETURN_IF_ERROR(validate(mesh).with_context(path));
  const std::string text = to_obj(mesh);
  return write_file_atomic(path, text.data(), text.size());
}

Expected<std::string> to_glb(const Mesh& mesh) {
  TESSERA_RETURN_IF_ERROR(validate(mesh));
  if (mesh.vertex_count() == 0 || mesh.triangle_count() == 0) {
    return invalid_argument("glb: the mesh is empty");
  }
  const size_t nv = static_cast<size_t>(mesh.vertex_count());
  const bool has_normals = !mesh.normals.empty();
  // BIN layout: positions | normals | indices; each section is a multiple of 4 bytes.
  std::string bin;
  const size_t pos_bytes = nv * 12, idx_bytes = mesh.triangles.size() * 4;
  append_bytes(bin, mesh.positions.data(), pos_bytes);
  size_t normal_offset = bin.size();
  if (has_normals) append_bytes(bin, mesh.normals.data(), pos_bytes);
  const size_t index_offset = bin.size();
  append_bytes(bin, mesh.triangles.data(), idx_bytes);

  const Bounds b = compute_bounds(mesh);
  uint32_t max_index = 0;
  for (uint32_t t : mesh.triangles) max_index = std::max(max_index, t);
  using nlohmann::json;
  json views = json::array();
  json accessors = json::array();
  json attributes = json::object();
  views.push_back({{"buffer", 0}, {"byteOffset", 0}, {"byteLength", pos_bytes}, {"target", 34962}});
  accessors.push_back({{"bufferView", 0}, {"componentType", 5126}, {"count", nv}, {"type", "VEC3"},
                       {"min", {b.min[0], b.min[1], b.min[2]}}, {"max", {b.max[0], b.max[1], b.max[2]}}});
  attributes["POSITION"] = 0;
  if (has_normals) {
    views.push_back({{"buffer", 0}, {"byteOffset", normal_offset}, {"byteLength", pos_bytes}, {"target", 34962}});
    accessors.push_back({{"bufferView", 1}, {"componentType", 5126}, {"count", nv}, {"type", "VEC3"}});
    attributes["NORMAL"] = 1;
  }
  const int index_view = static_cast<int>(views.size());
  views.push_back({{"buffer", 0}, {"byteOffset", index_offset}, {"byteLength", idx_bytes}, {"target", 34963}});
  accessors.push_back({{"bufferView", index_view}, {"componentType", 5125},
                       {"count", mesh.triangles.size()}, {"type", "SCALAR"},
                       {"min", {0}}, {"max", {max_index}}});
  json doc = {
      {"asset", {{"version", "2.0"}, {"generator", "Tessera"}}},
      {"scene", 0},
      {"scenes", {{{"nodes", {0}}}}},
      {"nodes", {{{"mesh", 0}}}},
      {"meshes", {{{"primitives", {{{"attributes", attributes}, {"indices", index_view}, {"mode", 4}}}}}}},
      {"buffers", {{{"byteLength", bin.size()}}}},
      {"bufferViews", views},
      {"accessors", accessors},
  };
  std::string json_text = doc.dump();
  while (json_text.size() % 4 != 0) json_text.push_back(' ');
  while (bin.size() % 4 != 0) bin.push_back('\0');

  std::string out;
  const size_t total = 12 + 8 + json_text.size() + 8 + bin.size();
  if (total > UINT32_MAX) return invalid_argument("glb: mesh too large for one GLB file (> 4 GiB)");
  out.reserve(total);
  append_u32(out, 0x46546C67u);  // "glTF"
  append_u32(out, 2);
  append_u32(out, static_cast<uint32_t>(total));
  append_u32(out, static_cast<uint32_t>(json_text.size()));
  append_u32(out, 0x4E4F534Au);  // "JSON"
  out += json_text;
  append_u32(out, static_cast<uint32_t>(bin.size()));
  append_u32(out, 0x004E4942u);  // "BIN\0"
  out += bin;
  return out;
}

Status write_glb(const Mesh& mesh, const std::string& path) {
  Expected<std::string> bytes = to_glb(mesh);
  if (!bytes.ok()) return bytes.status().with_context(path);
  return write_file_atomic(path, bytes->data(), bytes->size());
}

Status write_mesh(const Mesh& mesh, const std::string& path) {
  std::string ext;
  const size_t dot = path.find_last_of('.');
  if (dot != std::string::npos) ext = path.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".obj") return write_obj(mesh, path);
  if (ext == ".glb") return write_glb(mesh, path);
  return invalid_argument(path + ": unknown mesh format '" + ext + "' (use .obj or .glb)");
}

}  // namespace tessera::mesh
