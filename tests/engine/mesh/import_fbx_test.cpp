// The binary FBX reader (engine/mesh/import.h): our exporter's files round-trip (triangles,
// positions, uvs, the texture beside the file, the up axis), 7400 and 7500 node headers, zlib
// arrays, quads and n-gons, Model transforms; and broken files (truncation, lying EndOffsets and
// array lengths, indices out of range, NaN coordinates, ASCII FBX, garbage) are errors naming the
// file, never a crash or a huge allocation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/mapped_file.h"
#include "engine/mesh/export.h"
#include "engine/mesh/export_fbx.h"
#include "engine/mesh/import.h"
#include "tests/engine/mesh/import_test_util.h"

namespace tessera::mesh {
namespace {

using testing::FbxScene;
using testing::ScratchDir;
using testing::tetrahedron;
using testing::textured_tetrahedron;

void expect_error(const std::string& bytes, ErrorCode code, const std::string& says) {
  auto r = parse_fbx(bytes, "bad.fbx");
  ASSERT_FALSE(r.ok()) << "expected an error saying '" << says << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().message();
  EXPECT_NE(r.status().message().find("bad.fbx"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
}

// A unit quad (0,0,0)-(1,1,0) and a pentagon beside it: 2 + 3 triangles.
FbxScene quad_and_pentagon() {
  FbxScene s;
  s.vertices = {0, 0, 0, 1, 0,   0, 1, 1,   0, 0, 1,   0, 2, 0,
                0, 3, 0, 0, 3.5, 1, 0, 2.5, 2, 0, 1.5, 1, 0};
  s.polygon_vertex_index = {0, 1, 2, ~3, 4, 5, 6, 7, ~8};
  return s;
}

TEST(MeshImportFbx, ExporterRoundTripKeepsTrianglesAndPositions) {
  // A larger, closed mesh as well as the tetrahedron.
  Mesh sphere;
  const int rings = 12, segments = 20;
  for (int r = 0; r <= rings; ++r) {
    for (int s = 0; s < segments; ++s) {
      const double theta = M_PI * r / rings, phi = 2 * M_PI * s / segments;
      sphere.positions.insert(
          sphere.positions.end(),
          {static_cast<float>(std::sin(theta) * std::cos(phi)), static_cast<float>(std::cos(theta)),
           static_cast<float>(std::sin(theta) * std::sin(phi))});
    }
  }
  for (int r = 0; r < rings; ++r) {
    for (int s = 0; s < segments; ++s) {
      const uint32_t a = r * segments + s, b = r * segments + (s + 1) % segments;
      sphere.triangles.insert(sphere.triangles.end(),
                              {a, b + segments, b, a, a + segments, b + segments});
    }
  }
  for (const Mesh& original : {tetrahedron(), sphere}) {
    auto fbx = to_fbx(original);
    ASSERT_TRUE(fbx.ok()) << fbx.status().to_string();
    std::vector<std::string> warnings;
    auto m = parse_fbx(*fbx, "rt.fbx", &warnings);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_TRUE(warnings.empty()) << warnings.front();
    EXPECT_EQ(m->triangles, original.triangles);
    ASSERT_EQ(m->positions.size(), original.positions.size());
    for (size_t i = 0; i < original.positions.size(); ++i) {
      ASSERT_NEAR(m->positions[i], original.positions[i], 1e-6) << i;
    }
    EXPECT_TRUE(m->uvs.empty());
    EXPECT_TRUE(validate(*m).ok());
  }
}

TEST(MeshImportFbx, ZUpExportComesBackYUp) {
  const Mesh original = tetrahedron();
  ExportOptions options;
  options.up_axis = UpAxis::kZ;
  options.scale = 2.0f;
  auto fbx = to_fbx(original, options);
  ASSERT_TRUE(fbx.ok());
  auto m = parse_fbx(*fbx, "z.fbx");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->positions.size(), original.positions.size());
  for (size_t i = 0; i < original.positions.size(); ++i) {
    EXPECT_NEAR(m->positions[i], 2.0f * original.positions[i], 1e-6) << i;
  }
  EXPECT_EQ(m->triangles, original.triangles);
}

TEST(MeshImportFbx, TexturedExportRoundTripsUvsAndTextureAndWarnsWhenThePngIsMissing) {
  ScratchDir dir("import-fbx-textured");
  const Mesh original = textured_tetrahedron();
  const std::string path = dir.file("quad.fbx");
  ASSERT_TRUE(write_fbx(original, path).ok());
  std::vector<std::string> warnings;
  auto m = import_mesh_file(path, &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(m->triangles, original.triangles);
  ASSERT_EQ(m->uvs.size(), original.uvs.size());
  for (size_t i = 0; i < original.uvs.size(); ++i) EXPECT_NEAR(m->uvs[i], original.uvs[i], 1e-6);
  EXPECT_EQ(m->texture.width, original.texture.width);
  EXPECT_EQ(m->texture.rgb, original.texture.rgb);
  // The FileName is absolute, the RelativeFilename bare: moving the pair elsewhere still works.
  std::filesystem::create_directories(dir.path() / "moved");
  std::filesystem::rename(dir.path() / "quad.fbx", dir.path() / "moved" / "quad.fbx");
  std::filesystem::rename(dir.path() / "quad_texture.png",
                          dir.path() / "moved" / "quad_texture.png");
  m = import_mesh_file(dir.file("moved/quad.fbx"), &warnings);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->texture.rgb, original.texture.rgb);
  // Without its PNG: the copy embedded in the Video's Content, the same pixels, no warning.
  std::filesystem::remove(dir.path() / "moved" / "quad_texture.png");
  warnings.clear();
  m = import_mesh_file(dir.file("moved/quad.fbx"), &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(m->texture.rgb, original.texture.rgb);
  EXPECT_EQ(m->uvs.size(), original.uvs.size());
  // Asked for one self-contained file: no PNG is written beside it, and the same texture reads.
  ExportOptions inside;
  inside.texture_beside = false;
  const std::string alone = dir.file("alone.fbx");
  ASSERT_TRUE(write_fbx(original, alone, inside).ok());
  EXPECT_FALSE(std::filesystem::exists(texture_path_for(alone)));
  warnings.clear();
  m = import_mesh_file(alone, &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(m->texture.rgb, original.texture.rgb);
}

TEST(MeshImportFbx, Version7500ZlibArraysQuadsAndNgons) {
  for (uint32_t version : {7400u, 7500u, 7700u}) {
    for (bool compress : {false, true}) {
      SCOPED_TRACE(std::to_string(version) + (compress ? " zlib" : " raw"));
      FbxScene s = quad_and_pentagon();
      s.compress = compress;
      auto m = parse_fbx(s.bytes(version), "v.fbx");
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      EXPECT_EQ(m->vertex_count(), 9);
      // Fans: (0,1,2) (0,2,3) then (4,5,6) (4,6,7) (4,7,8).
      EXPECT_EQ(m->triangles, (std::vector<uint32_t>{0, 1, 2, 0, 2, 3, 4, 5, 6, 4, 6, 7, 4, 7, 8}));
      EXPECT_FLOAT_EQ(m->positions[3 * 6], 3.5f);
    }
  }
  // A 7500 file read with 32-bit headers (or the reverse) does not parse.
  FbxScene s = quad_and_pentagon();
  std::string wrong = s.bytes(7500);
  const uint32_t v7400 = 7400;
  std::memcpy(wrong.data() + 23, &v7400, 4);
  EXPECT_FALSE(parse_fbx(wrong, "wrong.fbx").ok());
}

TEST(MeshImportFbx, ModelTransformAndUvLayers) {
  FbxScene s = quad_and_pentagon();
  s.translation[0] = 10;
  s.rotation[2] = 90;  // about Z: (x, y) -> (-y, x)
  s.scaling[0] = 2;
  auto m = parse_fbx(s.bytes(), "t.fbx");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // Vertex 1 (1, 0, 0): scaled (2, 0, 0), rotated (0, 2, 0), translated (10, 2, 0).
  EXPECT_NEAR(m->positions[3], 10.0f, 1e-5);
  EXPECT_NEAR(m->positions[4], 2.0f, 1e-5);
  EXPECT_NEAR(m->positions[5], 0.0f, 1e-5);

  // IndexToDirect per corner with a seam: the pentagon starts at vertex 2 (instead of 4) with
  // another uv than the quad gives it, so vertex 2 is split (a copy, vertex 9, is appended).
  s = quad_and_pentagon();
  s.polygon_vertex_index = {0, 1, 2, ~3, 2, 5, 6, 7, ~8};
  s.uv = {0, 0, 1, 0, 1, 1, 0, 1, 0.5, 0.5};
  s.uv_index = {0, 1, 2, 3, 0, 1, 4, 3, 2};
  std::vector<std::string> warnings;
  m = parse_fbx(s.bytes(), "uv.fbx", &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(m->vertex_count(), 10);
  ASSERT_EQ(m->uvs.size(), 20u);
  EXPECT_EQ(m->triangles, (std::vector<uint32_t>{0, 1, 2, 0, 2, 3, 9, 5, 6, 9, 6, 7, 9, 7, 8}));
  EXPECT_EQ(m->uvs[2 * 2], 1.0f);  // vertex 2 keeps the quad's (1, 1)
  EXPECT_EQ(m->uvs[2 * 9], 0.0f);  // its copy has the pentagon's (0, 0)
  EXPECT_EQ(m->uvs[2 * 6], 0.5f);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(m->positions[3 * 9 + c], m->positions[3 * 2 + c]);
  EXPECT_TRUE(validate(*m).ok());
  // ByVertice / Direct.
  s = quad_and_pentagon();
  s.uv_mapping = "ByVertice";
  for (int v = 0; v < 9; ++v) s.uv.insert(s.uv.end(), {v / 8.0, 1 - v / 8.0});
  m = parse_fbx(s.bytes(), "uv.fbx");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->vertex_count(), 9);
  EXPECT_FLOAT_EQ(m->uvs[2 * 8], 1.0f);
  // A bad uv layer is a warning: the geometry stays, without uvs.
  s.uv_index = std::vector<int32_t>(9, 77);
  warnings.clear();
  m = parse_fbx(s.bytes(), "baduv.fbx", &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->uvs.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("out of range"), std::string::npos) << warnings[0];
}

TEST(MeshImportFbx, BrokenFilesAreErrorsNamingTheFault) {
  expect_error("", ErrorCode::kInvalidArgument, "no \"Kaydara FBX Binary\" magic");
  expect_error("hello, this is not an fbx", ErrorCode::kInvalidArgument, "magic");
  expect_error("; FBX 7.4.0 project file\nFBXHeaderExtension:  {\n}\n", ErrorCode::kUnsupported,
               "ASCII FBX");
  expect_error(std::string("Kaydara FBX Binary  \0\x1a\0", 23), ErrorCode::kCorruptData,
               "truncated");
  FbxScene s = quad_and_pentagon();
  const std::string good = s.bytes();
  // Every truncation (the footer aside) is an error; the reader requires the closing NULL record.
  const size_t content = good.size() - 160;
  for (size_t n = 0; n < content; ++n) {
    auto r = parse_fbx(good.substr(0, n), "cut.fbx");
    ASSERT_FALSE(r.ok()) << "truncated at " << n;
    EXPECT_NE(r.status().message().find("cut.fbx"), std::string::npos);
  }
  {  // NaN coordinate; index out of range; polygon never closed
    FbxScene b = quad_and_pentagon();
    b.vertices[4] = std::nan("");
    expect_error(b.bytes(), ErrorCode::kCorruptData, "not finite");
    b = quad_and_pentagon();
    b.vertices[0] = INFINITY;
    expect_error(b.bytes(7500), ErrorCode::kCorruptData, "not finite");
    b = quad_and_pentagon();
    b.polygon_vertex_index[2] = 9;
    expect_error(b.bytes(), ErrorCode::kCorruptData, "names vertex 9 of 9");
    b.polygon_vertex_index[2] = ~40;
    expect_error(b.bytes(), ErrorCode::kCorruptData, "names vertex 40 of 9");
    b = quad_and_pentagon();
    b.polygon_vertex_index.back() = 8;
    expect_error(b.bytes(), ErrorCode::kCorruptData, "not closed");
    b = quad_and_pentagon();
    b.vertices.pop_back();
    expect_error(b.bytes(), ErrorCode::kCorruptData, "not a multiple of 3");
  }
  // Arrays claiming more than the file holds: raw count vs stored bytes, and a zlib array whose
  // count no compressed stream of its size could reach (no allocation is attempted).
  for (bool compress : {false, true}) {
    FbxScene b = quad_and_pentagon();
    b.compress = compress;
    std::string bytes = b.bytes();
    const size_t vertices = bytes.find("Vertices");
    ASSERT_NE(vertices, std::string::npos);
    const size_t count_at = vertices + 8 + 1;  // name, then the 'd' type code
    const uint32_t claim = 0x7FFFFFFF;
    std::memcpy(bytes.data() + count_at, &claim, 4);
    expect_error(bytes, ErrorCode::kCorruptData,
                 compress ? "compressed bytes can hold" : "are stored");
    // Smaller lie: the zlib stream inflates to fewer bytes than claimed.
    if (compress) {
      const uint32_t small_lie = 28;
      std::memcpy(bytes.data() + count_at, &small_lie, 4);
      expect_error(bytes, ErrorCode::kCorruptData, "does not inflate");
    }
  }
  {  // A lying EndOffset (beyond the file); a stored array length beyond its node.
    std::string bytes = good;
    const uint32_t far = static_cast<uint32_t>(good.size() * 4);
    std::memcpy(bytes.data() + 27, &far, 4);
    expect_error(bytes, ErrorCode::kCorruptData, "EndOffset");
    bytes = good;
    const size_t pvi = bytes.find("PolygonVertexIndex");
    const uint32_t stored = 1u << 30;
    std::memcpy(bytes.data() + pvi + 18 + 1 + 8, &stored, 4);
    expect_error(bytes, ErrorCode::kCorruptData, "more than the property list holds");
  }
  {  // A zlib bomb: a few kB inflating to a 16M-corner polygon is refused before it is decoded.
    FbxScene b;
    b.vertices = {0, 0, 0, 1, 0, 0, 0, 1, 0};
    b.polygon_vertex_index.assign(size_t{1} << 22, 0);
    b.polygon_vertex_index[1] = 1;
    b.polygon_vertex_index.back() = ~2;
    b.compress = true;
    const std::string bomb = b.bytes();
    EXPECT_LT(bomb.size(), 64u * 1024);
    expect_error(bomb, ErrorCode::kCorruptData, "inflate to more than 128 times");
  }
  {  // No geometry at all.
    auto r = parse_fbx(testing::FbxBuilder::serialize({}, 7400), "empty.fbx");
    EXPECT_EQ(r.status().code(), ErrorCode::kNotFound) << r.status().message();
  }
}

TEST(MeshImportFbx, ByteFlipsAndGarbageNeverCrash) {
  ScratchDir dir("import-fbx-flips");
  auto fbx = to_fbx(textured_tetrahedron(), {}, dir.file("t_texture.png"));
  ASSERT_TRUE(fbx.ok());
  FbxScene s = quad_and_pentagon();
  s.compress = true;
  s.uv = {0, 0, 1, 0, 1, 1, 0, 1, 0.5, 0.5};
  s.uv_index = {0, 1, 2, 3, 0, 1, 4, 3, 2};
  for (const std::string& good : {*fbx, s.bytes(7500)}) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 1500; ++trial) {
      std::string bad = good;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] = static_cast<char>(rng());
      std::vector<std::string> warnings;
      auto r = parse_fbx(bad, "flip.fbx", &warnings, dir.path().string());
      if (r.ok()) {
        EXPECT_TRUE(validate(*r).ok());
      } else {
        EXPECT_NE(r.status().message().find("flip.fbx"), std::string::npos);
      }
    }
  }
}

}  // namespace
}  // namespace tessera::mesh
