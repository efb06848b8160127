// `tessera paint` as a user runs it: a generated ball painted on the embedded model into GLB and
// OBJ (+ MTL + PNG) files that open again with their texture, carrying the ball's settings and
// the paint record; the views saved on request; a preset's texture limit; `generate --paint` (shape
// then paint in one command, the settings of both in the file); bad input named, and nothing
// written then.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/mesh/import.h"
#include "engine/mesh/metadata.h"
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
  // The ball's own settings go on (generate --from still works), with how it was painted.
  auto metadata = mesh::read_metadata(out("painted.glb"));
  ASSERT_TRUE(metadata.ok()) << metadata.status().message();
  EXPECT_EQ((*metadata)["prompt"], "a ball");
  const auto& paint = (*metadata)["paint"];
  EXPECT_EQ(paint["prompt"], "a red ball");
  EXPECT_EQ(paint["steps"], 4);
  EXPECT_EQ(paint["views"]["ring"], 4);
  EXPECT_EQ(paint["texture_size"], 1024);
  EXPECT_TRUE(paint["new_atlas"].get<bool>());
  EXPECT_NE(paint["image_model"].get<std::string>(), "");

  r = run_tessera("paint " + shell_quote(out("ball.glb")) +
                  " -p \"a blue ball\" --steps 2 --views 2 --no-top --no-bottom -o " +
                  shell_quote(out("painted.obj")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("view 2/2 back"), std::string::npos) << r.err;
  auto obj = mesh::import_mesh_file(out("painted.obj"));
  ASSERT_TRUE(obj.ok()) << obj.status().message();
  EXPECT_EQ(obj->texture.width, 1024);
}

// The roblox preset takes textures up to 1024: a 2048 paint is shrunk on export and says so.
TEST_F(PaintCli, APresetsTextureLimitShrinksTheTexture) {
  const auto r = run_tessera("paint " + shell_quote(out("ball.glb")) +
                             " -p \"a green ball\" --steps 1 --views 2 --no-top --no-bottom "
                             "--view-size 64 --texture-size 2048 --preset roblox -o " +
                             shell_quote(out("roblox.fbx")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("texture shrunk from 2048x2048 to 1024x1024"), std::string::npos) << r.err;
  auto fbx = mesh::import_mesh_file(out("roblox.fbx"));
  ASSERT_TRUE(fbx.ok()) << fbx.status().message();
  EXPECT_EQ(fbx->texture.width, 1024);
  auto metadata = mesh::read_metadata(out("roblox.fbx"));
  ASSERT_TRUE(metadata.ok()) << metadata.status().message();
  EXPECT_EQ((*metadata)["export"]["max_texture"], 1024);
  EXPECT_EQ((*metadata)["paint"]["texture_size"], 2048);
}

// Shape, then paint, in one command: a textured file with the shape's settings and the paint's.
TEST_F(PaintCli, GenerateWithPaintWritesATexturedMeshWithBothSettings) {
  auto r = run_tessera(
      "generate -p \"a chair\" --paint --paint-steps 2 --paint-views 2 "
      "--paint-no-bottom --paint-view-size 64 -o " +
      shell_quote(out("chair.glb")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("view 3/3 top"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\n  paint "), std::string::npos) << r.err;  // its row in the timings
  auto glb = mesh::import_mesh_file(out("chair.glb"));
  ASSERT_TRUE(glb.ok()) << glb.status().message();
  EXPECT_EQ(glb->texture.width, 1024);
  EXPECT_EQ(glb->uvs.size(), 2 * static_cast<size_t>(glb->vertex_count()));
  auto metadata = mesh::read_metadata(out("chair.glb"));
  ASSERT_TRUE(metadata.ok()) << metadata.status().message();
  EXPECT_EQ((*metadata)["prompt"], "a chair");
  EXPECT_EQ((*metadata)["paint"]["prompt"], "a chair");
  EXPECT_EQ((*metadata)["paint"]["steps"], 2);
  EXPECT_FALSE((*metadata)["paint"]["views"]["bottom"].get<bool>());
  // Checked before the shape is generated, named with the prefix.
  r = run_tessera("generate -p x --paint --paint-views 40 -o " + shell_quote(out("no.glb")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ring of 40 views"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(" tokens"), std::string::npos) << "generated before the check: " << r.err;
  r = run_tessera("generate -p x --paint --texture " + shell_quote(out("any.png")) + " -o " +
                  shell_quote(out("no.glb")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--paint and --texture are exclusive"), std::string::npos) << r.err;
  r = run_tessera("generate -p x --paint -o " + shell_quote(out("no.stl")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("keeps its texture"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(" tokens"), std::string::npos) << r.err;
  r = run_tessera("generate -p x --paint --paint-sampler nope -o " + shell_quote(out("no.glb")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--paint-sampler"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out("no.glb")));
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
