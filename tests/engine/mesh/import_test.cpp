// import_mesh_file (engine/mesh/import.h): the reader chosen by extension and magic bytes; every
// format the studio exports comes back with its uvs and texture; empty files, garbage with a mesh
// extension and unknown extensions are errors that name the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/mapped_file.h"
#include "engine/mesh/export.h"
#include "engine/mesh/import.h"
#include "tests/engine/mesh/import_test_util.h"

namespace tessera::mesh {
namespace {

using testing::ScratchDir;
using testing::tetrahedron;
using testing::textured_test_mesh;

void write(const std::string& path, const std::string& bytes) {
  ASSERT_TRUE(write_file_atomic(path, bytes.data(), bytes.size()).ok()) << path;
}

TEST(MeshImport, LoadByExtension) {
  ScratchDir dir("import-by-extension");
  for (const char* name : {"t.obj", "t.glb", "t.fbx", "T.OBJ"}) {
    ASSERT_TRUE(write_mesh(tetrahedron(), dir.file(name)).ok()) << name;
    auto m = import_mesh_file(dir.file(name));
    ASSERT_TRUE(m.ok()) << name << ": " << m.status().to_string();
    EXPECT_EQ(m->triangle_count(), 4) << name;
    EXPECT_TRUE(m->normals.empty());
  }
  write(dir.file("t.notamesh"), "solid x\n");
  EXPECT_EQ(import_mesh_file(dir.file("t.notamesh")).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(import_mesh_file(dir.file("t.notamesh")).status().message().find("not a mesh file"),
            std::string::npos);
  auto missing = import_mesh_file(dir.file("missing.obj"));
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.obj"), std::string::npos);
}

TEST(MeshImport, MagicBytesWinOverAMisleadingExtension) {
  ScratchDir dir("import-magic");
  auto glb = to_glb(tetrahedron());
  ASSERT_TRUE(glb.ok());
  write(dir.file("really_glb.gltf"), *glb);
  write(dir.file("really_glb.fbx"), *glb);
  for (const char* name : {"really_glb.gltf", "really_glb.fbx"}) {
    auto m = import_mesh_file(dir.file(name));
    ASSERT_TRUE(m.ok()) << name << ": " << m.status().to_string();
    EXPECT_EQ(m->triangle_count(), 4);
  }
}

TEST(MeshImport, EmptyAndGarbageFilesNameTheFileAndTheFault) {
  ScratchDir dir("import-garbage");
  struct Case {
    const char* name;
    std::string bytes;
    ErrorCode code;
    const char* says;
  };
  const Case cases[] = {
      {"empty.obj", "", ErrorCode::kInvalidArgument, "empty"},
      {"empty.glb", "", ErrorCode::kInvalidArgument, "empty"},
      {"empty.gltf", "", ErrorCode::kInvalidArgument, "empty"},
      {"empty.fbx", "", ErrorCode::kInvalidArgument, "empty"},
      {"fake.glb", "hello, this is text", ErrorCode::kInvalidArgument, "glTF"},
      {"fake.fbx", "hello, this is text", ErrorCode::kInvalidArgument, "Kaydara"},
      {"fake.gltf", "hello, this is text", ErrorCode::kInvalidArgument, "not glTF JSON"},
      {"fake.obj", "hello, this is text", ErrorCode::kNotFound, "no faces"},
      {"binary.obj", std::string("v 1 2\0\0\x01", 8), ErrorCode::kInvalidArgument, "binary"},
      {"binary.gltf", std::string("{\0\0\x01", 4), ErrorCode::kInvalidArgument, "binary"},
      {"ascii.fbx", "; FBX 7.4.0 project file\nFBXHeaderExtension:  {\n}\n",
       ErrorCode::kUnsupported, "ASCII FBX"},
      {"noise.fbx", std::string("\x01\x02\x03\x00\xff", 5), ErrorCode::kInvalidArgument, "magic"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    write(dir.file(c.name), c.bytes);
    auto r = import_mesh_file(dir.file(c.name));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().message();
    EXPECT_NE(r.status().message().find(dir.file(c.name)), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
  }
}

// Every format the studio exports comes back with its uvs and texture when opened again (moved
// from the studio's GUI tests): each imported vertex must carry the uv of the original vertex at
// its position (files may reorder or split vertices), and the texture must be the same pixels.
TEST(MeshImport, TexturedExportsReimportWithUvsAndTexture) {
  const Mesh original = textured_test_mesh();
  ScratchDir out("import-textured-exports");
  for (const char* name : {"quad.obj", "quad.glb", "quad.fbx"}) {
    const std::string path = out.file(name);
    ASSERT_TRUE(write_mesh(original, path).ok()) << name;
    std::vector<std::string> warnings;
    auto imported = import_mesh_file(path, &warnings);
    ASSERT_TRUE(imported.ok()) << name << ": " << imported.status().message();
    const Mesh& m = imported.value();
    EXPECT_TRUE(warnings.empty()) << name << ": " << (warnings.empty() ? "" : warnings.front());
    EXPECT_EQ(m.triangle_count(), original.triangle_count()) << name;
    ASSERT_EQ(m.uvs.size(), 2 * static_cast<size_t>(m.vertex_count())) << name;
    for (int64_t v = 0; v < m.vertex_count(); ++v) {
      int64_t match = -1;
      for (int64_t o = 0; o < original.vertex_count(); ++o) {
        float d = 0;
        for (int c = 0; c < 3; ++c) {
          d = std::max(d, std::abs(m.positions[static_cast<size_t>(3 * v + c)] -
                                   original.positions[static_cast<size_t>(3 * o + c)]));
        }
        if (d < 1e-5f) match = o;
      }
      ASSERT_GE(match, 0) << name << ": vertex " << v << " is not one of the original positions";
      for (int c = 0; c < 2; ++c) {
        EXPECT_NEAR(m.uvs[static_cast<size_t>(2 * v + c)],
                    original.uvs[static_cast<size_t>(2 * match + c)], 1e-5f)
            << name << ": vertex " << v << " uv " << c;
      }
    }
    EXPECT_EQ(m.texture.width, original.texture.width) << name;
    EXPECT_EQ(m.texture.height, original.texture.height) << name;
    EXPECT_EQ(m.texture.rgb, original.texture.rgb) << name;
  }
  // Without the PNG (quad_texture.png, beside both) the FBX keeps its texture (embedded), and the
  // OBJ still opens, untextured, with a warning that names the image.
  const std::string fbx = out.file("quad.fbx");
  ASSERT_TRUE(std::filesystem::remove(texture_path_for(fbx)));
  std::vector<std::string> warnings;
  auto embedded = import_mesh_file(fbx, &warnings);
  ASSERT_TRUE(embedded.ok()) << embedded.status().message();
  EXPECT_EQ(embedded->texture.rgb, original.texture.rgb);
  EXPECT_TRUE(warnings.empty());
  const std::string obj = out.file("quad.obj");
  ASSERT_EQ(texture_path_for(obj), texture_path_for(fbx));
  auto bare = import_mesh_file(obj, &warnings);
  ASSERT_TRUE(bare.ok()) << bare.status().message();
  EXPECT_TRUE(bare.value().texture.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("quad_texture.png"), std::string::npos) << warnings[0];
}

// Every seed of the readers' fuzz corpora (valid files, broken ones and the inputs fuzzing once
// crashed on) parses to a valid mesh or an error naming the file: run here too, so a regression
// fails the unit tests without a fuzz build. regression-png-without-failure-reason: an FBX whose
// embedded texture made stb fail without a reason string (a null pointer appended to a message).
TEST(MeshImport, EveryFuzzCorpusSeedParsesOrFailsCleanly) {
  namespace fs = std::filesystem;
  const fs::path corpora = fs::path(TESSERA_SOURCE_DIR) / "tests" / "fuzz" / "corpus";
  int files = 0;
  for (const char* fuzzer : {"obj_import_fuzz", "glb_import_fuzz", "fbx_import_fuzz"}) {
    for (const auto& entry : fs::directory_iterator(corpora / fuzzer)) {
      auto bytes = read_file(entry.path().string());
      ASSERT_TRUE(bytes.ok()) << bytes.status().message();
      const std::string name = entry.path().filename().string();
      std::vector<std::string> warnings;
      // As each fuzzer reads its input (glb_import_fuzz: GLB by magic, else glTF text).
      const std::string kind = fuzzer;
      Expected<Mesh> m = kind == "obj_import_fuzz"       ? parse_obj(*bytes, name, &warnings)
                         : kind == "fbx_import_fuzz"     ? parse_fbx(*bytes, name, &warnings)
                         : bytes->substr(0, 4) == "glTF" ? parse_glb(*bytes, name, &warnings)
                                                         : parse_gltf(*bytes, name, &warnings);
      if (m.ok()) {
        EXPECT_TRUE(validate(*m).ok()) << name;
      } else {
        EXPECT_NE(m.status().message().find(name), std::string::npos) << m.status().message();
      }
      ++files;
    }
  }
  EXPECT_GE(files, 15);
  auto regression =
      read_file((corpora / "fbx_import_fuzz" / "regression-png-without-failure-reason").string());
  ASSERT_TRUE(regression.ok());
  std::vector<std::string> warnings;
  auto m = parse_fbx(*regression, "regression.fbx", &warnings);
  // The broken texture is a warning (the geometry opens) or the file is an error; either names it.
  if (m.ok()) {
    ASSERT_FALSE(warnings.empty());
    EXPECT_NE(warnings.front().find("regression.fbx"), std::string::npos) << warnings.front();
  }
}

}  // namespace
}  // namespace tessera::mesh
