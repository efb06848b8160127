#include "engine/mesh/export_fbx.h"

#include <cassert>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"

namespace tessera::mesh {
namespace {

constexpr uint32_t kFbxVersion = 7400;
// 7400 node headers: EndOffset, NumProperties, PropertyListLen (u32 each) + NameLen (u8).
constexpr size_t kNodeHeaderBytes = 13;
constexpr size_t kNullRecordBytes = 13;

// The FileId / CreationTime / footer-ID triple Blender writes (spec 1.4): SDK readers reportedly
// check that they agree, so all three are fixed together.
constexpr unsigned char kFileId[16] = {0x28, 0xb3, 0x2a, 0xeb, 0xb6, 0x24, 0xcc, 0xc2,
                                       0xbf, 0xc8, 0xb0, 0x2a, 0xa9, 0x2b, 0xfc, 0xf1};
constexpr const char* kCreationTime = "1970-01-01 10:00:00:000";
constexpr unsigned char kFooterId[16] = {0xfa, 0xbc, 0xab, 0x09, 0xd0, 0xc8, 0xd4, 0x66,
                                         0xb1, 0x76, 0xfb, 0x83, 0x1c, 0xf7, 0x26, 0x7e};
constexpr unsigned char kFooterMagic[16] = {0xf8, 0x5a, 0x8c, 0x6a, 0xde, 0xf5, 0xd9, 0x7e,
                                            0xec, 0xe9, 0x0c, 0xe3, 0x75, 0x8f, 0x29, 0x0b};
constexpr const char* kCreator = "Tessera FBX exporter";

// Object ids: any unique nonzero int64 (0 is the scene root). Fixed, so output is reproducible.
constexpr int64_t kGeometryId = 1000001;
constexpr int64_t kModelId = 1000002;
constexpr int64_t kMaterialId = 1000003;
constexpr int64_t kDocumentId = 1000000;
constexpr int64_t kTextureId = 1000004;
constexpr int64_t kVideoId = 1000005;
// Levels of detail past the first: Geometry kLodIdBase + 2 * level, Model one more.
constexpr int64_t kLodIdBase = 2000000;

int64_t geometry_id(size_t level) {
  return level == 0 ? kGeometryId : kLodIdBase + 2 * static_cast<int64_t>(level);
}
int64_t model_id(size_t level) {
  return level == 0 ? kModelId : kLodIdBase + 2 * static_cast<int64_t>(level) + 1;
}

// Everything a 7400 file may hold at most (EndOffsets are u32).
constexpr uint64_t kMaxFileBytes = std::numeric_limits<uint32_t>::max();
// Bytes of everything but the three big arrays, with a wide margin (the fixed tree is ~3 KiB).
constexpr uint64_t kFixedOverheadBytes = 64 * 1024;

// Serializes the node tree depth-first. begin() writes a header with placeholder fields;
// properties are appended; the first child (or end()) fixes NumProperties / PropertyListLen;
// end() writes the NULL record when the node had children (or had nothing at all, the SDK's
// empty-scope convention) and patches EndOffset to the absolute position after it.
class FbxWriter {
 public:
  explicit FbxWriter(size_t reserve) {
    out_.reserve(reserve);
    static constexpr char kMagic[23] = "Kaydara FBX Binary  \0\x1a";  // + implicit final NUL
    out_.append(kMagic, 23);
    put_u32(kFbxVersion);
  }

  void begin(std::string_view name) {
    assert(name.size() <= 255);
    if (!stack_.empty()) close_properties(stack_.back());
    Open node;
    node.header = out_.size();
    out_.append(kNodeHeaderBytes - 1, '\0');
    out_.push_back(static_cast<char>(name.size()));
    out_.append(name.data(), name.size());
    node.properties = out_.size();
    stack_.push_back(node);
  }

  void end() {
    assert(!stack_.empty());
    Open node = stack_.back();
    stack_.pop_back();
    close_properties(node);
    if (node.has_children || node.num_properties == 0) out_.append(kNullRecordBytes, '\0');
    patch_u32(node.header, static_cast<uint32_t>(out_.size()));
    // Mark the parent (whose properties close_properties already closed in begin()).
    if (!stack_.empty()) stack_.back().has_children = true;
  }

  // Property records (spec 2). Must come before the node's first child.
  void prop_i32(int32_t v) {
    put_code('I');
    put_raw(&v, 4);
  }
  void prop_i64(int64_t v) {
    put_code('L');
    put_raw(&v, 8);
  }
  void prop_f64(double v) {
    put_code('D');
    put_raw(&v, 8);
  }
  void prop_bool(bool v) {
    put_code('C');
    out_.push_back(v ? 1 : 0);
  }  // 0x01 as Blender writes
  void prop_string(std::string_view s) {
    put_code('S');
    put_u32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  void prop_raw(const void* data, uint32_t size) {
    put_code('R');
    put_u32(size);
    put_raw(data, size);
  }
  // Arrays: count, encoding 0 (raw), byte length, data.
  void prop_f64_array(const std::vector<double>& v) { put_array('d', v.data(), v.size(), 8); }
  void prop_i32_array(const std::vector<int32_t>& v) { put_array('i', v.data(), v.size(), 4); }

  // Shorthands for the common single-property node.
  void node_i32(std::string_view name, int32_t v) {
    begin(name);
    prop_i32(v);
    end();
  }
  void node_i64(std::string_view name, int64_t v) {
    begin(name);
    prop_i64(v);
    end();
  }
  void node_string(std::string_view name, std::string_view v) {
    begin(name);
    prop_string(v);
    end();
  }

  // Top-level NULL record, then the FBX SDK footer (spec 1.4): ID, zero padding to a 16-byte
  // boundary, 4 zero bytes, version, 120 zero bytes, magic; the length ends a multiple of 16.
  std::string finish() && {
    assert(stack_.empty());
    out_.append(kNullRecordBytes, '\0');
    put_raw(kFooterId, 16);
    out_.append((16 - out_.size() % 16) % 16, '\0');
    out_.append(4, '\0');
    put_u32(kFbxVersion);
    out_.append(120, '\0');
    put_raw(kFooterMagic, 16);
    return std::move(out_);
  }

  size_t size() const { return out_.size(); }

 private:
  struct Open {
    size_t header = 0;
    size_t properties = 0;
    uint32_t num_properties = 0;
    bool closed = false;
    bool has_children = false;
  };

  void close_properties(Open& node) {
    if (node.closed) return;
    node.closed = true;
    patch_u32(node.header + 4, node.num_properties);
    patch_u32(node.header + 8, static_cast<uint32_t>(out_.size() - node.properties));
  }
  void put_code(char code) {
    assert(!stack_.empty() && !stack_.back().closed);
    ++stack_.back().num_properties;
    out_.push_back(code);
  }
  void put_array(char code, const void* data, size_t count, size_t element_bytes) {
    put_code(code);
    put_u32(static_cast<uint32_t>(count));
    put_u32(0);  // encoding: raw
    put_u32(static_cast<uint32_t>(count * element_bytes));
    put_raw(data, count * element_bytes);
  }
  void put_raw(const void* data, size_t n) {
    out_.append(static_cast<const char*>(data), n);  // little-endian host (x86-64, aarch64)
  }
  void put_u32(uint32_t v) { put_raw(&v, 4); }
  void patch_u32(size_t at, uint32_t v) { std::memcpy(out_.data() + at, &v, 4); }

  std::string out_;
  std::vector<Open> stack_;
};

// Properties70 "P" records (spec 3: Blender asserts on the type strings).
void p_int(FbxWriter& w, std::string_view name, int32_t v) {
  w.begin("P");
  w.prop_string(name);
  w.prop_string("int");
  w.prop_string("Integer");
  w.prop_string("");
  w.prop_i32(v);
  w.end();
}
void p_number(FbxWriter& w, std::string_view name, double v) {
  w.begin("P");
  w.prop_string(name);
  w.prop_string("double");
  w.prop_string("Number");
  w.prop_string("");
  w.prop_f64(v);
  w.end();
}
void p_vector(FbxWriter& w, std::string_view name, std::string_view type, std::string_view label,
              std::string_view flags, double x, double y, double z) {
  w.begin("P");
  w.prop_string(name);
  w.prop_string(type);
  w.prop_string(label);
  w.prop_string(flags);
  w.prop_f64(x);
  w.prop_f64(y);
  w.prop_f64(z);
  w.end();
}
void p_animatable_number(FbxWriter& w, std::string_view name, double v) {
  w.begin("P");
  w.prop_string(name);
  w.prop_string("Number");
  w.prop_string("");
  w.prop_string("A");
  w.prop_f64(v);
  w.end();
}

// "Name\0\1Class": the object name / class split every Objects child carries (spec 3).
std::string object_name(std::string_view name, std::string_view fbx_class) {
  std::string s(name);
  s.push_back('\0');
  s.push_back('\x01');
  s.append(fbx_class);
  return s;
}

void write_header_extension(FbxWriter& w) {
  w.begin("FBXHeaderExtension");
  w.node_i32("FBXHeaderVersion", 1003);
  w.node_i32("FBXVersion", static_cast<int32_t>(kFbxVersion));
  w.node_i32("EncryptionType", 0);
  w.begin("CreationTimeStamp");  // matches kCreationTime
  w.node_i32("Version", 1000);
  w.node_i32("Year", 1970);
  w.node_i32("Month", 1);
  w.node_i32("Day", 1);
  w.node_i32("Hour", 10);
  w.node_i32("Minute", 0);
  w.node_i32("Second", 0);
  w.node_i32("Millisecond", 0);
  w.end();
  w.node_string("Creator", kCreator);
  w.end();
  w.begin("FileId");
  w.prop_raw(kFileId, 16);
  w.end();
  w.node_string("CreationTime", kCreationTime);
  w.node_string("Creator", kCreator);
}

void write_global_settings(FbxWriter& w, UpAxis up, double cm_per_unit) {
  // Axis triples from spec 4: both describe a right-handed frame whose up is the data's up.
  const bool z_up = up == UpAxis::kZ;
  const int32_t up_axis = z_up ? 2 : 1, front_axis = z_up ? 1 : 2, front_sign = z_up ? -1 : 1;
  w.begin("GlobalSettings");
  w.node_i32("Version", 1000);
  w.begin("Properties70");
  p_int(w, "UpAxis", up_axis);
  p_int(w, "UpAxisSign", 1);
  p_int(w, "FrontAxis", front_axis);
  p_int(w, "FrontAxisSign", front_sign);
  p_int(w, "CoordAxis", 0);
  p_int(w, "CoordAxisSign", 1);
  p_int(w, "OriginalUpAxis", up_axis);
  p_int(w, "OriginalUpAxisSign", 1);
  // Centimetres per file unit (ExportOptions::unit; 100 for metres, like GLB).
  p_number(w, "UnitScaleFactor", cm_per_unit);
  p_number(w, "OriginalUnitScaleFactor", cm_per_unit);
  w.end();
  w.end();
}

void write_documents_and_definitions(FbxWriter& w, bool textured, int32_t levels) {
  w.begin("Documents");
  w.node_i32("Count", 1);
  w.begin("Document");
  w.prop_i64(kDocumentId);
  w.prop_string("Scene");
  w.prop_string("Scene");
  w.node_i64("RootNode", 0);
  w.end();
  w.end();

  w.begin("References");  // empty: written by every SDK file
  w.end();

  struct Count {
    const char* type;
    int32_t count;
  };
  const Count kCounts[] = {{"GlobalSettings", 1}, {"Model", levels}, {"Geometry", levels},
                           {"Material", 1},       {"Texture", 1},    {"Video", 1}};
  const int32_t types = textured ? 6 : 4;
  w.begin("Definitions");
  w.node_i32("Version", 100);
  w.node_i32("Count", types);
  for (int32_t i = 0; i < types; ++i) {
    const Count& c = kCounts[i];
    w.begin("ObjectType");
    w.prop_string(c.type);
    w.node_i32("Count", c.count);
    w.end();
  }
  w.end();
}

void write_geometry(FbxWriter& w, const Mesh& mesh, size_t level, size_t levels) {
  w.begin("Geometry");
  w.prop_i64(geometry_id(level));
  w.prop_string(object_name(lod_object_name(level, levels), "Geometry"));
  w.prop_string("Mesh");
  w.node_i32("GeometryVersion", 124);

  std::vector<double> doubles(mesh.positions.begin(), mesh.positions.end());
  w.begin("Vertices");
  w.prop_f64_array(doubles);
  w.end();

  // Corners in triangle order; the last corner of each polygon is stored as ~index (= -index-1).
  std::vector<int32_t> corners(mesh.triangles.size());
  for (size_t i = 0; i < mesh.triangles.size(); ++i) {
    const auto index = static_cast<int32_t>(mesh.triangles[i]);  // < INT32_MAX: check_fbx_limits
    corners[i] = i % 3 == 2 ? ~index : index;
  }
  w.begin("PolygonVertexIndex");
  w.prop_i32_array(corners);
  w.end();

  const bool has_normals = !mesh.normals.empty();
  if (has_normals) {
    // ByPolygonVertex / Direct: one normal per corner (the corner's vertex normal), the mapping
    // every importer handles (Blender reads ByVertice too, but not every tool does).
    doubles.resize(mesh.triangles.size() * 3);
    for (size_t i = 0; i < mesh.triangles.size(); ++i) {
      const size_t v = mesh.triangles[i];
      for (size_t d = 0; d < 3; ++d) doubles[3 * i + d] = mesh.normals[3 * v + d];
    }
    w.begin("LayerElementNormal");
    w.prop_i32(0);
    w.node_i32("Version", 101);
    w.node_string("Name", "");
    w.node_string("MappingInformationType", "ByPolygonVertex");
    w.node_string("ReferenceInformationType", "Direct");
    w.begin("Normals");
    w.prop_f64_array(doubles);
    w.end();
    w.end();
  }

  const bool has_uvs = !mesh.uvs.empty();
  if (has_uvs) {
    // ByPolygonVertex / IndexToDirect: the per-vertex uvs once, each corner indexing its vertex's
    // (spec 3; bottom-left origin like the Mesh's, no flip).
    doubles.assign(mesh.uvs.begin(), mesh.uvs.end());
    w.begin("LayerElementUV");
    w.prop_i32(0);
    w.node_i32("Version", 101);
    w.node_string("Name", "UVMap");
    w.node_string("MappingInformationType", "ByPolygonVertex");
    w.node_string("ReferenceInformationType", "IndexToDirect");
    w.begin("UV");
    w.prop_f64_array(doubles);
    w.end();
    std::vector<int32_t> uv_index(mesh.triangles.begin(), mesh.triangles.end());
    w.begin("UVIndex");
    w.prop_i32_array(uv_index);
    w.end();
    w.end();
  }

  w.begin("LayerElementMaterial");
  w.prop_i32(0);
  w.node_i32("Version", 101);
  w.node_string("Name", "");
  w.node_string("MappingInformationType", "AllSame");
  w.node_string("ReferenceInformationType", "IndexToDirect");
  w.begin("Materials");
  w.prop_i32_array({0});
  w.end();
  w.end();

  w.begin("Layer");
  w.prop_i32(0);
  w.node_i32("Version", 100);
  auto layer_element = [&](const char* type) {
    w.begin("LayerElement");
    w.node_string("Type", type);
    w.node_i32("TypedIndex", 0);
    w.end();
  };
  if (has_normals) layer_element("LayerElementNormal");
  if (has_uvs) layer_element("LayerElementUV");  // Assimp drops the uvs without it (spec)
  layer_element("LayerElementMaterial");
  w.end();

  w.end();  // Geometry
}

// A user property (flags "A+U", as Blender writes custom properties; its importer turns every P
// whose flags hold 'U' into a custom property of the object).
void p_user_string(FbxWriter& w, std::string_view name, std::string_view v) {
  w.begin("P");
  w.prop_string(name);
  w.prop_string("KString");
  w.prop_string("");
  w.prop_string("A+U");
  w.prop_string(v);
  w.end();
}
void p_user_int(FbxWriter& w, std::string_view name, int32_t v) {
  w.begin("P");
  w.prop_string(name);
  w.prop_string("int");
  w.prop_string("Integer");
  w.prop_string("A+U");
  w.prop_i32(v);
  w.end();
}
void p_user_number(FbxWriter& w, std::string_view name, double v) {
  w.begin("P");
  w.prop_string(name);
  w.prop_string("double");
  w.prop_string("Number");
  w.prop_string("A+U");
  w.prop_f64(v);
  w.end();
}

// The metadata as user properties: kFbxSettingsProperty holds the whole JSON text (read back by
// `generate --from`), and each scalar field gets its own "tessera_<name>" (members of "sampling"
// and "export" by their own names, "model" as tessera_model / tessera_model_sha256), which is
// what an artist sees in Blender's custom properties.
void write_user_properties(FbxWriter& w, const std::string& json_text) {
  if (json_text.empty()) return;
  p_user_string(w, kFbxSettingsProperty, json_text);
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  auto scalar = [&](const std::string& name, const nlohmann::json& v) {
    if (v.is_string()) {
      p_user_string(w, name, v.get<std::string>());
    } else if (v.is_boolean()) {
      p_user_int(w, name, v.get<bool>() ? 1 : 0);
    } else if (v.is_number_integer()) {
      const bool fits = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= uint64_t{INT32_MAX}
                            : v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
      if (fits) {
        p_user_int(w, name, static_cast<int32_t>(v.get<int64_t>()));
      } else {
        p_user_string(w, name, v.dump());  // a 64-bit seed: exact as text
      }
    } else if (v.is_number()) {
      p_user_number(w, name, v.get<double>());
    } else if (v.is_array()) {
      p_user_string(w, name, v.dump());
    }
  };
  for (const auto& [key, value] : j.items()) {
    if (key == "tessera") {
      scalar("tessera_version", value);
    } else if (key == "model" && value.is_object()) {
      if (value.contains("name")) scalar("tessera_model", value["name"]);
      if (value.contains("gpt_sha256")) scalar("tessera_model_sha256", value["gpt_sha256"]);
    } else if (value.is_object()) {
      const bool flat = key == "sampling" || key == "export";
      for (const auto& [sub, v] : value.items()) {
        scalar(flat ? "tessera_" + sub : "tessera_" + key + "_" + sub, v);
      }
    } else if (!value.is_null()) {
      scalar("tessera_" + key, value);
    }
  }
}

void write_model(FbxWriter& w, size_t level, size_t levels, const std::string& metadata_json) {
  w.begin("Model");
  w.prop_i64(model_id(level));
  w.prop_string(object_name(lod_object_name(level, levels), "Model"));
  w.prop_string("Mesh");
  w.node_i32("Version", 232);
  w.begin("Properties70");
  p_vector(w, "Lcl Translation", "Lcl Translation", "", "A", 0, 0, 0);
  p_vector(w, "Lcl Rotation", "Lcl Rotation", "", "A", 0, 0, 0);
  p_vector(w, "Lcl Scaling", "Lcl Scaling", "", "A", 1, 1, 1);
  write_user_properties(w, metadata_json);
  w.end();
  w.begin("Shading");
  w.prop_bool(true);
  w.end();
  w.node_string("Culling", "CullingOff");
  w.end();
}

void write_material(FbxWriter& w, bool textured) {
  // Neutral grey, the same as the OBJ's MTL (export.cpp default_mtl); white under a texture.
  const double diffuse = textured ? 1.0 : 0.8;
  w.begin("Material");
  w.prop_i64(kMaterialId);
  w.prop_string(object_name("TesseraDefault", "Material"));
  w.prop_string("");
  w.node_i32("Version", 102);
  w.node_string("ShadingModel", "Phong");
  w.node_i32("MultiLayer", 0);
  w.begin("Properties70");
  p_vector(w, "DiffuseColor", "Color", "", "A", diffuse, diffuse, diffuse);
  p_animatable_number(w, "DiffuseFactor", 1.0);
  p_vector(w, "SpecularColor", "Color", "", "A", 1.0, 1.0, 1.0);
  p_animatable_number(w, "SpecularFactor", 0.04);
  p_animatable_number(w, "ShininessExponent", 50.0);
  w.end();
  w.end();
}

// Texture + Video referencing the PNG (spec 3): FileName absolute, RelativeFilename beside the FBX,
// the same path in both (Blender caches images by it). A non-empty `png` is embedded as the
// Video's Content, which Blender packs into the image, so the FBX shows its texture on its own.
void write_texture(FbxWriter& w, const std::string& texture_file, const std::string& png) {
  namespace fs = std::filesystem;
  const std::string relative = fs::path(texture_file).filename().string();
  std::error_code ec;
  fs::path absolute = fs::absolute(fs::path(texture_file), ec);
  if (ec) absolute = fs::path(texture_file);
  const std::string video_name = object_name(relative, "Video");
  w.begin("Texture");
  w.prop_i64(kTextureId);
  w.prop_string(object_name("TesseraTexture", "Texture"));
  w.prop_string("");
  w.node_string("Type", "TextureVideoClip");
  w.node_i32("Version", 202);
  w.node_string("TextureName", object_name("TesseraTexture", "Texture"));
  w.node_string("Media", video_name);
  w.node_string("FileName", absolute.string());
  w.node_string("RelativeFilename", relative);
  w.end();

  w.begin("Video");
  w.prop_i64(kVideoId);
  w.prop_string(video_name);
  w.prop_string("Clip");
  w.node_string("Type", "Clip");
  w.begin("Properties70");
  w.begin("P");
  w.prop_string("Path");
  w.prop_string("KString");
  w.prop_string("Url");
  w.prop_string("");
  w.prop_string(absolute.string());
  w.end();
  w.end();
  w.node_i32("UseMipMap", 0);
  w.node_string("Filename", absolute.string());
  w.node_string("RelativeFilename", relative);
  if (!png.empty()) {
    w.begin("Content");
    w.prop_raw(png.data(), static_cast<uint32_t>(png.size()));
    w.end();
  }
  w.end();
}

void write_connections(FbxWriter& w, bool textured, size_t levels) {
  auto connect = [&](int64_t child, int64_t parent) {
    w.begin("C");
    w.prop_string("OO");
    w.prop_i64(child);
    w.prop_i64(parent);
    w.end();
  };
  w.begin("Connections");
  for (size_t level = 0; level < levels; ++level) {
    connect(model_id(level), 0);  // model -> scene root: without it Blender creates no object
    connect(geometry_id(level), model_id(level));
    connect(kMaterialId, model_id(level));  // materials attach to the model, not the geometry
  }
  if (textured) {
    w.begin("C");  // texture -> the material's DiffuseColor property
    w.prop_string("OP");
    w.prop_i64(kTextureId);
    w.prop_i64(kMaterialId);
    w.prop_string("DiffuseColor");
    w.end();
    connect(kVideoId, kTextureId);
  }
  w.end();
}

}  // namespace

Status check_fbx_limits(int64_t vertex_count, int64_t triangle_count, bool has_normals,
                        bool has_uvs) {
  if (vertex_count < 0 || triangle_count < 0) {
    return invalid_argument("fbx: negative vertex or triangle count");
  }
  // Corner indices are int32 and the last corner is stored as ~index, so every index must fit.
  if (vertex_count > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("fbx: " + std::to_string(vertex_count) +
                            " vertices exceed FBX's int32 polygon-vertex indices");
  }
  const uint64_t corners = 3 * static_cast<uint64_t>(triangle_count);
  const uint64_t vertex_doubles = 3 * static_cast<uint64_t>(vertex_count);
  const uint64_t normal_doubles = has_normals ? 3 * corners : 0;
  const uint64_t uv_doubles = has_uvs ? 2 * static_cast<uint64_t>(vertex_count) : 0;
  const uint64_t uv_indices = has_uvs ? corners : 0;
  if (corners > std::numeric_limits<uint32_t>::max() ||
      vertex_doubles > std::numeric_limits<uint32_t>::max() ||
      normal_doubles > std::numeric_limits<uint32_t>::max()) {
    return invalid_argument("fbx: " + std::to_string(triangle_count) +
                            " triangles exceed FBX's uint32 array element count");
  }
  const uint64_t bytes = kFixedOverheadBytes + 8 * vertex_doubles + 4 * corners +
                         8 * normal_doubles + 8 * uv_doubles + 4 * uv_indices;
  if (bytes > kMaxFileBytes) {
    return invalid_argument("fbx: a mesh of " + std::to_string(vertex_count) + " vertices and " +
                            std::to_string(triangle_count) + " triangles needs about " +
                            std::to_string(bytes >> 20) +
                            " MiB, over the 4 GiB limit of binary FBX 7.4 (decimate it first)");
  }
  return Status();
}

Expected<std::string> to_fbx(const Mesh& input, const ExportOptions& options,
                             const std::string& texture_file) {
  return to_fbx_lods({&input}, options, texture_file);
}

namespace {

// to_fbx_lods with the texture's PNG file already made (embedded when textured).
Expected<std::string> fbx_file(const std::vector<const Mesh*>& lods, const ExportOptions& given,
                               const std::string& texture_file, const std::string& png) {
  if (lods.empty()) return invalid_argument("fbx: no mesh to write");
  uint64_t vertices = 0, triangles = 0;
  for (const Mesh* m : lods) {
    TESSERA_RETURN_IF_ERROR(validate(*m));
    if (m->vertex_count() == 0 || m->triangle_count() == 0) {
      return invalid_argument("fbx: the mesh is empty");
    }
    TESSERA_RETURN_IF_ERROR(check_fbx_limits(m->vertex_count(), m->triangle_count(),
                                             !m->normals.empty(), !m->uvs.empty()));
    vertices += static_cast<uint64_t>(m->vertex_count());
    triangles += static_cast<uint64_t>(m->triangle_count());
  }
  // All levels together must fit the one file as well.
  TESSERA_RETURN_IF_ERROR(check_fbx_limits(static_cast<int64_t>(vertices),
                                           static_cast<int64_t>(triangles), true, true));
  TESSERA_ASSIGN_OR_RETURN(const ExportOptions options, resolve_placement(*lods[0], given));
  const bool textured = !lods[0]->texture.empty() && !texture_file.empty();

  FbxWriter w(8192 + vertices * 24 + triangles * 12 * 4);
  write_header_extension(w);
  write_global_settings(w, options.up_axis, 100.0 * metres_per_unit(options.unit));
  write_documents_and_definitions(w, textured, static_cast<int32_t>(lods.size()));
  w.begin("Objects");
  for (size_t level = 0; level < lods.size(); ++level) {
    const Mesh mesh = transform_for_export(*lods[level], options);
    write_geometry(w, mesh, level, lods.size());
    write_model(w, level, lods.size(), options.metadata_json);
  }
  write_material(w, textured);
  if (textured) write_texture(w, texture_file, png);
  w.end();
  write_connections(w, textured, lods.size());
  w.begin("Takes");
  w.node_string("Current", "");
  w.end();
  // check_fbx_limits bounds the geometry well below 4 GiB; an embedded texture adds to it.
  if (w.size() >= kMaxFileBytes) {
    return invalid_argument(
        "fbx: the mesh and its embedded texture exceed the 4 GiB limit of "
        "binary FBX 7.4 (decimate it or use a smaller texture)");
  }
  return std::move(w).finish();
}

}  // namespace

Expected<std::string> to_fbx_lods(const std::vector<const Mesh*>& lods,
                                  const ExportOptions& options, const std::string& texture_file) {
  std::string png;
  if (!lods.empty() && !lods[0]->texture.empty() && !texture_file.empty()) {
    Expected<std::string> made = texture_png_file(*lods[0], options.metadata_json);
    if (!made.ok()) return made.status().with_context("fbx: texture");
    png = std::move(*made);
  }
  return fbx_file(lods, options, texture_file, png);
}

Status write_fbx(const Mesh& mesh, const std::string& path, const ExportOptions& options) {
  return write_fbx_lods({&mesh}, path, options);
}

Status write_fbx_lods(const std::vector<const Mesh*>& lods, const std::string& path,
                      const ExportOptions& options) {
  if (lods.empty()) return invalid_argument(path + ": no mesh to write");
  const Mesh& mesh = *lods[0];
  const bool textured = !mesh.texture.empty();
  const bool beside = textured && options.texture_beside;
  const std::string png_path = texture_path_for(path);
  std::string png;
  if (textured) {
    Expected<std::string> made = texture_png_file(mesh, options.metadata_json);
    if (!made.ok()) return made.status().with_context(path);
    png = std::move(*made);
  }
  Expected<std::string> bytes = fbx_file(lods, options, textured ? png_path : std::string(), png);
  if (!bytes.ok()) return bytes.status().with_context(path);
  if (beside) {
    TESSERA_RETURN_IF_ERROR(write_file_atomic(png_path, png.data(), png.size()).with_context(path));
  }
  Status st = write_file_atomic(path, bytes->data(), bytes->size());
  if (!st.ok() && beside) {
    std::error_code ec;
    std::filesystem::remove(png_path, ec);  // best effort: the FBX's error is the one returned
  }
  return st;
}

}  // namespace tessera::mesh
