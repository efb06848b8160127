// The glTF readers (engine/mesh/import.h): GLB from our exporter round-trips (uvs, embedded PNG),
// glTF text with a data: URI or a .bin beside it, and broken files (chunks past the end, lying
// lengths, accessors outside their views, indices out of range, NaN positions, node cycles) as
// errors naming the file, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "core/mapped_file.h"
#include "engine/mesh/export.h"
#include "engine/mesh/import.h"
#include "tests/engine/mesh/import_test_util.h"

namespace tessera::mesh {
namespace {

using Json = nlohmann::json;
using testing::ScratchDir;
using testing::tetrahedron;
using testing::textured_tetrahedron;

// The GLB's JSON and BIN chunks, and a GLB made from (possibly edited) ones.
struct Glb {
  Json json;
  std::string bin;

  static Glb split(const std::string& glb) {
    uint32_t json_len = 0;
    std::memcpy(&json_len, glb.data() + 12, 4);
    Glb g;
    g.json = Json::parse(glb.substr(20, json_len));
    uint32_t bin_len = 0;
    std::memcpy(&bin_len, glb.data() + 20 + json_len, 4);
    g.bin = glb.substr(28 + json_len, bin_len);
    return g;
  }
  std::string join() const {
    std::string text = json.dump();
    while (text.size() % 4) text.push_back(' ');
    std::string b = bin;
    while (b.size() % 4) b.push_back('\0');
    auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
    const uint32_t total = static_cast<uint32_t>(12 + 8 + text.size() + 8 + b.size());
    return "glTF" + u32(2) + u32(total) + u32(static_cast<uint32_t>(text.size())) + "JSON" + text +
           u32(static_cast<uint32_t>(b.size())) + std::string("BIN\0", 4) + b;
  }
};

void expect_corrupt(const std::string& bytes, const std::string& says) {
  auto r = parse_glb(bytes, "bad.glb");
  ASSERT_FALSE(r.ok()) << "expected an error saying '" << says << "'";
  EXPECT_EQ(r.status().code(), ErrorCode::kCorruptData) << r.status().message();
  EXPECT_NE(r.status().message().find("bad.glb"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
}

TEST(MeshImportGlb, FromOurExporterRoundTrips) {
  const Mesh original = tetrahedron();
  auto glb = to_glb(original);
  ASSERT_TRUE(glb.ok()) << glb.status().to_string();
  auto m = parse_glb(*glb, "tet.glb");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->triangles, original.triangles);
  EXPECT_EQ(m->positions, original.positions);
}

TEST(MeshImportGlb, TexturedRoundTripsUvsAndEmbeddedPng) {
  const Mesh original = textured_tetrahedron();
  auto glb = to_glb(original);
  ASSERT_TRUE(glb.ok());
  std::vector<std::string> warnings;
  auto m = parse_glb(*glb, "t.glb", &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(m->uvs.size(), original.uvs.size());
  for (size_t i = 0; i < original.uvs.size(); ++i) EXPECT_NEAR(m->uvs[i], original.uvs[i], 1e-6);
  EXPECT_EQ(m->texture.width, 3);
  EXPECT_EQ(m->texture.rgb, original.texture.rgb);
}

TEST(MeshImportGlb, BrokenLayoutIsAnErrorNamingTheFault) {
  auto glb = to_glb(tetrahedron());
  ASSERT_TRUE(glb.ok());
  const std::string good = *glb;
  expect_corrupt("glTF", "no \"glTF\" magic");
  expect_corrupt("", "no \"glTF\" magic");
  // The header's length larger than the file; a chunk running past the declared length.
  std::string lying = good;
  const uint32_t big = static_cast<uint32_t>(good.size() + 100);
  std::memcpy(lying.data() + 8, &big, 4);
  expect_corrupt(lying, "exceeds the file size");
  std::string chunk = good;
  const uint32_t huge = 0xFFFFFF00u;
  std::memcpy(chunk.data() + 12, &huge, 4);
  expect_corrupt(chunk, "runs past the end");
  // BIN chunk claiming more than is left (chunks would overlap the next or leave the file).
  Glb parts = Glb::split(good);
  std::string joined = parts.join();
  uint32_t json_len = 0;
  std::memcpy(&json_len, joined.data() + 12, 4);
  std::string bin_lie = joined;
  const uint32_t bin_big = static_cast<uint32_t>(parts.bin.size() + 4);
  std::memcpy(bin_lie.data() + 20 + json_len, &bin_big, 4);
  expect_corrupt(bin_lie, "runs past the end");
  // Stray bytes that cannot hold a chunk header.
  std::string stray = joined + "xyz";
  const uint32_t stray_total = static_cast<uint32_t>(stray.size());
  std::memcpy(stray.data() + 8, &stray_total, 4);
  expect_corrupt(stray, "stray bytes");
  // Every truncation fails cleanly.
  for (size_t n = 0; n < good.size(); n += 5) {
    auto r = parse_glb(good.substr(0, n), "cut.glb");
    EXPECT_FALSE(r.ok()) << "truncated at " << n;
  }
}

TEST(MeshImportGlb, BrokenContentIsAnErrorNamingTheFault) {
  auto glb = to_glb(tetrahedron());
  ASSERT_TRUE(glb.ok());
  const Glb parts = Glb::split(*glb);
  const size_t position_accessor =
      parts.json["meshes"][0]["primitives"][0]["attributes"]["POSITION"];
  const size_t index_accessor = parts.json["meshes"][0]["primitives"][0]["indices"];
  {
    Glb g = parts;  // an accessor claiming more elements than its view holds
    g.json["accessors"][position_accessor]["count"] = 1000000;
    expect_corrupt(g.join(), "do not fit bufferView");
  }
  {
    Glb g = parts;  // a buffer view beyond the BIN chunk
    g.json["bufferViews"][0]["byteOffset"] = 1u << 30;
    expect_corrupt(g.join(), "lies outside buffer");
  }
  {
    Glb g = parts;  // an index naming vertex 99 of 4
    const size_t view = g.json["accessors"][index_accessor]["bufferView"];
    const size_t offset = g.json["bufferViews"][view].value("byteOffset", 0);
    const uint32_t bad = 99;
    std::memcpy(g.bin.data() + offset, &bad, 4);
    expect_corrupt(g.join(), "out of range");
  }
  {
    Glb g = parts;  // a NaN position
    const size_t view = g.json["accessors"][position_accessor]["bufferView"];
    const size_t offset = g.json["bufferViews"][view].value("byteOffset", 0);
    const float nan = std::nanf("");
    std::memcpy(g.bin.data() + offset, &nan, 4);
    expect_corrupt(g.join(), "not finite");
  }
  {
    Glb g = parts;  // a node that is its own child; then two parents sharing a child
    g.json["nodes"][0]["children"] = Json::array({0});
    expect_corrupt(g.join(), "reached twice");
    g.json["nodes"] = Json::array({{{"children", {1, 2}}}, {{"children", {2}}}, {{"mesh", 0}}});
    g.json["scenes"][0]["nodes"] = Json::array({0});
    expect_corrupt(g.join(), "reached twice");
  }
  {
    Glb g = parts;  // numbers of the wrong kind: floats where indices go, strings, negatives
    g.json["accessors"][position_accessor]["count"] = 1e300;
    expect_corrupt(g.join(), "count");
    g = parts;
    g.json["accessors"][position_accessor]["componentType"] = -1;
    expect_corrupt(g.join(), "componentType");
    g = parts;
    g.json["scene"] = "zero";
    expect_corrupt(g.join(), "scene");
  }
  {
    Glb g = parts;  // no triangles
    g.json["meshes"][0]["primitives"][0]["mode"] = 1;
    auto r = parse_glb(g.join(), "lines.glb");
    EXPECT_EQ(r.status().code(), ErrorCode::kNotFound) << r.status().message();
  }
}

// A GLB of `mesh` whose first primitive is `mode` over `sequence` (uint32 indices appended to the
// buffer; an empty sequence: no indices, the vertices in order).
std::string with_primitive(const Mesh& mesh, int mode, const std::vector<uint32_t>& sequence) {
  auto glb = to_glb(mesh);
  EXPECT_TRUE(glb.ok());
  Glb g = Glb::split(*glb);
  Json& primitive = g.json["meshes"][0]["primitives"][0];
  primitive["mode"] = mode;
  if (sequence.empty()) {
    primitive.erase("indices");
  } else {
    while (g.bin.size() % 4) g.bin.push_back('\0');
    const size_t offset = g.bin.size();
    g.bin.append(reinterpret_cast<const char*>(sequence.data()), sequence.size() * 4);
    g.json["buffers"][0]["byteLength"] = g.bin.size();
    g.json["bufferViews"].push_back(
        {{"buffer", 0}, {"byteOffset", offset}, {"byteLength", sequence.size() * 4}});
    g.json["accessors"].push_back({{"bufferView", g.json["bufferViews"].size() - 1},
                                   {"componentType", 5125},
                                   {"count", sequence.size()},
                                   {"type", "SCALAR"}});
    primitive["indices"] = g.json["accessors"].size() - 1;
  }
  return g.join();
}

TEST(MeshImportGlb, TriangleStripsAndFansAreRead) {
  const Mesh quad_corners = tetrahedron();  // four vertices
  // A strip 0 1 2 3: (0 1 2) and (1 3 2), the second flipped to keep the winding.
  auto strip = parse_glb(with_primitive(quad_corners, 5, {0, 1, 2, 3}), "strip.glb");
  ASSERT_TRUE(strip.ok()) << strip.status().message();
  EXPECT_EQ(strip->triangles, (std::vector<uint32_t>{0, 1, 2, 1, 3, 2}));
  // A fan 0 1 2 3: (1 2 0) and (2 3 0).
  auto fan = parse_glb(with_primitive(quad_corners, 6, {0, 1, 2, 3}), "fan.glb");
  ASSERT_TRUE(fan.ok()) << fan.status().message();
  EXPECT_EQ(fan->triangles, (std::vector<uint32_t>{1, 2, 0, 2, 3, 0}));
  // Unindexed: the vertices in order.
  auto plain = parse_glb(with_primitive(quad_corners, 5, {}), "plain.glb");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->triangle_count(), 2);
  // Strips stitched with repeated vertices: the degenerate triangles are left out.
  auto stitched = parse_glb(with_primitive(quad_corners, 5, {0, 1, 2, 2, 3, 3, 1, 0}), "s.glb");
  ASSERT_TRUE(stitched.ok()) << stitched.status().message();
  for (int64_t t = 0; t < stitched->triangle_count(); ++t) {
    const uint32_t* v = &stitched->triangles[3 * t];
    EXPECT_TRUE(v[0] != v[1] && v[1] != v[2] && v[0] != v[2]);
  }
  EXPECT_GE(stitched->triangle_count(), 1);
  // Fewer than three vertices make nothing; an index out of range is named.
  EXPECT_EQ(parse_glb(with_primitive(quad_corners, 6, {0, 1}), "short.glb").status().code(),
            ErrorCode::kNotFound);
  expect_corrupt(with_primitive(quad_corners, 5, {0, 1, 9}), "index 9");
}

TEST(MeshImportGlb, ByteFlipsAreAWarningOrAnErrorNeverACrash) {
  for (const Mesh& mesh : {tetrahedron(), textured_tetrahedron()}) {
    auto glb = to_glb(mesh);
    ASSERT_TRUE(glb.ok());
    std::mt19937 rng(5);
    for (int trial = 0; trial < 400; ++trial) {
      std::string bad = *glb;
      bad[rng() % bad.size()] = static_cast<char>(rng());
      std::vector<std::string> warnings;
      auto r = parse_glb(bad, "flip.glb", &warnings);
      if (r.ok()) {
        EXPECT_TRUE(validate(*r).ok());
      }
    }
  }
}

std::string base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kAlphabet[(acc << (6 - bits)) & 63]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

TEST(MeshImportGltf, TextWithDataUriOrBinBesideIt) {
  const Mesh original = textured_tetrahedron();
  auto glb = to_glb(original);
  ASSERT_TRUE(glb.ok());
  Glb parts = Glb::split(*glb);
  ScratchDir dir("import-gltf");
  // 1. Everything in data: URIs.
  Json doc = parts.json;
  doc["buffers"][0]["uri"] = "data:application/octet-stream;base64," + base64(parts.bin);
  std::string text = doc.dump(1);
  ASSERT_TRUE(write_file_atomic(dir.file("inline.gltf"), text.data(), text.size()).ok());
  std::vector<std::string> warnings;
  auto m = import_mesh_file(dir.file("inline.gltf"), &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(m->triangles, original.triangles);
  EXPECT_EQ(m->texture.rgb, original.texture.rgb);
  // 2. A .bin beside it (with a space in its name, percent-encoded in the URI).
  doc["buffers"][0]["uri"] = "mesh%20data.bin";
  text = doc.dump();
  ASSERT_TRUE(
      write_file_atomic(dir.file("mesh data.bin"), parts.bin.data(), parts.bin.size()).ok());
  ASSERT_TRUE(write_file_atomic(dir.file("beside.gltf"), text.data(), text.size()).ok());
  m = import_mesh_file(dir.file("beside.gltf"), &warnings);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->positions, original.positions);
  // 3. Bytes only (no directory): the external file is not read, and says so.
  auto r = parse_gltf(text, "bytes.gltf");
  EXPECT_EQ(r.status().code(), ErrorCode::kCorruptData);
  EXPECT_NE(r.status().message().find("mesh%20data.bin"), std::string::npos)
      << r.status().message();
  // 4. The .bin missing, shorter than byteLength, an http: URI, bad base64: errors.
  std::filesystem::remove(dir.path() / "mesh data.bin");
  r = import_mesh_file(dir.file("beside.gltf"));
  EXPECT_EQ(r.status().code(), ErrorCode::kCorruptData);
  EXPECT_NE(r.status().message().find("mesh data.bin"), std::string::npos) << r.status().message();
  const std::string half = parts.bin.substr(0, parts.bin.size() / 2);
  ASSERT_TRUE(write_file_atomic(dir.file("mesh data.bin"), half.data(), half.size()).ok());
  r = import_mesh_file(dir.file("beside.gltf"));
  EXPECT_NE(r.status().message().find("declares"), std::string::npos) << r.status().message();
  doc["buffers"][0]["uri"] = "http://example.com/x.bin";
  r = parse_gltf(doc.dump(), "remote.gltf", nullptr, dir.path().string());
  EXPECT_NE(r.status().message().find("URI"), std::string::npos) << r.status().message();
  doc["buffers"][0]["uri"] = "data:application/octet-stream;base64,@@@@";
  r = parse_gltf(doc.dump(), "b64.gltf");
  EXPECT_NE(r.status().message().find("base64"), std::string::npos) << r.status().message();
  EXPECT_EQ(parse_gltf("{not json", "x.gltf").status().code(), ErrorCode::kCorruptData);
  EXPECT_EQ(parse_gltf("[1, 2]", "x.gltf").status().code(), ErrorCode::kCorruptData);
}

}  // namespace
}  // namespace tessera::mesh
