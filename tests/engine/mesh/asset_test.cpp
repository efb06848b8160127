// Assets for a platform (asset.h, export.h placement; issue 24): the presets' fields; placement by
// size, height and pivot into any unit and axis frame, checked against hand-computed coordinates;
// hole closing (small holes closed and oriented, large ones left and reported, texture seams
// treated as one vertex); LOD chains at halving budgets, closed when asked; GLB and FBX files with
// several levels; FBX units and user properties read back; 3MF units; bad options refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "core/png.h"
#include "engine/mesh/asset.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/export.h"
#include "engine/mesh/export_fbx.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/import.h"
#include "engine/mesh/import_internal.h"
#include "engine/mesh/metadata.h"
#include "engine/mesh/threemf.h"

namespace tessera::mesh {
namespace {

// An axis-aligned box [lo, hi] with 8 shared vertices and outward CCW triangles.
Mesh box(float x0, float y0, float z0, float x1, float y1, float z1) {
  Mesh m;
  for (int i = 0; i < 8; ++i) {
    m.positions.push_back(i & 1 ? x1 : x0);
    m.positions.push_back(i & 2 ? y1 : y0);
    m.positions.push_back(i & 4 ? z1 : z0);
  }
  const uint32_t quads[6][4] = {{4, 5, 7, 6}, {1, 0, 2, 3}, {0, 4, 6, 2},
                                {5, 1, 3, 7}, {6, 7, 3, 2}, {0, 1, 5, 4}};
  for (const auto& q : quads) {
    m.triangles.insert(m.triangles.end(), {q[0], q[1], q[2], q[0], q[2], q[3]});
  }
  return m;
}

Mesh sphere(int base = 5) {
  ExtractionOptions o;
  o.resolution_base = base;
  auto m = extract_dense(
      [](const float* p, int64_t n, float* out) {
        for (int64_t i = 0; i < n; ++i) {
          const float r = std::sqrt(p[3 * i] * p[3 * i] + p[3 * i + 1] * p[3 * i + 1] +
                                    p[3 * i + 2] * p[3 * i + 2]);
          out[i] = 10.0f * (0.7f - r);
        }
        return Status();
      },
      o);
  EXPECT_TRUE(m.ok());
  Mesh mesh = m.ok() ? std::move(*m) : Mesh();
  EXPECT_TRUE(cleanup(mesh, CleanupOptions()).ok());
  return mesh;
}

// Removes the triangles whose centroid lies above y = cut: opens a hole at the top.
Mesh cut_top(const Mesh& in, float cut) {
  Mesh m = in;
  m.triangles.clear();
  for (size_t t = 0; t < in.triangles.size(); t += 3) {
    float y = 0;
    for (int k = 0; k < 3; ++k) y += in.positions[3 * in.triangles[t + k] + 1];
    if (y / 3 <= cut) m.triangles.insert(m.triangles.end(), &in.triangles[t], &in.triangles[t] + 3);
  }
  return m;
}

TEST(AssetPresetTest, TheSixPresetsAndWhatTheySet) {
  ASSERT_EQ(asset_presets().size(), 6u);
  EXPECT_EQ(preset_names(), "roblox, unity, unreal, blender, godot, print");
  const AssetPreset* roblox = find_preset("Roblox");
  ASSERT_NE(roblox, nullptr);
  EXPECT_EQ(roblox->max_triangles, 20000);
  EXPECT_TRUE(roblox->closed);
  EXPECT_EQ(roblox->unit, LengthUnit::kStud);
  EXPECT_EQ(describe_preset(*roblox),
            "Y-up, studs, at most 20000 triangles, closed and manifold, textures up to 1024, .fbx "
            "or .obj");
  const AssetPreset* unreal = find_preset("unreal");
  ASSERT_NE(unreal, nullptr);
  EXPECT_EQ(describe_preset(*unreal), "Z-up, front +X, cm, textures up to 4096, .fbx");
  EXPECT_EQ(find_preset("unity")->max_texture_size, 2048);
  EXPECT_EQ(find_preset("godot")->max_texture_size, 4096);
  EXPECT_EQ(find_preset("blender")->max_texture_size, 0);
  EXPECT_EQ(find_preset("print")->unit, LengthUnit::kMillimetre);
  EXPECT_EQ(find_preset("maya"), nullptr);
  // glTF is Y-up metres whatever the preset.
  const ExportOptions glb = preset_export_options(*find_preset("blender"), ".GLB");
  EXPECT_EQ(glb.up_axis, UpAxis::kY);
  EXPECT_EQ(glb.unit, LengthUnit::kMetre);
  const ExportOptions fbx = preset_export_options(*unreal, ".fbx");
  EXPECT_EQ(fbx.up_axis, UpAxis::kZ);
  EXPECT_TRUE(fbx.front_x);
  EXPECT_EQ(fbx.unit, LengthUnit::kCentimetre);
}

// A texture over the limit is shrunk to it, aspect kept, by area average (a 2x2 block of four
// colours becomes their mean); one within it, or no limit, is left alone; the report says both.
TEST(PrepareAssetTest, TheTextureLimitShrinksALargerTextureOnly) {
  Mesh m = box(0, 0, 0, 1, 1, 1);
  for (int v = 0; v < 8; ++v) m.uvs.insert(m.uvs.end(), {0.1f * v, 0.05f * v});
  m.texture.width = 256;
  m.texture.height = 128;
  for (int64_t y = 0; y < 128; ++y) {
    for (int64_t x = 0; x < 256; ++x) {
      const uint8_t c = static_cast<uint8_t>(((x & 1) + 2 * (y & 1)) * 60);  // 0, 60, 120, 180
      m.texture.rgb.insert(m.texture.rgb.end(), {c, static_cast<uint8_t>(255 - c), 7});
    }
  }
  AssetOptions o;
  o.max_texture_size = 128;
  AssetReport report;
  auto levels = prepare_asset(m, o, &report);
  ASSERT_TRUE(levels.ok()) << levels.status().message();
  const TextureImage& t = levels->front().texture;
  EXPECT_EQ(t.width, 128);
  EXPECT_EQ(t.height, 64);
  EXPECT_TRUE(report.texture_shrunk());
  EXPECT_EQ(report.texture_width_before, 256);
  EXPECT_EQ(report.texture_height_before, 128);
  EXPECT_EQ(report.texture_width, 128);
  for (size_t i = 0; i < t.rgb.size(); i += 3) {
    ASSERT_EQ(t.rgb[i], 90);
    ASSERT_EQ(t.rgb[i + 1], 165);
    ASSERT_EQ(t.rgb[i + 2], 7);
  }
  EXPECT_EQ(levels->front().uvs, m.uvs);
  for (int64_t limit : {int64_t{0}, int64_t{256}, int64_t{4096}}) {
    o.max_texture_size = limit;
    levels = prepare_asset(m, o, &report);
    ASSERT_TRUE(levels.ok());
    EXPECT_EQ(levels->front().texture.width, 256) << limit;
    EXPECT_FALSE(report.texture_shrunk()) << limit;
    EXPECT_EQ(report.texture_width, 256);
  }
  o.max_texture_size = 16;
  const Status bad = validate_asset_options(o);
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("texture limit 16"), std::string::npos) << bad.message();
}

TEST(AssetPlacementTest, SizeHeightPivotUnitAndAxes) {
  // 1 x 2 x 4 box from (1, -1, -2): largest extent z (4), height y (2).
  const Mesh m = box(1, -1, -2, 2, 1, 2);
  ExportOptions o;
  o.size_m = 2.0;
  o.pivot = Pivot::kBase;
  o.unit = LengthUnit::kCentimetre;
  Mesh out = transform_for_export(m, o);
  Bounds b = compute_bounds(out);
  // scale 0.5 m per unit, in cm: x [-25, 25], y [0, 100], z [-100, 100].
  EXPECT_NEAR(b.min[0], -25, 1e-3);
  EXPECT_NEAR(b.max[0], 25, 1e-3);
  EXPECT_NEAR(b.min[1], 0, 1e-3);
  EXPECT_NEAR(b.max[1], 100, 1e-3);
  EXPECT_NEAR(b.min[2], -100, 1e-3);
  EXPECT_NEAR(b.max[2], 100, 1e-3);

  // Height 3 m, centred, Z-up with the front (+Z) along +X: (x, y, z) -> (z, x, y).
  o = ExportOptions();
  o.height_m = 3.0;
  o.pivot = Pivot::kCenter;
  o.up_axis = UpAxis::kZ;
  o.front_x = true;
  out = transform_for_export(m, o);
  b = compute_bounds(out);
  EXPECT_NEAR(b.max[0] - b.min[0], 6.0, 1e-4);  // the model's z (4) * 1.5
  EXPECT_NEAR(b.max[1] - b.min[1], 1.5, 1e-4);  // the model's x
  EXPECT_NEAR(b.max[2] - b.min[2], 3.0, 1e-4);  // the height, up
  EXPECT_NEAR(b.min[2] + b.max[2], 0.0, 1e-4);
  EXPECT_GT(signed_volume(out), 0.0);  // a rotation: still outward

  // Studs: 0.28 m each.
  o = ExportOptions();
  o.size_m = 2.8;
  o.unit = LengthUnit::kStud;
  b = compute_bounds(transform_for_export(m, o));
  EXPECT_NEAR(b.max[2] - b.min[2], 10.0, 1e-4);

  // A placement resolved once applies the same to every level.
  o = ExportOptions();
  o.size_m = 1.0;
  o.pivot = Pivot::kBase;
  auto resolved = resolve_placement(m, o);
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(resolved->pivot, Pivot::kOrigin);
  EXPECT_FLOAT_EQ(resolved->scale, 0.25f);
  EXPECT_DOUBLE_EQ(resolved->offset[1], 1.0);
  const Mesh small = box(1.2f, -1, -1, 1.8f, 0, 1);
  b = compute_bounds(transform_for_export(small, *resolved));
  EXPECT_NEAR(b.min[1], 0.0, 1e-6);  // its bottom sits where LOD0's does
}

TEST(AssetPlacementTest, BadPlacementIsRefused) {
  ExportOptions o;
  o.size_m = -1;
  EXPECT_FALSE(validate_export_options(o).ok());
  o.size_m = 1;
  o.height_m = 1;
  EXPECT_FALSE(validate_export_options(o).ok());
  o = ExportOptions();
  o.front_x = true;  // needs Z-up
  EXPECT_FALSE(validate_export_options(o).ok());
  o = ExportOptions();
  o.height_m = 1;
  Mesh flat;  // a single triangle in the y = 0 plane has no height
  flat.positions = {0, 0, 0, 1, 0, 0, 0, 0, 1};
  flat.triangles = {0, 1, 2};
  const auto r = resolve_placement(flat, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("height"), std::string::npos);
  EXPECT_EQ(parse_unit("Centimetres"), LengthUnit::kCentimetre);
  EXPECT_FALSE(parse_unit("furlongs").has_value());
  EXPECT_EQ(parse_pivot("centre"), Pivot::kCenter);
}

TEST(HoleClosingTest, SmallHolesCloseOrientedAndLargeOnesAreReported) {
  // A box without its top (+Y) face: one 4-edge hole.
  Mesh m = box(-1, -1, -1, 1, 1, 1);
  m.triangles.erase(m.triangles.begin() + 24, m.triangles.begin() + 30);  // quad {6, 7, 3, 2}
  ASSERT_EQ(compute_topology(m).boundary_edges, 4);
  Mesh big = m;
  HoleReport r = close_holes(big, 3);  // too large for 3 edges
  EXPECT_EQ(r.holes_found, 1);
  EXPECT_EQ(r.holes_closed, 0);
  EXPECT_FALSE(r.closed());
  EXPECT_EQ(r.boundary_edges_left, 4);

  r = close_holes(m);
  EXPECT_EQ(r.holes_closed, 1);
  EXPECT_EQ(r.triangles_added, 4);
  EXPECT_TRUE(r.closed());
  const Topology t = compute_topology(m);
  EXPECT_TRUE(t.watertight());
  EXPECT_EQ(t.misoriented_edges, 0);
  EXPECT_NEAR(signed_volume(m), 8.0, 1e-5);  // the fan is flat: the volume is the box's

  // A sphere with its cap cut off (a ~30-edge hole), with a texture seam: duplicated vertices at
  // the same positions count as one.
  Mesh s = cut_top(sphere(), 0.5f);
  ASSERT_GT(compute_welded_topology(s).boundary_edges, 8);
  Mesh seam = s;
  seam.uvs.assign(static_cast<size_t>(seam.vertex_count()) * 2, 0.5f);
  // Split vertex 0's use in the first triangle onto a copy at the same position.
  const uint32_t copy = static_cast<uint32_t>(seam.vertex_count());
  seam.positions.insert(seam.positions.end(),
                        {seam.positions[0], seam.positions[1], seam.positions[2]});
  seam.uvs.insert(seam.uvs.end(), {0.25f, 0.25f});
  if (!seam.normals.empty()) seam.normals.insert(seam.normals.end(), {0, 1, 0});
  for (size_t i = 0; i < 3; ++i) {
    if (seam.triangles[i] == 0) seam.triangles[i] = copy;
  }
  ASSERT_TRUE(validate(seam).ok());
  r = close_holes(seam);
  EXPECT_TRUE(r.closed()) << r.boundary_edges_left << " " << r.non_manifold_edges;
  EXPECT_TRUE(validate(seam).ok());
  EXPECT_GT(signed_volume(seam), 0.0);
}

TEST(PrepareAssetTest, LodsHalveTheBudgetAndStayClosed) {
  const Mesh s = sphere(6);
  ASSERT_GT(s.triangle_count(), 4000);
  AssetOptions o;
  o.max_triangles = 4000;
  o.lods = 3;
  o.closed = true;
  AssetReport report;
  auto levels = prepare_asset(s, o, &report);
  ASSERT_TRUE(levels.ok()) << levels.status().message();
  ASSERT_EQ(levels->size(), 4u);
  ASSERT_EQ(report.lod_triangles.size(), 4u);
  EXPECT_LE(report.lod_triangles[0], 4000);
  for (size_t i = 1; i < levels->size(); ++i) {
    EXPECT_LE(report.lod_triangles[i], (report.lod_triangles[0] >> i) + 8) << i;
    EXPECT_LT(report.lod_triangles[i], report.lod_triangles[i - 1]) << i;
    EXPECT_TRUE(compute_welded_topology((*levels)[i]).watertight()) << i;
  }
  EXPECT_TRUE(report.closed);

  // An open mesh closed on the way out.
  Mesh open = cut_top(s, 0.55f);
  o = AssetOptions();
  o.closed = true;
  levels = prepare_asset(open, o, &report);
  ASSERT_TRUE(levels.ok());
  EXPECT_TRUE(report.closed);
  EXPECT_TRUE(compute_welded_topology((*levels)[0]).watertight());
}

TEST(PrepareAssetTest, BudgetsAMeshCannotMeetAreRefused) {
  AssetOptions o;
  o.closed = true;
  o.max_triangles = 3;
  Status st = validate_asset_options(o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("4 triangles a closed mesh needs"), std::string::npos)
      << st.message();
  o.max_triangles = 40;
  o.lods = 4;  // LOD4 would get 2
  st = validate_asset_options(o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("LOD4"), std::string::npos) << st.message();
  o.lods = 9;
  EXPECT_FALSE(validate_asset_options(o).ok());
  o = AssetOptions();
  o.lods = 3;
  EXPECT_FALSE(validate_asset_options(o, 6).ok());  // a 6-triangle mesh halves to 0 at LOD3
  EXPECT_TRUE(validate_asset_options(o, 40).ok());
}

TEST(LodFileTest, GlbAndFbxHoldOneNamedMeshPerLevel) {
  const Mesh s = sphere();
  AssetOptions o;
  o.lods = 2;
  auto levels = prepare_asset(s, o);
  ASSERT_TRUE(levels.ok());
  std::vector<const Mesh*> ptrs;
  for (const Mesh& m : *levels) ptrs.push_back(&m);
  ExportOptions e;
  e.metadata_json = R"({"tessera":"t","prompt":"a ball","sampling":{"seed":12345678901}})";
  auto glb = to_glb_lods(ptrs, e);
  ASSERT_TRUE(glb.ok());
  for (const char* name : {"TesseraMesh_LOD0", "TesseraMesh_LOD1", "TesseraMesh_LOD2"}) {
    EXPECT_NE(glb->find(name), std::string::npos) << name;
  }
  auto back = parse_glb(*glb, "lods.glb");
  ASSERT_TRUE(back.ok()) << back.status().message();
  int64_t total = 0;
  for (const Mesh& m : *levels) total += m.triangle_count();
  EXPECT_EQ(back->triangle_count(), total);  // the reader merges the scene's meshes

  e.unit = LengthUnit::kCentimetre;
  auto fbx = to_fbx_lods(ptrs, e, "");
  ASSERT_TRUE(fbx.ok());
  for (const char* name : {"TesseraMesh_LOD0", "TesseraMesh_LOD1", "TesseraMesh_LOD2"}) {
    EXPECT_NE(fbx->find(name), std::string::npos) << name;
  }
  auto fbx_back = parse_fbx(*fbx, "lods.fbx");
  ASSERT_TRUE(fbx_back.ok()) << fbx_back.status().message();
  EXPECT_EQ(fbx_back->triangle_count(), total);
  // The settings come back whole; the 64-bit seed as exact text in its own property.
  auto settings = fbx_model_string_property(*fbx, "lods.fbx", kFbxSettingsProperty);
  ASSERT_TRUE(settings.ok());
  ASSERT_TRUE(settings->has_value());
  EXPECT_EQ(nlohmann::json::parse(**settings)["sampling"]["seed"].get<uint64_t>(), 12345678901u);
  auto seed = fbx_model_string_property(*fbx, "lods.fbx", "tessera_seed");
  ASSERT_TRUE(seed.ok());
  EXPECT_EQ(seed->value_or(""), "12345678901");
  auto prompt = fbx_model_string_property(*fbx, "lods.fbx", "tessera_prompt");
  EXPECT_EQ(prompt->value_or(""), "a ball");
  // Centimetres: UnitScaleFactor 1 (bytes: the double 1.0 follows the name's P record).
  EXPECT_NE(fbx->find("UnitScaleFactor"), std::string::npos);

  // A GLB in centimetres is refused; LODs in an OBJ too.
  EXPECT_FALSE(to_glb_lods(ptrs, e).ok());
  const Status st = write_mesh_lods(*levels, "/tmp/x_lods.obj");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("x_lods.obj"), std::string::npos);
}

TEST(LodFileTest, ThreeMfCarriesItsUnit) {
  if (!have_3mf()) GTEST_SKIP() << "built without lib3mf";
  const Mesh m = box(-1, -1, -1, 1, 1, 1);
  ExportOptions e;
  e.unit = LengthUnit::kMillimetre;
  e.size_m = 0.05;
  auto bytes = to_3mf(m, e);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto back = parse_3mf(*bytes, "box.3mf");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_DOUBLE_EQ(back->unit_metres, 1e-3);
  const Bounds b = compute_bounds(back->mesh);
  EXPECT_NEAR(b.max[0] - b.min[0], 50.0, 1e-3);  // 5 cm in millimetres
  e.unit = LengthUnit::kStud;
  EXPECT_FALSE(to_3mf(m, e).ok());
}

TEST(LodFileTest, TheTextureBesideAnObjCarriesTheSettings) {
  Mesh m = box(-1, -1, -1, 1, 1, 1);
  m.uvs.assign(16, 0.5f);
  m.texture.width = 2;
  m.texture.height = 2;
  m.texture.rgb.assign(12, 200);
  ExportOptions e;
  e.metadata_json = R"({"tessera":"t","prompt":"a crate"})";
  const std::string path =
      (std::filesystem::temp_directory_path() / "tessera_asset_tex.obj").string();
  ASSERT_TRUE(write_mesh(m, path, e).ok());
  auto png = read_file(texture_path_for(path));
  ASSERT_TRUE(png.ok());
  auto text = read_png_text(*png, "texture");
  ASSERT_TRUE(text.ok());
  ASSERT_EQ(text->size(), 2u);
  EXPECT_EQ((*text)[1].first, "tessera");
  EXPECT_EQ((*text)[1].second, e.metadata_json);
  std::filesystem::remove(path);
  std::filesystem::remove(texture_path_for(path));
  std::filesystem::remove(std::filesystem::path(path).replace_extension(".mtl"));
}

}  // namespace
}  // namespace tessera::mesh
