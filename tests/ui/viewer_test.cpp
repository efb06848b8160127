// tessera-view end to end under Xvfb: open a mesh, take a screenshot, quit; the screenshot shows
// the mesh in the middle and the ImGui panel in the top-left corner. Skips when xvfb-run or the
// viewer binary (built with the GUI) is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/mesh/export.h"
#include "tests/support/cli_runner.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wuseless-cast"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_PNG
#include <stb_image.h>
#pragma GCC diagnostic pop

namespace tessera {
namespace {

TEST(ViewerTest, ScreenshotShowsTheMeshAndThePanel) {
  const std::string viewer = std::string(TESSERA_BINARY_DIR) + "/app/tessera-view";
  if (!std::filesystem::exists(viewer)) GTEST_SKIP() << "tessera-view is not built";
  if (std::system("command -v xvfb-run >/dev/null 2>&1") != 0) GTEST_SKIP() << "no xvfb-run";
  const auto dir = std::filesystem::temp_directory_path() / "tessera-viewer-test";
  std::filesystem::create_directories(dir);
  mesh::Mesh cube;
  cube.positions = {-1, -1, -1, 1, -1, -1, 1, 1, -1, -1, 1, -1,
                    -1, -1, 1,  1, -1, 1,  1, 1, 1,  -1, 1, 1};
  cube.triangles = {0, 2, 1, 0, 3, 2, 4, 5, 6, 4, 6, 7, 0, 1, 5, 0, 5, 4,
                    2, 3, 7, 2, 7, 6, 1, 2, 6, 1, 6, 5, 0, 4, 7, 0, 7, 3};
  ASSERT_TRUE(mesh::write_obj(cube, (dir / "cube.obj").string()).ok());
  const std::string shot = (dir / "shot.png").string();
  std::filesystem::remove(shot);
  const std::string command =
      "xvfb-run -a -s '-screen 0 800x600x24' " + testing::shell_quote(viewer) + " " +
      testing::shell_quote((dir / "cube.obj").string()) + " --size 480x360 --screenshot " +
      testing::shell_quote(shot) + " --quit > " + testing::shell_quote((dir / "log.txt").string()) +
      " 2>&1";
  const int rc = std::system(command.c_str());
  ASSERT_EQ(rc, 0) << command;
  int w = 0, h = 0, channels = 0;
  unsigned char* pixels = stbi_load(shot.c_str(), &w, &h, &channels, 4);
  ASSERT_NE(pixels, nullptr) << "no screenshot at " << shot;
  EXPECT_EQ(w, 480);
  EXPECT_EQ(h, 360);
  auto px = [&](int x, int y) { return pixels + (static_cast<size_t>(y) * w + x) * 4; };
  // Background (default RenderOptions) at the bottom-right corner, the lit cube in the middle.
  const unsigned char* corner = px(w - 3, h - 3);
  const unsigned char* centre = px(w / 2 + 20, h / 2);
  EXPECT_NEAR(corner[0], 0.17 * 255, 3);
  EXPECT_GT(std::abs(centre[0] - corner[0]) + std::abs(centre[1] - corner[1]), 40);
  // The ImGui panel ("View" at 10,10): its title bar is a saturated blue-grey unlike the scene.
  int panel = 0;
  for (int y = 10; y < 40; ++y) {
    for (int x = 12; x < 200; ++x) panel += std::abs(px(x, y)[2] - corner[2]) > 25;
  }
  EXPECT_GT(panel, 1000);
  stbi_image_free(pixels);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
