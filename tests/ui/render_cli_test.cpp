// `tessera render`, run as a user would: a turntable GIF and a PNG of a mesh file, plus bad input.
// Skips when this machine cannot make an EGL surfaceless context.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/mesh/export.h"
#include "tests/support/cli_runner.h"
#include "tests/ui/gif_decoder.h"
#include "ui/render/offscreen.h"

namespace tessera {
namespace {

using testing::run_tessera;
using testing::shell_quote;

// A closed octahedron-ish blob: enough to cover pixels from every angle.
mesh::Mesh octahedron() {
  mesh::Mesh m;
  m.positions = {1, 0, 0, -1, 0, 0, 0, 1, 0, 0, -1, 0, 0, 0, 1, 0, 0, -1};
  m.triangles = {0, 2, 4, 2, 1, 4, 1, 3, 4, 3, 0, 4, 2, 0, 5, 1, 2, 5, 3, 1, 5, 0, 3, 5};
  return m;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class RenderCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!render::OffscreenContext::create(8, 8).ok()) GTEST_SKIP() << "no EGL surfaceless context";
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("tessera-render-cli-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(RenderCliTest, TurntableGifHasTheFramesAndTheyTurn) {
  ASSERT_TRUE(mesh::write_glb(octahedron(), path("shape.glb")).ok());
  const auto r = run_tessera("render " + shell_quote(path("shape.glb")) + " --turntable " +
                             shell_quote(path("spin.gif")) + " --frames 6 --size 64x48 --delay 5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("6 frames 64x48"), std::string::npos) << r.out;
  const auto gif = testing::decode_gif(read_bytes(path("spin.gif")));
  ASSERT_TRUE(gif.error.empty()) << gif.error;
  EXPECT_EQ(gif.width, 64);
  EXPECT_EQ(gif.height, 48);
  ASSERT_EQ(gif.rgb.size(), 6u);
  EXPECT_EQ(gif.delays[0], 5);
  EXPECT_TRUE(gif.loops);
  // The frames differ (the camera turns) and each shows the mesh over the background.
  int differing = 0;
  for (size_t i = 0; i < gif.rgb[0].size(); ++i) differing += gif.rgb[0][i] != gif.rgb[1][i];
  EXPECT_GT(differing, 50);
  const uint8_t* centre = &gif.rgb[0][3 * (24 * 64 + 32)];
  const uint8_t* corner = &gif.rgb[0][0];
  EXPECT_GT(std::abs(centre[0] - corner[0]) + std::abs(centre[1] - corner[1]) +
                std::abs(centre[2] - corner[2]),
            60);
}

TEST_F(RenderCliTest, PngSingleFrameAndContactSheet) {
  ASSERT_TRUE(mesh::write_obj(octahedron(), path("shape.obj")).ok());
  auto r =
      run_tessera("render " + shell_quote(path("shape.obj")) + " --turntable " +
                  shell_quote(path("one.png")) + " --size 40x30 --shading normals --wireframe");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto png = read_bytes(path("one.png"));
  ASSERT_GT(png.size(), 24u);
  EXPECT_EQ(png[19], 40);  // IHDR width (big-endian, low byte)
  EXPECT_EQ(png[23], 30);
  r = run_tessera("render " + shell_quote(path("shape.obj")) + " --turntable " +
                  shell_quote(path("sheet.png")) + " --size 40x30 --frames 4 --shading matcap");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  png = read_bytes(path("sheet.png"));
  ASSERT_GT(png.size(), 24u);
  EXPECT_EQ(png[19], 80);  // 2 x 2 sheet
  EXPECT_EQ(png[23], 60);
}

TEST_F(RenderCliTest, BadInputIsReportedWithoutOutput) {
  ASSERT_TRUE(mesh::write_obj(octahedron(), path("shape.obj")).ok());
  const std::string obj = shell_quote(path("shape.obj"));
  // Usage errors: exit 2, naming the bad value.
  auto r =
      run_tessera("render " + obj + " --turntable " + shell_quote(path("x.gif")) + " --size 0x10");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--size '0x10'"), std::string::npos) << r.err;
  r = run_tessera("render " + obj + " --turntable " + shell_quote(path("x.bmp")));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(".gif or .png"), std::string::npos) << r.err;
  r = run_tessera("render " + obj + " --turntable " + shell_quote(path("x.gif")) +
                  " --shading toon");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("toon"), std::string::npos) << r.err;
  // Runtime errors: exit 1, naming the file.
  r = run_tessera("render " + shell_quote(path("missing.obj")) + " --turntable " +
                  shell_quote(path("x.gif")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.obj"), std::string::npos) << r.err;
  {
    std::ofstream junk(path("junk.glb"), std::ios::binary);
    junk << "this is not a glb file at all";
  }
  r = run_tessera("render " + shell_quote(path("junk.glb")) + " --turntable " +
                  shell_quote(path("x.gif")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("junk.glb"), std::string::npos) << r.err;
  r = run_tessera("render " + obj + " --turntable " + shell_quote(path("no-such-dir/x.png")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no-such-dir"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("x.gif")));
  EXPECT_FALSE(std::filesystem::exists(path("x.bmp")));
}

}  // namespace
}  // namespace tessera
