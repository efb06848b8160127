#include "ui/render/mesh_file.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/core/mapped_file.h"

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
  GlbReader(const std::string& bytes, const std::string& name) : bytes_(bytes), name_(name) {}

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
    return out;
  }

 private:
  Status fail(const std::string& what) const { return corrupt_data(name_ + ": " + what); }

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
      const size_t components = std::string(expected_type) == "VEC3" ? 3 : 1;
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
  Json doc_;
  size_t bin_offset_ = 0;
  uint64_t bin_size_ = 0;
};

}  // namespace

Expected<mesh::Mesh> parse_obj(const std::string& text, const std::string& name) {
  if (text.find('\0') != std::string::npos) {
    return corrupt_data(name + ": binary data, not a text OBJ file");
  }
  mesh::Mesh out;
  std::vector<int64_t> face;
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
      out.positions.insert(out.positions.end(), xyz, xyz + 3);
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
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\r') ++p;  // skip /vt/vn
        const int64_t count = out.vertex_count();
        // 1-based; negative counts back from the latest vertex.
        const int64_t resolved = index > 0 ? index - 1 : count + index;
        if (index == 0 || resolved < 0 || resolved >= count) {
          return corrupt_data(where() + "face index " + std::to_string(index) +
                              " does not name one of the " + std::to_string(count) +
                              " vertices defined so far");
        }
        face.push_back(resolved);
      }
      if (face.size() < 3) return corrupt_data(where() + "face with fewer than 3 vertices");
      for (size_t k = 1; k + 1 < face.size(); ++k) {
        out.triangles.push_back(static_cast<uint32_t>(face[0]));
        out.triangles.push_back(static_cast<uint32_t>(face[k]));
        out.triangles.push_back(static_cast<uint32_t>(face[k + 1]));
      }
    }
    // Everything else (vt, vn, o, g, s, usemtl, mtllib, comments) does not change the shape.
  }
  if (out.empty()) return Status(ErrorCode::kNotFound, name + ": no faces in the OBJ file");
  if (out.vertex_count() > 0xFFFFFFFFll) return corrupt_data(name + ": more than 2^32 vertices");
  return out;
}

Expected<mesh::Mesh> parse_glb(const std::string& bytes, const std::string& name) {
  return GlbReader(bytes, name).read();
}

Expected<mesh::Mesh> load_mesh_file(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext != ".obj" && ext != ".glb") {
    return invalid_argument(path + ": cannot read '" + ext + "' meshes (use .obj or .glb)");
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string bytes, read_file(path));
  return ext == ".obj" ? parse_obj(bytes, path) : parse_glb(bytes, path);
}

}  // namespace tessera::render
