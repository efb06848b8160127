// Settings carried in the files and `tessera generate --from FILE` (issue 24): a GLB / OBJ / 3MF
// written by generate carries its prompt, seed and settings; --from makes the same mesh again on
// the same model (byte for byte, variations included); --no-metadata writes none; files without
// metadata, with malformed metadata or with bad fields fail clearly, naming the file and field, and
// write nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/cli_runner.h"

namespace tessera::testing {
namespace {

class FromCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("tessera-from-test-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

// An OBJ without its mtllib line (which names the file's own .mtl).
std::string obj_geometry(const std::string& file) {
  std::istringstream in(slurp(file));
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind("mtllib ", 0) != 0) out += line + "\n";
  }
  return out;
}

TEST_F(FromCliTest, TheSameMeshAgainFromGlbObjAnd3mf) {
  CliResult r =
      run_tessera("generate -p 'a mug' --seed 5 --scale 2 -o " + shell_quote(path("a.glb")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string glb = slurp(path("a.glb"));
  EXPECT_NE(glb.find("\"generator\":\"Tessera "), std::string::npos);
  EXPECT_NE(glb.find("\"prompt\":\"a mug\""), std::string::npos);
  r = run_tessera("generate --from " + shell_quote(path("a.glb")) + " -o " +
                  shell_quote(path("b.glb")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(path("b.glb")), glb) << "--from made a different file";

  r = run_tessera("generate -p 'a lamp' --up-axis z -o " + shell_quote(path("l.obj")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_tessera("generate --from " + shell_quote(path("l.obj")) + " -o " +
                  shell_quote(path("l2.obj")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(obj_geometry(path("l2.obj")), obj_geometry(path("l.obj")));

  // Variation 2 of 2 made again alone (the engine is batch-invariant).
  r = run_tessera("generate -p 'a chair' --variations 2 --seed 9 -o " + shell_quote(path("c.3mf")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_tessera("generate --from " + shell_quote(path("c_2.3mf")) + " -o " +
                  shell_quote(path("c2.glb")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("seed 10"), std::string::npos) << r.out;
  r = run_tessera("generate -p 'a chair' --seed 10 -o " + shell_quote(path("c10.glb")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(path("c2.glb")), slurp(path("c10.glb")));
}

TEST_F(FromCliTest, MissingOrBadMetadataFailsNamingFileAndField) {
  CliResult r = run_tessera("generate -p 'a ring' --no-metadata -o " + shell_quote(path("n.glb")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(path("n.glb")).find("\"extras\""), std::string::npos);
  r = run_tessera("generate --from " + shell_quote(path("n.glb")) + " -o " +
                  shell_quote(path("o.glb")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("n.glb has no Tessera metadata"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("o.glb")));

  const std::string cube = "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n";
  struct Case {
    std::string line, expect;
  };
  for (const Case& c : {Case{"# tessera {not json", "not a JSON object"},
                        Case{"# tessera {\"seed\": 3}", "'prompt'"},
                        Case{"# tessera {\"prompt\": \"a box\", \"sampling\": {\"seed\": \"x\"}}",
                             "'sampling.seed'"},
                        Case{"# tessera {\"prompt\": \"a box\", \"bbox\": [1, 2]}", "'bbox'"},
                        Case{"# tessera {\"prompt\": \"a box\", \"export\": {\"up_axis\": \"x\"}}",
                             "'export.up_axis'"}}) {
    std::ofstream(path("bad.obj")) << c.line << "\n" << cube;
    r = run_tessera("generate --from " + shell_quote(path("bad.obj")) + " -o " +
                    shell_quote(path("out.obj")));
    EXPECT_EQ(r.exit_code, 1) << c.line;
    EXPECT_NE(r.err.find("bad.obj"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.line << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("out.obj")));
  }

  // Another model's file: a warning, and the shape is made with this one.
  std::ofstream(path("other.obj")) << "# tessera {\"prompt\": \"a box\", \"model\": {\"name\": "
                                      "\"big\", \"gpt_sha256\": \"00\"}}\n"
                                   << cube;
  r = run_tessera("generate --from " + shell_quote(path("other.obj")) + " -o " +
                  shell_quote(path("other2.obj")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("made with another model (\"big\")"), std::string::npos) << r.err;

  r = run_tessera("generate -p 'a box' --from " + shell_quote(path("other.obj")) + " -o " +
                  shell_quote(path("x.obj")));
  EXPECT_NE(r.exit_code, 0);  // --prompt and --from exclude each other
  r = run_tessera("generate -o " + shell_quote(path("x.obj")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--prompt"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera::testing
