// Presets, size, pivot, LODs and closing through the CLI (issue 24), on the embedded model as a
// user runs it: `generate --preset roblox` writes a closed FBX within Roblox's budget that carries
// its settings (and --from makes it again byte for byte); `convert --preset print` closes an open
// mesh; `--lods` reports its levels; bad options (unknown preset or unit, size <= 0, size with
// height, a budget below what a closed mesh needs, too many LODs, a unit GLB cannot hold, an
// Unreal front on a Y-up file) fail naming the option and write nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/support/cli_runner.h"

namespace tessera::testing {
namespace {

class PresetCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("tessera-preset-test-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(PresetCliTest, RobloxFbxIsClosedWithinBudgetAndMadeAgainFromItsSettings) {
  const std::string out = path("chair.fbx");
  CliResult r = run_tessera(
      "generate -p 'a chair' --seed 3 --preset roblox --size 2 --pivot base "
      "--max-faces 3000 -o " +
      shell_quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  CliResult check = run_tessera("check --json " + shell_quote(out));
  EXPECT_EQ(check.exit_code, 0) << check.out;  // closed and manifold
  EXPECT_NE(check.out.find("\"triangles\""), std::string::npos);
  const std::string fbx = slurp(out);
  for (const char* text :
       {"tessera_prompt", "a chair", "tessera_preset", "roblox", "tessera_settings"}) {
    EXPECT_NE(fbx.find(text), std::string::npos) << text;
  }
  r = run_tessera("generate --from " + shell_quote(out) + " -o " + shell_quote(path("again.fbx")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(path("again.fbx")), fbx) << "--from made a different FBX";

  // Privacy: no settings at all.
  r = run_tessera("generate -p 'a chair' --preset roblox --no-metadata -o " +
                  shell_quote(path("private.fbx")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(path("private.fbx")).find("tessera_"), std::string::npos);
}

TEST_F(PresetCliTest, PrintClosesAnOpenMeshAndLodsAreReported) {
  // A box without its top: convert --preset print closes it.
  const std::string obj =
      "v -1 -1 -1\nv 1 -1 -1\nv -1 1 -1\nv 1 1 -1\nv -1 -1 1\nv 1 -1 1\nv -1 1 1\nv 1 1 1\n"
      "f 5 6 8\nf 5 8 7\nf 2 1 3\nf 2 3 4\nf 1 5 7\nf 1 7 3\nf 6 2 4\nf 6 4 8\nf 1 2 6\nf 1 6 5\n";
  {
    std::FILE* f = std::fopen(path("open.obj").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(obj.data(), 1, obj.size(), f);
    std::fclose(f);
  }
  EXPECT_EQ(run_tessera("check " + shell_quote(path("open.obj"))).exit_code, 1);
  CliResult r = run_tessera("convert " + shell_quote(path("open.obj")) +
                            " --preset print --size 0.04 -o " + shell_quote(path("closed.stl")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  CliResult check = run_tessera("check " + shell_quote(path("closed.stl")));
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_NE(check.out.find("40 x 40 x 40"), std::string::npos) << check.out;  // millimetres

  // --no-closed leaves it open, and says nothing about closing.
  r = run_tessera("convert " + shell_quote(path("open.obj")) + " --preset print --no-closed -o " +
                  shell_quote(path("open.stl")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(run_tessera("check " + shell_quote(path("open.stl"))).exit_code, 1);

  r = run_tessera("generate -p 'a ball' --lods 2 -o " + shell_quote(path("ball.glb")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("LOD0 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("LOD2 "), std::string::npos) << r.err;
  EXPECT_NE(slurp(path("ball.glb")).find("TesseraMesh_LOD2"), std::string::npos);
}

TEST_F(PresetCliTest, BadOptionsFailNamingTheOptionAndWriteNothing) {
  struct Case {
    std::string args, file, expect;
  };
  const Case cases[] = {
      {"--preset maya", "a.fbx", "--preset 'maya' is not a preset"},
      {"--size 0", "a.fbx", "--size"},
      {"--size -2", "a.fbx", "--size"},
      {"--height 0", "a.fbx", "--height"},
      {"--size 1 --height 1", "a.fbx", "exclusive"},
      {"--preset print --max-faces 3", "a.stl", "closed mesh needs"},
      {"--max-faces 40 --lods 6", "a.glb", "LOD6"},
      {"--lods 9", "a.glb", "--lods 9"},
      {"--unit cm", "a.glb", "--unit cm"},
      {"--unit furlongs", "a.fbx", "--unit 'furlongs'"},
      {"--unit studs", "a.3mf", "--unit studs"},
      {"--forward x", "a.fbx", "--forward x needs"},
      {"--preset unreal --up-axis y --forward x", "a.fbx", "--forward x needs"},
      {"--closed --no-closed", "a.fbx", "exclusive"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const std::string out = path(c.file);
    const CliResult r = run_tessera("generate -p 'a cube' " + c.args + " -o " + shell_quote(out));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  // convert: the same checks, and a file without metadata is fine (it simply carries none).
  CliResult r = run_tessera("convert " + shell_quote(path("missing.obj")) + " -o " +
                            shell_quote(path("b.fbx")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.obj"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("b.fbx")));
  // A preset's format expectation is a warning, not a refusal.
  r = run_tessera("generate -p 'a cube' --preset unreal -o " + shell_quote(path("c.glb")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--preset unreal expects .fbx"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera::testing
