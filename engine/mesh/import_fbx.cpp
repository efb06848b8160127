// Binary FBX 7.x reader (import.h has the contract; the format facts are the project's FBX notes,
// docs/fbx.md, checked against Blender 3.4's importer).
//
// Two passes. First the node tree: every record is checked against the bytes before anything is
// read: a node's EndOffset must lie inside its parent (or the file), its property list inside the
// node and exactly PropertyListLen long, each property inside the list, every child list must end
// with an all-zero NULL record of the version's size, nesting is at most 64 deep, and the top-level
// list must end with its NULL record (so a truncated file is an error). Properties are kept as
// (type, offset) pairs; array payloads are decoded only when the importer uses them. Second, the
// scene: Objects (Geometry, Model, Texture, Video, Material) and Connections.
//
// Arrays: count, encoding, stored length (u32 each, also at 7500). Raw arrays must store exactly
// count * element size bytes; zlib arrays may claim at most what their stored bytes can inflate to
// (zlib's maximum ratio is 1032:1) and must inflate to exactly that size. So no allocation exceeds
// about a thousand times the file, and the importer decodes only the arrays it uses.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/mesh/import.h"
#include "engine/mesh/import_internal.h"

namespace tessera::mesh {
namespace {

constexpr std::string_view kMagic("Kaydara FBX Binary  \0\x1a\0", 23);
constexpr int kMaxDepth = 64;
constexpr uint64_t kZlibMaxRatio = 1032;
// Largest decoded array (zlib's avail_out is 32-bit, and no mesh worth viewing needs more).
constexpr uint64_t kMaxArrayBytes = uint64_t{1} << 31;
// All zlib arrays of a file may inflate to at most 1 MiB + 128 x the file's size.
constexpr uint64_t kDecodeBudgetBase = uint64_t{1} << 20;
constexpr uint64_t kDecodeBudgetRatio = 128;
// Extra triangles a geometry instanced by several Models may add in all.
constexpr uint64_t kMaxInstancedTriangles = uint64_t{1} << 22;

struct Property {
  char type = 0;
  uint64_t offset = 0;  // of the payload, just after the type code
};

struct Node {
  std::string_view name;
  uint64_t offset = 0;  // of the record, for messages
  std::vector<Property> props;
  std::vector<Node> children;

  const Node* child(std::string_view n) const {
    for (const Node& c : children) {
      if (c.name == n) return &c;
    }
    return nullptr;
  }
};

class FbxReader {
 public:
  FbxReader(std::string_view bytes, const std::string& name, std::vector<std::string>* warnings,
            const std::string& directory)
      : d_(bytes), name_(name), warnings_(warnings), directory_(directory) {}

  Expected<Mesh> read() {
    TESSERA_RETURN_IF_ERROR(check_header());
    TESSERA_RETURN_IF_ERROR(parse_tree());
    return build_mesh();
  }

  // The string value of Properties70 P `property` of the first Model that has one.
  Expected<std::optional<std::string>> model_string_property(std::string_view property) {
    TESSERA_RETURN_IF_ERROR(check_header());
    TESSERA_RETURN_IF_ERROR(parse_tree());
    const Node* objects = root_.child("Objects");
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
  Status fail(const std::string& what) const { return corrupt_data(name_ + ": " + what); }
  void warn(const std::string& what) { import_detail::warn(warnings_, name_ + ": " + what); }

  uint64_t le(uint64_t at, int n) const {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(d_[at + i]);
    return v;
  }

  // ---- the node tree ---------------------------------------------------------------------------

  Status check_header() {
    if (d_.size() < kMagic.size() + 4 || d_.substr(0, kMagic.size()) != kMagic) {
      const std::string_view head = d_.substr(0, std::min<size_t>(d_.size(), 4096));
      if (head.find('\0') == std::string_view::npos &&
          (head.find("FBXHeaderExtension") != std::string_view::npos ||
           head.find("; FBX") != std::string_view::npos)) {
        return unsupported(
            name_ + ": an ASCII FBX file; only binary FBX is read (export it as binary FBX)");
      }
      if (d_.substr(0, std::min<size_t>(d_.size(), 18)) == kMagic.substr(0, 18) &&
          d_.size() < kMagic.size() + 4) {
        return fail("truncated in the file header (" + std::to_string(d_.size()) + " bytes)");
      }
      return invalid_argument(name_ + ": not a binary FBX file (no \"Kaydara FBX Binary\" magic)");
    }
    version_ = static_cast<uint32_t>(le(23, 4));
    if (version_ < 7000) {
      return unsupported(name_ + ": FBX version " + std::to_string(version_) +
                         " is older than 7.0 and not read");
    }
    if (version_ > 20000) {
      return fail("implausible FBX version " + std::to_string(version_));
    }
    wide_ = version_ >= 7500;
    header_bytes_ = wide_ ? 25 : 13;
    return Status();
  }

  Status parse_tree() {
    uint64_t pos = kMagic.size() + 4;
    for (;;) {
      if (d_.size() - pos < header_bytes_) {
        return fail(
            "truncated: the top-level node list has no closing NULL record (file ends at "
            "byte " +
            std::to_string(d_.size()) + ")");
      }
      Node node;
      bool is_null = false;
      TESSERA_RETURN_IF_ERROR(read_node(pos, d_.size(), 0, &node, &is_null));
      if (is_null) break;
      root_.children.push_back(std::move(node));
    }
    return Status();
  }

  // Reads the record at `pos` (which must end by `limit`), advancing `pos` past it.
  Status read_node(uint64_t& pos, uint64_t limit, int depth, Node* node, bool* is_null) {
    if (depth > kMaxDepth)
      return fail("nodes nested deeper than 64 at byte " + std::to_string(pos));
    const uint64_t start = pos;
    if (limit < pos || limit - pos < header_bytes_) {
      return fail("truncated node header at byte " + std::to_string(pos));
    }
    const int w = wide_ ? 8 : 4;
    const uint64_t end = le(pos, w), num_props = le(pos + w, w), prop_len = le(pos + 2 * w, w);
    const uint64_t name_len = static_cast<unsigned char>(d_[pos + 3 * w]);
    pos += header_bytes_;
    if (end == 0) {
      if (num_props != 0 || prop_len != 0 || name_len != 0) {
        return fail("node at byte " + std::to_string(start) +
                    " has EndOffset 0 but is not an all-zero NULL record");
      }
      *is_null = true;
      return Status();
    }
    const std::string where = "node at byte " + std::to_string(start);
    if (end > limit || end < pos + name_len) {
      return fail(where + ": EndOffset " + std::to_string(end) + " lies outside " +
                  std::to_string(pos + name_len) + ".." + std::to_string(limit) +
                  " (truncated, or a lying length)");
    }
    node->offset = start;
    node->name = d_.substr(pos, name_len);
    pos += name_len;
    const std::string what = where + " ('" + std::string(node->name) + "')";
    if (prop_len > end - pos) {
      return fail(what + ": property list of " + std::to_string(prop_len) +
                  " bytes runs past the node's end");
    }
    if (num_props > prop_len / 2) {  // the smallest property ('C') takes 2 bytes
      return fail(what + ": " + std::to_string(num_props) + " properties cannot fit in " +
                  std::to_string(prop_len) + " bytes");
    }
    const uint64_t props_end = pos + prop_len;
    node->props.reserve(num_props);
    for (uint64_t i = 0; i < num_props; ++i) {
      Property p;
      TESSERA_RETURN_IF_ERROR(read_property(pos, props_end, what, &p));
      node->props.push_back(p);
    }
    if (pos != props_end) {
      return fail(what + ": its properties take " + std::to_string(pos - (props_end - prop_len)) +
                  " bytes, not the " + std::to_string(prop_len) + " PropertyListLen says");
    }
    if (pos == end) return Status();  // a leaf without a NULL record
    if (end - pos < header_bytes_) {
      return fail(what + ": " + std::to_string(end - pos) +
                  " bytes after the properties are too few for the closing NULL record");
    }
    while (end - pos > header_bytes_) {
      Node child;
      bool child_null = false;
      TESSERA_RETURN_IF_ERROR(read_node(pos, end - header_bytes_, depth + 1, &child, &child_null));
      if (child_null) {
        return fail(what + ": a NULL record at byte " + std::to_string(pos - header_bytes_) +
                    " before the end of its child list");
      }
      node->children.push_back(std::move(child));
    }
    if (end - pos != header_bytes_) {
      return fail(what + ": its children end " + std::to_string(pos) + " past its EndOffset");
    }
    for (uint64_t i = pos; i < end; ++i) {
      if (d_[i] != 0) {
        return fail(what + ": the child list does not end with a NULL record (nonzero byte at " +
                    std::to_string(i) + ")");
      }
    }
    pos = end;
    return Status();
  }

  Status read_property(uint64_t& pos, uint64_t limit, const std::string& what, Property* p) {
    if (pos >= limit) return fail(what + ": property list truncated");
    p->type = d_[pos];
    p->offset = pos + 1;
    const uint64_t avail = limit - pos - 1;
    uint64_t size = 0;
    switch (p->type) {
      case 'Y':
        size = 2;
        break;
      case 'C':
        size = 1;
        break;
      case 'I':
      case 'F':
        size = 4;
        break;
      case 'D':
      case 'L':
        size = 8;
        break;
      case 'S':
      case 'R':
        if (avail < 4) return fail(what + ": string property truncated");
        size = 4 + le(p->offset, 4);
        break;
      case 'f':
      case 'd':
      case 'l':
      case 'i':
      case 'b':
      case 'c':
        if (avail < 12) return fail(what + ": array property header truncated");
        size = 12 + le(p->offset + 8, 4);
        break;
      default: {
        const auto code = static_cast<unsigned char>(p->type);
        return fail(what + ": unknown property type code " + std::to_string(code) + " at byte " +
                    std::to_string(pos));
      }
    }
    if (size > avail) {
      return fail(what + ": property '" + std::string(1, p->type) + "' at byte " +
                  std::to_string(pos) + " needs " + std::to_string(size) +
                  " bytes, more than the property list holds");
    }
    pos = p->offset + size;
    return Status();
  }

  // ---- property values -------------------------------------------------------------------------

  std::optional<int64_t> as_int(const Property& p) const {
    switch (p.type) {
      case 'Y':
        return static_cast<int16_t>(le(p.offset, 2));
      case 'C':
        return static_cast<int64_t>(le(p.offset, 1));
      case 'I':
        return static_cast<int32_t>(le(p.offset, 4));
      case 'L':
        return static_cast<int64_t>(le(p.offset, 8));
      default:
        return std::nullopt;
    }
  }
  std::optional<double> as_number(const Property& p) const {
    if (p.type == 'F') {
      float f;
      std::memcpy(&f, d_.data() + p.offset, 4);
      return f;
    }
    if (p.type == 'D') {
      double v;
      std::memcpy(&v, d_.data() + p.offset, 8);
      return v;
    }
    if (auto i = as_int(p)) return static_cast<double>(*i);
    return std::nullopt;
  }
  std::optional<std::string_view> as_string(const Property& p) const {
    if (p.type != 'S' && p.type != 'R') return std::nullopt;
    return d_.substr(p.offset + 4, le(p.offset, 4));
  }
  // The first property of `node`'s child `child` as a string ("" when absent or not a string).
  std::string_view child_string(const Node& node, std::string_view child) const {
    const Node* c = node.child(child);
    if (c == nullptr || c->props.empty()) return {};
    return as_string(c->props[0]).value_or(std::string_view());
  }
  std::optional<int64_t> object_id(const Node& node) const {
    if (node.props.empty() || node.props[0].type != 'L') return std::nullopt;
    return as_int(node.props[0]);
  }

  // Decodes an array property into raw little-endian bytes (checked as described at the top).
  Status array_bytes(const Property& p, const std::string& what, std::string* out, uint64_t* count,
                     size_t* element) {
    size_t elem = 0;
    switch (p.type) {
      case 'f':
      case 'i':
        elem = 4;
        break;
      case 'd':
      case 'l':
        elem = 8;
        break;
      case 'b':
      case 'c':
        elem = 1;
        break;
      default:
        return fail(what + " is not an array (property type '" + std::string(1, p.type) + "')");
    }
    const uint64_t n = le(p.offset, 4), encoding = le(p.offset + 4, 4),
                   stored = le(p.offset + 8, 4);
    const uint64_t raw = n * elem;  // n < 2^32: no overflow
    const std::string_view data = d_.substr(p.offset + 12, stored);
    if (encoding == 0) {
      if (stored != raw) {
        return fail(what + ": " + std::to_string(n) + " elements need " + std::to_string(raw) +
                    " bytes but " + std::to_string(stored) + " are stored");
      }
      out->assign(data);
    } else if (encoding == 1) {
      if (raw > stored * kZlibMaxRatio + 64) {
        return fail(what + ": claims " + std::to_string(n) + " elements (" + std::to_string(raw) +
                    " bytes), more than its " + std::to_string(stored) +
                    " compressed bytes can hold");
      }
      // Real FBX arrays compress a few times; a stream that inflates a thousandfold is a bomb,
      // and its output (millions of fan triangles from a few kB) is not a mesh to wait for.
      decoded_bytes_ += raw;
      if (decoded_bytes_ > kDecodeBudgetBase + kDecodeBudgetRatio * d_.size()) {
        return fail(what + ": the file's compressed arrays inflate to more than " +
                    std::to_string(kDecodeBudgetRatio) + " times its size (" +
                    std::to_string(decoded_bytes_) + " bytes so far)");
      }
      if (raw > kMaxArrayBytes) {
        return fail(what + ": an array of " + std::to_string(raw) + " bytes is larger than the " +
                    std::to_string(kMaxArrayBytes >> 20) + " MiB this reader accepts");
      }
      out->assign(raw, '\0');
      z_stream zs{};
      if (inflateInit(&zs) != Z_OK) return fail(what + ": zlib initialisation failed");
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
      zs.avail_in = static_cast<uInt>(data.size());
      zs.next_out = reinterpret_cast<Bytef*>(out->data());
      zs.avail_out = static_cast<uInt>(raw);
      const int rc = inflate(&zs, Z_FINISH);
      const uint64_t produced = zs.total_out;
      inflateEnd(&zs);
      if (rc != Z_STREAM_END || produced != raw) {
        return fail(what + ": the zlib data does not inflate to the " + std::to_string(raw) +
                    " bytes of " + std::to_string(n) + " elements (" +
                    (rc == Z_STREAM_END ? "it holds " + std::to_string(produced)
                                        : std::string(rc == Z_BUF_ERROR ? "more or truncated data"
                                                                        : "corrupt stream")) +
                    ")");
      }
    } else {
      return fail(what + ": unknown array encoding " + std::to_string(encoding));
    }
    *count = n;
    *element = elem;
    return Status();
  }

  Status read_doubles(const Property& p, const std::string& what, std::vector<double>* out) {
    std::string raw;
    uint64_t n = 0;
    size_t elem = 0;
    TESSERA_RETURN_IF_ERROR(array_bytes(p, what, &raw, &n, &elem));
    if (p.type != 'd' && p.type != 'f') return fail(what + " is not a float or double array");
    out->resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      if (elem == 8) {
        std::memcpy(&(*out)[i], raw.data() + 8 * i, 8);
      } else {
        float f;
        std::memcpy(&f, raw.data() + 4 * i, 4);
        (*out)[i] = f;
      }
    }
    return Status();
  }

  Status read_ints(const Property& p, const std::string& what, std::vector<int64_t>* out) {
    std::string raw;
    uint64_t n = 0;
    size_t elem = 0;
    TESSERA_RETURN_IF_ERROR(array_bytes(p, what, &raw, &n, &elem));
    if (p.type != 'i' && p.type != 'l') return fail(what + " is not an integer array");
    out->resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      if (elem == 8) {
        int64_t v;
        std::memcpy(&v, raw.data() + 8 * i, 8);
        (*out)[i] = v;
      } else {
        int32_t v;
        std::memcpy(&v, raw.data() + 4 * i, 4);
        (*out)[i] = v;
      }
    }
    return Status();
  }

  // The array in the first property of child `child` of `node`.
  const Property* array_child(const Node& node, std::string_view child) const {
    const Node* c = node.child(child);
    if (c == nullptr || c->props.empty()) return nullptr;
    return &c->props[0];
  }

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
    if (const Node* objects = root_.child("Objects")) {
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
    if (const Node* connections = root_.child("Connections")) {
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
        return import_detail::assign_corner_uvs(uv_corners, uv_table, name_, &m);
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
    const Node* settings = root_.child("GlobalSettings");
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
      return Status(ErrorCode::kNotFound, name_ + ": no triangles in the FBX file (" +
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
          auto image = import_detail::decode_import_png(*bytes, name_ + " embedded texture");
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

  std::string_view d_;
  const std::string& name_;
  std::vector<std::string>* warnings_;
  const std::string& directory_;
  uint32_t version_ = 0;
  bool wide_ = false;
  uint64_t decoded_bytes_ = 0;  // inflated by zlib arrays so far
  uint64_t header_bytes_ = 13;
  Node root_;
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
