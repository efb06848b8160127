// Files the project's own readers do not read go to Assimp in a child process with limits
// (engine/mesh/isolated_import.h): they open with their uvs and texture; a file that makes Assimp
// abort, hang or allocate without bound costs that file only (this test process is the "studio");
// a reader that hands back garbage, too much, or nothing is caught by the parent; without the
// reader the messages say which formats are unavailable. Draco-compressed glTF reads natively
// (libdraco), checked against draco_transcoder's output of a known mesh.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/png.h"
#include "engine/mesh/export.h"
#include "engine/mesh/import.h"
#include "engine/mesh/isolated_import.h"
#include "tests/engine/mesh/import_test_util.h"
#include "tests/support/command_output.h"

namespace tessera::mesh {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;
using testing::textured_test_mesh;

const fs::path kCorpus = "/usr/share/assimp/models";

void write(const std::string& path, const std::string& bytes) {
  ASSERT_TRUE(write_file_atomic(path, bytes.data(), bytes.size()).ok()) << path;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

// A shell script standing in for tessera-mesh-reader.
std::string fake_reader(const ScratchDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.file(name);
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), 0755);
  return path;
}

bool reader_installed() {
  return isolated_formats().available;
}

// A PLY square with texture coordinates and a texture beside it (`comment TextureFile`).
std::string textured_ply() {
  return "ply\nformat ascii 1.0\ncomment TextureFile tex.png\nelement vertex 4\n"
         "property float x\nproperty float y\nproperty float z\nproperty float s\n"
         "property float t\nelement face 2\nproperty list uchar int vertex_indices\nend_header\n"
         "0 0 0 0 0\n1 0 0 1 0\n1 1 0 1 1\n0 1 0 0 1\n3 0 1 2\n3 0 2 3\n";
}

TEST(IsolatedImport, TheAssimpFormatsAreListedForTheOpenDialog) {
  if (!reader_installed()) GTEST_SKIP() << isolated_formats().why_not;
  const IsolatedFormats f = isolated_formats();
  EXPECT_FALSE(f.version.empty());
  for (const char* ext : {".dae", ".ply", ".3ds", ".blend", ".x", ".off", ".lwo"}) {
    EXPECT_NE(std::find(f.extensions.begin(), f.extensions.end(), ext), f.extensions.end()) << ext;
  }
  const std::string filter = import_filter();
  for (const char* pattern :
       {"*.obj", "*.glb", "*.fbx", "*.stl", "*.3mf", "*.dae", "*.ply", "*.3ds"}) {
    EXPECT_NE(filter.find(pattern), std::string::npos) << pattern << " in " << filter;
  }
  EXPECT_NE(import_formats_text().find("Assimp " + f.version), std::string::npos)
      << import_formats_text();
}

TEST(IsolatedImport, APlyOpensWithItsUvsAndTexture) {
  if (!reader_installed()) GTEST_SKIP() << isolated_formats().why_not;
  ScratchDir dir("isolated-ply");
  const Mesh textured = textured_test_mesh();
  auto png =
      encode_png(textured.texture.rgb.data(), textured.texture.width, textured.texture.height, 3);
  ASSERT_TRUE(png.ok());
  write(dir.file("tex.png"), *png);
  write(dir.file("square.ply"), textured_ply());
  std::vector<std::string> warnings;
  auto m = import_mesh_file(dir.file("square.ply"), &warnings);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(m->triangle_count(), 2);
  ASSERT_EQ(m->uvs.size(), 2 * static_cast<size_t>(m->vertex_count()));
  // Each corner keeps its uv: here u = x and v = y.
  for (int64_t v = 0; v < m->vertex_count(); ++v) {
    EXPECT_NEAR(m->uvs[2 * v], m->positions[3 * v], 1e-5f);
    EXPECT_NEAR(m->uvs[2 * v + 1], m->positions[3 * v + 1], 1e-5f);
  }
  EXPECT_EQ(m->texture.width, textured.texture.width);
  EXPECT_EQ(m->texture.rgb, textured.texture.rgb);
  // Without the image it still opens, with a warning naming it.
  fs::remove(dir.file("tex.png"));
  warnings.clear();
  m = import_mesh_file(dir.file("square.ply"), &warnings);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(m->texture.empty());
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("tex.png"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(dir.file("square.ply")), std::string::npos) << warnings[0];
}

// UTF-16 text with a byte-order mark (Windows tools write COLLADA and PLY so; Assimp's parsers take
// UTF-8 only) is handed to Assimp as UTF-8, and opens.
TEST(IsolatedImport, Utf16TextOpens) {
  if (!reader_installed()) GTEST_SKIP() << isolated_formats().why_not;
  ScratchDir dir("isolated-utf16");
  const std::string text = textured_ply();
  std::string utf16le = "\xFF\xFE";
  for (char c : text) {
    utf16le += c;
    utf16le += '\0';
  }
  write(dir.file("square.ply"), utf16le);
  auto m = import_mesh_file(dir.file("square.ply"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->triangle_count(), 2);
}

// Files artists send that only Assimp reads, from assimp-testmodels: they open, textured where the
// file is, and the up axis of an ASCII FBX is applied as the binary reader applies it.
TEST(IsolatedImport, CorpusFilesOpenWithTheirTextures) {
  if (!reader_installed()) GTEST_SKIP() << isolated_formats().why_not;
  if (!fs::is_directory(kCorpus)) GTEST_SKIP() << "assimp-testmodels is not installed";
  struct Case {
    const char* file;
    int64_t triangles;
    bool textured;
  };
  const Case cases[] = {
      {"Collada/duck.dae", 4212, true},                           // a TGA texture beside it
      {"FBX/embedded_ascii/box.FBX", 12, true},                   // ASCII FBX, embedded texture
      {"glTF/CesiumMilkTruck/CesiumMilkTruck.gltf", 3624, true},  // glTF 1.0
      {"3DS/fels.3ds", 768, false},
      {"PLY/cube_binary.ply", 12, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    std::vector<std::string> warnings;
    auto m = import_mesh_file((kCorpus / c.file).string(), &warnings);
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_EQ(m->triangle_count(), c.triangles);
    EXPECT_EQ(!m->texture.empty(), c.textured);
    if (c.textured) {
      EXPECT_EQ(m->uvs.size(), 2 * static_cast<size_t>(m->vertex_count()));
    }
    EXPECT_TRUE(validate(*m).ok());
  }
  // The duck stands on its feet: Y up (Assimp turns the file's Y_UP / Z_UP into Y up).
  auto duck = import_mesh_file((kCorpus / "Collada/duck.dae").string());
  ASSERT_TRUE(duck.ok());
  const Bounds b = compute_bounds(*duck);
  EXPECT_GT(b.max[1] - b.min[1], 0.5 * (b.max[2] - b.min[2]));
}

// Real Assimp failures, from files written here: a PLY whose face list is cut short makes
// Debian's Assimp 5.2.5 abort in an assertion; a PLY header cut mid-line makes it spin forever.
TEST(IsolatedImport, AnAbortOrAHangInAssimpCostsOnlyThatFile) {
  if (!reader_installed()) GTEST_SKIP() << isolated_formats().why_not;
  ScratchDir dir("isolated-hostile");
  write(dir.file("abort.ply"),
        "ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\n"
        "property float z\nelement face 2\nproperty list uchar uint vertex_indices\nend_header\n"
        "0 0 0\n");
  write(dir.file("hang.ply"), "ply\nformat ascii 1.0\nelement vertex 8\nproperty float3");
  auto start = std::chrono::steady_clock::now();
  auto aborted = import_mesh_file(dir.file("abort.ply"));
  ASSERT_FALSE(aborted.ok());
  EXPECT_EQ(aborted.status().code(), ErrorCode::kInternal);
  EXPECT_NE(aborted.status().message().find(dir.file("abort.ply")), std::string::npos);
  EXPECT_NE(aborted.status().message().find("crashed"), std::string::npos)
      << aborted.status().message();
  EXPECT_NE(aborted.status().message().find("SIGABRT"), std::string::npos)
      << aborted.status().message();
  EXPECT_LT(seconds_since(start), 10.0);

  IsolatedReadLimits limits;
  limits.seconds = 2.0;
  start = std::chrono::steady_clock::now();
  auto hung = import_isolated(dir.file("hang.ply"), nullptr, limits);
  const double took = seconds_since(start);
  ASSERT_FALSE(hung.ok());
  EXPECT_NE(hung.status().message().find("did not finish reading it within 2 s"), std::string::npos)
      << hung.status().message();
  EXPECT_NE(hung.status().message().find(dir.file("hang.ply")), std::string::npos);
  EXPECT_GE(took, 1.9);
  EXPECT_LT(took, 6.0);

  // And the next file opens as if nothing happened.
  write(dir.file("tex.png"), "");
  write(dir.file("square.ply"), textured_ply());
  auto next = import_mesh_file(dir.file("square.ply"));
  EXPECT_TRUE(next.ok()) << next.status().message();
}

// assimp-testmodels' invalid/OutOfMemory.off makes Assimp allocate gigabytes: the memory limit
// stops it within seconds.
TEST(IsolatedImport, AMemoryBombIsStoppedByTheMemoryLimit) {
  if (!reader_installed()) GTEST_SKIP() << isolated_formats().why_not;
  const fs::path bomb = kCorpus / "invalid" / "OutOfMemory.off";
  if (!fs::is_regular_file(bomb)) GTEST_SKIP() << "assimp-testmodels is not installed";
  IsolatedReadLimits limits;
  limits.memory_bytes = uint64_t{512} << 20;
  limits.seconds = 30.0;
  const auto start = std::chrono::steady_clock::now();
  auto m = import_isolated(bomb.string(), nullptr, limits);
  ASSERT_FALSE(m.ok());
  EXPECT_LT(seconds_since(start), 25.0) << m.status().message();
  EXPECT_NE(m.status().message().find("OutOfMemory.off"), std::string::npos);
  EXPECT_EQ(m.status().code(), ErrorCode::kOutOfMemory) << m.status().message();
  EXPECT_NE(m.status().message().find("512 MiB"), std::string::npos) << m.status().message();
}

TEST(IsolatedImport, TheOutputLimitStopsAReaderThatHandsBackTooMuch) {
  if (!reader_installed()) GTEST_SKIP() << isolated_formats().why_not;
  ScratchDir dir("isolated-output");
  write(dir.file("square.ply"), textured_ply());
  IsolatedReadLimits limits;
  limits.output_bytes = 64;
  auto m = import_isolated(dir.file("square.ply"), nullptr, limits);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("limit"), std::string::npos) << m.status().message();
}

// The boundary itself: whatever the child does, the parent reports it against the file.
TEST(IsolatedImport, AMisbehavingReaderIsCaughtByTheParent) {
  ScratchDir dir("isolated-fake");
  write(dir.file("model.dae"), "<COLLADA/>");
  struct Case {
    const char* name;
    std::string body;
    const char* says;
  };
  // A valid GLB whose vertex is NaN: the GLB reader checks what comes back like any file.
  Mesh nan_mesh;
  nan_mesh.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  nan_mesh.triangles = {0, 1, 2};
  auto glb = to_glb(nan_mesh);
  ASSERT_TRUE(glb.ok());
  std::string nan_glb = *glb;
  const float nan = std::nanf("");
  const size_t at = nan_glb.find(std::string("\x00\x00\x80\x3f", 4));  // the first 1.0f
  ASSERT_NE(at, std::string::npos);
  std::memcpy(&nan_glb[at], &nan, 4);
  write(dir.file("nan.glb"), nan_glb);
  const Case cases[] = {
      {"garbage", "echo 'this is not a mesh'", "in what the Assimp reader handed back"},
      {"nothing", "exit 0", "in what the Assimp reader handed back"},
      {"nan", "cat '" + dir.file("nan.glb") + "'", "not finite"},
      {"segfault", "kill -SEGV $$", "SIGSEGV"},
      {"exit", "echo 'boom' >&2; exit 7", "exit status 7: boom"},
      {"refusal", "echo \"error: $1: Assimp cannot read it (no)\" >&2; exit 2",
       "Assimp cannot read it (no)"},
      {"sleeper", "trap '' TERM; sleep 30", "did not finish"},
  };
  IsolatedReadLimits limits;
  limits.seconds = 1.5;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ScopedEnv env("TESSERA_MESH_READER", fake_reader(dir, c.name, c.body));
    const auto start = std::chrono::steady_clock::now();
    auto m = import_isolated(dir.file("model.dae"), nullptr, limits);
    ASSERT_FALSE(m.ok());
    EXPECT_LT(seconds_since(start), 5.0);
    EXPECT_NE(m.status().message().find(dir.file("model.dae")), std::string::npos)
        << m.status().message();
    EXPECT_NE(m.status().message().find(c.says), std::string::npos) << m.status().message();
  }
}

TEST(IsolatedImport, WithoutTheReaderTheMessagesSayWhatIsUnavailable) {
  ScratchDir dir("isolated-missing");
  ScopedEnv env("TESSERA_MESH_READER", dir.file("no-such-reader"));
  EXPECT_FALSE(isolated_formats().available);
  write(dir.file("model.dae"), "<COLLADA/>");
  auto dae = import_mesh_file(dir.file("model.dae"));
  ASSERT_FALSE(dae.ok());
  EXPECT_EQ(dae.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(dae.status().message().find("Assimp"), std::string::npos) << dae.status().message();
  EXPECT_NE(dae.status().message().find("no-such-reader"), std::string::npos)
      << dae.status().message();
  write(dir.file("ascii.fbx"), "; FBX 7.4.0 project file\nFBXHeaderExtension:  {\n}\n");
  auto fbx = import_mesh_file(dir.file("ascii.fbx"));
  ASSERT_FALSE(fbx.ok());
  EXPECT_NE(fbx.status().message().find("ASCII FBX"), std::string::npos);
  EXPECT_NE(fbx.status().message().find("unavailable"), std::string::npos)
      << fbx.status().message();
  EXPECT_NE(import_formats_text().find("unavailable"), std::string::npos);
  EXPECT_EQ(import_filter().find("*.dae"), std::string::npos);
  // The native formats still open.
  ASSERT_TRUE(write_mesh(textured_test_mesh(), dir.file("q.obj")).ok());
  EXPECT_TRUE(import_mesh_file(dir.file("q.obj")).ok());
}

// KHR_draco_mesh_compression through libdraco: a known textured mesh compressed by Google's own
// draco_transcoder (Debian's draco package) comes back with its triangles, positions (to Draco's
// quantisation), uvs and texture.
TEST(IsolatedImport, DracoCompressedGlbReadsNatively) {
  const std::string transcoder = "/usr/bin/draco_transcoder";
  if (!fs::exists(transcoder)) GTEST_SKIP() << "draco_transcoder (package draco) is not installed";
  ScratchDir dir("draco");
  const Mesh original = textured_test_mesh();
  ASSERT_TRUE(write_mesh(original, dir.file("plain.glb")).ok());
  const auto out = tessera::testing::command_output(transcoder + " -i '" + dir.file("plain.glb") +
                                                    "' -o '" + dir.file("draco.glb") + "' 2>&1");
  ASSERT_TRUE(fs::exists(dir.file("draco.glb"))) << out;
  auto bytes = read_file(dir.file("draco.glb"));
  ASSERT_TRUE(bytes.ok());
  ASSERT_NE(bytes->find("KHR_draco_mesh_compression"), std::string::npos);
  std::vector<std::string> warnings;
  auto m = parse_glb(*bytes, "draco.glb", &warnings, dir.path().string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(m->triangle_count(), original.triangle_count());
  ASSERT_EQ(m->uvs.size(), 2 * static_cast<size_t>(m->vertex_count()));
  const Bounds a = compute_bounds(original), b = compute_bounds(*m);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(a.min[c], b.min[c], 1e-3);
    EXPECT_NEAR(a.max[c], b.max[c], 1e-3);
  }
  EXPECT_EQ(m->texture.rgb, original.texture.rgb);
  // A corrupted Draco stream is an error naming the file, never a crash.
  std::string broken = *bytes;
  const size_t draco_at = broken.find("DRACO");
  ASSERT_NE(draco_at, std::string::npos);
  for (size_t i = draco_at + 8; i < std::min(broken.size(), draco_at + 64); ++i) broken[i] ^= 0x5A;
  auto bad = parse_glb(broken, "broken.glb");
  if (!bad.ok()) {
    EXPECT_NE(bad.status().message().find("broken.glb"), std::string::npos);
  } else {
    EXPECT_TRUE(validate(*bad).ok());
  }
}

}  // namespace
}  // namespace tessera::mesh

namespace tessera::mesh {
namespace {

// The child-boundary fuzzer's seeds, as it reads them (first byte: the format): the valid_* files
// open, the invalid_* ones (a real Assimp abort and a real hang among them) are errors naming the
// file, within the fuzzer's limits.
TEST(IsolatedImport, EveryBoundaryFuzzSeedOpensOrFailsCleanly) {
  if (!reader_installed()) GTEST_SKIP() << isolated_formats().why_not;
  static const char* const kExtensions[] = {".ply", ".off", ".dae", ".obj",
                                            ".stl", ".3ds", ".fbx", ".gltf"};
  const fs::path corpus =
      fs::path(TESSERA_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "mesh_reader_fuzz";
  ScratchDir dir("isolated-seeds");
  IsolatedReadLimits limits;
  limits.seconds = 3.0;
  limits.memory_bytes = uint64_t{1} << 30;
  int seeds = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    auto bytes = read_file(entry.path().string());
    ASSERT_TRUE(bytes.ok());
    ASSERT_FALSE(bytes->empty());
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const std::string path =
        dir.file(entry.path().stem().string() + kExtensions[static_cast<uint8_t>((*bytes)[0]) % 8]);
    write(path, bytes->substr(1));
    auto m = import_isolated(path, nullptr, limits);
    if (name.rfind("valid_", 0) == 0) {
      ASSERT_TRUE(m.ok()) << m.status().message();
      EXPECT_TRUE(validate(*m).ok());
    } else {
      ASSERT_FALSE(m.ok());
      EXPECT_NE(m.status().message().find(path), std::string::npos) << m.status().message();
    }
    ++seeds;
  }
  EXPECT_GE(seeds, 8);
}

}  // namespace
}  // namespace tessera::mesh
