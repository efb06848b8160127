// `tessera paint` as a user runs it: a generated ball painted on the embedded model into GLB and
// OBJ (+ MTL + PNG) files that open again with their texture; the views saved on request; bad
// input named, and nothing written then.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/mesh/import.h"
#include "tests/support/cli_runner.h"

namespace tessera {
namespace {

using testing::run_tessera;
using testing::shell_quote;
namespace fs = std::filesystem;

class PaintCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("paint-cli-" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    const auto r = run_tessera("generate -p \"a ball\" -o " + shell_quote(out("ball.glb")));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  static std::string out(const std::string& name) { return (*dir_ / name).string(); }
  static fs::path* dir_;
};
fs::path* PaintCli::dir_ = nullptr;

TEST_F(PaintCli, PaintsAGeneratedBallIntoFilesThatOpenTextured) {
  auto r =
      run_tessera("paint " + shell_quote(out("ball.glb")) + " -p \"a red ball\" --steps 4 -o " +
                  shell_quote(out("painted.glb")) + " --save-views " + shell_quote(out("views")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("view 1/6 front"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("view 6/6 bottom"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("coverage"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("1024x1024 texture"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out("views/1-front.png")));
  EXPECT_TRUE(fs::exists(out("views/1-front-mask.png")));
  auto glb = mesh::import_mesh_file(out("painted.glb"));
  ASSERT_TRUE(glb.ok()) << glb.status().message();
  EXPECT_FALSE(glb->uvs.empty());
  EXPECT_EQ(glb->texture.width, 1024);

  r = run_tessera("paint " + shell_quote(out("ball.glb")) +
                  " -p \"a blue ball\" --steps 2 --views 2 --no-top --no-bottom -o " +
                  shell_quote(out("painted.obj")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("view 2/2 back"), std::string::npos) << r.err;
  auto obj = mesh::import_mesh_file(out("painted.obj"));
  ASSERT_TRUE(obj.ok()) << obj.status().message();
  EXPECT_EQ(obj->texture.width, 1024);
}

TEST_F(PaintCli, BadInputIsNamedAndNothingIsWritten) {
  const std::string o = " -o " + shell_quote(out("bad.glb"));
  auto r = run_tessera("paint " + shell_quote(out("no-such-mesh.glb")) + " -p x" + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no-such-mesh.glb"), std::string::npos) << r.err;
  r = run_tessera("paint " + shell_quote(out("ball.glb")) + " -p x --texture-size 1000" + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("texture size 1000"), std::string::npos) << r.err;
  r = run_tessera("paint " + shell_quote(out("ball.glb")) + " -p x --views 40" + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ring of 40 views"), std::string::npos) << r.err;
  r = run_tessera("paint " + shell_quote(out("ball.glb")) + o);
  EXPECT_NE(r.exit_code, 0);  // no prompt
  r = run_tessera("paint " + shell_quote(out("ball.glb")) + " -p x -o " +
                  shell_quote(out("bad.txt")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(fs::exists(out("bad.glb")));
}

}  // namespace
}  // namespace tessera
