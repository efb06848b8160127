// A painted asset in a real consumer: `tessera paint` paints a generated ball on the embedded model
// (GLB, godot preset), `tessera convert` makes the FBX (unity) and the OBJ (roblox: its 1024 limit
// shrinks the 2048 paint) from it, and Blender 3.4 imports the three headless. For each file
// Blender must find an Image Texture node linked to the Principled BSDF's Base Color, packed in
// the GLB and in the FBX (imported with the PNG beside it removed: the copy embedded in it), a
// file beside the OBJ, and its pixels must be the painted ones: the texture as Tessera reads the
// same file, compared at a grid of pixels (every pixel of an atlas holds a colour: the charts, and
// the gutters and the gaps filled from them), and not one flat colour. Skips without `blender`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "engine/mesh/export_options.h"
#include "engine/mesh/import.h"
#include "tests/support/blender_run.h"
#include "tests/support/cli_runner.h"

namespace tessera {
namespace {

using tessera::testing::blender_on_path;
using tessera::testing::BlenderRun;
using tessera::testing::run_blender;
using tessera::testing::run_tessera;
using tessera::testing::shell_quote;

constexpr int kGrid = 8;  // samples per side

// Per file: whether a TEX_IMAGE feeds Base Color, packed or not, its size and the RGB (0..255) at
// a kGrid x kGrid grid of pixels, addressed from the top row (Blender stores the bottom row first).
constexpr const char* kScript = R"PY(
GRID = 8
for path in PATHS:
    import_file(path)
    o = [o for o in bpy.context.scene.objects if o.type == "MESH"][0]
    images = [l.from_node.image for m in o.data.materials if m and m.use_nodes
              for l in m.node_tree.links if l.to_node.type == "BSDF_PRINCIPLED"
              and l.to_socket.name == "Base Color" and l.from_node.type == "TEX_IMAGE"
              and l.from_node.image]
    out = {"path": path, "linked": bool(images), "uv_layers": len(o.data.uv_layers)}
    if images:
        im = images[0]
        w, h = im.size[0], im.size[1]
        px = im.pixels[:]
        samples = []
        for gy in range(GRID):
            for gx in range(GRID):
                x = (2 * gx + 1) * w // (2 * GRID)
                y = (2 * gy + 1) * h // (2 * GRID)
                i = ((h - 1 - y) * w + x) * 4
                samples.append([round(px[i + c] * 255) for c in range(3)])
        out.update({"packed": im.packed_file is not None, "width": w, "height": h,
                    "samples": samples})
    print("TESSERA_PAINT " + json.dumps(out), flush=True)
)PY";

TEST(BlenderPaint, PaintedGlbFbxObjShowTheirPaintedTextureOnBaseColor) {
  if (!blender_on_path()) GTEST_SKIP() << "blender is not on PATH";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("tessera_blender_paint_" +
                        std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                        std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto file = [&](const char* name) { return (dir / name).string(); };
  auto r = run_tessera("generate -p \"a ball\" -o " + shell_quote(file("ball.glb")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_tessera("paint " + shell_quote(file("ball.glb")) +
                  " -p \"a striped ball\" --steps 2 --views 4 --view-size 64 --texture-size 2048 "
                  "--preset godot -o " +
                  shell_quote(file("painted.glb")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_tessera("convert " + shell_quote(file("painted.glb")) + " --preset unity -o " +
                  shell_quote(file("unity.fbx")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_tessera("convert " + shell_quote(file("painted.glb")) + " --preset roblox -o " +
                  shell_quote(file("roblox.obj")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("texture shrunk from 2048x2048 to 1024x1024"), std::string::npos) << r.err;

  // What Tessera reads from each file (before the FBX's PNG goes).
  const std::vector<std::string> paths = {file("painted.glb"), file("unity.fbx"),
                                          file("roblox.obj")};
  std::map<std::string, mesh::TextureImage> ours;
  for (const std::string& p : paths) {
    auto m = mesh::import_mesh_file(p);
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_FALSE(m->texture.empty()) << p;
    ours[p] = m->texture;
  }
  EXPECT_EQ(ours[paths[0]].width, 2048);
  EXPECT_EQ(ours[paths[1]].width, 2048);  // unity takes 2048
  EXPECT_EQ(ours[paths[2]].width, 1024);  // roblox 1024
  ASSERT_TRUE(fs::remove(mesh::texture_path_for(paths[1])));

  const BlenderRun run = run_blender(kScript, paths, file("blender.log"), "TESSERA_PAINT ");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  int seen = 0;
  for (const std::string& line : run.tagged) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    const std::string path = j["path"];
    SCOPED_TRACE(path);
    ++seen;
    ASSERT_TRUE(j["linked"].get<bool>()) << "no image on Base Color";
    EXPECT_EQ(j["uv_layers"], 1);
    EXPECT_EQ(j["packed"].get<bool>(), !path.ends_with(".obj"));
    const mesh::TextureImage& t = ours[path];
    ASSERT_EQ(j["width"].get<int64_t>(), t.width);
    ASSERT_EQ(j["height"].get<int64_t>(), t.height);
    const auto& samples = j["samples"];
    ASSERT_EQ(samples.size(), static_cast<size_t>(kGrid * kGrid));
    double mean = 0, mean_sq = 0;
    for (int gy = 0; gy < kGrid; ++gy) {
      for (int gx = 0; gx < kGrid; ++gx) {
        const int64_t x = (2 * gx + 1) * t.width / (2 * kGrid);
        const int64_t y = (2 * gy + 1) * t.height / (2 * kGrid);
        const auto& s = samples[static_cast<size_t>(gy * kGrid + gx)];
        for (int c = 0; c < 3; ++c) {
          const int want = t.rgb[static_cast<size_t>((y * t.width + x) * 3 + c)];
          EXPECT_NEAR(s[static_cast<size_t>(c)].get<int>(), want, 1)
              << "pixel " << x << "," << y << " channel " << c;
          mean += want;
          mean_sq += static_cast<double>(want) * want;
        }
      }
    }
    const double n = 3.0 * kGrid * kGrid;
    mean /= n;
    EXPECT_GT(std::sqrt(std::max(0.0, mean_sq / n - mean * mean)), 3.0)
        << "the texture is one flat colour";
  }
  EXPECT_EQ(seen, 3) << run.output;
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace tessera
