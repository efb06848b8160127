#include "engine/mesh/export.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/core/mapped_file.h"
#include "engine/mesh/export_fbx.h"

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

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

bool is_identity(const ExportOptions& options) {
  return options.up_axis == UpAxis::kY && options.scale == 1.0f;
}

// Holds a transformed copy only when the options change anything (the default path copies
// nothing).
class ExportView {
 public:
  ExportView(const Mesh& mesh, const ExportOptions& options) : mesh_(&mesh) {
    if (!is_identity(options)) {
      copy_ = transform_for_export(mesh, options);
      mesh_ = &*copy_;
    }
  }
  const Mesh& mesh() const { return *mesh_; }

 private:
  const Mesh* mesh_;
  std::optional<Mesh> copy_;
};

}  // namespace

Status validate_export_options(const ExportOptions& options) {
  if (!std::isfinite(options.scale) || options.scale <= 0.0f) {
    return invalid_argument("export scale " + std::to_string(options.scale) +
                            " must be finite and > 0");
  }
  if (options.up_axis != UpAxis::kY && options.up_axis != UpAxis::kZ) {
    return invalid_argument("export up axis must be Y or Z");
  }
  return Status();
}

const char* up_axis_name(UpAxis axis) { return axis == UpAxis::kZ ? "z" : "y"; }

Mesh transform_for_export(const Mesh& mesh, const ExportOptions& options) {
  Mesh out = mesh;
  const bool z_up = options.up_axis == UpAxis::kZ;
  for (size_t i = 0; i + 2 < out.positions.size(); i += 3) {
    const float x = mesh.positions[i] * options.scale, y = mesh.positions[i + 1] * options.scale,
                z = mesh.positions[i + 2] * options.scale;
    out.positions[i] = x;
    out.positions[i + 1] = z_up ? -z : y;
    out.positions[i + 2] = z_up ? y : z;
  }
  if (z_up) {
    for (size_t i = 0; i + 2 < out.normals.size(); i += 3) {
      out.normals[i + 1] = -mesh.normals[i + 2];
      out.normals[i + 2] = mesh.normals[i + 1];
    }
  }
  return out;
}

std::string to_obj(const Mesh& input, const ExportOptions& options, const std::string& mtl_file) {
  const ExportView view(input, options);
  const Mesh& mesh = view.mesh();
  std::string out;
  out.reserve(static_cast<size_t>(mesh.vertex_count()) * 80 + static_cast<size_t>(mesh.triangle_count()) * 40);
  out += "# Tessera mesh: " + std::to_string(mesh.vertex_count()) + " vertices, " +
         std::to_string(mesh.triangle_count()) + " triangles, up axis " +
         up_axis_name(options.up_axis) + "\n";
  if (!mtl_file.empty()) out += "mtllib " + mtl_file + "\n";
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
  if (!mtl_file.empty()) out += std::string("usemtl ") + kObjMaterialName + "\n";
  for (int64_t t = 0; t < mesh.triangle_count(); ++t) {
    const uint32_t a = mesh.triangles[3 * t] + 1, b = mesh.triangles[3 * t + 1] + 1,
                   c = mesh.triangles[3 * t + 2] + 1;
    const int n = normals ? std::snprintf(line, sizeof line, "f %u//%u %u//%u %u//%u\n", a, a, b, b, c, c)
                          : std::snprintf(line, sizeof line, "f %u %u %u\n", a, b, c);
    out.append(line, static_cast<size_t>(n));
  }
  return out;
}

std::string default_mtl() {
  // Diffuse 0.8 grey, a faint white specular: how Blender's and Maya's default materials look.
  return std::string("# Tessera default material\nnewmtl ") + kObjMaterialName +
         "\nKa 0 0 0\nKd 0.8 0.8 0.8\nKs 0.04 0.04 0.04\nNs 50\nd 1\nillum 2\n";
}

Status write_obj(const Mesh& mesh, const std::string& path, const ExportOptions& options) {
  TESSERA_RETURN_IF_ERROR(validate(mesh).with_context(path));
  TESSERA_RETURN_IF_ERROR(validate_export_options(options).with_context(path));
  if (mesh.vertex_count() == 0 || mesh.triangle_count() == 0) {
    return invalid_argument(path + ": obj: the mesh is empty");
  }
  namespace fs = std::filesystem;
  const fs::path mtl_path = fs::path(path).replace_extension(".mtl");
  if (mtl_path == fs::path(path)) {
    return invalid_argument(path + ": an OBJ path must not end in .mtl (the material file goes there)");
  }
  const std::string mtl = default_mtl();
  // The error names the OBJ too: that is the path the caller asked for.
  TESSERA_RETURN_IF_ERROR(
      write_file_atomic(mtl_path.string(), mtl.data(), mtl.size()).with_context(path));
  const std::string text = to_obj(mesh, options, mtl_path.filename().string());
  Status st = write_file_atomic(path, text.data(), text.size());
  if (!st.ok()) {
    std::error_code ec;
    fs::remove(mtl_path, ec);  // best effort: the error being returned is the OBJ's
  }
  return st;
}

Expected<std::string> to_glb(const Mesh& input, const ExportOptions& options) {
  TESSERA_RETURN_IF_ERROR(validate(input));
  TESSERA_RETURN_IF_ERROR(validate_export_options(options));
  const ExportView view(input, options);
  const Mesh& mesh = view.mesh();
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

Status write_glb(const Mesh& mesh, const std::string& path, const ExportOptions& options) {
  Expected<std::string> bytes = to_glb(mesh, options);
  if (!bytes.ok()) return bytes.status().with_context(path);
  return write_file_atomic(path, bytes->data(), bytes->size());
}

bool is_supported_mesh_extension(const std::string& path) {
  const std::string ext = lower_extension(path);
  return ext == ".obj" || ext == ".glb" || ext == ".fbx";
}

Status write_mesh(const Mesh& mesh, const std::string& path, const ExportOptions& options) {
  const std::string ext = lower_extension(path);
  if (ext == ".obj") return write_obj(mesh, path, options);
  if (ext == ".glb") return write_glb(mesh, path, options);
  if (ext == ".fbx") return write_fbx(mesh, path, options);
  return invalid_argument(path + ": unknown mesh format '" + ext + "' (use " +
                          kSupportedMeshExtensions + ")");
}

}  // namespace tessera::mesh
