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

#include "core/mapped_file.h"
#include "engine/mesh/texture.h"
#include "engine/mesh/export_fbx.h"
#include "engine/mesh/metadata.h"
#include "engine/mesh/stl.h"
#include "engine/mesh/threemf.h"

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
  return options.up_axis == UpAxis::kY && !options.front_x && options.scale == 1.0f &&
         options.size_m == 0.0 && options.height_m == 0.0 && options.pivot == Pivot::kOrigin &&
         options.offset == std::array<double, 3>{0.0, 0.0, 0.0} &&
         options.unit == LengthUnit::kMetre;
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

std::string to_obj(const Mesh& input, const ExportOptions& options, const std::string& mtl_file) {
  const ExportView view(input, options);
  const Mesh& mesh = view.mesh();
  std::string out;
  out.reserve(static_cast<size_t>(mesh.vertex_count()) * 80 +
              static_cast<size_t>(mesh.triangle_count()) * 40);
  out += "# Tessera mesh: " + std::to_string(mesh.vertex_count()) + " vertices, " +
         std::to_string(mesh.triangle_count()) + " triangles, up axis " +
         up_axis_name(options.up_axis) + "\n";
  if (options.unit != LengthUnit::kMetre || options.front_x) {
    out += std::string("# units: ") + unit_name(options.unit) +
           (options.front_x ? ", front +X" : "") + "\n";
  }
  if (!options.metadata_json.empty()) out += obj_metadata_line(options.metadata_json);
  if (!mtl_file.empty()) out += "mtllib " + mtl_file + "\n";
  char line[128];
  for (int64_t v = 0; v < mesh.vertex_count(); ++v) {
    const int n = std::snprintf(line, sizeof line, "v %.7g %.7g %.7g\n", mesh.positions[3 * v],
                                mesh.positions[3 * v + 1], mesh.positions[3 * v + 2]);
    out.append(line, static_cast<size_t>(n));
  }
  const bool uvs = !mesh.uvs.empty();
  for (int64_t v = 0; uvs && v < mesh.vertex_count(); ++v) {
    const int n =
        std::snprintf(line, sizeof line, "vt %.7g %.7g\n", mesh.uvs[2 * v], mesh.uvs[2 * v + 1]);
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
    int n;
    if (normals && uvs) {
      n = std::snprintf(line, sizeof line, "f %u/%u/%u %u/%u/%u %u/%u/%u\n", a, a, a, b, b, b, c, c,
                        c);
    } else if (normals) {
      n = std::snprintf(line, sizeof line, "f %u//%u %u//%u %u//%u\n", a, a, b, b, c, c);
    } else if (uvs) {
      n = std::snprintf(line, sizeof line, "f %u/%u %u/%u %u/%u\n", a, a, b, b, c, c);
    } else {
      n = std::snprintf(line, sizeof line, "f %u %u %u\n", a, b, c);
    }
    out.append(line, static_cast<size_t>(n));
  }
  return out;
}

std::string default_mtl(const std::string& texture_file) {
  // Diffuse 0.8 grey, a faint white specular: how Blender's and Maya's default materials look.
  // Textured: white diffuse, so viewers that multiply Kd by the map show the texture's colours.
  if (texture_file.empty()) {
    return std::string("# Tessera default material\nnewmtl ") + kObjMaterialName +
           "\nKa 0 0 0\nKd 0.8 0.8 0.8\nKs 0.04 0.04 0.04\nNs 50\nd 1\nillum 2\n";
  }
  return std::string("# Tessera textured material\nnewmtl ") + kObjMaterialName +
         "\nKa 0 0 0\nKd 1 1 1\nKs 0.04 0.04 0.04\nNs 50\nd 1\nillum 2\nmap_Kd " + texture_file +
         "\n";
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
    return invalid_argument(path +
                            ": an OBJ path must not end in .mtl (the material file goes there)");
  }
  const bool textured = !mesh.texture.empty();
  const std::string png_path = texture_path_for(path);
  // Errors name the OBJ too: that is the path the caller asked for.
  TESSERA_RETURN_IF_ERROR(write_texture_beside(mesh, path, options.metadata_json));
  auto remove_written = [&](bool mtl_written) {
    std::error_code ec;  // best effort: the error being returned is the one that matters
    if (mtl_written) fs::remove(mtl_path, ec);
    if (textured) fs::remove(png_path, ec);
  };
  const std::string mtl =
      default_mtl(textured ? fs::path(png_path).filename().string() : std::string());
  if (Status st = write_file_atomic(mtl_path.string(), mtl.data(), mtl.size()).with_context(path);
      !st.ok()) {
    remove_written(false);
    return st;
  }
  const std::string text = to_obj(mesh, options, mtl_path.filename().string());
  Status st = write_file_atomic(path, text.data(), text.size());
  if (!st.ok()) remove_written(true);
  return st;
}

Expected<std::string> to_glb(const Mesh& input, const ExportOptions& options) {
  return to_glb_lods({&input}, options);
}

Expected<std::string> to_glb_lods(const std::vector<const Mesh*>& lods,
                                  const ExportOptions& given) {
  if (lods.empty()) return invalid_argument("glb: no mesh to write");
  for (const Mesh* m : lods) {
    TESSERA_RETURN_IF_ERROR(validate(*m));
    if (m->vertex_count() == 0 || m->triangle_count() == 0) {
      return invalid_argument("glb: the mesh is empty");
    }
  }
  TESSERA_ASSIGN_OR_RETURN(const ExportOptions options, resolve_placement(*lods[0], given));
  if (options.unit != LengthUnit::kMetre) {
    return invalid_argument(std::string("glb: glTF positions are metres by definition, not ") +
                            unit_name(options.unit) + " (choose metres, or another format)");
  }
  const bool textured = !lods[0]->texture.empty();
  std::string png;
  if (textured) {
    Expected<std::string> encoded = encode_texture_png(lods[0]->texture);
    if (!encoded.ok()) return encoded.status().with_context("glb: texture");
    png = std::move(*encoded);
  }
  using nlohmann::json;
  json views = json::array();
  json accessors = json::array();
  json meshes = json::array();
  json nodes = json::array();
  json scene_nodes = json::array();
  // BIN layout per level: positions | normals | uvs | indices; then the png; each section starts
  // 4-byte aligned (all element sizes are 4).
  std::string bin;
  for (size_t level = 0; level < lods.size(); ++level) {
    const ExportView view(*lods[level], options);
    const Mesh& mesh = view.mesh();
    const size_t nv = static_cast<size_t>(mesh.vertex_count());
    const bool has_normals = !mesh.normals.empty(), has_uvs = !mesh.uvs.empty();
    const size_t pos_bytes = nv * 12, uv_bytes = nv * 8, idx_bytes = mesh.triangles.size() * 4;
    const size_t pos_offset = bin.size();
    append_bytes(bin, mesh.positions.data(), pos_bytes);
    const size_t normal_offset = bin.size();
    if (has_normals) append_bytes(bin, mesh.normals.data(), pos_bytes);
    const size_t uv_offset = bin.size();
    if (has_uvs) {
      // glTF's texture coordinates start at the image's top-left: v flips.
      std::vector<float> flipped(mesh.uvs);
      for (size_t i = 1; i < flipped.size(); i += 2) flipped[i] = 1.0f - flipped[i];
      append_bytes(bin, flipped.data(), uv_bytes);
    }
    const size_t index_offset = bin.size();
    append_bytes(bin, mesh.triangles.data(), idx_bytes);

    const Bounds b = compute_bounds(mesh);
    uint32_t max_index = 0;
    for (uint32_t t : mesh.triangles) max_index = std::max(max_index, t);
    json attributes = json::object();
    attributes["POSITION"] = accessors.size();
    accessors.push_back({{"bufferView", views.size()},
                         {"componentType", 5126},
                         {"count", nv},
                         {"type", "VEC3"},
                         {"min", {b.min[0], b.min[1], b.min[2]}},
                         {"max", {b.max[0], b.max[1], b.max[2]}}});
    views.push_back(
        {{"buffer", 0}, {"byteOffset", pos_offset}, {"byteLength", pos_bytes}, {"target", 34962}});
    if (has_normals) {
      attributes["NORMAL"] = accessors.size();
      accessors.push_back(
          {{"bufferView", views.size()}, {"componentType", 5126}, {"count", nv}, {"type", "VEC3"}});
      views.push_back({{"buffer", 0},
                       {"byteOffset", normal_offset},
                       {"byteLength", pos_bytes},
                       {"target", 34962}});
    }
    if (has_uvs) {
      attributes["TEXCOORD_0"] = accessors.size();
      accessors.push_back(
          {{"bufferView", views.size()}, {"componentType", 5126}, {"count", nv}, {"type", "VEC2"}});
      views.push_back(
          {{"buffer", 0}, {"byteOffset", uv_offset}, {"byteLength", uv_bytes}, {"target", 34962}});
    }
    const size_t index_accessor = accessors.size();
    accessors.push_back({{"bufferView", views.size()},
                         {"componentType", 5125},
                         {"count", mesh.triangles.size()},
                         {"type", "SCALAR"},
                         {"min", {0}},
                         {"max", {max_index}}});
    views.push_back({{"buffer", 0},
                     {"byteOffset", index_offset},
                     {"byteLength", idx_bytes},
                     {"target", 34963}});
    json primitive = {{"attributes", attributes}, {"indices", index_accessor}, {"mode", 4}};
    if (textured && has_uvs) primitive["material"] = 0;
    json mesh_json = {{"primitives", {primitive}}};
    json node = {{"mesh", meshes.size()}};
    if (lods.size() > 1) {
      mesh_json["name"] = lod_object_name(level, lods.size());
      node["name"] = lod_object_name(level, lods.size());
    }
    scene_nodes.push_back(nodes.size());
    meshes.push_back(std::move(mesh_json));
    nodes.push_back(std::move(node));
  }
  const size_t png_offset = bin.size();
  bin += png;
  json doc = {
      {"asset", glb_asset(options.metadata_json)},
      {"scene", 0},
      {"scenes", {{{"nodes", scene_nodes}}}},
      {"nodes", nodes},
      {"meshes", meshes},
      {"accessors", accessors},
  };
  if (textured) {
    // Image views carry no target (glTF: only vertex and index data do).
    const size_t png_view = views.size();
    views.push_back({{"buffer", 0}, {"byteOffset", png_offset}, {"byteLength", png.size()}});
    doc["images"] = {{{"bufferView", png_view}, {"mimeType", "image/png"}}};
    // LINEAR / LINEAR_MIPMAP_LINEAR, CLAMP_TO_EDGE: the atlas regions have gutters, not tiling.
    doc["samplers"] = {
        {{"magFilter", 9729}, {"minFilter", 9987}, {"wrapS", 33071}, {"wrapT", 33071}}};
    doc["textures"] = {{{"sampler", 0}, {"source", 0}}};
    doc["materials"] = {{{"name", kObjMaterialName},
                         {"pbrMetallicRoughness",
                          {{"baseColorTexture", {{"index", 0}, {"texCoord", 0}}},
                           {"metallicFactor", 0.0},
                           {"roughnessFactor", 1.0}}}}};
  }
  while (bin.size() % 4 != 0) bin.push_back('\0');
  doc["bufferViews"] = views;
  doc["buffers"] = {{{"byteLength", bin.size()}}};
  std::string json_text = doc.dump();
  while (json_text.size() % 4 != 0) json_text.push_back(' ');

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
  return ext == ".obj" || ext == ".glb" || ext == ".fbx" || ext == ".stl" || ext == ".3mf";
}

bool carries_texture(const std::string& path) {
  const std::string ext = lower_extension(path);
  return ext == ".obj" || ext == ".glb" || ext == ".fbx";
}

Status write_mesh(const Mesh& mesh, const std::string& path, const ExportOptions& options) {
  const std::string ext = lower_extension(path);
  if (ext == ".obj") return write_obj(mesh, path, options);
  if (ext == ".glb") return write_glb(mesh, path, options);
  if (ext == ".fbx") return write_fbx(mesh, path, options);  // writes the texture PNG itself
  if (ext == ".stl") return write_stl(mesh, path, options);  // geometry only (no uvs, texture)
  if (ext == ".3mf") {                                       // geometry and the metadata
    Metadata metadata;
    if (!options.metadata_json.empty()) {
      metadata.emplace_back(kThreeMfMetadataName, options.metadata_json);
    }
    return write_3mf(mesh, path, options, metadata);
  }
  return invalid_argument(path + ": unknown mesh format '" + ext + "' (use " +
                          kSupportedMeshExtensions + ")");
}

Status write_mesh_lods(const std::vector<Mesh>& lods, const std::string& path,
                       const ExportOptions& options) {
  if (lods.empty()) return invalid_argument(path + ": no mesh to write");
  if (lods.size() == 1) return write_mesh(lods[0], path, options);
  std::vector<const Mesh*> levels;
  for (const Mesh& m : lods) levels.push_back(&m);
  const std::string ext = lower_extension(path);
  if (ext == ".glb") {
    Expected<std::string> bytes = to_glb_lods(levels, options);
    if (!bytes.ok()) return bytes.status().with_context(path);
    return write_file_atomic(path, bytes->data(), bytes->size());
  }
  if (ext == ".fbx") return write_fbx_lods(levels, path, options);
  return invalid_argument(path + ": levels of detail are written to .glb or .fbx files (" +
                          std::to_string(lods.size()) + " levels asked for a '" + ext + "' file)");
}

}  // namespace tessera::mesh
