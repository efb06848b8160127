// Real-consumer check of the exporters: Blender 3.4 imports an FBX (Y-up, and Z-up at scale 2), an
// OBJ and a binary STL (Z-up) of a marching-cubes ellipsoid (a few thousand triangles) in one
// headless run, and reports the object count, vertex and face counts, material slots and
// world-space bounds it ended up with. Skips when `blender` is not on PATH. One Blender start
// (~5-10 s) serves all four files.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "core/mapped_file.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/export.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/texture.h"
#include "tests/support/blender_run.h"
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
    elif path.lower().endswith(".stl"):
        bpy.ops.import_mesh.stl(filepath=path)
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

using testing::blender_on_path;

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
  const std::string stl = (dir / "ellipsoid_z.stl").string();
  ASSERT_TRUE(write_mesh(mesh, fbx_y).ok());
  ExportOptions z_up;
  z_up.up_axis = UpAxis::kZ;
  z_up.scale = 2.0f;
  ASSERT_TRUE(write_mesh(mesh, fbx_z, z_up).ok());
  ASSERT_TRUE(write_mesh(mesh, obj).ok());
  // STL has no axis convention of its own: Blender (and slicers) take it as Z-up.
  ExportOptions stl_z;
  stl_z.up_axis = UpAxis::kZ;
  ASSERT_TRUE(write_mesh(mesh, stl, stl_z).ok());

  const std::string log = (dir / "blender.log").string();
  const std::string command = "timeout 120 blender -b --factory-startup --python-expr " +
                              shell_quote(kBlenderScript) + " -- " + shell_quote(fbx_y) + " " +
                              shell_quote(fbx_z) + " " + shell_quote(obj) + " " + shell_quote(stl) +
                              " >" + shell_quote(log) + " 2>&1";
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
  ASSERT_EQ(results.size(), 4u) << *output;

  // The mesh is Y-up: in Blender's Z-up world, model (x, y, z) should land on (x, -z, y), i.e.
  // standing upright (the tall model Y on Blender Z), at the chosen scale.
  const Bounds b = compute_bounds(mesh);
  auto expect_upright = [&](const std::string& path, double scale, int materials = 1) {
    SCOPED_TRACE(path);
    ASSERT_EQ(results.count(path), 1u);
    const Imported& r = results[path];
    EXPECT_EQ(r.objects, 1);
    EXPECT_EQ(r.vertices, mesh.vertex_count());
    EXPECT_EQ(r.faces, mesh.triangle_count());
    EXPECT_EQ(r.materials, materials);
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
  expect_upright(stl, 1.0, 0);  // Blender welds the STL's corners back into the same vertices
  fs::remove_all(dir);
}

// Textured exports: Blender finds a UV layer with a uv per corner and an image texture node, linked
// to the Principled BSDF's Base Color, whose image is our PNG (by file name for the OBJ, packed for
// the GLB and for the FBX, which is imported with its PNG removed: the copy embedded in it) at the
// atlas size. It also reads the
// uv of one corner on the front, so a flipped V in any format would show. Blender 3.4's glTF
// importer still uses numpy.bool (gone in numpy >= 1.24): the shared prelude puts the alias back.
constexpr const char* kBlenderTextureScript = R"PY(
for path in PATHS:
    import_file(path)
    o = [o for o in bpy.context.scene.objects if o.type == "MESH"][0]
    images = [l.from_node.image for m in o.data.materials if m and m.use_nodes
              for l in m.node_tree.links if l.to_node.type == "BSDF_PRINCIPLED"
              and l.to_socket.name == "Base Color" and l.from_node.type == "TEX_IMAGE"
              and l.from_node.image]
    packed = bool(images) and images[0].packed_file is not None
    name = "packed" if packed else (os.path.basename(images[0].filepath) if images else "none")
    size = images[0].size[:] if images else (0, 0)
    uv = o.data.uv_layers[0] if o.data.uv_layers else None
    # The corner nearest the camera of Blender's front view (world -Y, the Y-up mesh's +Z): the
    # middle of the front region (the atlas's top-left quarter).
    best = min(o.data.loops, key=lambda l: (o.matrix_world @ o.data.vertices[l.vertex_index].co)[1])
    u, v = uv.data[best.index].uv[:] if uv else (-1, -1)
    print("TESSERA_TEX", path, len(o.data.uv_layers), len(uv.data) if uv else 0, len(o.data.loops),
          name, size[0], size[1], "%.4f" % u, "%.4f" % v, flush=True)
)PY";

TEST(BlenderImport, TexturedObjFbxGlbHaveUvsAndTheImage) {
  if (!blender_on_path()) GTEST_SKIP() << "blender is not on PATH";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("tessera_blender_tex_test_" +
                        std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(dir);
  Mesh mesh = ellipsoid();
  TextureImage image;
  image.width = 64;
  image.height = 48;
  for (int64_t y = 0; y < image.height; ++y) {
    for (int64_t x = 0; x < image.width; ++x) {
      image.rgb.insert(image.rgb.end(),
                       {static_cast<uint8_t>(4 * x), static_cast<uint8_t>(5 * y), 90});
    }
  }
  ASSERT_TRUE(project_texture_front(image, {}, &mesh).ok());
  const std::vector<std::string> paths = {
      (dir / "tex.obj").string(), (dir / "embedded.fbx").string(), (dir / "tex.glb").string()};
  ExportOptions z_up;
  z_up.up_axis = UpAxis::kZ;
  ASSERT_TRUE(write_mesh(mesh, paths[0]).ok());
  ASSERT_TRUE(write_mesh(mesh, paths[1], z_up).ok());
  ASSERT_TRUE(write_mesh(mesh, paths[2]).ok());
  ASSERT_TRUE(fs::remove(texture_path_for(paths[1])));  // the FBX shows its embedded copy

  const testing::BlenderRun run = testing::run_blender(
      kBlenderTextureScript, paths, (dir / "blender.log").string(), "TESSERA_TEX ");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  int seen = 0;
  for (const std::string& line : run.tagged) {
    std::istringstream f(line);
    std::string path, name;
    int layers = 0, uv_count = 0, loops = 0, w = 0, h = 0;
    double u = 0, v = 0;
    f >> path >> layers >> uv_count >> loops >> name >> w >> h >> u >> v;
    ASSERT_FALSE(f.fail()) << line;
    SCOPED_TRACE(path);
    ++seen;
    EXPECT_EQ(layers, 1);
    EXPECT_EQ(uv_count, loops);
    EXPECT_EQ(loops, 3 * mesh.triangle_count());
    EXPECT_EQ(w, mesh.texture.width);
    EXPECT_EQ(h, mesh.texture.height);
    const char* expected_name = path.ends_with(".obj") ? "tex_texture.png" : "packed";
    EXPECT_EQ(name, expected_name);
    // The image centre in the front region: (0.25, 0.75) of the atlas (Blender's v is up), give
    // or take the gutters and the pole's offset from the bounds' centre.
    EXPECT_NEAR(u, 0.25, 0.05);
    EXPECT_NEAR(v, 0.75, 0.05);
  }
  EXPECT_EQ(seen, 3) << run.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::mesh
