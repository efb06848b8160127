// The OBJ reader (engine/mesh/import.h): polygons, negative indices, uv seams, MTL map_Kd textures,
// and every kind of broken file (bad numbers, indices out of range, NaN/Inf, binary data,
// truncation) as an error naming the file and line, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/mapped_file.h"
#include "engine/mesh/export.h"
#include "engine/mesh/import.h"
#include "engine/mesh/texture.h"
#include "tests/engine/mesh/import_test_util.h"

namespace tessera::mesh {
namespace {

using testing::ScratchDir;
using testing::tetrahedron;
using testing::textured_tetrahedron;

TEST(MeshImportObj, PolygonsNegativeIndicesAndComments) {
  const std::string text =
      "# a quad and a triangle\nmtllib x.mtl\nv 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nvt 0 0\n"
      "vn 0 0 1\nf 1/1/1 2/1/1 3/1/1 4/1/1\nv 2 2 2\nf -1 -2 -3\r\n";
  auto m = parse_obj(text, "quad.obj");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->vertex_count(), 5);
  EXPECT_EQ(m->triangles, (std::vector<uint32_t>{0, 1, 2, 0, 2, 3, 4, 3, 2}));
  EXPECT_TRUE(validate(*m).ok());
}

TEST(MeshImportObj, ErrorsNameTheFileAndLine) {
  auto bad_index = parse_obj("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 9\n", "bad.obj");
  EXPECT_EQ(bad_index.status().code(), ErrorCode::kCorruptData);
  EXPECT_NE(bad_index.status().message().find("bad.obj:4"), std::string::npos)
      << bad_index.status().message();
  struct Case {
    const char* text;
    ErrorCode code;
    const char* says;
  };
  const Case cases[] = {
      {"v 0 0\n", ErrorCode::kCorruptData, "three numbers"},
      {"v 0 0 nan\n", ErrorCode::kCorruptData, "not finite"},
      {"v 0 0 inf\nv 1 0 0\nv 0 1 0\nf 1 2 3\n", ErrorCode::kCorruptData, "not finite"},
      {"v 1e39 0 0\n", ErrorCode::kCorruptData, "not finite"},  // overflows float
      {"v abc def ghi\n", ErrorCode::kCorruptData, "three numbers"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\nf -1 -2 -7\n", ErrorCode::kCorruptData, "-7"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 99999999999999999999\n", ErrorCode::kCorruptData,
       "face index"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 0 1 2\n", ErrorCode::kCorruptData, "face index 0"},
      {"f 1 2 3\nv 0 0 0\nv 1 0 0\nv 0 1 0\n", ErrorCode::kCorruptData, "defined so far"},
      {"v 0 0 0\nv 1 0 0\nf 1 2\n", ErrorCode::kCorruptData, "fewer than 3"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 x 3\n", ErrorCode::kCorruptData, "not a number"},
      {"v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nf 1/5 2/1 3/1\n", ErrorCode::kCorruptData, "vt"},
      {"v 0 0 0\n", ErrorCode::kNotFound, "no faces"},
      {"", ErrorCode::kNotFound, "no faces"},
      {"hello, this is not a mesh\n", ErrorCode::kNotFound, "no faces"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto r = parse_obj(c.text, "case.obj");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code);
    EXPECT_NE(r.status().message().find("case.obj"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(parse_obj(std::string("v 0\0 0 0", 9), "bin.obj").status().code(),
            ErrorCode::kCorruptData);
}

TEST(MeshImportObj, EveryTruncationAndByteFlipParsesOrFailsCleanly) {
  const Mesh original = textured_tetrahedron();
  const std::string text = to_obj(original, {}, "t.mtl");
  for (size_t n = 0; n <= text.size(); ++n) {
    std::vector<std::string> warnings;
    auto r = parse_obj(text.substr(0, n), "cut.obj", &warnings);
    if (r.ok()) {
      EXPECT_TRUE(validate(*r).ok()) << "truncated at " << n;
    } else {
      EXPECT_NE(r.status().message().find("cut.obj"), std::string::npos);
    }
  }
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::string bad = text;
    bad[rng() % bad.size()] = static_cast<char>(rng());
    std::vector<std::string> warnings;
    auto r = parse_obj(bad, "flip.obj", &warnings);
    if (r.ok()) {
      EXPECT_TRUE(validate(*r).ok());
    }
  }
}

TEST(MeshImportObj, SplitsVerticesOnUvSeamsAndReadsMapKdOptions) {
  // A quad of two triangles whose shared edge (vertices 1 and 3) carries different uvs on each
  // side: those two vertices are split, the others keep their file index.
  const std::string text =
      "v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\n"
      "vt 0 0\nvt 0.5 0\nvt 0.5 1\nvt 0 1\nvt 0.6 0\nvt 0.6 1\nvt 1 1\n"
      "f 1/1 2/2 4/4\nf 2/5 3/7 4/6\n";
  auto m = parse_obj(text, "seam.obj");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->vertex_count(), 6);
  EXPECT_EQ(m->triangles, (std::vector<uint32_t>{0, 1, 3, 4, 2, 5}));
  EXPECT_EQ(m->uvs, (std::vector<float>{0, 0, 0.5f, 0, 1, 1, 0, 1, 0.6f, 0, 0.6f, 1}));
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(m->positions[3 * 4 + c], m->positions[3 * 1 + c]);
    EXPECT_EQ(m->positions[3 * 5 + c], m->positions[3 * 3 + c]);
  }
  EXPECT_TRUE(validate(*m).ok());
  // Tiling uvs are a warning (uvs dropped).
  std::vector<std::string> warnings;
  auto tiled = parse_obj("v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 4 0\nvt 0 4\nf 1/1 2/2 3/3\n",
                         "tiled.obj", &warnings);
  ASSERT_TRUE(tiled.ok()) << tiled.status().to_string();
  EXPECT_TRUE(tiled->uvs.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("tiled.obj"), std::string::npos);

  // map_Kd with options and a subdirectory, of the material usemtl names.
  ScratchDir dir("import-obj-mtl");
  std::filesystem::create_directories(dir.path() / "tex");
  const Mesh tex = textured_tetrahedron();
  auto png = encode_texture_png(tex.texture);
  ASSERT_TRUE(png.ok());
  ASSERT_TRUE(write_file_atomic(dir.file("tex/skin.png"), png->data(), png->size()).ok());
  const std::string mtl =
      "newmtl other\nmap_Kd missing.png\nnewmtl skin\nKd 1 1 1\nmap_Kd -s 1 1 1 -clamp on "
      "tex\\skin.png\n";
  ASSERT_TRUE(write_file_atomic(dir.file("m.mtl"), mtl.data(), mtl.size()).ok());
  const std::string obj = "mtllib m.mtl\nusemtl skin\n" + text;
  ASSERT_TRUE(write_file_atomic(dir.file("m.obj"), obj.data(), obj.size()).ok());
  warnings.clear();
  auto loaded = import_mesh_file(dir.file("m.obj"), &warnings);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(loaded->texture.rgb, tex.texture.rgb);
}

TEST(MeshImportObj, TexturedExportRoundTripsAndMissingSidecarsAreWarnings) {
  ScratchDir dir("import-obj-textured");
  const Mesh original = textured_tetrahedron();
  ASSERT_TRUE(write_obj(original, dir.file("t.obj")).ok());
  std::vector<std::string> warnings;
  auto m = import_mesh_file(dir.file("t.obj"), &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(m->triangles, original.triangles);
  ASSERT_EQ(m->uvs.size(), original.uvs.size());
  for (size_t i = 0; i < original.uvs.size(); ++i) EXPECT_NEAR(m->uvs[i], original.uvs[i], 1e-6);
  EXPECT_EQ(m->texture.rgb, original.texture.rgb);

  // Without its PNG: geometry and uvs load, the texture is dropped with a warning naming the file.
  std::filesystem::remove(dir.path() / "t_texture.png");
  warnings.clear();
  m = import_mesh_file(dir.file("t.obj"), &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->uvs.size(), 8u);
  EXPECT_TRUE(m->texture.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("t_texture.png"), std::string::npos) << warnings[0];
  // Not a PNG in its place; then a PNG whose header claims 60000 x 60000 pixels: warnings.
  ASSERT_TRUE(write_file_atomic(dir.file("t_texture.png"), "not a png", 9).ok());
  warnings.clear();
  m = import_mesh_file(dir.file("t.obj"), &warnings);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->texture.empty());
  EXPECT_EQ(warnings.size(), 1u);
  auto png = encode_texture_png(original.texture);
  ASSERT_TRUE(png.ok());
  std::string huge = *png;
  for (int k : {16, 20}) {  // IHDR width and height, big-endian
    huge[k] = 0;
    huge[k + 1] = 0;
    huge[k + 2] = static_cast<char>(0xEA);
    huge[k + 3] = 0x60;
  }
  ASSERT_TRUE(write_file_atomic(dir.file("t_texture.png"), huge.data(), huge.size()).ok());
  warnings.clear();
  m = import_mesh_file(dir.file("t.obj"), &warnings);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->texture.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("60000x60000"), std::string::npos) << warnings[0];
  // Without the MTL as well (and no warnings pointer): still fine.
  std::filesystem::remove(dir.path() / "t.mtl");
  m = import_mesh_file(dir.file("t.obj"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->texture.empty());
}

}  // namespace
}  // namespace tessera::mesh
