// Image writers (GIF encoder round-tripped through an independent decoder, PNG structure, contact
// sheets) and the OBJ/GLB readers behind `tessera render` and tessera-view. No GL needed.
#include "ui/render/image.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "engine/core/mapped_file.h"
#include "engine/mesh/export.h"
#include "engine/mesh/texture.h"
#include "tests/ui/gif_decoder.h"
#include "ui/render/mesh_file.h"

namespace tessera::render {
namespace {

Image solid(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  Image img;
  img.width = w;
  img.height = h;
  img.rgba.resize(static_cast<size_t>(w * h * 4));
  for (size_t i = 0; i < img.rgba.size(); i += 4) {
    img.rgba[i] = r;
    img.rgba[i + 1] = g;
    img.rgba[i + 2] = b;
    img.rgba[i + 3] = 255;
  }
  return img;
}

uint8_t level(int l, int levels) {
  return static_cast<uint8_t>((l * 255 + (levels - 1) / 2) / (levels - 1));
}

TEST(GifTest, PaletteColoursRoundTripExactlyThroughManyDictionaryResets) {
  // Random palette colours: LZW compresses poorly, so the 4096-code table fills and is reset many
  // times per frame, and code widths pass through 9..12 bits.
  std::mt19937 rng(7);
  std::vector<Image> frames;
  for (int f = 0; f < 3; ++f) {
    Image img = solid(97, 61, 0, 0, 0);
    for (size_t i = 0; i < img.rgba.size(); i += 4) {
      img.rgba[i] = level(static_cast<int>(rng() % 6), 6);
      img.rgba[i + 1] = level(static_cast<int>(rng() % 7), 7);
      img.rgba[i + 2] = level(static_cast<int>(rng() % 6), 6);
    }
    frames.push_back(img);
  }
  auto bytes = encode_gif(frames, 7);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  const auto gif = testing::decode_gif(*bytes);
  ASSERT_TRUE(gif.error.empty()) << gif.error;
  EXPECT_EQ(gif.width, 97);
  EXPECT_EQ(gif.height, 61);
  EXPECT_TRUE(gif.loops);
  ASSERT_EQ(gif.rgb.size(), 3u);
  for (size_t f = 0; f < 3; ++f) {
    EXPECT_EQ(gif.delays[f], 7);
    for (size_t p = 0; p < static_cast<size_t>(97 * 61); ++p) {
      ASSERT_EQ(gif.rgb[f][3 * p], frames[f].rgba[4 * p]) << "frame " << f << " pixel " << p;
      ASSERT_EQ(gif.rgb[f][3 * p + 1], frames[f].rgba[4 * p + 1])
          << "frame " << f << " pixel " << p;
      ASSERT_EQ(gif.rgb[f][3 * p + 2], frames[f].rgba[4 * p + 2])
          << "frame " << f << " pixel " << p;
    }
  }
}

TEST(GifTest, SmoothColoursDitherWithinOneLevelAndCompress) {
  // A gradient: every decoded channel lies within one palette step of the input, and the
  // average over a 4x4 dither cell stays close to it.
  Image img = solid(128, 64, 0, 0, 0);
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 128; ++x) {
      uint8_t* p = &img.rgba[static_cast<size_t>((y * 128 + x) * 4)];
      p[0] = static_cast<uint8_t>(x * 2);
      p[1] = static_cast<uint8_t>(y * 4);
      p[2] = 200;
    }
  }
  auto bytes = encode_gif({img}, 10);
  ASSERT_TRUE(bytes.ok());
  EXPECT_LT(bytes->size(), 128u * 64u);  // well under one byte per pixel
  const auto gif = testing::decode_gif(*bytes);
  ASSERT_TRUE(gif.error.empty()) << gif.error;
  ASSERT_EQ(gif.rgb.size(), 1u);
  double error_sum = 0;
  for (size_t p = 0; p < 128u * 64u; ++p) {
    for (int c = 0; c < 3; ++c) {
      const int diff = std::abs(gif.rgb[0][3 * p + static_cast<size_t>(c)] -
                                img.rgba[4 * p + static_cast<size_t>(c)]);
      ASSERT_LE(diff, 51) << "pixel " << p << " channel " << c;
      error_sum +=
          gif.rgb[0][3 * p + static_cast<size_t>(c)] - img.rgba[4 * p + static_cast<size_t>(c)];
    }
  }
  // Ordered dithering is unbiased on average.
  EXPECT_LT(std::abs(error_sum / (128.0 * 64.0 * 3.0)), 4.0);
}

TEST(GifTest, RejectsBadInput) {
  EXPECT_EQ(encode_gif({}, 5).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(encode_gif({solid(4, 4, 0, 0, 0), solid(4, 5, 0, 0, 0)}, 5).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(encode_gif({solid(4, 4, 0, 0, 0)}, 0).status().code(), ErrorCode::kInvalidArgument);
  Image broken = solid(4, 4, 0, 0, 0);
  broken.rgba.pop_back();
  EXPECT_EQ(encode_gif({broken}, 5).status().code(), ErrorCode::kInvalidArgument);
  const Status st = write_gif("/nonexistent-dir/x.gif", {solid(2, 2, 1, 2, 3)}, 5);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent-dir/x.gif"), std::string::npos) << st.message();
}

TEST(PngTest, WritesAValidPngHeader) {
  auto bytes = encode_png(solid(33, 17, 10, 20, 30));
  ASSERT_TRUE(bytes.ok());
  ASSERT_GT(bytes->size(), 33u);
  EXPECT_EQ(std::memcmp(bytes->data(), "\x89PNG\r\n\x1a\n", 8), 0);
  EXPECT_EQ(std::memcmp(bytes->data() + 12, "IHDR", 4), 0);
  auto be32 = [&](size_t at) {
    const uint8_t* b = bytes->data() + at;
    return (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
  };
  EXPECT_EQ(be32(16), 33);
  EXPECT_EQ(be32(20), 17);
  EXPECT_EQ((*bytes)[24], 8);  // bit depth
  EXPECT_EQ((*bytes)[25], 6);  // colour type RGBA
  EXPECT_EQ(encode_png(Image{}).status().code(), ErrorCode::kInvalidArgument);
}

TEST(ContactSheetTest, TilesFramesRowByRow) {
  std::vector<Image> frames = {solid(3, 2, 10, 0, 0), solid(3, 2, 20, 0, 0), solid(3, 2, 30, 0, 0)};
  auto sheet = contact_sheet(frames, 2);
  ASSERT_TRUE(sheet.ok());
  EXPECT_EQ(sheet->width, 6);
  EXPECT_EQ(sheet->height, 4);
  EXPECT_EQ(sheet->pixel(0, 0)[0], 10);
  EXPECT_EQ(sheet->pixel(5, 1)[0], 20);
  EXPECT_EQ(sheet->pixel(2, 3)[0], 30);
  EXPECT_EQ(sheet->pixel(4, 3)[0], 0);  // the unused cell is black
  EXPECT_EQ(contact_sheet(frames, 0).status().code(), ErrorCode::kInvalidArgument);
}

// ---- mesh files --------------------------------------------------------------------------------

mesh::Mesh tetrahedron() {
  mesh::Mesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
  m.triangles = {0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3};
  return m;
}

TEST(MeshFileTest, ObjPolygonsNegativeIndicesAndComments) {
  const std::string text =
      "# a quad and a triangle\nmtllib x.mtl\nv 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nvt 0 0\n"
      "vn 0 0 1\nf 1/1/1 2/1/1 3/1/1 4/1/1\nv 2 2 2\nf -1 -2 -3\r\n";
  auto m = parse_obj(text, "quad.obj");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->vertex_count(), 5);
  EXPECT_EQ(m->triangles, (std::vector<uint32_t>{0, 1, 2, 0, 2, 3, 4, 3, 2}));
}

TEST(MeshFileTest, ObjErrorsNameTheLine) {
  auto bad_index = parse_obj("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 9\n", "bad.obj");
  EXPECT_EQ(bad_index.status().code(), ErrorCode::kCorruptData);
  EXPECT_NE(bad_index.status().message().find("bad.obj:4"), std::string::npos)
      << bad_index.status().message();
  EXPECT_EQ(parse_obj("v 0 0\n", "short.obj").status().code(), ErrorCode::kCorruptData);
  EXPECT_EQ(parse_obj("v 0 0 nan\n", "nan.obj").status().code(), ErrorCode::kCorruptData);
  EXPECT_EQ(parse_obj("v 0 0 0\n", "nofaces.obj").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(parse_obj(std::string("v 0\0 0 0", 9), "bin.obj").status().code(),
            ErrorCode::kCorruptData);
}

TEST(MeshFileTest, GlbFromOurExporterRoundTrips) {
  const mesh::Mesh original = tetrahedron();
  auto glb = mesh::to_glb(original);
  ASSERT_TRUE(glb.ok()) << glb.status().to_string();
  auto m = parse_glb(*glb, "tet.glb");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->triangle_count(), original.triangle_count());
  EXPECT_EQ(m->vertex_count(), original.vertex_count());
  const auto b = mesh::compute_bounds(*m);
  EXPECT_NEAR(b.max[0] - b.min[0], 1.0f, 1e-5);
}

TEST(MeshFileTest, CorruptGlbIsAnErrorNeverACrash) {
  auto glb = mesh::to_glb(tetrahedron());
  ASSERT_TRUE(glb.ok());
  EXPECT_EQ(parse_glb("glTF", "tiny.glb").status().code(), ErrorCode::kCorruptData);
  // Every truncation and a sweep of single-byte corruptions: each parses or fails cleanly.
  for (size_t n = 0; n < glb->size(); n += 7) {
    const auto r = parse_glb(glb->substr(0, n), "cut.glb");
    EXPECT_FALSE(r.ok()) << "truncated at " << n;
  }
  std::mt19937 rng(3);
  for (int trial = 0; trial < 400; ++trial) {
    std::string bad = *glb;
    bad[rng() % bad.size()] = static_cast<char>(rng());
    const auto r = parse_glb(bad, "flip.glb");
    if (r.ok()) {
      EXPECT_TRUE(mesh::validate(*r).ok());
    }
  }
}

// A tetrahedron with distinct per-vertex uvs (a seam-free layout) and a 3 x 2 texture whose
// texels all differ, so a flipped row or swapped channel shows.
mesh::Mesh textured_tetrahedron() {
  mesh::Mesh m = tetrahedron();
  m.uvs = {0.0f, 0.0f, 1.0f, 0.125f, 0.3f, 1.0f, 0.71f, 0.42f};
  m.texture.width = 3;
  m.texture.height = 2;
  for (int i = 0; i < 18; ++i) m.texture.rgb.push_back(static_cast<uint8_t>(13 * i + 7));
  return m;
}

void expect_same_texturing(const mesh::Mesh& expected, const mesh::Mesh& got) {
  ASSERT_EQ(got.uvs.size(), expected.uvs.size());
  for (size_t i = 0; i < expected.uvs.size(); ++i) {
    EXPECT_NEAR(got.uvs[i], expected.uvs[i], 1e-6) << "uv component " << i;
  }
  EXPECT_EQ(got.texture.width, expected.texture.width);
  EXPECT_EQ(got.texture.height, expected.texture.height);
  EXPECT_EQ(got.texture.rgb, expected.texture.rgb);
  EXPECT_TRUE(mesh::validate(got).ok()) << mesh::validate(got).to_string();
}

TEST(MeshFileTest, TexturedObjAndGlbRoundTripUvsAndTexture) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera-mesh-file-textured";
  std::filesystem::create_directories(dir);
  const mesh::Mesh original = textured_tetrahedron();
  ASSERT_TRUE(mesh::write_obj(original, (dir / "t.obj").string()).ok());
  ASSERT_TRUE(mesh::write_glb(original, (dir / "t.glb").string()).ok());
  for (const char* file : {"t.obj", "t.glb"}) {
    SCOPED_TRACE(file);
    std::vector<std::string> warnings;
    auto m = load_mesh_file((dir / file).string(), &warnings);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_TRUE(warnings.empty()) << warnings.front();
    EXPECT_EQ(m->vertex_count(), original.vertex_count());
    EXPECT_EQ(m->triangles, original.triangles);
    expect_same_texturing(original, *m);
  }
  // The OBJ without its PNG: the geometry and uvs load, the texture is dropped with a warning
  // that names the missing file.
  std::filesystem::remove(dir / "t_texture.png");
  std::vector<std::string> warnings;
  auto m = load_mesh_file((dir / "t.obj").string(), &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->triangle_count(), 4);
  EXPECT_EQ(m->uvs.size(), 8u);
  EXPECT_TRUE(m->texture.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("t_texture.png"), std::string::npos) << warnings[0];
  EXPECT_TRUE(mesh::validate(*m).ok());
  // A file that is not a PNG in its place: the same (no crash, a warning).
  ASSERT_TRUE(write_file_atomic((dir / "t_texture.png").string(), "not a png", 9).ok());
  warnings.clear();
  m = load_mesh_file((dir / "t.obj").string(), &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->texture.empty());
  EXPECT_EQ(warnings.size(), 1u);
  // And without the MTL as well (no warnings pointer: still fine).
  std::filesystem::remove(dir / "t.mtl");
  m = load_mesh_file((dir / "t.obj").string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->texture.empty());
  std::filesystem::remove_all(dir);
}

TEST(MeshFileTest, ObjSplitsVerticesOnUvSeamsAndReadsMapKdOptions) {
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
  EXPECT_TRUE(mesh::validate(*m).ok());
  // Bad vt references are errors naming the line; tiling uvs are a warning (uvs dropped).
  EXPECT_EQ(parse_obj("v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nf 1/2 2/1 3/1\n", "vt.obj")
                .status()
                .code(),
            ErrorCode::kCorruptData);
  std::vector<std::string> warnings;
  auto tiled = parse_obj("v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 4 0\nvt 0 4\nf 1/1 2/2 3/3\n",
                         "tiled.obj", &warnings);
  ASSERT_TRUE(tiled.ok()) << tiled.status().to_string();
  EXPECT_TRUE(tiled->uvs.empty());
  EXPECT_EQ(warnings.size(), 1u);

  // map_Kd with options and a subdirectory, of the material usemtl names.
  const auto dir = std::filesystem::temp_directory_path() / "tessera-mesh-file-mtl";
  std::filesystem::create_directories(dir / "tex");
  const mesh::Mesh tex = textured_tetrahedron();
  auto png = mesh::encode_texture_png(tex.texture);
  ASSERT_TRUE(png.ok());
  ASSERT_TRUE(write_file_atomic((dir / "tex" / "skin.png").string(), png->data(), png->size()).ok());
  const std::string mtl =
      "newmtl other\nmap_Kd missing.png\nnewmtl skin\nKd 1 1 1\nmap_Kd -s 1 1 1 -clamp on "
      "tex\\skin.png\n";
  ASSERT_TRUE(write_file_atomic((dir / "m.mtl").string(), mtl.data(), mtl.size()).ok());
  const std::string obj = "mtllib m.mtl\nusemtl skin\n" + text;
  ASSERT_TRUE(write_file_atomic((dir / "m.obj").string(), obj.data(), obj.size()).ok());
  warnings.clear();
  auto loaded = load_mesh_file((dir / "m.obj").string(), &warnings);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(loaded->texture.rgb, tex.texture.rgb);
  std::filesystem::remove_all(dir);
}

TEST(MeshFileTest, GlbTexturedCorruptionIsAWarningOrErrorNeverACrash) {
  auto glb = mesh::to_glb(textured_tetrahedron());
  ASSERT_TRUE(glb.ok());
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = *glb;
    bad[rng() % bad.size()] = static_cast<char>(rng());
    std::vector<std::string> warnings;
    const auto r = parse_glb(bad, "flip.glb", &warnings);
    if (r.ok()) {
      EXPECT_TRUE(mesh::validate(*r).ok());
    }
  }
}

TEST(MeshFileTest, LoadByExtension) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera-mesh-file-test";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(mesh::write_obj(tetrahedron(), (dir / "t.obj").string()).ok());
  ASSERT_TRUE(mesh::write_glb(tetrahedron(), (dir / "t.glb").string()).ok());
  auto obj = load_mesh_file((dir / "t.obj").string());
  ASSERT_TRUE(obj.ok()) << obj.status().to_string();
  EXPECT_EQ(obj->triangle_count(), 4);
  auto glb = load_mesh_file((dir / "t.glb").string());
  ASSERT_TRUE(glb.ok()) << glb.status().to_string();
  EXPECT_EQ(glb->triangle_count(), 4);
  EXPECT_EQ(load_mesh_file((dir / "t.stl").string()).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(load_mesh_file((dir / "missing.obj").string()).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::render
