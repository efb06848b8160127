// Binary FBX 7.x reader (import.h has the contract; the format facts are the project's FBX notes,
// docs/fbx.md, checked against Blender 3.4's importer).
//
// Two passes. First the node tree (import_fbx_internal.h, import_fbx_nodes.cpp): every record
// checked against the bytes, array payloads decoded only when used. Second, here, the scene:
// Objects (Geometry, Model, Texture, Video, Material) and Connections, each Geometry placed by the
// Models that own it, merged into one mesh with the texture of its material.
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/mesh/import.h"
#include "engine/mesh/import_fbx_internal.h"
#include "engine/mesh/import_internal.h"

namespace tessera::mesh {
namespace {

// Extra triangles a geometry instanced by several Models may add in all.
constexpr uint64_t kMaxInstancedTriangles = uint64_t{1} << 22;

using fbx_detail::kMaxDepth;
using fbx_detail::Node;
using fbx_detail::NodeTree;
using fbx_detail::Property;

// The scene of a parsed node tree: its objects and connections, read into one mesh.
class FbxReader : private NodeTree {
 public:
  FbxReader(std::string_view bytes, const std::string& name, std::vector<std::string>* warnings,
            const std::string& directory)
      : NodeTree(bytes, name), warnings_(warnings), directory_(directory) {}

  Expected<Mesh> read() {
    TESSERA_RETURN_IF_ERROR(parse());
    return build_mesh();
  }

  // The string value of Properties70 P `property` of the first Model that has one.
  Expected<std::optional<std::string>> model_string_property(std::string_view property) {
    TESSERA_RETURN_IF_ERROR(parse());
    const Node* objects = root().child("Objects");
    if (objects == nullptr) return std::optional<std::string>();
    for (const Node& o : objects->children) {
      if (o.name != "Model") continue;
      const Node* props70 = o.child("Properties70");
      if (props70 == nullptr) continue;
      for (const Node& p : props70->children) {
        if (p.name != "P" || p.props.size() < 5 || as_string(p.props[0]) != property) continue;
        const auto v = as_string(p.props[4]);
        if (!v) return fail("Model property " + std::string(property) + " is not a string");
        return std::optional<std::string>(std::string(*v));
      }
    }
    return std::optional<std::string>();
  }

 private:
  void warn(const std::string& what) { import_detail::warn(warnings_, name() + ": " + what); }

  // ---- the scene -------------------------------------------------------------------------------

  using Mat = import_detail::Mat4;  // column-major 4x4
  static Mat identity() { return import_detail::mat_identity(); }
  static Mat mul(const Mat& a, const Mat& b) { return import_detail::mat_mul(a, b); }

  // The three numbers of Properties70 P `name` of `object` (nullopt when absent or malformed).
  std::optional<std::array<double, 3>> p_vector(const Node& object, std::string_view name) const {
    const Node* props70 = object.child("Properties70");
    if (props70 == nullptr) return std::nullopt;
    for (const Node& p : props70->children) {
      if (p.name != "P" || p.props.size() < 7) continue;
      if (as_string(p.props[0]) != name) continue;
      std::array<double, 3> v{};
      for (int k = 0; k < 3; ++k) {
        auto x = as_number(p.props[4 + k]);
        if (!x) return std::nullopt;
        v[k] = *x;
      }
      return v;
    }
    return std::nullopt;
  }
  std::optional<int64_t> p_int(const Node& object, std::string_view name) const {
    const Node* props70 = object.child("Properties70");
    if (props70 == nullptr) return std::nullopt;
    for (const Node& p : props70->children) {
      if (p.name != "P" || p.props.size() < 5) continue;
      if (as_string(p.props[0]) != name) continue;
      return as_int(p.props[4]);
    }
    return std::nullopt;
  }

  // Lcl Translation * Rotation (degrees, XYZ: Rz * Ry * Rx) * Scaling.
  Mat model_local(const Node& model) const {
    const auto t = p_vector(model, "Lcl Translation").value_or(std::array<double, 3>{0, 0, 0});
    const auto r = p_vector(model, "Lcl Rotation").value_or(std::array<double, 3>{0, 0, 0});
    const auto s = p_vector(model, "Lcl Scaling").value_or(std::array<double, 3>{1, 1, 1});
    constexpr double kDeg = 3.14159265358979323846 / 180.0;
    const double cx = std::cos(r[0] * kDeg), sx = std::sin(r[0] * kDeg);
    const double cy = std::cos(r[1] * kDeg), sy = std::sin(r[1] * kDeg);
    const double cz = std::cos(r[2] * kDeg), sz = std::sin(r[2] * kDeg);
    Mat rx = identity(), ry = identity(), rz = identity();
    rx[5] = cx;
    rx[6] = sx;
    rx[9] = -sx;
    rx[10] = cx;
    ry[0] = cy;
    ry[2] = -sy;
    ry[8] = sy;
    ry[10] = cy;
    rz[0] = cz;
    rz[1] = sz;
    rz[4] = -sz;
    rz[5] = cz;
    Mat m = mul(rz, mul(ry, rx));
    for (int c = 0; c < 3; ++c) {
      for (int row = 0; row < 3; ++row) m[c * 4 + row] *= s[c];
    }
    m[12] = t[0];
    m[13] = t[1];
    m[14] = t[2];
    return m;
  }

  // The world transform of Model `id`: its local transform under its parent Models' (the first OO
  // parent that is a Model; cycles and chains deeper than 64 stop climbing).
  Mat model_world(int64_t id) const {
    Mat world = identity();
    std::unordered_set<int64_t> seen;
    int64_t current = id;
    for (int depth = 0; depth < kMaxDepth; ++depth) {
      auto it = models_.find(current);
      if (it == models_.end() || !seen.insert(current).second) break;
      world = mul(model_local(*it->second), world);
      int64_t parent = 0;
      auto range = parents_.equal_range(current);
      for (auto p = range.first; p != range.second; ++p) {
        if (models_.count(p->second.first)) {
          parent = p->second.first;
          break;
        }
      }
      if (parent == 0) break;
      current = parent;
    }
    return world;
  }

  void index_objects() {
    if (const Node* objects = root().child("Objects")) {
      for (const Node& o : objects->children) {
        const auto id = object_id(o);
        if (!id) continue;
        if (o.name == "Model") models_.emplace(*id, &o);
        if (o.name == "Texture") textures_.emplace_back(*id, &o);
        if (o.name == "Video") videos_.emplace(*id, &o);
        if (o.name == "Material") materials_.insert(*id);
        if (o.name == "Geometry") {
          // FBX 7 geometries are "Mesh", "Shape" (blend shapes), "NurbsCurve", ...: Mesh only.
          if (o.props.size() >= 3 && as_string(o.props[2]) != std::string_view("Mesh")) continue;
          geometries_.emplace_back(*id, &o);
        }
      }
    }
    if (const Node* connections = root().child("Connections")) {
      for (const Node& c : connections->children) {
        if (c.name != "C" || c.props.size() < 3) continue;
        if (c.props[1].type != 'L' || c.props[2].type != 'L') continue;  // as Blender does
        const int64_t child = *as_int(c.props[1]), parent = *as_int(c.props[2]);
        std::string_view property;
        if (c.props.size() >= 4) property = as_string(c.props[3]).value_or(std::string_view());
        parents_.emplace(child, std::make_pair(parent, property));
      }
    }
  }

  // One geometry, transformed, with per-vertex uvs when its first uv layer is usable.
  struct Piece {
    Mesh mesh;
    bool had_uv_layer = false;
  };

  // Reads geometry `g` in its own coordinates (the Model transform is applied per instance).
  Status read_geometry(const Node& g, Piece* piece) {
    const std::string what = "Geometry at byte " + std::to_string(g.offset);
    const Property* vertices_prop = array_child(g, "Vertices");
    const Property* index_prop = array_child(g, "PolygonVertexIndex");
    if (vertices_prop == nullptr || index_prop == nullptr) return Status();  // no mesh data
    std::vector<double> vertices;
    TESSERA_RETURN_IF_ERROR(read_doubles(*vertices_prop, what + " Vertices", &vertices));
    if (vertices.size() % 3 != 0) {
      return fail(what + ": Vertices holds " + std::to_string(vertices.size()) +
                  " numbers, not a multiple of 3");
    }
    const uint64_t vertex_count = vertices.size() / 3;
    std::vector<int64_t> pvi;
    TESSERA_RETURN_IF_ERROR(read_ints(*index_prop, what + " PolygonVertexIndex", &pvi));

    Mesh& m = piece->mesh;
    m.positions.resize(vertices.size());
    for (size_t i = 0; i < vertices.size(); ++i) {
      if (!std::isfinite(vertices[i]) || std::fabs(vertices[i]) > 3.0e38) {
        return fail(what + ": vertex " + std::to_string(i / 3) + " is not finite");
      }
      m.positions[i] = static_cast<float>(vertices[i]);
    }

    // Polygons, fan-triangulated: each triangle corner as its position k in PolygonVertexIndex
    // (4 bytes per corner: a file of a few kB can describe millions of corners).
    std::vector<uint32_t> tri_k;
    uint64_t polygon_start = 0, polygon_count = 0;
    for (uint64_t k = 0; k < pvi.size(); ++k) {
      const int64_t raw = pvi[k];
      const int64_t index = raw < 0 ? ~raw : raw;
      if (static_cast<uint64_t>(index) >= vertex_count) {
        return fail(what + ": PolygonVertexIndex[" + std::to_string(k) +
                    "] = " + std::to_string(raw) + " names vertex " + std::to_string(index) +
                    " of " + std::to_string(vertex_count));
      }
      if (raw < 0) {
        for (uint64_t c = polygon_start + 1; c + 1 <= k; ++c) {
          tri_k.insert(tri_k.end(), {static_cast<uint32_t>(polygon_start), static_cast<uint32_t>(c),
                                     static_cast<uint32_t>(c + 1)});
        }
        polygon_start = k + 1;
        ++polygon_count;
      }
    }
    if (polygon_start != pvi.size()) {
      return fail(what +
                  ": the last polygon of PolygonVertexIndex is not closed (no negative "
                  "index ends it)");
    }
    if (vertex_count > 0xFFFFFFFFull) return fail(what + ": more than 2^32 vertices");

    // uvs: the first LayerElementUV (index 0 when present).
    const Node* layer = nullptr;
    for (const Node& c : g.children) {
      if (c.name != "LayerElementUV") continue;
      if (layer == nullptr) layer = &c;
      if (!c.props.empty() && as_int(c.props[0]) == 0) {
        layer = &c;
        break;
      }
    }
    const auto vertex_at = [&](uint32_t k) {
      const int64_t raw = pvi[k];
      return static_cast<uint32_t>(raw < 0 ? ~raw : raw);
    };
    if (layer != nullptr) {
      std::vector<import_detail::UvCorner> uv_corners(tri_k.size());
      for (size_t i = 0; i < tri_k.size(); ++i) uv_corners[i].vertex = vertex_at(tri_k[i]);
      std::vector<float> uv_table;
      const std::string problem = read_uv_layer(*layer, what, tri_k, pvi, vertex_count,
                                                polygon_count, uv_table, uv_corners);
      if (problem.empty()) {
        piece->had_uv_layer = true;
        tri_k = {};
        pvi = {};
        return import_detail::assign_corner_uvs(uv_corners, uv_table, name(), &m);
      }
      warn(what + ": " + problem + "; the mesh is shown without its texture");
    }
    m.triangles.resize(tri_k.size());
    for (size_t i = 0; i < tri_k.size(); ++i) m.triangles[i] = vertex_at(tri_k[i]);
    return Status();
  }

  // Fills uv_table and each corner's uv index from a LayerElementUV (`tri_k`: each triangle
  // corner's position in `pvi`, the checked PolygonVertexIndex); a non-empty result says what was
  // wrong (a warning: the uvs are dropped, the geometry stays).
  std::string read_uv_layer(const Node& layer, const std::string& what,
                            const std::vector<uint32_t>& tri_k, const std::vector<int64_t>& pvi,
                            uint64_t vertex_count, uint64_t polygon_count,
                            std::vector<float>& uv_table,
                            std::vector<import_detail::UvCorner>& uv_corners) {
    const uint64_t pvi_count = pvi.size();
    const std::string_view mapping = child_string(layer, "MappingInformationType");
    const std::string_view reference = child_string(layer, "ReferenceInformationType");
    const Property* uv_prop = array_child(layer, "UV");
    if (uv_prop == nullptr) return "LayerElementUV has no UV array";
    std::vector<double> uv;
    if (Status st = read_doubles(*uv_prop, what + " UV", &uv); !st.ok()) return st.message();
    if (uv.size() % 2 != 0) return "the UV array has an odd number of values";
    uint64_t mapped_count = 0;
    int mode = 0;  // 0 per corner, 1 per vertex, 2 per polygon, 3 all same
    if (mapping == "ByPolygonVertex") {
      mapped_count = pvi_count;
    } else if (mapping == "ByVertice" || mapping == "ByVertex" || mapping == "ByControlPoint") {
      mode = 1;
      mapped_count = vertex_count;
    } else if (mapping == "ByPolygon") {
      mode = 2;
      mapped_count = polygon_count;
    } else if (mapping == "AllSame") {
      mode = 3;
      mapped_count = 1;
    } else {
      return "uv mapping '" + std::string(mapping) + "' is not read";
    }
    std::vector<int64_t> index;
    const bool indexed = reference == "IndexToDirect" || reference == "Index";
    if (indexed) {
      const Property* index_prop = array_child(layer, "UVIndex");
      if (index_prop == nullptr) return "IndexToDirect uvs without a UVIndex array";
      if (Status st = read_ints(*index_prop, what + " UVIndex", &index); !st.ok()) {
        return st.message();
      }
      if (index.size() < mapped_count) {
        return "UVIndex has " + std::to_string(index.size()) + " entries for " +
               std::to_string(mapped_count) + " mapped elements";
      }
    } else if (reference != "Direct") {
      return "uv reference '" + std::string(reference) + "' is not read";
    }
    const uint64_t uv_count = uv.size() / 2;
    // Polygon of each PolygonVertexIndex position, only for the ByPolygon mapping.
    std::vector<uint32_t> polygon_of_k;
    if (mode == 2) {
      polygon_of_k.resize(pvi_count);
      uint32_t polygon = 0;
      for (size_t k = 0; k < pvi_count; ++k) {
        polygon_of_k[k] = polygon;
        if (pvi[k] < 0) ++polygon;
      }
    }
    for (size_t i = 0; i < tri_k.size(); ++i) {
      const uint64_t k = tri_k[i];
      const uint64_t v = static_cast<uint64_t>(pvi[k] < 0 ? ~pvi[k] : pvi[k]);
      const uint64_t m = mode == 0 ? k : mode == 1 ? v : mode == 2 ? polygon_of_k[k] : 0;
      int64_t u = static_cast<int64_t>(m);
      if (indexed) {
        u = index[m];
        if (u == -1) continue;  // no uv for this corner
      }
      if (u < 0 || static_cast<uint64_t>(u) >= uv_count) {
        return "uv " + std::to_string(u) + " of corner " + std::to_string(k) +
               " is out of range for " + std::to_string(uv_count) + " uvs";
      }
      uv_corners[i].uv = u;
    }
    uv_table.resize(uv.size());
    for (size_t i = 0; i < uv.size(); ++i) {
      if (!std::isfinite(uv[i])) return "a uv is not finite";
      uv_table[i] = static_cast<float>(uv[i]);
    }
    return std::string();
  }

  // GlobalSettings' up axis as a rotation that takes it to +Y (identity for +Y or when absent).
  void apply_up_axis(Mesh& mesh) const {
    const Node* settings = root().child("GlobalSettings");
    if (settings == nullptr) return;
    const int64_t axis = p_int(*settings, "UpAxis").value_or(1);
    const int64_t sign = p_int(*settings, "UpAxisSign").value_or(1) < 0 ? -1 : 1;
    if (axis == 1 && sign == 1) return;
    if (axis < 0 || axis > 2) return;
    for (size_t i = 0; i + 2 < mesh.positions.size(); i += 3) {
      const float x = mesh.positions[i], y = mesh.positions[i + 1], z = mesh.positions[i + 2];
      float nx = x, ny = y, nz = z;
      if (axis == 2 && sign == 1) {  // +Z up: -90 degrees about X
        ny = z;
        nz = -y;
      } else if (axis == 2) {  // -Z up: +90 degrees about X
        ny = -z;
        nz = y;
      } else if (axis == 1) {  // -Y up: 180 degrees about X
        ny = -y;
        nz = -z;
      } else if (sign == 1) {  // +X up: +90 degrees about Z
        nx = -y;
        ny = x;
      } else {  // -X up: -90 degrees about Z
        nx = y;
        ny = -x;
      }
      mesh.positions[i] = nx;
      mesh.positions[i + 1] = ny;
      mesh.positions[i + 2] = nz;
    }
  }

  Expected<Mesh> build_mesh() {
    index_objects();
    Mesh out;
    bool all_uvs = true, any_uvs = false;
    uint64_t instanced = 0;
    bool dropped = false;
    for (const auto& [id, node] : geometries_) {
      std::vector<int64_t> owners;
      auto range = parents_.equal_range(id);
      for (auto p = range.first; p != range.second; ++p) {
        if (models_.count(p->second.first)) owners.push_back(p->second.first);
      }
      if (owners.empty()) owners.push_back(0);  // not placed by a Model: as stored
      Piece piece;
      TESSERA_RETURN_IF_ERROR(read_geometry(*node, &piece));
      if (piece.mesh.triangles.empty()) continue;
      const std::string what = "Geometry at byte " + std::to_string(node->offset);
      for (size_t o = 0; o < owners.size(); ++o) {
        if (o > 0) {
          instanced += piece.mesh.triangles.size() / 3;
          if (instanced > kMaxInstancedTriangles) {
            if (!dropped) {
              warn(
                  "geometries instanced by several Models add more than 2^22 triangles; further "
                  "instances are not shown");
            }
            dropped = true;
            break;
          }
        }
        const bool has_uvs = !piece.mesh.uvs.empty();
        any_uvs = any_uvs || has_uvs;
        all_uvs = all_uvs && has_uvs;
        const uint64_t base = out.positions.size() / 3;
        if (base + piece.mesh.positions.size() / 3 > 0xFFFFFFFFull) {
          return fail("more than 2^32 vertices in all geometries");
        }
        const Mat transform = owners[o] == 0 ? identity() : model_world(owners[o]);
        const std::vector<float>& local = piece.mesh.positions;
        out.positions.reserve(out.positions.size() + local.size());
        for (size_t v = 0; v + 2 < local.size(); v += 3) {
          float world[3];
          if (!import_detail::transform_point(transform, local[v], local[v + 1], local[v + 2],
                                              world)) {
            return fail(what + ": vertex " + std::to_string(v / 3) +
                        " is not finite once its Model's transform is applied");
          }
          out.positions.insert(out.positions.end(), world, world + 3);
        }
        if (has_uvs) {
          out.uvs.insert(out.uvs.end(), piece.mesh.uvs.begin(), piece.mesh.uvs.end());
        }
        out.triangles.reserve(out.triangles.size() + piece.mesh.triangles.size());
        for (uint32_t t : piece.mesh.triangles) {
          out.triangles.push_back(static_cast<uint32_t>(base + t));
        }
      }
    }
    if (out.triangles.empty()) {
      return Status(ErrorCode::kNotFound, name() + ": no triangles in the FBX file (" +
                                              std::to_string(geometries_.size()) +
                                              " mesh geometries)");
    }
    if (!all_uvs || out.uvs.size() != 2 * out.positions.size() / 3) {
      if (any_uvs) warn("only some geometries have texture coordinates; the texture is not shown");
      out.uvs.clear();
    } else if (!import_detail::uvs_in_unit_range(out.uvs)) {
      warn(
          "texture coordinates outside [0, 1] (tiling) are not supported; the mesh is shown "
          "without its texture");
      out.uvs.clear();
    }
    apply_up_axis(out);
    if (!out.uvs.empty()) attach_texture(out);
    return out;
  }

  // The texture: the one on a material's DiffuseColor (else the first Texture object).
  void attach_texture(Mesh& out) {
    const Node* chosen = nullptr;
    int64_t chosen_id = 0;
    int diffuse_textures = 0;
    for (const auto& [id, node] : textures_) {
      auto range = parents_.equal_range(id);
      for (auto p = range.first; p != range.second; ++p) {
        if (materials_.count(p->second.first) &&
            (p->second.second == "DiffuseColor" || p->second.second == "Maya|baseColor" ||
             p->second.second == "base_color_map")) {
          if (diffuse_textures++ == 0) {
            chosen = node;
            chosen_id = id;
          }
          break;
        }
      }
    }
    if (chosen == nullptr && !textures_.empty()) {
      chosen = textures_.front().second;
      chosen_id = textures_.front().first;
    }
    if (chosen == nullptr) return;
    if (diffuse_textures > 1) warn("several diffuse textures; only the first one is shown");
    const std::string what = "Texture at byte " + std::to_string(chosen->offset);
    // Embedded: a connected Video's Content.
    const Node* video = nullptr;
    for (const auto& [vid, vnode] : videos_) {
      auto range = parents_.equal_range(vid);
      for (auto p = range.first; p != range.second; ++p) {
        if (p->second.first == chosen_id) video = vnode;
      }
    }
    if (video != nullptr) {
      const Node* content = video->child("Content");
      if (content != nullptr && !content->props.empty()) {
        auto bytes = as_string(content->props[0]);
        if (bytes && !bytes->empty()) {
          auto image = import_detail::decode_import_png(*bytes, name() + " embedded texture");
          if (!image.ok()) {
            warn("embedded texture not shown (" + image.status().message() + ")");
            return;
          }
          out.texture = std::move(*image);
          return;
        }
      }
    }
    if (directory_.empty()) return;  // sidecar files are not read
    std::string relative(child_string(*chosen, "RelativeFilename"));
    std::string absolute(child_string(*chosen, "FileName"));
    if (video != nullptr) {
      if (relative.empty()) relative = std::string(child_string(*video, "RelativeFilename"));
      if (absolute.empty()) absolute = std::string(child_string(*video, "Filename"));
    }
    if (relative.empty() && absolute.empty()) {
      warn(what + " names no file; the texture is not shown");
      return;
    }
    std::string path;
    Expected<std::string> bytes =
        relative.empty() ? Expected<std::string>(not_found("none"))
                         : import_detail::read_sidecar(directory_, relative, false, &path);
    if (!bytes.ok() && !absolute.empty()) {
      std::string second;
      Expected<std::string> other =
          import_detail::read_sidecar(directory_, absolute, false, &second);
      if (other.ok() || path.empty()) {
        bytes = std::move(other);
        path = second;
      }
    }
    if (!bytes.ok()) {
      warn("texture " + (path.empty() ? relative + absolute : path) +
           " not loaded, the mesh is shown without it (" + bytes.status().message() + ")");
      return;
    }
    auto image = import_detail::decode_import_png(*bytes, path);
    if (!image.ok()) {
      warn("texture " + path + " not loaded, the mesh is shown without it (" +
           image.status().message() + ")");
      return;
    }
    out.texture = std::move(*image);
  }

  std::vector<std::string>* warnings_;
  const std::string& directory_;
  std::vector<std::pair<int64_t, const Node*>> geometries_;
  std::unordered_map<int64_t, const Node*> models_;
  std::vector<std::pair<int64_t, const Node*>> textures_;
  std::unordered_map<int64_t, const Node*> videos_;
  std::unordered_set<int64_t> materials_;
  // child id -> (parent id, property name for OP links)
  std::unordered_multimap<int64_t, std::pair<int64_t, std::string_view>> parents_;
};

}  // namespace

Expected<std::optional<std::string>> fbx_model_string_property(std::string_view bytes,
                                                               const std::string& name,
                                                               std::string_view property) {
  static const std::string kNoDirectory;  // FbxReader keeps a reference
  return FbxReader(bytes, name, nullptr, kNoDirectory).model_string_property(property);
}

Expected<Mesh> parse_fbx(std::string_view bytes, const std::string& name,
                         std::vector<std::string>* warnings, const std::string& directory) {
  return FbxReader(bytes, name, warnings, directory).read();
}

}  // namespace tessera::mesh
