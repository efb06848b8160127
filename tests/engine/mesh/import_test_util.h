// Helpers for the mesh reader tests (tests/engine/mesh/import_*_test.cpp): small meshes, a scratch
// directory, and FbxBuilder, a binary FBX writer written from the FBX spec notes (docs/fbx.md)
// independently of engine/mesh/export_fbx.cpp, so the tests can make what our exporter never
// writes: 7500 files (64-bit node headers), zlib arrays, quads and n-gons, Model transforms, and
// files that lie.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/mesh/mesh.h"

namespace tessera::mesh::testing {

// A textured quad pair (two quads at different depths, so positions identify vertices) with a
// 4x2 texture of distinct colours.
inline Mesh textured_test_mesh() {
  Mesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0.5f, 1, 0, 0.5f, 1, 1, 0.5f};
  m.triangles = {0, 1, 2, 0, 2, 3, 4, 5, 6};
  m.uvs = {0.0f, 0.0f, 1.0f, 0.0f, 1.0f, 1.0f, 0.0f, 1.0f, 0.25f, 0.5f, 0.75f, 0.5f, 0.5f, 0.875f};
  m.texture.width = 4;
  m.texture.height = 2;
  for (int i = 0; i < 8; ++i) {
    m.texture.rgb.insert(m.texture.rgb.end(),
                         {static_cast<uint8_t>(30 * i), static_cast<uint8_t>(255 - 20 * i),
                          static_cast<uint8_t>(i % 2 ? 200 : 10)});
  }
  return m;
}

inline Mesh tetrahedron() {
  Mesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
  m.triangles = {0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3};
  return m;
}

// A tetrahedron with distinct per-vertex uvs (a seam-free layout) and a 3 x 2 texture whose texels
// all differ, so a flipped row or swapped channel shows.
inline Mesh textured_tetrahedron() {
  Mesh m = tetrahedron();
  m.uvs = {0.0f, 0.0f, 1.0f, 0.125f, 0.3f, 1.0f, 0.71f, 0.42f};
  m.texture.width = 3;
  m.texture.height = 2;
  for (int i = 0; i < 18; ++i) m.texture.rgb.push_back(static_cast<uint8_t>(13 * i + 7));
  return m;
}

// A fresh, empty directory under the system temp dir, removed on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / ("tessera-" + name)) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// ---- FbxBuilder
// ----------------------------------------------------------------------------------

struct FbxProp {
  char type = 0;
  std::string payload;  // everything after the type code
};

struct FbxNode {
  std::string name;
  std::vector<FbxProp> props;
  std::vector<FbxNode> children;
};

template <typename T>
std::string fbx_raw(const T& v) {
  std::string s(sizeof(T), '\0');
  std::memcpy(s.data(), &v, sizeof(T));
  return s;
}

inline FbxProp fbx_i(int32_t v) {
  return {'I', fbx_raw(v)};
}
inline FbxProp fbx_l(int64_t v) {
  return {'L', fbx_raw(v)};
}
inline FbxProp fbx_d(double v) {
  return {'D', fbx_raw(v)};
}
inline FbxProp fbx_s(const std::string& v) {
  return {'S', fbx_raw(static_cast<uint32_t>(v.size())) + v};
}
inline FbxProp fbx_r(const std::string& v) {
  return {'R', fbx_raw(static_cast<uint32_t>(v.size())) + v};
}

// An array property: `code` 'd', 'f', 'i' or 'l'; zlib-compressed when `compress`.
template <typename T>
FbxProp fbx_array(char code, const std::vector<T>& values, bool compress) {
  std::string data(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(data.data(), values.data(), data.size());
  uint32_t encoding = 0;
  if (compress) {
    uLongf bound = compressBound(static_cast<uLong>(data.size()));
    std::string packed(bound, '\0');
    compress2(reinterpret_cast<Bytef*>(packed.data()), &bound,
              reinterpret_cast<const Bytef*>(data.data()), static_cast<uLong>(data.size()), 6);
    packed.resize(bound);
    data = packed;
    encoding = 1;
  }
  return {code, fbx_raw(static_cast<uint32_t>(values.size())) + fbx_raw(encoding) +
                    fbx_raw(static_cast<uint32_t>(data.size())) + data};
}

inline FbxNode fbx_node(std::string name, std::vector<FbxProp> props,
                        std::vector<FbxNode> children = {}) {
  return {std::move(name), std::move(props), std::move(children)};
}

// A Properties70 "P" record with three numbers (Lcl Translation style) or one int.
inline FbxNode fbx_p3(const std::string& name, double x, double y, double z) {
  return fbx_node("P",
                  {fbx_s(name), fbx_s(name), fbx_s(""), fbx_s("A"), fbx_d(x), fbx_d(y), fbx_d(z)});
}
inline FbxNode fbx_pint(const std::string& name, int32_t v) {
  return fbx_node("P", {fbx_s(name), fbx_s("int"), fbx_s("Integer"), fbx_s(""), fbx_i(v)});
}

class FbxBuilder {
 public:
  // Serializes `top` as a binary FBX of `version` (< 7500: 32-bit node headers, else 64-bit).
  static std::string serialize(const std::vector<FbxNode>& top, uint32_t version) {
    FbxBuilder b(version);
    b.out_.append("Kaydara FBX Binary  \0\x1a\0", 23);
    b.out_ += fbx_raw(version);
    for (const FbxNode& n : top) b.write(n);
    b.out_.append(b.null_len(), '\0');
    b.out_.append(160, '\0');  // a footer-sized tail (readers ignore it)
    return b.out_;
  }

 private:
  explicit FbxBuilder(uint32_t version) : wide_(version >= 7500) {}
  size_t null_len() const { return wide_ ? 25 : 13; }
  void put(uint64_t v) {
    if (wide_) {
      out_ += fbx_raw(v);
    } else {
      out_ += fbx_raw(static_cast<uint32_t>(v));
    }
  }
  void patch(size_t at, uint64_t v) {
    if (wide_) {
      std::memcpy(out_.data() + at, &v, 8);
    } else {
      const auto v32 = static_cast<uint32_t>(v);
      std::memcpy(out_.data() + at, &v32, 4);
    }
  }
  void write(const FbxNode& n) {
    const size_t start = out_.size();
    const size_t w = wide_ ? 8 : 4;
    put(0);
    put(n.props.size());
    put(0);
    out_.push_back(static_cast<char>(n.name.size()));
    out_ += n.name;
    const size_t props_start = out_.size();
    for (const FbxProp& p : n.props) {
      out_.push_back(p.type);
      out_ += p.payload;
    }
    patch(start + 2 * w, out_.size() - props_start);
    for (const FbxNode& c : n.children) write(c);
    if (!n.children.empty() || n.props.empty()) out_.append(null_len(), '\0');
    patch(start, out_.size());
  }

  bool wide_;
  std::string out_;
};

// The nodes of a one-geometry scene: GlobalSettings (up axis), Objects { Geometry, Model with
// Lcl Translation / Rotation / Scaling }, Connections (model -> root, geometry -> model).
struct FbxScene {
  std::vector<double> vertices;
  std::vector<int32_t> polygon_vertex_index;
  std::vector<double> uv;         // empty: no uv layer
  std::vector<int32_t> uv_index;  // empty: Direct
  std::string uv_mapping = "ByPolygonVertex";
  double translation[3] = {0, 0, 0};
  double rotation[3] = {0, 0, 0};
  double scaling[3] = {1, 1, 1};
  int up_axis = 1;
  bool compress = false;

  std::vector<FbxNode> nodes() const {
    std::vector<FbxNode> geometry_children = {
        fbx_node("Vertices", {fbx_array('d', vertices, compress)}),
        fbx_node("PolygonVertexIndex", {fbx_array('i', polygon_vertex_index, compress)})};
    if (!uv.empty()) {
      std::vector<FbxNode> layer = {
          fbx_node("Version", {fbx_i(101)}),
          fbx_node("MappingInformationType", {fbx_s(uv_mapping)}),
          fbx_node("ReferenceInformationType",
                   {fbx_s(uv_index.empty() ? "Direct" : "IndexToDirect")}),
          fbx_node("UV", {fbx_array('d', uv, compress)})};
      if (!uv_index.empty())
        layer.push_back(fbx_node("UVIndex", {fbx_array('i', uv_index, compress)}));
      geometry_children.push_back(fbx_node("LayerElementUV", {fbx_i(0)}, layer));
    }
    return {
        fbx_node("GlobalSettings", {},
                 {fbx_node("Version", {fbx_i(1000)}),
                  fbx_node("Properties70", {},
                           {fbx_pint("UpAxis", up_axis), fbx_pint("UpAxisSign", 1)})}),
        fbx_node(
            "Objects", {},
            {fbx_node("Geometry",
                      {fbx_l(11), fbx_s(std::string("g\0\1Geometry", 11)), fbx_s("Mesh")},
                      geometry_children),
             fbx_node("Model", {fbx_l(22), fbx_s(std::string("m\0\1Model", 8)), fbx_s("Mesh")},
                      {fbx_node("Properties70", {},
                                {fbx_p3("Lcl Translation", translation[0], translation[1],
                                        translation[2]),
                                 fbx_p3("Lcl Rotation", rotation[0], rotation[1], rotation[2]),
                                 fbx_p3("Lcl Scaling", scaling[0], scaling[1], scaling[2])})})}),
        fbx_node("Connections", {},
                 {fbx_node("C", {fbx_s("OO"), fbx_l(22), fbx_l(0)}),
                  fbx_node("C", {fbx_s("OO"), fbx_l(11), fbx_l(22)})})};
  }
  std::string bytes(uint32_t version = 7400) const {
    return FbxBuilder::serialize(nodes(), version);
  }
};

}  // namespace tessera::mesh::testing
