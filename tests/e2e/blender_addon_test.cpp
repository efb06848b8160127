// The Blender add-on (integrations/blender) in Blender 3.4 headless, against a `tessera serve` this
// test starts: installed from its zip as an artist would, a job of two variations generated, and
// the objects checked (names, custom properties, size, side by side); a UV sphere painted through
// "Paint selected" (the textured copy where the sphere is, its packed image on the base colour);
// the message when the server is not running, and the server's own words for a bad request. Skips
// when `blender` is not on PATH.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/command_output.h"
#include "tests/support/serve_process.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

TEST(BlenderAddon, GeneratesVariationsIntoTheSceneWithTheirSettings) {
  if (std::system("command -v blender >/dev/null 2>&1") != 0) GTEST_SKIP() << "no blender";
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-blender-addon-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  testing::ServeProcess server(dir / "server", {});
  ASSERT_GT(server.port(), 0) << server.err();
  const fs::path zip = dir / "tessera-blender.zip";
  const std::string source = TESSERA_SOURCE_DIR;
  ASSERT_EQ(std::system(
                (source + "/scripts/blender-addon-zip.sh " + zip.string() + " >/dev/null").c_str()),
            0);
  const std::string out = testing::command_output(
      "BLENDER_USER_SCRIPTS=" + (dir / "scripts").string() +
      " blender -b --factory-startup --python " + source + "/tests/e2e/blender_addon_check.py -- " +
      zip.string() + " " + server.url() + " 2>&1");
  const size_t at = out.find("RESULT ");
  ASSERT_NE(at, std::string::npos) << out;
  const nlohmann::json r =
      nlohmann::json::parse(out.substr(at + 7, out.find('\n', at) - at - 7), nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_TRUE(r["panel"].get<bool>());
  EXPECT_TRUE(r["operator"].get<bool>());
  EXPECT_EQ(r["state"], "done");
  ASSERT_EQ(r["objects"].size(), 2u) << r.dump();
  for (int c = 0; c < 2; ++c) {
    const nlohmann::json& o = r["objects"][c];
    EXPECT_EQ(o["name"], "Tessera a chair " + std::to_string(c + 1));
    EXPECT_EQ(o["prompt"], "a chair");
    EXPECT_EQ(o["seed"].get<int>(), 3 + c);
    EXPECT_GT(o["triangles"].get<int>(), 100);
    EXPECT_NEAR(o["height"].get<double>(), 1.5, 1e-3);
  }
  EXPECT_GT(r["objects"][1]["x"].get<double>() - r["objects"][0]["x"].get<double>(), 1.5);
  EXPECT_TRUE(r["paint_operator"].get<bool>());
  EXPECT_EQ(r["paint_state"], "done") << r.dump();
  ASSERT_TRUE(r.contains("painted")) << r.dump();
  const nlohmann::json& p = r["painted"];
  EXPECT_EQ(p["name"], "Sphere painted");
  EXPECT_EQ(p["triangles"], p["sphere_triangles"]);
  EXPECT_NEAR(p["centre"][0].get<double>(), 3.0, 0.05);
  EXPECT_NEAR(p["centre"][1].get<double>(), 1.0, 0.05);
  EXPECT_NEAR(p["centre"][2].get<double>(), 0.5, 0.05);
  EXPECT_EQ(p["image"], nlohmann::json::array({1024, 1024}));
  EXPECT_TRUE(p["packed"].get<bool>());
  EXPECT_EQ(p["prompt"], "a red ball");
  // Through the panel's button: fetched off the main thread, imported by its timer.
  EXPECT_EQ(r["panel_paint_operator"], nlohmann::json::array({"FINISHED"})) << r.dump();
  const nlohmann::json& panel = r["panel_paint"];
  EXPECT_EQ(panel["status"].get<std::string>().rfind("Painted: Sphere painted", 0), 0u) << r.dump();
  EXPECT_TRUE(panel["fetched_in_background"].get<bool>()) << r.dump();
  EXPECT_EQ(panel["painted"].get<std::string>().rfind("Sphere painted", 0), 0u) << r.dump();
  EXPECT_NE(r["unreachable"].get<std::string>().find("tessera serve"), std::string::npos)
      << r.dump();
  EXPECT_NE(r["refused"].get<std::string>().find("\"variations\""), std::string::npos) << r.dump();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
