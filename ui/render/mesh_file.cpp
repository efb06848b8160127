#include "ui/render/mesh_file.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/mapped_file.h"
#include "engine/mesh/texture.h"

namespace tessera::render {

namespace {

using Json = nlohmann::json;

// ---- OBJ ---------------------------------------------------------------------------------------

bool parse_float(const char*& p, float* out) {
  while (*p == ' ' || *p == '\t') ++p;
  char* end = nullptr;
  const float v = std::strtof(p, &end);
  if (end == p) return false;
  p = end;
  *out = v;
  return true;
}

// Mesh::uvs must lie in [0, 1]; values a rounding step outside (a float written with 7 digits)
// are clamped, anything further (tiling uvs) is refused.
bool uvs_in_unit_range(std::vector<float>& uvs) {
  constexpr float kSlack = 1e-5f;
  for (float& c : uvs) {
    if (!(c >= -kSlack && c <= 1.0f + kSlack)) return false;
    c = std::clamp(c, 0.0f, 1.0f);
  }
  return true;
}

// ---- GLB ---------------------------------------------------------------------------------------

uint32_t read_u32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, 4);  // glTF is little-endian, as is every target we build for
  return v;
}

using Mat = std::array<double, 16>;  // column-major

Mat mat_identity() {
  Mat m{};
  m[0] = m[5] = m[10] = m[15] = 1;
  return m;
}

Mat mat_mul(const Mat& a, const Mat& b) {
  Mat r{};
  for (int c = 0; c < 4; ++c) {
    for (int row = 0; row < 4; ++row) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += a[k * 4 + row] * b[c * 4 + k];
      r[c * 4 + row] = s;
    }
  }
  return r;
}

class GlbReader {
 public:
  GlbReader(const std::string& bytes, const std::string& name, std::vector<std::string>* warnings)
      : bytes_(bytes), name_(name), warnings_(warnings) {}

  Expected<mesh::Mesh> read() {
    if (bytes_.size() < 20 || bytes_.compare(0, 4, "glTF") != 0) {
      return fail("not a binary glTF file (no \"glTF\" magic)");
    }
    if (read_u32(bytes_, 4) != 2) {
      return fail("glTF version " + std::to_string(read_u32(bytes_, 4)) + " is not 2");
    }
    const uint64_t total = read_u32(bytes_, 8);
    if (total > bytes_.size()) {
      return fail("header length " + std::to_string(total) + " exceeds the file size " +
                  std::to_string(bytes_.size()));
    }
    // Chunks: JSON first (required), then an optional BIN.
    size_t at = 12;
    std::string json_text;
    while (at + 8 <= total) {
      const uint64_t length = read_u32(bytes_, at);
      const uint32_t type = read_u32(bytes_, at + 4);
      if (at + 8 + length > total) {
        return fail("chunk at byte " + std::to_string(at) + " of length " + std::to_string(length) +
                    " runs past the end of the file");
      }
      if (type == 0x4E4F534A && json_text.empty()) {  // "JSON"
        json_text = bytes_.substr(at + 8, length);
      } else if (type == 0x004E4942 && bin_size_ == 0) {  // "BIN\0"
        bin_offset_ = at + 8;
        bin_size_ = length;
      }
      at += 8 + ((length + 3) & ~uint64_t{3});
    }
    if (json_text.empty()) return fail("no JSON chunk");
    try {
      doc_ = Json::parse(json_text);
    } catch (const Json::exception& e) {
      return fail(std::string("JSON chunk does not parse: ") + e.what());
    }
    if (!doc_.is_object()) return fail("JSON chunk is not an object");

    mesh::Mesh out;
    const Json& scenes = doc_.value("scenes", Json::array());
    if (scenes.is_array() && !scenes.empty()) {
      const size_t scene_index = doc_.value("scene", 0u);
      if (scene_index >= scenes.size())
        return fail("default scene " + std::to_string(scene_index) + " does not exist");
      const Json& roots = scenes[scene_index].value("nodes", Json::array());
      if (!roots.is_array()) return fail("scene nodes is not an array");
      for (const Json& root : roots) {
        TESSERA_RETURN_IF_ERROR(visit_node(root, mat_identity(), 0, out));
      }
    } else {
      // No scene: show every mesh untransformed.
      const Json& meshes = doc_.value("meshes", Json::array());
      for (size_t m = 0; m < meshes.size(); ++m) {
        TESSERA_RETURN_IF_ERROR(add_mesh(m, mat_identity(), out));
      }
    }
    if (out.empty()) return Status(ErrorCode::kNotFound, name_ + ": no triangles in the file");
    attach_texture(out);
    return out;
  }

 private:
  Status fail(const std::string& what) const { return corrupt_data(name_ + ": " + what); }
  void warn(const std::string& what) {
    if (warnings_ != nullptr) warnings_->push_back(name_ + ": " + what);
  }

  // Reads TEXCOORD_0 of a primitive whose `count` positions were just added, into uvs_ (v flipped
  // back to the Mesh convention), or gives up on uvs for the whole file with a warning.
  void add_uvs(const Json& attributes, size_t count) {
    if (!uvs_ok_) return;
    if (!attributes.contains("TEXCOORD_0")) {
      if (!uvs_.empty()) warn("a primitive without TEXCOORD_0: the mesh is shown without uvs");
      uvs_ok_ = false;
      return;
    }
    Expected<AccessorData> uv = accessor(attributes["TEXCOORD_0"], "VEC2");
    if (!uv.ok()) {
      warn("TEXCOORD_0 not read, the mesh is shown without its texture (" + uv.status().message() +
           ")");
      uvs_ok_ = false;
      return;
    }
    if (uv->component_type != 5126 || uv->count != count) {
      warn(uv->component_type != 5126
               ? "TEXCOORD_0 is not float (normalized integer uvs are not read); the mesh is "
                 "shown without its texture"
               : "TEXCOORD_0 has " + std::to_string(uv->count) + " elements for " +
                     std::to_string(count) + " positions; the mesh is shown without its texture");
      uvs_ok_ = false;
      return;
    }
    for (size_t v = 0; v < uv->count; ++v) {
      float st[2];
      std::memcpy(st, uv->data + v * uv->stride, sizeof(st));
      uvs_.push_back(st[0]);
      uvs_.push_back(1.0f - st[1]);  // glTF's origin is the image's top-left, Mesh's bottom-left
    }
  }

  // Gives `out` the uvs read (when every primitive had them) and the base colour texture of the
  // first primitive's material when it is an embedded PNG; anything else is a warning.
  void attach_texture(mesh::Mesh& out) {
    if (!uvs_ok_ || uvs_.size() != 2 * static_cast<size_t>(out.vertex_count())) return;
    if (!uvs_in_unit_range(uvs_)) {
      warn(
          "texture coordinates outside [0, 1] (tiling) are not supported; the mesh is shown "
          "without its texture");
      return;
    }
    out.uvs = std::move(uvs_);
    if (!material_) return;
    if (several_materials_)
      warn("primitives use several materials; only the first one's texture is shown");
    const std::string what = "material " + std::to_string(*material_);
    try {
      const Json& materials = doc_.at("materials");
      const Json& pbr = materials.at(*material_).value("pbrMetallicRoughness", Json::object());
      if (!pbr.is_object() || !pbr.contains("baseColorTexture")) return;  // untextured material
      const Json& ref = pbr.at("baseColorTexture");
      if (ref.value("texCoord", 0) != 0) {
        warn(what + ": the base colour texture uses texCoord " +
             std::to_string(ref.value("texCoord", 0)) + " (only TEXCOORD_0 is read)");
        return;
      }
      const size_t texture_index = ref.at("index").get<size_t>();
      const Json& texture = doc_.at("textures").at(texture_index);
      if (!texture.contains("source")) {
        warn("texture " + std::to_string(texture_index) +
             " has no PNG/JPEG source (an extension image format?); not shown");
        return;
      }
      const size_t image_index = texture.at("source").get<size_t>();
      const Json& image = doc_.at("images").at(image_index);
      const std::string image_what = "image " + std::to_string(image_index);
      if (!image.contains("bufferView")) {
        warn(image_what + " is not embedded (uri images are not read); not shown");
        return;
      }
      const std::string mime = image.value("mimeType", std::string());
      if (mime != "image/png") {
        warn(image_what + " has mimeType '" + mime + "' (only embedded PNG is read); not shown");
        return;
      }
      const size_t view_index = image.at("bufferView").get<size_t>();
      const Json& view = doc_.at("bufferViews").at(view_index);
      const uint64_t offset = view.value("byteOffset", uint64_t{0});
      const uint64_t length = view.at("byteLength").get<uint64_t>();
      if (view.value("buffer", 0u) != 0 || offset > bin_size_ || length > bin_size_ - offset) {
        warn(image_what + ": bufferView " + std::to_string(view_index) +
             " lies outside the BIN chunk; not shown");
        return;
      }
      Expected<mesh::TextureImage> decoded = mesh::decode_texture_png(
          bytes_.substr(bin_offset_ + offset, length), name_ + " " + image_what);
      if (!decoded.ok()) {
        warn("texture not shown (" + decoded.status().message() + ")");
        return;
      }
      out.texture = std::move(*decoded);
    } catch (const Json::exception& e) {
      warn(what + ": malformed texture reference, not shown (" + e.what() + ")");
    }
  }

  Status visit_node(const Json& index_json, const Mat& parent, int depth, mesh::Mesh& out) {
    // glTF node graphs are trees; the depth bound turns a malicious cycle into an error.
    if (depth > 64) return fail("node hierarchy deeper than 64 (a cycle?)");
    if (!index_json.is_number_unsigned()) return fail("node index is not an unsigned integer");
    const auto& nodes = doc_.value("nodes", Json::array());
    const size_t index = index_json.get<size_t>();
    if (!nodes.is_array() || index >= nodes.size()) {
      return fail("node " + std::to_string(index) + " does not exist");
    }
    const Json& node = nodes[index];
    Mat local = mat_identity();
    try {
      if (node.contains("matrix")) {
        const auto m = node["matrix"].get<std::vector<double>>();
        if (m.size() != 16)
          return fail("node " + std::to_string(index) + " matrix is not 16 numbers");
        std::copy(m.begin(), m.end(), local.begin());
      } else {
        const auto t = node.value("translation", std::vector<double>{0, 0, 0});
        const auto r = node.value("rotation", std::vector<double>{0, 0, 0, 1});
        const auto s = node.value("scale", std::vector<double>{1, 1, 1});
        if (t.size() != 3 || r.size() != 4 || s.size() != 3) {
          return fail("node " + std::to_string(index) +
                      " has a malformed translation/rotation/scale");
        }
        const double x = r[0], y = r[1], z = r[2], w = r[3];
        // Rotation matrix of a unit quaternion, columns scaled by s, then the translation.
        const Mat rot = {1 - 2 * (y * y + z * z),
                         2 * (x * y + z * w),
                         2 * (x * z - y * w),
                         0,
                         2 * (x * y - z * w),
                         1 - 2 * (x * x + z * z),
                         2 * (y * z + x * w),
                         0,
                         2 * (x * z + y * w),
                         2 * (y * z - x * w),
                         1 - 2 * (x * x + y * y),
                         0,
                         0,
                         0,
                         0,
                         1};
        for (int c = 0; c < 3; ++c) {
          for (int row = 0; row < 3; ++row) local[c * 4 + row] = rot[c * 4 + row] * s[c];
        }
        local[12] = t[0];
        local[13] = t[1];
        local[14] = t[2];
      }
    } catch (const Json::exception& e) {
      return fail("node " + std::to_string(index) + ": " + e.what());
    }
    const Mat world = mat_mul(parent, local);
    if (node.contains("mesh")) {
      if (!node["mesh"].is_number_unsigned())
        return fail("node mesh index is not an unsigned integer");
      TESSERA_RETURN_IF_ERROR(add_mesh(node["mesh"].get<size_t>(), world, out));
    }
    if (node.contains("children")) {
      if (!node["children"].is_array()) return fail("node children is not an array");
      for (const Json& child : node["children"]) {
        TESSERA_RETURN_IF_ERROR(visit_node(child, world, depth + 1, out));
      }
    }
    return Status();
  }

  // The bytes of accessor `index`: element size, count and stride checked against its buffer view
  // and the BIN chunk.
  struct AccessorData {
    const char* data = nullptr;
    size_t count = 0;
    size_t stride = 0;
    int component_type = 0;
  };
  Expected<AccessorData> accessor(const Json& index_json, const char* expected_type) {
    if (!index_json.is_number_unsigned()) return fail("accessor index is not an unsigned integer");
    const size_t index = index_json.get<size_t>();
    const auto& accessors = doc_.value("accessors", Json::array());
    if (!accessors.is_array() || index >= accessors.size()) {
      return fail("accessor " + std::to_string(index) + " does not exist");
    }
    const Json& a = accessors[index];
    const std::string what = "accessor " + std::to_string(index);
    try {
      if (a.value("type", std::string()) != expected_type) {
        return fail(what + " has type '" + a.value("type", std::string()) + "', expected " +
                    expected_type);
      }
      if (!a.contains("bufferView"))
        return fail(what + " has no bufferView (sparse/empty accessors are not read)");
      const size_t view_index = a["bufferView"].get<size_t>();
      const auto& views = doc_.value("bufferViews", Json::array());
      if (view_index >= views.size())
        return fail(what + ": bufferView " + std::to_string(view_index) + " does not exist");
      const Json& view = views[view_index];
      if (view.value("buffer", 0u) != 0)
        return fail(what + ": only the GLB's own buffer 0 is read");
      AccessorData out;
      out.component_type = a.value("componentType", 0);
      out.count = a.value("count", size_t{0});
      size_t component_size = 0;
      switch (out.component_type) {
        case 5121:
          component_size = 1;
          break;  // UNSIGNED_BYTE
        case 5123:
          component_size = 2;
          break;    // UNSIGNED_SHORT
        case 5125:  // UNSIGNED_INT
        case 5126:
          component_size = 4;
          break;  // FLOAT
        default:
          return fail(what + " has unsupported componentType " +
                      std::to_string(out.component_type));
      }
      const std::string type = expected_type;
      const size_t components = type == "VEC3" ? 3 : type == "VEC2" ? 2 : 1;
      const size_t element = component_size * components;
      const uint64_t view_offset = view.value("byteOffset", uint64_t{0});
      const uint64_t view_length = view.value("byteLength", uint64_t{0});
      const uint64_t offset = a.value("byteOffset", uint64_t{0});
      out.stride = view.value("byteStride", size_t{0});
      if (out.stride == 0) out.stride = element;
      if (out.stride < element || out.stride > 252)
        return fail(what + ": bad byteStride " + std::to_string(out.stride));
      if (view_offset > bin_size_ || view_length > bin_size_ - view_offset) {
        return fail(what + ": bufferView " + std::to_string(view_index) +
                    " lies outside the BIN chunk");
      }
      if (out.count > 0) {
        const uint64_t needed =
            offset + (static_cast<uint64_t>(out.count) - 1) * out.stride + element;
        if (out.count > view_length || needed > view_length) {
          return fail(what + ": " + std::to_string(out.count) + " elements do not fit bufferView " +
                      std::to_string(view_index) + " (" + std::to_string(view_length) + " bytes)");
        }
      }
      out.data = bytes_.data() + bin_offset_ + view_offset + offset;
      return out;
    } catch (const Json::exception& e) {
      return fail(what + ": " + e.what());
    }
  }

  Status add_mesh(size_t mesh_index, const Mat& transform, mesh::Mesh& out) {
    const auto& meshes = doc_.value("meshes", Json::array());
    if (!meshes.is_array() || mesh_index >= meshes.size()) {
      return fail("mesh " + std::to_string(mesh_index) + " does not exist");
    }
    const Json& primitives = meshes[mesh_index].value("primitives", Json::array());
    if (!primitives.is_array())
      return fail("mesh " + std::to_string(mesh_index) + " primitives is not an array");
    for (const Json& primitive : primitives) {
      if (!primitive.is_object())
        return fail("mesh " + std::to_string(mesh_index) + " has a malformed primitive");
      if (primitive.value("mode", 4) != 4) continue;  // points/lines/strips: nothing to shade
      const Json& attributes = primitive.value("attributes", Json::object());
      if (!attributes.is_object() || !attributes.contains("POSITION")) continue;
      TESSERA_ASSIGN_OR_RETURN(AccessorData positions, accessor(attributes["POSITION"], "VEC3"));
      if (positions.component_type != 5126) return fail("POSITION accessor is not float");
      const auto base = static_cast<uint64_t>(out.vertex_count());
      if (base + positions.count > 0xFFFFFFFFu) return fail("more than 2^32 vertices");
      for (size_t v = 0; v < positions.count; ++v) {
        float p[3];
        std::memcpy(p, positions.data + v * positions.stride, sizeof(p));
        for (int r = 0; r < 3; ++r) {
          const double value = transform[r] * p[0] + transform[4 + r] * p[1] +
                               transform[8 + r] * p[2] + transform[12 + r];
          if (!std::isfinite(value)) return fail("vertex " + std::to_string(v) + " is not finite");
          out.positions.push_back(static_cast<float>(value));
        }
      }
      add_uvs(attributes, positions.count);
      if (primitive.contains("material") && primitive["material"].is_number_unsigned()) {
        const size_t material = primitive["material"].get<size_t>();
        if (!material_) {
          material_ = material;
        } else if (*material_ != material) {
          several_materials_ = true;
        }
      }
      std::vector<uint64_t> indices;
      if (primitive.contains("indices")) {
        TESSERA_ASSIGN_OR_RETURN(AccessorData ix, accessor(primitive["indices"], "SCALAR"));
        if (ix.component_type == 5126) return fail("index accessor is float");
        indices.resize(ix.count);
        for (size_t i = 0; i < ix.count; ++i) {
          const char* p = ix.data + i * ix.stride;
          if (ix.component_type == 5121) {
            indices[i] = static_cast<uint8_t>(*p);
          } else if (ix.component_type == 5123) {
            uint16_t v;
            std::memcpy(&v, p, 2);
            indices[i] = v;
          } else {
            uint32_t v;
            std::memcpy(&v, p, 4);
            indices[i] = v;
          }
        }
      } else {
        indices.resize(positions.count);
        for (size_t i = 0; i < indices.size(); ++i) indices[i] = i;
      }
      if (indices.size() % 3 != 0) {
        return fail("mesh " + std::to_string(mesh_index) + ": index count " +
                    std::to_string(indices.size()) + " is not a multiple of 3");
      }
      for (uint64_t i : indices) {
        if (i >= positions.count) {
          return fail("mesh " + std::to_string(mesh_index) + ": index " + std::to_string(i) +
                      " is out of range for " + std::to_string(positions.count) + " vertices");
        }
        out.triangles.push_back(static_cast<uint32_t>(base + i));
      }
    }
    return Status();
  }

  const std::string& bytes_;
  const std::string& name_;
  std::vector<std::string>* warnings_;  // nullable
  Json doc_;
  std::vector<float> uvs_;  // per vertex of the merged mesh, while every primitive has them
  bool uvs_ok_ = true;
  std::optional<size_t> material_;  // of the first triangle primitive that names one
  bool several_materials_ = false;
  size_t bin_offset_ = 0;
  uint64_t bin_size_ = 0;
};

}  // namespace

namespace {

// What an OBJ says about its material: the mtllib file names (relative to the OBJ) and the first
// usemtl name (empty without one).
struct ObjMaterialRefs {
  std::vector<std::string> mtllibs;
  std::string material;
};

std::string trimmed(const char* p) {
  while (*p == ' ' || *p == '\t') ++p;
  std::string s(p);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

void warn(std::vector<std::string>* warnings, std::string message) {
  if (warnings != nullptr) warnings->push_back(std::move(message));
}

Expected<mesh::Mesh> parse_obj_impl(const std::string& text, const std::string& name,
                                    std::vector<std::string>* warnings, ObjMaterialRefs* refs) {
  if (text.find('\0') != std::string::npos) {
    return corrupt_data(name + ": binary data, not a text OBJ file");
  }
  std::vector<float> positions;  // the file's `v`s
  std::vector<float> texcoords;  // the file's `vt`s (u, v)
  // Face corners, fan-triangulated: (file vertex, file vt or -1) per corner, 3 per triangle.
  std::vector<std::pair<int64_t, int64_t>> corners;
  std::vector<std::pair<int64_t, int64_t>> face;
  bool any_vt = false;
  size_t line_start = 0;
  int64_t line_number = 0;
  std::string line;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    line.assign(text, line_start, line_end - line_start);
    line_start = line_end + 1;
    ++line_number;
    const char* p = line.c_str();
    while (*p == ' ' || *p == '\t') ++p;
    const auto where = [&] { return name + ":" + std::to_string(line_number) + ": "; };
    if (p[0] == 'v' && (p[1] == ' ' || p[1] == '\t')) {
      ++p;
      float xyz[3];
      for (float& c : xyz) {
        if (!parse_float(p, &c)) return corrupt_data(where() + "vertex needs three numbers");
        if (!std::isfinite(c)) return corrupt_data(where() + "vertex coordinate is not finite");
      }
      positions.insert(positions.end(), xyz, xyz + 3);
    } else if (p[0] == 'v' && p[1] == 't' && (p[2] == ' ' || p[2] == '\t')) {
      p += 2;
      float uv[2];  // an optional third (w) coordinate is ignored
      for (float& c : uv) {
        if (!parse_float(p, &c)) return corrupt_data(where() + "vt needs two numbers");
        if (!std::isfinite(c)) return corrupt_data(where() + "vt coordinate is not finite");
      }
      texcoords.insert(texcoords.end(), uv, uv + 2);
    } else if (p[0] == 'f' && (p[1] == ' ' || p[1] == '\t')) {
      ++p;
      face.clear();
      while (true) {
        while (*p == ' ' || *p == '\t' || *p == '\r') ++p;
        if (*p == '\0' || *p == '#') break;
        char* end = nullptr;
        const long long index = std::strtoll(p, &end, 10);
        if (end == p) return corrupt_data(where() + "face index is not a number");
        p = end;
        const int64_t count = static_cast<int64_t>(positions.size() / 3);
        // 1-based; negative counts back from the latest vertex.
        const int64_t resolved = index > 0 ? index - 1 : count + index;
        if (index == 0 || resolved < 0 || resolved >= count) {
          return corrupt_data(where() + "face index " + std::to_string(index) +
                              " does not name one of the " + std::to_string(count) +
                              " vertices defined so far");
        }
        int64_t vt = -1;
        if (*p == '/' && p[1] != '/' && p[1] != ' ' && p[1] != '\t' && p[1] != '\r' &&
            p[1] != '\0') {
          ++p;
          const long long t = std::strtoll(p, &end, 10);
          if (end == p) return corrupt_data(where() + "face texture index is not a number");
          p = end;
          const int64_t vt_count = static_cast<int64_t>(texcoords.size() / 2);
          vt = t > 0 ? t - 1 : vt_count + t;
          if (t == 0 || vt < 0 || vt >= vt_count) {
            return corrupt_data(where() + "face texture index " + std::to_string(t) +
                                " does not name one of the " + std::to_string(vt_count) +
                                " vt lines defined so far");
          }
          any_vt = true;
        }
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\r') ++p;  // skip /vn
        face.emplace_back(resolved, vt);
      }
      if (face.size() < 3) return corrupt_data(where() + "face with fewer than 3 vertices");
      for (size_t k = 1; k + 1 < face.size(); ++k) {
        corners.push_back(face[0]);
        corners.push_back(face[k]);
        corners.push_back(face[k + 1]);
      }
    } else if (refs != nullptr && std::strncmp(p, "mtllib", 6) == 0 &&
               (p[6] == ' ' || p[6] == '\t')) {
      // Usually one file; names with spaces are rare enough that one name per line is read.
      const std::string file = trimmed(p + 6);
      if (!file.empty()) refs->mtllibs.push_back(file);
    } else if (refs != nullptr && std::strncmp(p, "usemtl", 6) == 0 &&
               (p[6] == ' ' || p[6] == '\t') && refs->material.empty()) {
      refs->material = trimmed(p + 6);
    }
    // Everything else (vn, o, g, s, comments) does not change what is shown.
  }
  if (corners.empty()) return Status(ErrorCode::kNotFound, name + ": no faces in the OBJ file");
  if (positions.size() / 3 > 0xFFFFFFFFull) {
    return corrupt_data(name + ": more than 2^32 vertices");
  }
  mesh::Mesh out;
  out.positions = std::move(positions);
  out.triangles.reserve(corners.size());
  if (!any_vt) {
    for (const auto& c : corners) out.triangles.push_back(static_cast<uint32_t>(c.first));
    return out;
  }
  // One uv per vertex: the first vt a vertex is used with stays on it; another vt on the same
  // vertex gets a copy of the vertex (a UV seam), shared by every corner with that pair.
  const size_t file_vertices = out.positions.size() / 3;
  out.uvs.assign(2 * file_vertices, 0.0f);
  std::vector<int64_t> first_vt(file_vertices, -1);
  std::unordered_map<uint64_t, uint32_t> seam_copies;  // (vertex << 32 | vt) -> copy
  for (const auto& [v, vt] : corners) {
    uint64_t index = static_cast<uint64_t>(v);
    if (vt >= 0) {
      const float u = texcoords[2 * vt], w = texcoords[2 * vt + 1];
      if (first_vt[v] < 0) {
        first_vt[v] = vt;
        out.uvs[2 * v] = u;
        out.uvs[2 * v + 1] = w;
      } else if (first_vt[v] != vt && (out.uvs[2 * v] != u || out.uvs[2 * v + 1] != w)) {
        const uint64_t key = (static_cast<uint64_t>(v) << 32) | static_cast<uint64_t>(vt);
        auto [it, inserted] =
            seam_copies.try_emplace(key, static_cast<uint32_t>(out.positions.size() / 3));
        if (inserted) {
          if (out.positions.size() / 3 >= 0xFFFFFFFFull) {
            return corrupt_data(name + ": more than 2^32 vertices after splitting UV seams");
          }
          for (int c = 0; c < 3; ++c) out.positions.push_back(out.positions[3 * v + c]);
          out.uvs.push_back(u);
          out.uvs.push_back(w);
        }
        index = it->second;
      }
    }
    out.triangles.push_back(static_cast<uint32_t>(index));
  }
  if (!uvs_in_unit_range(out.uvs)) {
    warn(warnings, name +
                       ": texture coordinates outside [0, 1] (tiling) are not supported; "
                       "the mesh is shown without its texture");
    out.uvs.clear();
  }
  return out;
}

// map_Kd's value without its options ("-s 1 1 1 -clamp on file.png" -> "file.png"), with '\'
// read as '/'. Empty when nothing is left.
std::string map_file_name(const std::string& value) {
  static const std::pair<const char*, int> kOptions[] = {
      {"-blendu", 1},  {"-blendv", 1}, {"-bm", 1}, {"-boost", 1}, {"-cc", 1}, {"-clamp", 1},
      {"-imfchan", 1}, {"-mm", 2},     {"-o", 3},  {"-s", 3},     {"-t", 3},  {"-texres", 1}};
  size_t at = 0;
  const auto skip_space = [&] {
    while (at < value.size() && (value[at] == ' ' || value[at] == '\t')) ++at;
  };
  const auto skip_word = [&] {
    while (at < value.size() && value[at] != ' ' && value[at] != '\t') ++at;
  };
  while (true) {
    skip_space();
    if (at >= value.size() || value[at] != '-') break;
    const size_t word_start = at;
    skip_word();
    const std::string option = value.substr(word_start, at - word_start);
    int args = 0;
    for (const auto& [opt, n] : kOptions) {
      if (option == opt) args = n;
    }
    if (args == 0) return std::string();  // unknown option: we cannot tell where the name starts
    for (int a = 0; a < args; ++a) {
      skip_space();
      // -o/-s/-t take 1 to 3 numbers: stop at the first word that is not a number.
      if (a > 0 && (option == "-o" || option == "-s" || option == "-t")) {
        char* end = nullptr;
        std::strtod(value.c_str() + at, &end);
        if (end == value.c_str() + at) break;
      }
      skip_word();
    }
  }
  std::string file = value.substr(std::min(at, value.size()));
  std::replace(file.begin(), file.end(), '\\', '/');
  return file;
}

// The map_Kd of material `material` in MTL text (of the first material with one when `material`
// is empty); empty when there is none.
std::string find_map_kd(const std::string& mtl, const std::string& material) {
  std::string current;
  size_t line_start = 0;
  std::string line;
  while (line_start < mtl.size()) {
    size_t line_end = mtl.find('\n', line_start);
    if (line_end == std::string::npos) line_end = mtl.size();
    line.assign(mtl, line_start, line_end - line_start);
    line_start = line_end + 1;
    const char* p = line.c_str();
    while (*p == ' ' || *p == '\t') ++p;
    if (std::strncmp(p, "newmtl", 6) == 0 && (p[6] == ' ' || p[6] == '\t')) {
      current = trimmed(p + 6);
    } else if (std::strncmp(p, "map_Kd", 6) == 0 && (p[6] == ' ' || p[6] == '\t')) {
      if (material.empty() || current == material) return map_file_name(trimmed(p + 6));
    }
  }
  return std::string();
}

// Attaches the texture named by the OBJ's materials to `*mesh` (which has uvs), or warns.
void attach_obj_texture(const std::string& obj_path, const ObjMaterialRefs& refs,
                        std::vector<std::string>* warnings, mesh::Mesh* mesh) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(obj_path).parent_path();
  std::string image;
  for (const std::string& lib : refs.mtllibs) {
    std::string rel = lib;
    std::replace(rel.begin(), rel.end(), '\\', '/');
    const std::string mtl_path = (dir / rel).string();
    Expected<std::string> mtl = read_file(mtl_path);
    if (!mtl.ok()) {
      warn(warnings, obj_path + ": material file " + mtl_path +
                         " cannot be read; the mesh is shown without its texture (" +
                         mtl.status().message() + ")");
      return;
    }
    image = find_map_kd(*mtl, refs.material);
    if (!image.empty()) break;
  }
  if (image.empty()) return;  // an untextured material: nothing to warn about
  if (mesh->uvs.empty()) {
    warn(warnings, obj_path + ": map_Kd " + image +
                       " is given but the faces have no texture coordinates; it is not shown");
    return;
  }
  const std::string image_path = (dir / image).string();
  Expected<mesh::TextureImage> texture = mesh::read_texture_png(image_path);
  if (!texture.ok()) {
    warn(warnings, obj_path + ": texture " + image_path +
                       " not loaded, the mesh is shown without it (" + texture.status().message() +
                       ")");
    return;
  }
  mesh->texture = std::move(*texture);
}

}  // namespace

Expected<mesh::Mesh> parse_obj(const std::string& text, const std::string& name,
                               std::vector<std::string>* warnings) {
  return parse_obj_impl(text, name, warnings, nullptr);
}

Expected<mesh::Mesh> parse_glb(const std::string& bytes, const std::string& name,
                               std::vector<std::string>* warnings) {
  return GlbReader(bytes, name, warnings).read();
}

Expected<mesh::Mesh> load_mesh_file(const std::string& path, std::vector<std::string>* warnings) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext != ".obj" && ext != ".glb") {
    return invalid_argument(path + ": cannot read '" + ext + "' meshes (use .obj or .glb)");
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string bytes, read_file(path));
  if (ext == ".glb") return parse_glb(bytes, path, warnings);
  ObjMaterialRefs refs;
  TESSERA_ASSIGN_OR_RETURN(mesh::Mesh mesh, parse_obj_impl(bytes, path, warnings, &refs));
  attach_obj_texture(path, refs, warnings, &mesh);
  return mesh;
}

}  // namespace tessera::render
