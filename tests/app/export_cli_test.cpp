// `tessera generate` / `tessera decode` export options: -o *.fbx, --up-axis, --scale, --max-faces,
// on the parity-fixture model directory (random weights; only the files matter here).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/png.h"
#include "tests/support/cli_runner.h"
#include "tests/support/fixture_model_dir.h"

namespace tessera {
namespace {

using testing::FixtureModelDir;
using testing::run_tessera;
using testing::shell_quote;

using testing::slurp;

std::vector<float> obj_positions(const std::string& text) {
  std::vector<float> p;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    float x, y, z;
    if (std::sscanf(line.c_str(), "v %f %f %f", &x, &y, &z) == 3) p.insert(p.end(), {x, y, z});
  }
  return p;
}

// "wrote PATH (V vertices, T triangles)" -> T.
int64_t reported_triangles(const std::string& out) {
  const size_t at = out.find(" vertices, ");
  if (at == std::string::npos) return -1;
  return std::stoll(out.substr(at + 11));
}

class ExportCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = new FixtureModelDir("export_cli"); }
  static void TearDownTestSuite() { delete model_; }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("tessera-export-cli-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string model_arg() { return " --model " + shell_quote(model_->path()); }
  static std::string generate_args(const std::string& output) {
    return "generate" + model_arg() + " --prompt " + shell_quote(testing::kParityPrompt) +
           " --bbox 0.5 1 0.25 --resolution 17 -o " + shell_quote(output);
  }

  static FixtureModelDir* model_;
  std::filesystem::path dir_;
};
FixtureModelDir* ExportCliTest::model_ = nullptr;

TEST_F(ExportCliTest, GenerateWritesFbxAndDecodeAppliesUpAxisAndScale) {
  const std::string fbx = path("out.FBX"), tokens = path("tokens.txt");
  auto r = run_tessera(generate_args(fbx) + " --tokens-out " + shell_quote(tokens) +
                       " --up-axis z --scale 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string bytes = slurp(fbx);
  ASSERT_GT(bytes.size(), 27u);
  EXPECT_EQ(bytes.compare(0, 18, "Kaydara FBX Binary"), 0);

  // The same tokens decoded Y-up at scale 1 and Z-up at scale 2: (x, y, z) -> 2 (x, -z, y).
  const std::string y_obj = path("y.obj"), z_obj = path("z.obj");
  r = run_tessera("decode" + model_arg() + " --tokens " + shell_quote(tokens) +
                  " --resolution 17 -o " + shell_quote(y_obj));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_tessera("decode" + model_arg() + " --tokens " + shell_quote(tokens) +
                  " --resolution 17 --up-axis z --scale 2 -o " + shell_quote(z_obj));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(path("y.mtl")));
  const std::vector<float> y = obj_positions(slurp(y_obj)), z = obj_positions(slurp(z_obj));
  ASSERT_EQ(y.size(), z.size());
  ASSERT_FALSE(y.empty());
  for (size_t i = 0; i < y.size(); i += 3) {
    ASSERT_NEAR(z[i], 2 * y[i], 1e-5f);
    ASSERT_NEAR(z[i + 1], -2 * y[i + 2], 1e-5f);
    ASSERT_NEAR(z[i + 2], 2 * y[i + 1], 1e-5f);
  }
}

TEST_F(ExportCliTest, MaxFacesDecimates) {
  auto full = run_tessera(generate_args(path("full.glb")));
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const int64_t all = reported_triangles(full.out);
  ASSERT_GT(all, 40) << full.out;
  auto r =
      run_tessera(generate_args(path("small.glb")) + " --max-faces " + std::to_string(all / 2));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int64_t reduced = reported_triangles(r.out);
  EXPECT_GT(reduced, 0) << r.out;
  EXPECT_LE(reduced, all / 2) << r.out;
}

TEST_F(ExportCliTest, BadExportOptionsFailBeforeGenerating) {
  auto r = run_tessera(generate_args(path("a.fbx")) + " --scale 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--scale"), std::string::npos) << r.err;
  r = run_tessera(generate_args(path("a.fbx")) + " --up-axis x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--up-axis"), std::string::npos) << r.err;
  r = run_tessera(generate_args(path("a.ply")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(".fbx"), std::string::npos) << r.err;
  r = run_tessera(generate_args(path("a.fbx")) + " --max-faces -3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(path("a.fbx")));
}

TEST_F(ExportCliTest, TextureIsProjectedAndExported) {
  std::vector<uint8_t> rgb;
  for (int i = 0; i < 16 * 8; ++i) rgb.insert(rgb.end(), {static_cast<uint8_t>(i), 200, 30});
  auto png = encode_png(rgb.data(), 16, 8, 3);
  ASSERT_TRUE(png.ok());
  const std::string image = path("concept.png");
  ASSERT_TRUE(write_file_atomic(image, png->data(), png->size()).ok());

  auto r = run_tessera(generate_args(path("t.glb")) + " --texture " + shell_quote(image));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string glb = slurp(path("t.glb"));
  EXPECT_NE(glb.find("\"TEXCOORD_0\""), std::string::npos);
  EXPECT_NE(glb.find("\"image/png\""), std::string::npos);
  r = run_tessera(generate_args(path("t.obj")) + " --texture " + shell_quote(image) +
                  " --texture-margin 0.1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(path("t_texture.png")));
  EXPECT_NE(slurp(path("t.mtl")).find("map_Kd t_texture.png"), std::string::npos);
  EXPECT_NE(slurp(path("t.obj")).find("\nvt "), std::string::npos);

  // A missing or broken image, or a bad margin, fails before generating and writes nothing.
  const std::string broken = path("broken.png");
  ASSERT_TRUE(write_file_atomic(broken, png->data(), png->size() / 2).ok());
  for (const std::string& extra :
       {" --texture " + shell_quote(path("missing.png")), " --texture " + shell_quote(broken),
        " --texture " + shell_quote(image) + " --texture-margin 0.6"}) {
    r = run_tessera(generate_args(path("bad.fbx")) + extra);
    EXPECT_EQ(r.exit_code, 1) << extra;
    EXPECT_NE(r.err.find("--texture"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("bad.fbx")));
    EXPECT_FALSE(std::filesystem::exists(path("bad_texture.png")));
  }
}

}  // namespace
}  // namespace tessera
