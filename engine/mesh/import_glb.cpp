// glTF 2.0 reader, binary (.glb) and text (.gltf); import.h has the contract.
//
// Layout checks: the GLB header's length must fit the bytes; the first chunk must be JSON and every
// chunk must end inside the length the header declares (chunks follow each other, so they cannot
// overlap); buffer views must lie inside their buffer, accessors inside their buffer view
// (offset + (count - 1) * stride + element size); indices must name existing vertices. Nodes must
// form a tree (a node reached twice is an error, which also rules out cycles and the exponential
// walk of a DAG), at most 256 deep. A mesh used by several nodes is instanced, up to 2^22 extra
// vertices in all (further instances are dropped with a warning), so a few bytes of JSON cannot
// multiply a buffer into gigabytes. Draco-compressed primitives (KHR_draco_mesh_compression) are
// decoded by libdraco from their buffer view (itself checked as above); the decoded faces are
// checked against the decoded points like any index.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "engine/mesh/import.h"
#include "core/base64.h"
#include "engine/mesh/import_internal.h"

#if TESSERA_HAVE_DRACO
#include <draco/compression/decode.h>
#endif

namespace tessera::mesh {
namespace {

using Json = nlohmann::json;

constexpr int kMaxNodeDepth = 256;
constexpr uint64_t kMaxInstancedVertices = uint64_t{1} << 22;

uint32_t read_u32(std::string_view bytes, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, 4);  // glTF is little-endian, as is every target we build for
  return v;
}

using Mat = import_detail::Mat4;
using import_detail::mat_identity;
using import_detail::mat_mul;
using import_detail::transform_point;

// Thrown for a JSON member of the wrong kind; caught with nlohmann's exceptions. Numbers are read
// only as unsigned integers: nlohmann converts a float to an integer type with a plain cast, which
// is undefined behaviour for 1e300 or -1.5.
struct JsonFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

uint64_t uint_value(const Json& j) {
  if (!j.is_number_unsigned()) throw JsonFault("expected an unsigned integer, found " + j.dump());
  return j.get<uint64_t>();
}

uint64_t uint_member(const Json& object, const char* key, uint64_t fallback) {
  if (!object.is_object()) throw JsonFault("expected an object");
  auto it = object.find(key);
  if (it == object.end()) return fallback;
  if (!it->is_number_unsigned()) {
    throw JsonFault(std::string("'") + key + "' is not an unsigned integer");
  }
  return it->get<uint64_t>();
}

class GltfReader {
 public:
  GltfReader(const std::string& name, std::vector<std::string>* warnings,
             const std::string& directory)
      : name_(name), warnings_(warnings), directory_(directory) {}

  Expected<Mesh> read_glb(std::string_view bytes) {
    if (bytes.size() < 12 || bytes.substr(0, 4) != "glTF") {
      return fail("not a binary glTF file (no \"glTF\" magic)");
    }
    if (read_u32(bytes, 4) == 1) {
      return unsupported(name_ + ": a glTF 1.0 binary; only glTF 2 is read here");
    }
    if (read_u32(bytes, 4) != 2) {
      return fail("glTF version " + std::to_string(read_u32(bytes, 4)) + " is not 2");
    }
    const uint64_t total = read_u32(bytes, 8);
    if (total > bytes.size()) {
      return fail("header length " + std::to_string(total) + " exceeds the file size " +
                  std::to_string(bytes.size()));
    }
    if (total < 20) return fail("header length " + std::to_string(total) + " leaves no JSON chunk");
    // Chunks: JSON first (required), then an optional BIN; others are skipped.
    uint64_t at = 12;
    std::string_view json_text;
    bool have_bin = false;
    for (int chunk = 0; at < total; ++chunk) {
      if (total - at < 8) {
        return fail(std::to_string(total - at) + " stray bytes after the last chunk (at byte " +
                    std::to_string(at) + ")");
      }
      const uint64_t length = read_u32(bytes, at);
      const uint32_t type = read_u32(bytes, at + 4);
      if (length > total - at - 8) {
        return fail("chunk " + std::to_string(chunk) + " at byte " + std::to_string(at) +
                    " of length " + std::to_string(length) + " runs past the end of the file (" +
                    std::to_string(total) + " bytes)");
      }
      if (chunk == 0) {
        if (type != 0x4E4F534A) return fail("the first chunk is not JSON");  // "JSON"
        json_text = bytes.substr(at + 8, length);
      } else if (type == 0x004E4942 && !have_bin) {  // "BIN\0"
        have_bin = true;
        glb_bin_ = bytes.substr(at + 8, length);
      }
      at += 8 + ((length + 3) & ~uint64_t{3});
    }
    glb_ = true;
    return read_json(json_text);
  }

  Expected<Mesh> read_json(std::string_view json_text) {
    try {
      doc_ = Json::parse(json_text.begin(), json_text.end());
    } catch (const Json::exception& e) {
      return fail(std::string("the JSON does not parse: ") + e.what());
    }
    if (!doc_.is_object()) return fail("the JSON is not an object");
    // glTF 1.0 is another format: meshes, accessors and materials are objects keyed by name there
    // (asset.version "1.0", or the number 1 as some exporters wrote it).
    const auto asset = doc_.find("asset");
    const Json* version = asset != doc_.end() && asset->is_object() && asset->contains("version")
                              ? &(*asset)["version"]
                              : nullptr;
    const bool v1 = (doc_.contains("meshes") && doc_["meshes"].is_object()) ||
                    (version != nullptr && version->is_string() &&
                     version->get<std::string>().rfind('1', 0) == 0) ||
                    (version != nullptr && version->is_number() && version->get<double>() < 2.0);
    if (v1) return unsupported(name_ + ": glTF 1.0; only glTF 2 is read here");
    try {
      return read_document();
    } catch (const std::exception& e) {
      // A member of an unexpected JSON type anywhere the code did not check explicitly.
      return fail(std::string("malformed glTF JSON: ") + e.what());
    }
  }

 private:
  Status fail(const std::string& what) const { return corrupt_data(name_ + ": " + what); }
  void warn(const std::string& what) { import_detail::warn(warnings_, name_ + ": " + what); }

  const Json& array_member(const Json& object, const char* key) {
    static const Json kEmpty = Json::array();
    if (!object.is_object()) return kEmpty;
    auto it = object.find(key);
    if (it == object.end() || !it->is_array()) return kEmpty;
    return *it;
  }

  Expected<Mesh> read_document() {
    TESSERA_RETURN_IF_ERROR(load_buffers());
    Mesh out;
    const Json& scenes = array_member(doc_, "scenes");
    const Json& nodes = array_member(doc_, "nodes");
    node_seen_.assign(nodes.size(), false);
    mesh_used_.assign(array_member(doc_, "meshes").size(), false);
    if (!scenes.empty()) {
      const size_t scene_index = uint_member(doc_, "scene", 0);
      if (scene_index >= scenes.size())
        return fail("default scene " + std::to_string(scene_index) + " does not exist");
      const Json& roots = scenes[scene_index].value("nodes", Json::array());
      if (!roots.is_array()) return fail("scene nodes is not an array");
      for (const Json& root : roots) {
        TESSERA_RETURN_IF_ERROR(visit_node(root, mat_identity(), 0, out));
      }
    } else {
      // No scene: show every mesh untransformed.
      const Json& meshes = array_member(doc_, "meshes");
      for (size_t m = 0; m < meshes.size(); ++m) {
        TESSERA_RETURN_IF_ERROR(add_mesh(m, mat_identity(), out));
      }
    }
    if (out.empty()) {
      return Status(ErrorCode::kNotFound,
                    name_ + ": no triangles in the file" +
                        (points_or_lines_ ? " (only points or lines, which have no surface)" : ""));
    }
    attach_texture(out);
    return out;
  }

  // buffers[i] -> bytes: the GLB's BIN chunk for buffer 0 of a .glb, else a data: URI or (with a
  // directory) a relative file. Loaded up front so accessors only index into memory.
  Status load_buffers() {
    const Json& buffers = array_member(doc_, "buffers");
    buffers_.resize(buffers.size());
    owned_.resize(buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i) {
      const Json& b = buffers[i];
      if (!b.is_object()) return fail("buffer " + std::to_string(i) + " is not an object");
      const uint64_t length = uint_member(b, "byteLength", 0);
      const std::string what = "buffer " + std::to_string(i);
      std::string_view data;
      if (!b.contains("uri")) {
        if (!glb_ || i != 0) return fail(what + " has no uri (only a GLB's buffer 0 may omit it)");
        data = glb_bin_;
      } else {
        TESSERA_ASSIGN_OR_RETURN(owned_[i], load_uri(b.at("uri").get<std::string>(), what));
        data = owned_[i];
      }
      if (length > data.size()) {
        return fail(what + " declares " + std::to_string(length) + " bytes but holds " +
                    std::to_string(data.size()));
      }
      buffers_[i] = data.substr(0, length);
    }
    return Status();
  }

  // The bytes behind a URI: base64 data: URIs always; relative files only with a directory.
  Expected<std::string> load_uri(const std::string& uri, const std::string& what) {
    if (uri.rfind("data:", 0) == 0) {
      const size_t comma = uri.find(',');
      if (comma == std::string::npos || comma < 12 || uri.compare(comma - 7, 7, ";base64") != 0) {
        return fail(what + ": only base64 data: URIs are read");
      }
      auto decoded = decode_base64(std::string_view(uri).substr(comma + 1));
      if (!decoded) return fail(what + ": the data: URI is not valid base64");
      return std::move(*decoded);
    }
    if (directory_.empty()) {
      return fail(what + ": the external file '" + uri + "' is not read (no directory given)");
    }
    std::string path;
    auto bytes = import_detail::read_sidecar(directory_, uri, true, &path);
    if (!bytes.ok()) {
      return corrupt_data(name_ + ": " + what + " '" + uri + "' cannot be read (" +
                          bytes.status().message() + ")");
    }
    return bytes;
  }

  // Reads TEXCOORD_0 of a primitive whose `count` positions were just added, into uvs_ (v flipped
  // back to the Mesh convention), or gives up on uvs for the whole file with a warning.
  void add_uvs(const Json& attributes, size_t count, const std::vector<float>* decoded = nullptr) {
    if (!uvs_ok_) return;
    if (decoded != nullptr) {
      if (decoded->empty()) {
        if (!uvs_.empty()) warn("a primitive without TEXCOORD_0: the mesh is shown without uvs");
        uvs_ok_ = false;
        return;
      }
      for (size_t v = 0; v < count; ++v) {
        uvs_.push_back((*decoded)[2 * v]);
        uvs_.push_back(1.0f - (*decoded)[2 * v + 1]);
      }
      return;
    }
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

  // The image's bytes: a buffer view, or a uri (data: or a relative file).
  Expected<std::string> image_bytes(const Json& image, const std::string& image_what) {
    if (image.contains("bufferView")) {
      const std::string mime = image.value("mimeType", std::string());
      if (mime != "image/png") {
        return unsupported(image_what + " has mimeType '" + mime + "' (only PNG is read)");
      }
      const size_t view_index = uint_value(image.at("bufferView"));
      TESSERA_ASSIGN_OR_RETURN(std::string_view view, buffer_view(view_index));
      return std::string(view);
    }
    if (!image.contains("uri")) return corrupt_data(image_what + " has neither bufferView nor uri");
    const std::string uri = image.at("uri").get<std::string>();
    if (uri.rfind("data:", 0) == 0 && uri.rfind("data:image/png", 0) != 0) {
      return unsupported(image_what + " is a data: URI that is not image/png");
    }
    auto bytes = load_uri(uri, image_what);
    if (!bytes.ok()) return bytes.status();
    return bytes;
  }

  // Gives `out` the uvs read (when every primitive had them) and the base colour texture of the
  // first primitive's material; anything else is a warning.
  void attach_texture(Mesh& out) {
    if (!uvs_ok_ || uvs_.size() != 2 * static_cast<size_t>(out.vertex_count())) {
      if (!uvs_.empty() && uvs_ok_) warn("uvs do not cover every vertex; not shown");
      return;
    }
    if (!import_detail::uvs_in_unit_range(uvs_)) {
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
      if (uint_member(ref, "texCoord", 0) != 0) {
        warn(what + ": the base colour texture uses texCoord " +
             std::to_string(uint_member(ref, "texCoord", 0)) + " (only TEXCOORD_0 is read)");
        return;
      }
      const size_t texture_index = uint_value(ref.at("index"));
      const Json& texture = doc_.at("textures").at(texture_index);
      if (!texture.contains("source")) {
        warn("texture " + std::to_string(texture_index) +
             " has no PNG/JPEG source (an extension image format?); not shown");
        return;
      }
      const size_t image_index = uint_value(texture.at("source"));
      const Json& image = doc_.at("images").at(image_index);
      const std::string image_what = "image " + std::to_string(image_index);
      Expected<std::string> bytes = image_bytes(image, image_what);
      if (!bytes.ok()) {
        warn(bytes.status().message() + "; the texture is not shown");
        return;
      }
      Expected<TextureImage> decoded =
          import_detail::decode_import_png(*bytes, name_ + " " + image_what);
      if (!decoded.ok()) {
        warn("texture not shown (" + decoded.status().message() + ")");
        return;
      }
      out.texture = std::move(*decoded);
    } catch (const std::exception& e) {
      warn(what + ": malformed texture reference, not shown (" + e.what() + ")");
    }
  }

  Status visit_node(const Json& index_json, const Mat& parent, int depth, Mesh& out) {
    if (depth > kMaxNodeDepth) return fail("node hierarchy deeper than 256");
    if (!index_json.is_number_unsigned()) return fail("node index is not an unsigned integer");
    const Json& nodes = array_member(doc_, "nodes");
    const size_t index = uint_value(index_json);
    if (index >= nodes.size()) return fail("node " + std::to_string(index) + " does not exist");
    if (node_seen_[index]) {
      return fail("node " + std::to_string(index) +
                  " is reached twice (glTF nodes must form a tree)");
    }
    node_seen_[index] = true;
    const Json& node = nodes[index];
    if (!node.is_object()) return fail("node " + std::to_string(index) + " is not an object");
    Mat local = mat_identity();
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
    const Mat world = mat_mul(parent, local);
    if (node.contains("mesh")) {
      if (!node["mesh"].is_number_unsigned())
        return fail("node mesh index is not an unsigned integer");
      TESSERA_RETURN_IF_ERROR(add_mesh(uint_value(node["mesh"]), world, out));
    }
    if (node.contains("children")) {
      if (!node["children"].is_array()) return fail("node children is not an array");
      for (const Json& child : node["children"]) {
        TESSERA_RETURN_IF_ERROR(visit_node(child, world, depth + 1, out));
      }
    }
    return Status();
  }

  // The bytes of buffer view `index`, checked against its buffer.
  Expected<std::string_view> buffer_view(size_t view_index) {
    const Json& views = array_member(doc_, "bufferViews");
    const std::string what = "bufferView " + std::to_string(view_index);
    if (view_index >= views.size()) return fail(what + " does not exist");
    const Json& view = views[view_index];
    const size_t buffer = uint_member(view, "buffer", 0);
    if (buffer >= buffers_.size()) {
      return fail(what + ": buffer " + std::to_string(buffer) + " does not exist");
    }
    const std::string_view data = buffers_[buffer];
    const uint64_t offset = uint_member(view, "byteOffset", 0);
    const uint64_t length = uint_member(view, "byteLength", 0);
    if (offset > data.size() || length > data.size() - offset) {
      return fail(what + " (bytes " + std::to_string(offset) + " + " + std::to_string(length) +
                  ") lies outside buffer " + std::to_string(buffer) + " (" +
                  std::to_string(data.size()) + " bytes)");
    }
    return data.substr(offset, length);
  }

  // The bytes of accessor `index`: element size, count and stride checked against its buffer view.
  struct AccessorData {
    const char* data = nullptr;
    size_t count = 0;
    size_t stride = 0;
    int component_type = 0;
  };
  Expected<AccessorData> accessor(const Json& index_json, const char* expected_type) {
    if (!index_json.is_number_unsigned()) return fail("accessor index is not an unsigned integer");
    const size_t index = uint_value(index_json);
    const Json& accessors = array_member(doc_, "accessors");
    if (index >= accessors.size())
      return fail("accessor " + std::to_string(index) + " does not exist");
    const Json& a = accessors[index];
    const std::string what = "accessor " + std::to_string(index);
    if (!a.is_object()) return fail(what + " is not an object");
    if (a.value("type", std::string()) != expected_type) {
      return fail(what + " has type '" + a.value("type", std::string()) + "', expected " +
                  expected_type);
    }
    if (!a.contains("bufferView"))
      return fail(what + " has no bufferView (sparse/empty accessors are not read)");
    const size_t view_index = uint_value(a["bufferView"]);
    TESSERA_ASSIGN_OR_RETURN(std::string_view view, buffer_view(view_index));
    AccessorData out;
    out.component_type = uint_member(a, "componentType", 0);
    out.count = uint_member(a, "count", 0);
    size_t component_size = 0;
    switch (out.component_type) {
      case 5121:  // UNSIGNED_BYTE
        component_size = 1;
        break;
      case 5123:  // UNSIGNED_SHORT
        component_size = 2;
        break;
      case 5125:  // UNSIGNED_INT
      case 5126:  // FLOAT
        component_size = 4;
        break;
      default:
        return fail(what + " has unsupported componentType " + std::to_string(out.component_type));
    }
    const std::string type = expected_type;
    const size_t components = type == "VEC3" ? 3 : type == "VEC2" ? 2 : 1;
    const size_t element = component_size * components;
    const uint64_t offset = uint_member(a, "byteOffset", 0);
    out.stride = uint_member(doc_.at("bufferViews")[view_index], "byteStride", 0);
    if (out.stride == 0) out.stride = element;
    if (out.stride < element || out.stride > 252)
      return fail(what + ": bad byteStride " + std::to_string(out.stride));
    if (out.count > 0) {
      // count <= view size first, so the product below cannot overflow.
      if (out.count > view.size() || offset > view.size() ||
          (static_cast<uint64_t>(out.count) - 1) * out.stride + element > view.size() - offset) {
        return fail(what + ": " + std::to_string(out.count) + " elements do not fit bufferView " +
                    std::to_string(view_index) + " (" + std::to_string(view.size()) + " bytes)");
      }
    }
    out.data = view.data() + (out.count > 0 ? offset : 0);
    return out;
  }

  // The primitive's KHR_draco_mesh_compression object, or null.
  static const Json* draco_extension(const Json& primitive) {
    const auto ext = primitive.find("extensions");
    if (ext == primitive.end() || !ext->is_object()) return nullptr;
    const auto draco = ext->find("KHR_draco_mesh_compression");
    if (draco == ext->end()) return nullptr;
    return &*draco;
  }

  // A Draco primitive decoded: positions (3 floats a point), uvs (TEXCOORD_0, 2 floats a point, as
  // stored: v not yet flipped; empty when the primitive has none) and triangle corner indices.
  struct DracoPrimitive {
    std::vector<float> positions;
    std::vector<float> uvs;
    std::vector<uint32_t> indices;
  };

  Expected<DracoPrimitive> decode_draco(const Json& draco, size_t mesh_index) {
    const std::string what = "mesh " + std::to_string(mesh_index) + " (Draco)";
    if (!draco.is_object() || !draco.contains("bufferView") || !draco.contains("attributes") ||
        !draco["attributes"].is_object()) {
      return fail(what + ": KHR_draco_mesh_compression needs bufferView and attributes");
    }
    const Json& ids = draco["attributes"];
    if (!ids.contains("POSITION") || !ids["POSITION"].is_number_unsigned()) {
      return fail(what + ": no POSITION attribute id");
    }
    if (!draco["bufferView"].is_number_unsigned())
      return fail(what + ": bufferView is not an index");
    TESSERA_ASSIGN_OR_RETURN(std::string_view bytes, buffer_view(uint_value(draco["bufferView"])));
#if TESSERA_HAVE_DRACO
    draco::DecoderBuffer buffer;
    buffer.Init(bytes.data(), bytes.size());
    auto type = draco::Decoder::GetEncodedGeometryType(&buffer);
    if (!type.ok() || type.value() != draco::TRIANGULAR_MESH) {
      return fail(what + ": the buffer view is not a Draco triangle mesh");
    }
    draco::Decoder decoder;
    auto decoded = decoder.DecodeMeshFromBuffer(&buffer);
    if (!decoded.ok()) {
      return fail(what + ": Draco cannot decode it (" + decoded.status().error_msg_string() + ")");
    }
    const std::unique_ptr<draco::Mesh> mesh = std::move(decoded).value();
    const uint32_t points = mesh->num_points();
    DracoPrimitive out;
    const auto read = [&](const Json& id, int components, std::vector<float>& into) -> Status {
      const draco::PointAttribute* attribute =
          mesh->GetAttributeByUniqueId(static_cast<uint32_t>(uint_value(id)));
      if (attribute == nullptr) {
        return fail(what + ": attribute id " + std::to_string(uint_value(id)) +
                    " is not in the data");
      }
      if (attribute->num_components() < components) {
        return fail(what + ": attribute " + std::to_string(uint_value(id)) + " has " +
                    std::to_string(attribute->num_components()) + " components, expected " +
                    std::to_string(components));
      }
      into.resize(static_cast<size_t>(points) * components);
      for (uint32_t p = 0; p < points; ++p) {
        const draco::AttributeValueIndex value = attribute->mapped_index(draco::PointIndex(p));
        if (value.value() >= attribute->size() ||
            !attribute->ConvertValue<float>(value, static_cast<int8_t>(components),
                                            into.data() + static_cast<size_t>(p) * components)) {
          return fail(what + ": point " + std::to_string(p) + " has no value");
        }
      }
      return Status();
    };
    TESSERA_RETURN_IF_ERROR(read(ids["POSITION"], 3, out.positions));
    if (ids.contains("TEXCOORD_0") && ids["TEXCOORD_0"].is_number_unsigned()) {
      TESSERA_RETURN_IF_ERROR(read(ids["TEXCOORD_0"], 2, out.uvs));
    }
    out.indices.reserve(3 * static_cast<size_t>(mesh->num_faces()));
    for (uint32_t f = 0; f < mesh->num_faces(); ++f) {
      const draco::Mesh::Face& face = mesh->face(draco::FaceIndex(f));
      for (int k = 0; k < 3; ++k) {
        if (face[k].value() >= points) {
          return fail(what + ": face " + std::to_string(f) + " names point " +
                      std::to_string(face[k].value()) + " of " + std::to_string(points));
        }
        out.indices.push_back(face[k].value());
      }
    }
    return out;
#else
    (void)bytes;
    return unsupported(name_ + ": " + what +
                       " is Draco-compressed, and this build has no Draco decoder (libdraco-dev)");
#endif
  }

  Status add_mesh(size_t mesh_index, const Mat& transform, Mesh& out) {
    const Json& meshes = array_member(doc_, "meshes");
    if (mesh_index >= meshes.size()) {
      return fail("mesh " + std::to_string(mesh_index) + " does not exist");
    }
    const bool instance = mesh_used_[mesh_index];
    mesh_used_[mesh_index] = true;
    const Json& primitives = meshes[mesh_index].value("primitives", Json::array());
    if (!primitives.is_array())
      return fail("mesh " + std::to_string(mesh_index) + " primitives is not an array");
    for (const Json& primitive : primitives) {
      if (!primitive.is_object())
        return fail("mesh " + std::to_string(mesh_index) + " has a malformed primitive");
      // 4 triangles, 5 a triangle strip, 6 a triangle fan; points and lines have nothing to shade.
      const uint64_t mode = uint_member(primitive, "mode", 4);
      if (mode < 4 || mode > 6) {
        points_or_lines_ = true;
        continue;
      }
      const Json& attributes = primitive.value("attributes", Json::object());
      if (!attributes.is_object() || !attributes.contains("POSITION")) continue;
      const Json* draco = draco_extension(primitive);
      DracoPrimitive decoded;
      AccessorData positions;
      if (draco != nullptr) {
        TESSERA_ASSIGN_OR_RETURN(decoded, decode_draco(*draco, mesh_index));
        positions.data = reinterpret_cast<const char*>(decoded.positions.data());
        positions.count = decoded.positions.size() / 3;
        positions.stride = 3 * sizeof(float);
        positions.component_type = 5126;
      } else {
        TESSERA_ASSIGN_OR_RETURN(positions, accessor(attributes["POSITION"], "VEC3"));
      }
      if (positions.component_type != 5126) return fail("POSITION accessor is not float");
      if (instance) {
        instanced_vertices_ += positions.count;
        if (instanced_vertices_ > kMaxInstancedVertices) {
          if (!instances_dropped_) {
            warn(
                "meshes instanced by several nodes add more than 2^22 vertices; further "
                "instances are not shown");
          }
          instances_dropped_ = true;
          return Status();
        }
      }
      const auto base = static_cast<uint64_t>(out.vertex_count());
      if (base + positions.count > 0xFFFFFFFFu) return fail("more than 2^32 vertices");
      for (size_t v = 0; v < positions.count; ++v) {
        float p[3], world[3];
        std::memcpy(p, positions.data + v * positions.stride, sizeof(p));
        if (!transform_point(transform, p[0], p[1], p[2], world)) {
          return fail("mesh " + std::to_string(mesh_index) + " vertex " + std::to_string(v) +
                      " is not finite");
        }
        out.positions.insert(out.positions.end(), world, world + 3);
      }
      add_uvs(attributes, positions.count, draco != nullptr ? &decoded.uvs : nullptr);
      if (primitive.contains("material") && primitive["material"].is_number_unsigned()) {
        const size_t material = uint_value(primitive["material"]);
        if (!material_) {
          material_ = material;
        } else if (*material_ != material) {
          several_materials_ = true;
        }
      }
      // The primitive's vertex sequence: its indices, else 0, 1, 2, ...
      std::vector<uint32_t> sequence;
      if (draco != nullptr) {
        sequence = std::move(decoded.indices);  // checked against the points by decode_draco
      } else if (primitive.contains("indices")) {
        TESSERA_ASSIGN_OR_RETURN(AccessorData ix, accessor(primitive["indices"], "SCALAR"));
        if (ix.component_type == 5126) return fail("index accessor is float");
        sequence.reserve(ix.count);
        for (size_t i = 0; i < ix.count; ++i) {
          const char* p = ix.data + i * ix.stride;
          uint64_t value;
          if (ix.component_type == 5121) {
            value = static_cast<uint8_t>(*p);
          } else if (ix.component_type == 5123) {
            uint16_t v;
            std::memcpy(&v, p, 2);
            value = v;
          } else {
            uint32_t v;
            std::memcpy(&v, p, 4);
            value = v;
          }
          if (value >= positions.count) {
            return fail("mesh " + std::to_string(mesh_index) + ": index " + std::to_string(value) +
                        " is out of range for " + std::to_string(positions.count) + " vertices");
          }
          sequence.push_back(static_cast<uint32_t>(value));
        }
      } else {
        sequence.resize(positions.count);
        for (size_t i = 0; i < positions.count; ++i) sequence[i] = static_cast<uint32_t>(i);
      }
      const auto at = [&](size_t i) { return static_cast<uint32_t>(base + sequence[i]); };
      const size_t n = sequence.size();
      if (mode == 4 || draco != nullptr) {
        if (n % 3 != 0) {
          return fail("mesh " + std::to_string(mesh_index) + ": " +
                      (primitive.contains("indices") ? "index count " : "unindexed vertex count ") +
                      std::to_string(n) + " is not a multiple of 3");
        }
        out.triangles.reserve(out.triangles.size() + n);
        for (size_t i = 0; i < n; ++i) out.triangles.push_back(at(i));
      } else {
        // Strips and fans (glTF 2.0, 3.7.2.1): triangle i of a strip is p_i, p_(i+1+i%2),
        // p_(i+2-i%2) (every other one flipped to keep the winding); of a fan p_(i+1), p_(i+2),
        // p_0. Degenerate triangles (a vertex twice: how strips are stitched) are left out.
        out.triangles.reserve(out.triangles.size() + 3 * (n > 2 ? n - 2 : 0));
        for (size_t i = 0; i + 2 < n; ++i) {
          uint32_t t[3];
          if (mode == 5) {
            t[0] = at(i);
            t[1] = at(i + 1 + i % 2);
            t[2] = at(i + 2 - i % 2);
          } else {
            t[0] = at(i + 1);
            t[1] = at(i + 2);
            t[2] = at(0);
          }
          if (t[0] == t[1] || t[1] == t[2] || t[0] == t[2]) continue;
          out.triangles.insert(out.triangles.end(), t, t + 3);
        }
      }
    }
    return Status();
  }

  const std::string& name_;
  std::vector<std::string>* warnings_;  // nullable
  const std::string& directory_;
  Json doc_;
  bool glb_ = false;
  std::string_view glb_bin_;
  std::vector<std::string> owned_;         // decoded data: URIs / files, per buffer
  std::vector<std::string_view> buffers_;  // per buffer, byteLength long
  std::vector<bool> node_seen_;
  std::vector<bool> mesh_used_;
  uint64_t instanced_vertices_ = 0;
  bool instances_dropped_ = false;
  std::vector<float> uvs_;  // per vertex of the merged mesh, while every primitive has them
  bool uvs_ok_ = true;
  std::optional<size_t> material_;  // of the first triangle primitive that names one
  bool several_materials_ = false;
  bool points_or_lines_ = false;  // a primitive of mode 0-3 was skipped
};

}  // namespace

Expected<Mesh> parse_glb(std::string_view bytes, const std::string& name,
                         std::vector<std::string>* warnings, const std::string& directory) {
  return GltfReader(name, warnings, directory).read_glb(bytes);
}

Expected<Mesh> parse_gltf(std::string_view json_text, const std::string& name,
                          std::vector<std::string>* warnings, const std::string& directory) {
  if (json_text.find('\0') != std::string_view::npos) {
    return corrupt_data(name + ": binary data, not glTF JSON text");
  }
  return GltfReader(name, warnings, directory).read_json(json_text);
}

}  // namespace tessera::mesh
