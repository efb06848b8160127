// Binary FBX exporter, export options on every format (up axis, scale), OBJ's MTL, and the
// failure paths. The FBX output is parsed by a small reader written here from the spec
// (docs/fbx.md), independent of the writer: it walks every node record, checks each
// EndOffset, NULL sentinel and property record, and rejects anything out of bounds.
#include "engine/mesh/export_fbx.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/export.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {
namespace {

// ---- A minimal binary FBX 7.x reader (test-only) ------------------------------------------------

struct FbxProperty {
  char type = 0;
  int64_t integer = 0;            // Y C I L
  double number = 0;              // F D
  std::string bytes;              // S R
  std::vector<double> doubles;    // d f
  std::vector<int64_t> integers;  // i l b
};

struct FbxNode {
  std::string name;
  std::vector<FbxProperty> props;
  std::vector<FbxNode> children;
  bool had_null_record = false;

  const FbxNode* child(const std::string& n) const {
    for (const FbxNode& c : children) {
      if (c.name == n) return &c;
    }
    return nullptr;
  }
};

struct FbxFile {
  uint32_t version = 0;
  FbxNode root;            // children = top-level nodes
  size_t content_end = 0;  // offset just after the top-level NULL record
};

class FbxReader {
 public:
  explicit FbxReader(const std::string& data) : d_(data) {}

  // Empty string on success, else what was wrong and where.
  std::string parse(FbxFile* out) {
    static const char kMagic[23] = "Kaydara FBX Binary  \0\x1a";
    if (d_.size() < 27 || std::memcmp(d_.data(), kMagic, 23) != 0) return "bad magic";
    out->version = static_cast<uint32_t>(u(23, 4));
    wide_ = out->version >= 7500;
    pos_ = 27;
    for (;;) {
      FbxNode node;
      bool is_null = false;
      std::string err = read_node(&node, &is_null, 0);
      if (!err.empty()) return err;
      if (is_null) break;
      out->root.children.push_back(std::move(node));
    }
    out->content_end = pos_;
    return "";
  }

 private:
  size_t header_bytes() const { return wide_ ? 25 : 13; }
  uint64_t u(size_t at, int n) const {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(d_[at + i]);
    return v;
  }
  bool have(size_t n) const { return pos_ <= d_.size() && d_.size() - pos_ >= n; }

  std::string read_node(FbxNode* node, bool* is_null, int depth) {
    if (depth > 32) return "nesting too deep";
    const size_t start = pos_;
    if (!have(header_bytes())) return "truncated node header at " + std::to_string(pos_);
    const int w = wide_ ? 8 : 4;
    const uint64_t end_offset = u(pos_, w), num_props = u(pos_ + w, w),
                   prop_len = u(pos_ + 2 * w, w);
    const unsigned name_len = static_cast<unsigned char>(d_[pos_ + 3 * w]);
    pos_ += header_bytes();
    if (end_offset == 0) {
      for (size_t i = start; i < pos_; ++i) {
        if (d_[i] != 0) return "NULL record with nonzero bytes at " + std::to_string(start);
      }
      *is_null = true;
      return "";
    }
    if (end_offset > d_.size() || end_offset <= start) {
      return "EndOffset " + std::to_string(end_offset) + " out of range at " +
             std::to_string(start);
    }
    if (!have(name_len)) return "truncated name";
    node->name = d_.substr(pos_, name_len);
    pos_ += name_len;
    const size_t props_start = pos_;
    if (num_props > (end_offset - pos_)) return node->name + ": more properties than bytes";
    for (uint64_t p = 0; p < num_props; ++p) {
      FbxProperty prop;
      std::string err = read_property(&prop, end_offset);
      if (!err.empty()) return node->name + ": " + err;
      node->props.push_back(std::move(prop));
    }
    if (pos_ - props_start != prop_len) return node->name + ": PropertyListLen mismatch";
    if (pos_ < end_offset) {
      if (end_offset - pos_ < header_bytes()) return node->name + ": no room for the NULL record";
      while (pos_ < end_offset - header_bytes()) {
        FbxNode c;
        bool child_null = false;
        std::string err = read_node(&c, &child_null, depth + 1);
        if (!err.empty()) return node->name + "/" + err;
        if (child_null) return node->name + ": NULL record before the end of the child list";
        node->children.push_back(std::move(c));
      }
      for (size_t i = pos_; i < end_offset; ++i) {
        if (d_[i] != 0) return node->name + ": nested block sentinel is not all zero";
      }
      pos_ = end_offset;
      node->had_null_record = true;
    }
    if (pos_ != end_offset) return node->name + ": EndOffset does not match the record's end";
    return "";
  }

  std::string read_property(FbxProperty* p, uint64_t limit) {
    auto need = [&](size_t n) { return pos_ <= limit && limit - pos_ >= n; };
    if (!need(1)) return "truncated property";
    p->type = d_[pos_++];
    auto scalar = [&](int n, bool is_float) -> std::string {
      if (!need(static_cast<size_t>(n))) return "truncated scalar";
      const uint64_t bits = u(pos_, n);
      if (is_float && n == 8) std::memcpy(&p->number, &bits, 8);
      if (is_float && n == 4) {
        float f;
        const uint32_t b32 = static_cast<uint32_t>(bits);
        std::memcpy(&f, &b32, 4);
        p->number = f;
      }
      if (!is_float) {
        // Sign-extend.
        const int shift = 64 - 8 * n;
        p->integer = static_cast<int64_t>(bits << shift) >> shift;
      }
      pos_ += static_cast<size_t>(n);
      return "";
    };
    switch (p->type) {
      case 'Y':
        return scalar(2, false);
      case 'C':
        return scalar(1, false);
      case 'I':
        return scalar(4, false);
      case 'L':
        return scalar(8, false);
      case 'F':
        return scalar(4, true);
      case 'D':
        return scalar(8, true);
      case 'S':
      case 'R': {
        if (!need(4)) return "truncated string length";
        const uint64_t n = u(pos_, 4);
        pos_ += 4;
        if (!need(n)) return "string length " + std::to_string(n) + " past the record";
        p->bytes = d_.substr(pos_, n);
        pos_ += n;
        return "";
      }
      case 'd':
      case 'f':
      case 'l':
      case 'i':
      case 'b': {
        if (!need(12)) return "truncated array header";
        const uint64_t count = u(pos_, 4), encoding = u(pos_ + 4, 4), stored = u(pos_ + 8, 4);
        pos_ += 12;
        const size_t elem = p->type == 'd' || p->type == 'l' ? 8 : p->type == 'b' ? 1 : 4;
        if (encoding != 0)
          return "array encoding " + std::to_string(encoding) + " (writer stores raw)";
        // Checked before any allocation: a huge count cannot make the reader allocate.
        if (stored != count * elem) return "array byte length does not match its count";
        if (!need(stored)) return "array of " + std::to_string(count) + " past the record";
        for (uint64_t k = 0; k < count; ++k) {
          const size_t at = pos_ + k * elem;
          if (p->type == 'd') {
            double v;
            std::memcpy(&v, d_.data() + at, 8);
            p->doubles.push_back(v);
          } else if (p->type == 'f') {
            float v;
            std::memcpy(&v, d_.data() + at, 4);
            p->doubles.push_back(v);
          } else {
            const int shift = 64 - 8 * static_cast<int>(elem);
            p->integers.push_back(static_cast<int64_t>(u(at, static_cast<int>(elem)) << shift) >>
                                  shift);
          }
        }
        pos_ += stored;
        return "";
      }
      default:
        return std::string("unknown property type '") + p->type + "'";
    }
  }

  const std::string& d_;
  size_t pos_ = 0;
  bool wide_ = false;
};

// Properties70 lookup: the P record whose first property is `name`.
const FbxNode* find_p(const FbxNode& props70, const std::string& name) {
  for (const FbxNode& p : props70.children) {
    if (p.name == "P" && !p.props.empty() && p.props[0].bytes == name) return &p;
  }
  return nullptr;
}

// ---- Fixtures
// ------------------------------------------------------------------------------------

// An ellipsoid twice as tall (Y) as wide, so that the up axis shows in the bounds.
Mesh tall_ellipsoid() {
  ExtractionOptions o;
  o.resolution_base = 4;
  auto m = extract_dense(
      [](const float* p, int64_t n, float* out) {
        for (int64_t i = 0; i < n; ++i) {
          const float x = p[3 * i] / 0.4f, y = p[3 * i + 1] / 0.8f, z = p[3 * i + 2] / 0.4f;
          out[i] = 10.0f * (1.0f - std::sqrt(x * x + y * y + z * z));
        }
        return Status();
      },
      o);
  EXPECT_TRUE(m.ok());
  Mesh mesh = std::move(*m);
  EXPECT_TRUE(cleanup(mesh, CleanupOptions()).ok());
  return mesh;
}

class FbxExportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { mesh_ = new Mesh(tall_ellipsoid()); }
  static void TearDownTestSuite() {
    delete mesh_;
    mesh_ = nullptr;
  }
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() /
        ("tessera_fbx_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static FbxFile parse_ok(const std::string& bytes) {
    FbxFile f;
    const std::string err = FbxReader(bytes).parse(&f);
    EXPECT_EQ(err, "");
    return f;
  }

  static Mesh* mesh_;
  std::filesystem::path dir_;
};
Mesh* FbxExportTest::mesh_ = nullptr;

TEST_F(FbxExportTest, FileStructureFollowsTheSpec) {
  const Mesh& mesh = *mesh_;
  ASSERT_GT(mesh.triangle_count(), 500);
  auto bytes = to_fbx(mesh);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  const FbxFile f = parse_ok(*bytes);
  EXPECT_EQ(f.version, 7400u);

  // Footer (FBX SDK layout): 16-byte ID, padding to 16, 4 zeros, version, 120 zeros, magic.
  const std::string& s = *bytes;
  EXPECT_EQ(s.size() % 16, 0u);
  const size_t tail = f.content_end + 16;
  ASSERT_GE(s.size(), tail + 144);
  EXPECT_EQ(s.size() - 144, (tail + 15) / 16 * 16);
  uint32_t footer_version;
  std::memcpy(&footer_version, s.data() + s.size() - 140, 4);
  EXPECT_EQ(footer_version, 7400u);
  static const unsigned char kMagic[16] = {0xf8, 0x5a, 0x8c, 0x6a, 0xde, 0xf5, 0xd9, 0x7e,
                                           0xec, 0xe9, 0x0c, 0xe3, 0x75, 0x8f, 0x29, 0x0b};
  EXPECT_EQ(std::memcmp(s.data() + s.size() - 16, kMagic, 16), 0);

  // The top-level nodes Blender and SDK importers need, in order.
  std::vector<std::string> names;
  for (const FbxNode& n : f.root.children) names.push_back(n.name);
  const std::vector<std::string> expected = {"FBXHeaderExtension",
                                             "FileId",
                                             "CreationTime",
                                             "Creator",
                                             "GlobalSettings",
                                             "Documents",
                                             "References",
                                             "Definitions",
                                             "Objects",
                                             "Connections",
                                             "Takes"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(f.root.child("FBXHeaderExtension")->child("FBXVersion")->props[0].integer, 7400);
  EXPECT_EQ(f.root.child("FileId")->props[0].type, 'R');
  EXPECT_EQ(f.root.child("FileId")->props[0].bytes.size(), 16u);
  // Every node with children ended with a NULL record (the reader checked its bytes).
  std::function<void(const FbxNode&)> check_nulls = [&](const FbxNode& n) {
    if (!n.children.empty()) {
      EXPECT_TRUE(n.had_null_record) << n.name;
    }
    for (const FbxNode& c : n.children) check_nulls(c);
  };
  for (const FbxNode& n : f.root.children) check_nulls(n);

  // Objects: every child starts with L, S, S; the name has exactly one "\0\1" split.
  const FbxNode* objects = f.root.child("Objects");
  ASSERT_NE(objects, nullptr);
  ASSERT_EQ(objects->children.size(), 3u);
  std::vector<int64_t> ids;
  for (const FbxNode& o : objects->children) {
    ASSERT_GE(o.props.size(), 3u) << o.name;
    EXPECT_EQ(o.props[0].type, 'L');
    EXPECT_NE(o.props[0].integer, 0);
    EXPECT_EQ(o.props[1].type, 'S');
    EXPECT_EQ(o.props[2].type, 'S');
    const std::string& nm = o.props[1].bytes;
    const size_t split = nm.find(std::string("\0\x01", 2));
    ASSERT_NE(split, std::string::npos) << o.name;
    EXPECT_EQ(nm.find(std::string("\0\x01", 2), split + 1), std::string::npos);
    EXPECT_EQ(nm.substr(split + 2), o.name);
    ids.push_back(o.props[0].integer);
  }
  const int64_t geometry = ids[0], model = ids[1], material = ids[2];
  EXPECT_EQ(objects->children[0].name, "Geometry");
  EXPECT_EQ(objects->children[1].name, "Model");
  EXPECT_EQ(objects->children[2].name, "Material");

  // Connections: model -> root, geometry -> model, material -> model, all "OO" with L ids.
  std::vector<std::pair<int64_t, int64_t>> links;
  for (const FbxNode& c : f.root.child("Connections")->children) {
    ASSERT_EQ(c.props.size(), 3u);
    EXPECT_EQ(c.props[0].bytes, "OO");
    EXPECT_EQ(c.props[1].type, 'L');
    EXPECT_EQ(c.props[2].type, 'L');
    links.emplace_back(c.props[1].integer, c.props[2].integer);
  }
  const std::vector<std::pair<int64_t, int64_t>> expected_links = {
      {model, 0}, {geometry, model}, {material, model}};
  EXPECT_EQ(links, expected_links);

  // Definitions count the objects.
  const FbxNode* defs = f.root.child("Definitions");
  int64_t total = 0;
  for (const FbxNode& t : defs->children) {
    if (t.name == "ObjectType") total += t.child("Count")->props[0].integer;
  }
  EXPECT_EQ(defs->child("Count")->props[0].integer, total);
}

TEST_F(FbxExportTest, GeometryArraysMatchTheMesh) {
  const Mesh& mesh = *mesh_;
  auto bytes = to_fbx(mesh);
  ASSERT_TRUE(bytes.ok());
  const FbxFile f = parse_ok(*bytes);
  const FbxNode* g = f.root.child("Objects")->child("Geometry");
  ASSERT_NE(g, nullptr);
  const FbxProperty& vertices = g->child("Vertices")->props.at(0);
  ASSERT_EQ(vertices.type, 'd');
  ASSERT_EQ(vertices.doubles.size(), mesh.positions.size());
  for (size_t i = 0; i < vertices.doubles.size(); ++i) {
    ASSERT_EQ(vertices.doubles[i], static_cast<double>(mesh.positions[i]));
  }
  // PolygonVertexIndex: triangles, the third corner stored as ~index (negative).
  const FbxProperty& pvi = g->child("PolygonVertexIndex")->props.at(0);
  ASSERT_EQ(pvi.type, 'i');
  ASSERT_EQ(pvi.integers.size(), mesh.triangles.size());
  for (size_t i = 0; i < pvi.integers.size(); ++i) {
    const int64_t v = pvi.integers[i];
    if (i % 3 == 2) {
      ASSERT_LT(v, 0) << "corner " << i;
      ASSERT_EQ(-v - 1, mesh.triangles[i]);
    } else {
      ASSERT_GE(v, 0) << "corner " << i;
      ASSERT_EQ(v, mesh.triangles[i]);
    }
  }
  // Normals: ByPolygonVertex / Direct, 3 doubles per corner, the corner vertex's normal.
  const FbxNode* ln = g->child("LayerElementNormal");
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->child("MappingInformationType")->props[0].bytes, "ByPolygonVertex");
  EXPECT_EQ(ln->child("ReferenceInformationType")->props[0].bytes, "Direct");
  const FbxProperty& normals = ln->child("Normals")->props.at(0);
  ASSERT_EQ(normals.doubles.size(), 3 * mesh.triangles.size());
  for (size_t c = 0; c < mesh.triangles.size(); ++c) {
    for (size_t d = 0; d < 3; ++d) {
      ASSERT_EQ(normals.doubles[3 * c + d], mesh.normals[3 * mesh.triangles[c] + d]);
    }
  }
  // Layer 0 lists the elements (Assimp and SDK importers look there).
  std::vector<std::string> layer_types;
  for (const FbxNode& e : g->child("Layer")->children) {
    if (e.name == "LayerElement") layer_types.push_back(e.child("Type")->props[0].bytes);
  }
  EXPECT_EQ(layer_types, (std::vector<std::string>{"LayerElementNormal", "LayerElementMaterial"}));

  // Same bytes every time (fixed ids and creation time).
  auto again = to_fbx(mesh);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again == *bytes);
}

TEST_F(FbxExportTest, MeshWithoutNormalsHasNoNormalLayer) {
  Mesh mesh = *mesh_;
  mesh.normals.clear();
  auto bytes = to_fbx(mesh);
  ASSERT_TRUE(bytes.ok());
  const FbxFile f = parse_ok(*bytes);
  const FbxNode* g = f.root.child("Objects")->child("Geometry");
  EXPECT_EQ(g->child("LayerElementNormal"), nullptr);
  EXPECT_NE(g->child("LayerElementMaterial"), nullptr);
}

TEST_F(FbxExportTest, GlobalSettingsDescribeUpAxisAndUnits) {
  for (UpAxis up : {UpAxis::kY, UpAxis::kZ}) {
    ExportOptions options;
    options.up_axis = up;
    options.scale = 2.5f;
    auto bytes = to_fbx(*mesh_, options);
    ASSERT_TRUE(bytes.ok());
    const FbxFile f = parse_ok(*bytes);
    const FbxNode* props = f.root.child("GlobalSettings")->child("Properties70");
    ASSERT_NE(props, nullptr);
    auto int_value = [&](const char* name) {
      const FbxNode* p = find_p(*props, name);
      EXPECT_NE(p, nullptr) << name;
      if (p == nullptr) return int64_t{-99};
      // Blender asserts on the type strings: ("int", "Integer", "") with an I value.
      EXPECT_EQ(p->props.size(), 5u);
      EXPECT_EQ(p->props[1].bytes, "int");
      EXPECT_EQ(p->props[2].bytes, "Integer");
      EXPECT_EQ(p->props[4].type, 'I');
      return p->props[4].integer;
    };
    const bool z = up == UpAxis::kZ;
    EXPECT_EQ(int_value("UpAxis"), z ? 2 : 1);
    EXPECT_EQ(int_value("UpAxisSign"), 1);
    EXPECT_EQ(int_value("FrontAxis"), z ? 1 : 2);
    EXPECT_EQ(int_value("FrontAxisSign"), z ? -1 : 1);
    EXPECT_EQ(int_value("CoordAxis"), 0);
    EXPECT_EQ(int_value("CoordAxisSign"), 1);
    EXPECT_EQ(int_value("OriginalUpAxis"), z ? 2 : 1);
    // Units: the file is in metres whatever the scale (the scale is in the coordinates).
    const FbxNode* unit = find_p(*props, "UnitScaleFactor");
    ASSERT_NE(unit, nullptr);
    EXPECT_EQ(unit->props[1].bytes, "double");
    EXPECT_EQ(unit->props[2].bytes, "Number");
    EXPECT_EQ(unit->props[4].type, 'D');
    EXPECT_EQ(unit->props[4].number, 100.0);
  }
}

// The three formats read back into positions + normals, to check the options the same way.
struct ReadBack {
  std::vector<float> positions, normals;
};

ReadBack read_obj(const std::string& text) {
  ReadBack r;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    float x, y, z;
    if (std::sscanf(line.c_str(), "v %f %f %f", &x, &y, &z) == 3)
      r.positions.insert(r.positions.end(), {x, y, z});
    if (std::sscanf(line.c_str(), "vn %f %f %f", &x, &y, &z) == 3)
      r.normals.insert(r.normals.end(), {x, y, z});
  }
  return r;
}

ReadBack read_glb(const std::string& s) {
  ReadBack r;
  uint32_t json_len;
  std::memcpy(&json_len, s.data() + 12, 4);
  const auto doc = nlohmann::json::parse(s.substr(20, json_len));
  const char* bin = s.data() + 20 + json_len + 8;
  const auto& attrs = doc["meshes"][0]["primitives"][0]["attributes"];
  auto read_attr = [&](const char* name, std::vector<float>* out) {
    const auto& acc = doc["accessors"][attrs[name].get<int>()];
    const auto& view = doc["bufferViews"][acc["bufferView"].get<int>()];
    out->resize(acc["count"].get<size_t>() * 3);
    std::memcpy(out->data(), bin + view["byteOffset"].get<size_t>(), out->size() * 4);
  };
  read_attr("POSITION", &r.positions);
  read_attr("NORMAL", &r.normals);
  return r;
}

ReadBack read_fbx(const std::string& s, const Mesh& mesh) {
  ReadBack r;
  FbxFile f;
  EXPECT_EQ(FbxReader(s).parse(&f), "");
  const FbxNode* g = f.root.child("Objects")->child("Geometry");
  for (double v : g->child("Vertices")->props[0].doubles)
    r.positions.push_back(static_cast<float>(v));
  // Per-corner normals back to per-vertex (the writer copies the vertex normal to each corner).
  const auto& n = g->child("LayerElementNormal")->child("Normals")->props[0].doubles;
  r.normals.resize(mesh.normals.size());
  for (size_t c = 0; c < mesh.triangles.size(); ++c) {
    for (size_t d = 0; d < 3; ++d)
      r.normals[3 * mesh.triangles[c] + d] = static_cast<float>(n[3 * c + d]);
  }
  return r;
}

TEST_F(FbxExportTest, UpAxisAndScaleOnEveryFormat) {
  const Mesh& mesh = *mesh_;
  const float scale = 3.0f;
  for (const char* ext : {".obj", ".glb", ".fbx"}) {
    for (UpAxis up : {UpAxis::kY, UpAxis::kZ}) {
      SCOPED_TRACE(std::string(ext) + " up " + up_axis_name(up));
      ExportOptions options;
      options.up_axis = up;
      options.scale = scale;
      const std::string path = (dir_ / (std::string("m_") + up_axis_name(up) + ext)).string();
      ASSERT_TRUE(write_mesh(mesh, path, options).ok());
      auto bytes = read_file(path);
      ASSERT_TRUE(bytes.ok());
      const std::string e = ext;
      const ReadBack r = e == ".obj"   ? read_obj(*bytes)
                         : e == ".glb" ? read_glb(*bytes)
                                       : read_fbx(*bytes, mesh);
      ASSERT_EQ(r.positions.size(), mesh.positions.size());
      ASSERT_EQ(r.normals.size(), mesh.normals.size());
      const float tol = e == ".obj" ? 2e-5f : 1e-6f;  // OBJ text keeps 7 significant digits
      for (size_t v = 0; v < mesh.positions.size(); v += 3) {
        const float x = mesh.positions[v], y = mesh.positions[v + 1], z = mesh.positions[v + 2];
        // Z-up: +90 degrees about X, (x, y, z) -> (x, -z, y).
        const float ex = x * scale, ey = (up == UpAxis::kZ ? -z : y) * scale,
                    ez = (up == UpAxis::kZ ? y : z) * scale;
        ASSERT_NEAR(r.positions[v], ex, tol * scale);
        ASSERT_NEAR(r.positions[v + 1], ey, tol * scale);
        ASSERT_NEAR(r.positions[v + 2], ez, tol * scale);
        const float nx = mesh.normals[v], ny = mesh.normals[v + 1], nz = mesh.normals[v + 2];
        ASSERT_NEAR(r.normals[v], nx, tol);
        ASSERT_NEAR(r.normals[v + 1], up == UpAxis::kZ ? -nz : ny, tol);
        ASSERT_NEAR(r.normals[v + 2], up == UpAxis::kZ ? ny : nz, tol);
      }
      // The tall axis (Y in the model) ends up on the up axis.
      float lo = 1e9f, hi = -1e9f;
      const size_t up_component = up == UpAxis::kZ ? 2 : 1;
      for (size_t v = up_component; v < r.positions.size(); v += 3) {
        lo = std::min(lo, r.positions[v]);
        hi = std::max(hi, r.positions[v]);
      }
      EXPECT_NEAR(hi - lo, 1.6f * scale, 0.05f * scale);
    }
  }
}

TEST_F(FbxExportTest, ObjComesWithItsMaterialFile) {
  const std::string path = (dir_ / "Artist Mesh.OBJ").string();
  ASSERT_TRUE(write_mesh(*mesh_, path).ok());
  auto obj = read_file(path);
  ASSERT_TRUE(obj.ok());
  EXPECT_NE(obj->find("\nmtllib Artist Mesh.mtl\n"), std::string::npos);
  EXPECT_NE(obj->find(std::string("\nusemtl ") + kObjMaterialName + "\n"), std::string::npos);
  auto mtl = read_file((dir_ / "Artist Mesh.mtl").string());
  ASSERT_TRUE(mtl.ok());
  EXPECT_NE(mtl->find(std::string("newmtl ") + kObjMaterialName), std::string::npos);
  EXPECT_NE(mtl->find("Kd 0.8 0.8 0.8"), std::string::npos);
}

TEST_F(FbxExportTest, ExtensionPicksTheFormat) {
  const std::string path = (dir_ / "UPPER.FBX").string();
  ASSERT_TRUE(write_mesh(*mesh_, path).ok());
  auto bytes = read_file(path);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->compare(0, 18, "Kaydara FBX Binary"), 0);
  EXPECT_TRUE(is_supported_mesh_extension("a.Glb"));
  EXPECT_FALSE(is_supported_mesh_extension("a.ply"));
  EXPECT_FALSE(is_supported_mesh_extension("fbx"));
  const std::string bad = (dir_ / "mesh.ply").string();
  Status st = write_mesh(*mesh_, bad);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find(bad), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(".obj, .glb, .fbx, .stl or .3mf"), std::string::npos) << st.message();
  EXPECT_FALSE(std::filesystem::exists(bad));
}

TEST_F(FbxExportTest, UnwritablePathFailsAndLeavesNoFile) {
  for (const char* ext : {".obj", ".glb", ".fbx"}) {
    const std::filesystem::path path = dir_ / "missing_dir" / (std::string("m") + ext);
    Status st = write_mesh(*mesh_, path.string());
    EXPECT_EQ(st.code(), ErrorCode::kIoError) << ext;
    EXPECT_NE(st.message().find("missing_dir"), std::string::npos) << st.message();
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "missing_dir"));
  // The OBJ's MTL succeeds but the OBJ itself cannot be written (a directory is in the way): the
  // MTL is removed again, nothing is left half-done.
  std::filesystem::create_directories(dir_ / "taken.obj");
  EXPECT_FALSE(write_mesh(*mesh_, (dir_ / "taken.obj").string()).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "taken.mtl"));
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename(), "taken.obj") << "left behind: " << entry.path();
  }
}

TEST_F(FbxExportTest, EmptyOrInvalidMeshIsRejected) {
  Mesh bad_index = *mesh_;
  bad_index.triangles[4] = 1u << 30;
  Mesh nan_position = *mesh_;
  nan_position.positions[7] = std::numeric_limits<float>::quiet_NaN();
  Mesh ragged = *mesh_;
  ragged.triangles.pop_back();
  Mesh empty;
  for (const Mesh* m : {&bad_index, &nan_position, &ragged, &empty}) {
    for (const char* ext : {".obj", ".glb", ".fbx"}) {
      const std::filesystem::path path = dir_ / (std::string("bad") + ext);
      Status st = write_mesh(*m, path.string());
      EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << ext << " " << st.message();
      EXPECT_NE(st.message().find(path.string()), std::string::npos) << st.message();
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(FbxExportTest, BadOptionsAreRejected) {
  for (float scale : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
    ExportOptions options;
    options.scale = scale;
    for (const char* ext : {".obj", ".glb", ".fbx"}) {
      Status st = write_mesh(*mesh_, (dir_ / (std::string("o") + ext)).string(), options);
      EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << scale << ext;
      EXPECT_NE(st.message().find("scale"), std::string::npos) << st.message();
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST(FbxLimits, HugeCountsAreRejectedBeforeAllocating) {
  EXPECT_TRUE(check_fbx_limits(1'000'000, 2'000'000, true).ok());
  // Over int32 vertex indices.
  Status st = check_fbx_limits(int64_t{3} << 30, 10, false);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("int32"), std::string::npos) << st.message();
  // Over the uint32 element count of PolygonVertexIndex.
  st = check_fbx_limits(1000, int64_t{1} << 31, false);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  // Within every count limit but over 4 GiB in total (per-corner normals are 24 bytes each).
  st = check_fbx_limits(10'000'000, 100'000'000, true);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("4 GiB"), std::string::npos) << st.message();
  EXPECT_FALSE(check_fbx_limits(-1, 10, true).ok());
  EXPECT_FALSE(check_fbx_limits(10, std::numeric_limits<int64_t>::max() / 2, true).ok());
}

// The reader above must be able to fail: corrupt a sentinel, an EndOffset and an array length.
TEST_F(FbxExportTest, ReaderDetectsCorruption) {
  auto bytes = to_fbx(*mesh_);
  ASSERT_TRUE(bytes.ok());
  FbxFile ok;
  ASSERT_EQ(FbxReader(*bytes).parse(&ok), "");
  // The first node (FBXHeaderExtension) ends with a 13-byte NULL record just before its EndOffset.
  uint32_t end;
  std::memcpy(&end, bytes->data() + 27, 4);
  {
    std::string s = *bytes;
    s[end - 5] = 1;
    FbxFile f;
    EXPECT_NE(FbxReader(s).parse(&f).find("sentinel"), std::string::npos);
  }
  {
    std::string s = *bytes;
    const uint32_t wrong = end + 1;
    std::memcpy(s.data() + 27, &wrong, 4);
    FbxFile f;
    EXPECT_NE(FbxReader(s).parse(&f), "");
  }
  {
    // A huge element count in the Vertices array header.
    std::string s = *bytes;
    const size_t at = s.find("Vertices");
    ASSERT_NE(at, std::string::npos);
    ASSERT_EQ(s[at + 8], 'd');
    const uint32_t huge = 0x7fffffff;
    std::memcpy(s.data() + at + 9, &huge, 4);
    FbxFile f;
    EXPECT_NE(FbxReader(s).parse(&f).find("does not match its count"), std::string::npos);
  }
}

}  // namespace
}  // namespace tessera::mesh
