// Each export preset checked in a real consumer: `tessera convert --preset NAME --size 1.8 --pivot
// base` writes an L-shaped test object (a tall post with a foot pointing to the model's front, +Z)
// in every format the preset names, and Blender 3.4 imports them headless in one run. For each
// file: the size in Blender's metres (FBX declares its unit: studs for roblox, centimetres for
// unreal) or in the preset's unit (an STL has none: millimetres for print), the up axis (the post
// stands along Blender's Z), the front (where the foot points: Blender's -Y for Y-up presets and
// blender, +X for unreal), the pivot (bottom centre at the origin), the custom properties an FBX
// carries (tessera_prompt, tessera_seed), and the LOD objects of --lods. Skips when `blender` is
// not on PATH.
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
#include "tests/support/blender_run.h"
#include "tests/support/cli_runner.h"

namespace tessera {
namespace {

using tessera::testing::blender_on_path;
using tessera::testing::BlenderRun;
using tessera::testing::run_blender;
using tessera::testing::run_tessera;
using tessera::testing::shell_quote;

// Prints, per file: the mesh objects (name, faces, custom tessera_* properties) and, over all of
// them, world bounds, plus the mean (x, y) of the vertices at the top (within 1 % of the height)
// of LOD0 (or the only object).
constexpr const char* kScript = R"PY(
for path in PATHS:
    import_file(path)
    bpy.context.view_layer.update()
    meshes = sorted([o for o in bpy.context.scene.objects if o.type == "MESH"], key=lambda o: o.name)
    objs = []
    pts = []
    for o in meshes:
        props = {k: (o[k] if isinstance(o[k], (int, float, str)) else str(o[k]))
                 for k in o.keys() if k.startswith("tessera_") and k != "tessera_settings"}
        objs.append({"name": o.name, "faces": len(o.data.polygons), "props": props})
    main = meshes[0]
    world = [main.matrix_world @ v.co for v in main.data.vertices]
    lo = [min(c[i] for c in world) for i in range(3)]
    hi = [max(c[i] for c in world) for i in range(3)]
    h = hi[2] - lo[2]
    top = [c for c in world if c[2] >= hi[2] - 0.01 * h]
    tx = sum(c[0] for c in top) / len(top)
    ty = sum(c[1] for c in top) / len(top)
    print("TESSERA_RESULT " + json.dumps({"path": path, "objects": objs, "lo": list(lo),
          "hi": list(hi), "top": [tx, ty]}), flush=True)
)PY";

// Appends an axis-aligned box (outward, counter-clockwise faces) to an OBJ text.
void box(std::string& obj, int& base, double x0, double y0, double z0, double x1, double y1,
         double z1) {
  const double xs[2] = {x0, x1}, ys[2] = {y0, y1}, zs[2] = {z0, z1};
  for (int i = 0; i < 8; ++i) {
    obj += "v " + std::to_string(xs[i & 1]) + " " + std::to_string(ys[(i >> 1) & 1]) + " " +
           std::to_string(zs[(i >> 2) & 1]) + "\n";
  }
  // Corner i: x = bit 0, y = bit 1, z = bit 2.
  const int faces[6][4] = {{0, 2, 3, 1}, {4, 5, 7, 6}, {0, 1, 5, 4},
                           {2, 6, 7, 3}, {0, 4, 6, 2}, {1, 3, 7, 5}};
  for (const auto& f : faces) {
    obj += "f " + std::to_string(base + f[0]) + " " + std::to_string(base + f[1]) + " " +
           std::to_string(base + f[2]) + "\n";
    obj += "f " + std::to_string(base + f[0]) + " " + std::to_string(base + f[2]) + " " +
           std::to_string(base + f[3]) + "\n";
  }
  base += 8;
}

TEST(BlenderPresets, EveryPresetImportsWithItsSizeAxesPivotAndProperties) {
  if (!blender_on_path()) GTEST_SKIP() << "blender is not on PATH";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("tessera_blender_presets_" +
                        std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The post: 0.6 x 2 x 0.4 (model units, Y up); the foot: 0.6 x 0.2 x 0.8 in front (+Z) at the
  // bottom. Tallest along Y, so --size sets the height; the top is behind the box's centre.
  std::string obj =
      "# tessera {\"tessera\": \"test\", \"prompt\": \"an L\", \"sampling\": {\"sample\": true, "
      "\"seed\": 7}, \"guidance\": 3}\n";
  int base = 1;
  box(obj, base, -0.3, -1.0, -0.2, 0.3, 1.0, 0.2);
  box(obj, base, -0.3, -1.0, 0.2, 0.3, -0.8, 1.0);
  const std::string input = (dir / "l_shape.obj").string();
  ASSERT_TRUE(write_file_atomic(input, obj.data(), obj.size()).ok());

  struct Case {
    std::string preset, file, extra;
    double metres_per_number;  // how many metres Blender's number means (1 but for STL)
    double front_x, front_y;   // where the foot points in Blender's world
    int lods;
  };
  const std::vector<Case> cases = {
      {"roblox", "roblox.fbx", "", 1.0, 0, -1, 0},
      {"unity", "unity.fbx", "", 1.0, 0, -1, 0},
      {"unity", "unity.glb", "", 1.0, 0, -1, 0},
      {"unreal", "unreal.fbx", "--lods 2", 1.0, 1, 0, 2},
      {"blender", "blender.fbx", "", 1.0, 0, -1, 0},
      {"blender", "blender.glb", "", 1.0, 0, -1, 0},
      {"godot", "godot.glb", "", 1.0, 0, -1, 0},
      {"print", "print.stl", "", 0.001, 0, -1, 0},
  };
  std::vector<std::string> paths;
  for (const Case& c : cases) {
    const std::string out = (dir / c.file).string();
    const auto r = run_tessera("convert " + shell_quote(input) + " -o " + shell_quote(out) +
                               " --preset " + c.preset + " --size 1.8 --pivot base " + c.extra);
    ASSERT_EQ(r.exit_code, 0) << c.file << "\n" << r.err;
    paths.push_back(out);
  }
  const BlenderRun run =
      run_blender(kScript, paths, (dir / "blender.log").string(), "TESSERA_RESULT ");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::map<std::string, nlohmann::json> results;
  for (const std::string& line : run.tagged) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    results[fs::path(j["path"].get<std::string>()).filename().string()] = j;
  }
  ASSERT_EQ(results.size(), cases.size()) << run.output;

  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const nlohmann::json& r = results[c.file];
    const double k = c.metres_per_number;
    double lo[3], hi[3];
    for (int i = 0; i < 3; ++i) {
      lo[i] = r["lo"][i].get<double>() * k;
      hi[i] = r["hi"][i].get<double>() * k;
    }
    // Size: the post's 2 units of height are the largest extent -> 1.8 m, along Blender's Z.
    const double tol = 0.01;
    EXPECT_NEAR(hi[2] - lo[2], 1.8, tol);
    const double horizontal[2] = {hi[0] - lo[0], hi[1] - lo[1]};
    const double width = 0.6 * 0.9, depth = 1.2 * 0.9;  // x; z (post + foot)
    // Front: the foot's direction in Blender's horizontal plane carries the depth.
    if (c.front_x != 0) {
      EXPECT_NEAR(horizontal[0], depth, tol);
      EXPECT_NEAR(horizontal[1], width, tol);
    } else {
      EXPECT_NEAR(horizontal[0], width, tol);
      EXPECT_NEAR(horizontal[1], depth, tol);
    }
    // Pivot base: the bottom at z = 0, centred horizontally.
    EXPECT_NEAR(lo[2], 0.0, tol);
    EXPECT_NEAR(lo[0] + hi[0], 0.0, tol);
    EXPECT_NEAR(lo[1] + hi[1], 0.0, tol);
    // The top of the post lies behind the centre: the foot points the other way.
    const double tx = r["top"][0].get<double>() * k, ty = r["top"][1].get<double>() * k;
    const double fx = -tx, fy = -ty;  // centre (0, 0) minus the top
    EXPECT_NEAR(fx / std::hypot(fx, fy), c.front_x, 0.05) << tx << " " << ty;
    EXPECT_NEAR(fy / std::hypot(fx, fy), c.front_y, 0.05) << tx << " " << ty;

    const nlohmann::json& objects = r["objects"];
    ASSERT_EQ(objects.size(), static_cast<size_t>(c.lods + 1));
    if (c.lods > 0) {
      for (int i = 0; i <= c.lods; ++i) {
        std::string name = "TesseraMesh_LOD";
        name += std::to_string(i);
        EXPECT_EQ(objects[i]["name"].get<std::string>(), name);
      }
    }
    if (fs::path(c.file).extension() == ".fbx") {
      const nlohmann::json& props = objects[0]["props"];
      EXPECT_EQ(props.value("tessera_prompt", ""), "an L") << props.dump();
      EXPECT_EQ(props.value("tessera_seed", -1), 7) << props.dump();
      EXPECT_EQ(props.value("tessera_preset", ""), c.preset) << props.dump();
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
