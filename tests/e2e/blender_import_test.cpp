// Real-consumer check of the exporters: Blender 3.4 imports an FBX (Y-up, and Z-up at scale 2) and
// an OBJ of a marching-cubes ellipsoid (a few thousand triangles) in one headless run, and reports
// the object count, vertex and face counts, material slots and world-space bounds it ended up
// with. Skips when `blender` is not on PATH. One Blender start (~5-10 s) serves all three files.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "engine/core/mapped_file.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/export.h"
#include "engine/mesh/extraction.h"
#include "tests/support/cli_runner.h"

namespace tessera::mesh {
namespace {

using tessera::testing::shell_quote;

// Runs inside Blender: for each path after "--", empty the scene, import, print one line.
// World bounds come from the object's bound box through matrix_world, so the axis conversion the
// importer applies as an object rotation is included.
constexpr const char* kBlenderScript = R"PY(
import sys, bpy
from mathutils import Vector
for path in sys.argv[sys.argv.index("--") + 1:]:
    for o in list(bpy.data.objects):
        bpy.data.objects.remove(o)
    if path.lower().endswith(".fbx"):
        bpy.ops.import_scene.fbx(filepath=path)
    else:
        bpy.ops.wm.obj_import(filepath=path)
    bpy.context.view_layer.update()
    meshes = [o for o in bpy.context.scene.objects if o.type == "MESH"]
    o = meshes[0]
    corners = [o.matrix_world @ Vector(c) for c in o.bound_box]
    lo = [min(c[i] for c in corners) for i in range(3)]
    hi = [max(c[i] for c in corners) for i in range(3)]
    print("TESSERA_RESULT", path, len(meshes), len(o.data.vertices), len(o.data.polygons),
          len(o.data.materials), *["%.6f" % v for v in lo + hi], flush=True)
)PY";

struct Imported {
  int objects = 0, vertices = 0, faces = 0, materials = 0;
  std::array<double, 3> lo{}, hi{};
};

bool blender_on_path() {
  return std::system("command -v blender >/dev/null 2>&1") == 0;
}

Mesh ellipsoid() {
  ExtractionOptions o;
  o.resolution_base = 5;
  auto m = extract_dense(
      [](const float* p, int64_t n, float* out) {
        for (int64_t i = 0; i < n; ++i) {
          const float x = p[3 * i] / 0.4f, y = p[3 * i + 1] / 0.8f, z = p[3 * i + 2] / 0.3f;
          out[i] = 10.0f * (1.0f - std::sqrt(x * x + y * y + z * z));
        }
        return Status();
      },
      o);
  EXPECT_TRUE(m.ok());
  Mesh mesh = std::move(*m);
  EXPECT_TRUE(cleanup(mesh, CleanupOptions()).ok());
  return mesh;
}

TEST(BlenderImport, FbxAndObjImportWithTheRightCountsAndOrientation) {
  if (!blender_on_path()) GTEST_SKIP() << "blender is not on PATH";
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() /
      ("tessera_blender_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(dir);
  const Mesh mesh = ellipsoid();
  ASSERT_GT(mesh.triangle_count(), 2000);

  const std::string fbx_y = (dir / "ellipsoid_y.fbx").string();
  const std::string fbx_z = (dir / "ellipsoid_z2.fbx").string();
  const std::string obj = (dir / "ellipsoid.obj").string();
  ASSERT_TRUE(write_mesh(mesh, fbx_y).ok());
  ExportOptions z_up;
  z_up.up_axis = UpAxis::kZ;
  z_up.scale = 2.0f;
  ASSERT_TRUE(write_mesh(mesh, fbx_z, z_up).ok());
  ASSERT_TRUE(write_mesh(mesh, obj).ok());

  const std::string log = (dir / "blender.log").string();
  const std::string command = "timeout 120 blender -b --factory-startup --python-expr " +
                              shell_quote(kBlenderScript) + " -- " + shell_quote(fbx_y) + " " +
                              shell_quote(fbx_z) + " " + shell_quote(obj) + " >" +
                              shell_quote(log) + " 2>&1";
  const int rc = std::system(command.c_str());
  auto output = read_file(log);
  ASSERT_TRUE(output.ok());
  ASSERT_EQ(rc, 0) << *output;

  std::map<std::string, Imported> results;
  std::istringstream in(*output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("TESSERA_RESULT ", 0) != 0) continue;
    std::istringstream fields(line.substr(15));
    std::string path;
    Imported r;
    fields >> path >> r.objects >> r.vertices >> r.faces >> r.materials >> r.lo[0] >> r.lo[1] >>
        r.lo[2] >> r.hi[0] >> r.hi[1] >> r.hi[2];
    ASSERT_FALSE(fields.fail()) << line;
    results[path] = r;
  }
  ASSERT_EQ(results.size(), 3u) << *output;

  // The mesh is Y-up: in Blender's Z-up world, model (x, y, z) should land on (x, -z, y), i.e.
  // standing upright (the tall model Y on Blender Z), at the chosen scale.
  const Bounds b = compute_bounds(mesh);
  auto expect_upright = [&](const std::string& path, double scale) {
    SCOPED_TRACE(path);
    ASSERT_EQ(results.count(path), 1u);
    const Imported& r = results[path];
    EXPECT_EQ(r.objects, 1);
    EXPECT_EQ(r.vertices, mesh.vertex_count());
    EXPECT_EQ(r.faces, mesh.triangle_count());
    EXPECT_EQ(r.materials, 1);
    const std::array<double, 3> lo = {b.min[0] * scale, -b.max[2] * scale, b.min[1] * scale};
    const std::array<double, 3> hi = {b.max[0] * scale, -b.min[2] * scale, b.max[1] * scale};
    for (int d = 0; d < 3; ++d) {
      EXPECT_NEAR(r.lo[d], lo[d], 1e-4 * scale) << "axis " << d;
      EXPECT_NEAR(r.hi[d], hi[d], 1e-4 * scale) << "axis " << d;
    }
  };
  expect_upright(fbx_y, 1.0);
  expect_upright(fbx_z, 2.0);
  expect_upright(obj, 1.0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::mesh
