// The UV atlas (engine/mesh/uv_atlas.h) on meshes a user meets: a torus, a sphere, a cube with
// split normals, a triangle soup (no shared vertices, as STL), a thin strip, a mesh with
// degenerate triangles; each atlas checked for what the painter needs (no overlap, no flip, low
// stretch, the texture used), and what bad input gets.
#include "engine/mesh/uv_atlas.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <vector>

#include "engine/mesh/mesh.h"
#include "tests/support/test_meshes.h"

namespace tessera::mesh {
namespace {

using test::torus;
Mesh sphere(int stacks, int slices) {
  return test::ellipsoid(stacks, slices);
}

// A unit cube with one vertex per face corner (split normals): 24 vertices.
Mesh cube() {
  Mesh m;
  const int axes[6][3] = {{0, 1, 2}, {0, 1, 2}, {1, 2, 0}, {1, 2, 0}, {2, 0, 1}, {2, 0, 1}};
  for (int f = 0; f < 6; ++f) {
    const float side = f % 2 == 0 ? 0.5f : -0.5f;
    const int n = axes[f][2], u = axes[f][0], v = axes[f][1];
    const uint32_t base = static_cast<uint32_t>(m.positions.size() / 3);
    const float corners[4][2] = {{-0.5f, -0.5f}, {0.5f, -0.5f}, {0.5f, 0.5f}, {-0.5f, 0.5f}};
    for (const auto& c : corners) {
      float p[3];
      p[n] = side;
      p[u] = c[0];
      p[v] = c[1];
      m.positions.insert(m.positions.end(), p, p + 3);
      float nn[3] = {0, 0, 0};
      nn[n] = side > 0 ? 1.0f : -1.0f;
      m.normals.insert(m.normals.end(), nn, nn + 3);
    }
    if (side > 0) {
      m.triangles.insert(m.triangles.end(), {base, base + 1, base + 2, base, base + 2, base + 3});
    } else {
      m.triangles.insert(m.triangles.end(), {base, base + 2, base + 1, base, base + 3, base + 2});
    }
  }
  return m;
}

// Every triangle with its own three vertices.
Mesh soup(const Mesh& in) {
  Mesh m;
  for (uint32_t v : in.triangles) {
    m.positions.insert(m.positions.end(), in.positions.begin() + 3 * v,
                       in.positions.begin() + 3 * v + 3);
    m.triangles.push_back(static_cast<uint32_t>(m.triangles.size()));
  }
  return m;
}

void expect_good_atlas(const Mesh& in, const AtlasOptions& o, double min_utilization) {
  AtlasReport r;
  auto out = make_uv_atlas(in, o, &r);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_TRUE(validate(*out).ok());
  EXPECT_EQ(out->triangles.size(), in.triangles.size());
  EXPECT_EQ(out->uvs.size(), out->positions.size() / 3 * 2);
  EXPECT_EQ(r.overlapping, 0);
  EXPECT_EQ(r.flipped, 0);
  EXPECT_GE(r.utilization, min_utilization) << r.charts << " charts";
  EXPECT_LE(r.stretch_p50, 1.15);
  EXPECT_LE(r.stretch_p90, 1.4);
  EXPECT_GT(r.charts, 0);
  // Positions are kept; every output vertex sits on an input vertex.
  EXPECT_NEAR(surface_area(*out), surface_area(in), 1e-4 * surface_area(in));
  // The independent check agrees.
  auto again = check_uv_atlas(*out, o.size);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->overlapping, 0);
  EXPECT_NEAR(again->utilization, r.utilization, 1e-9);
}

// The painter's 60 % of the texture used, on a torus (a few long arcs: cut where they are
// hollow, nested by the bitmap placement), a sphere, a cube's six squares and a soup of separate
// triangles.
TEST(UvAtlas, TorusSphereCubeAndSoupGetValidAtlases) {
  AtlasOptions o;
  o.size = 1024;
  {
    SCOPED_TRACE("torus");
    expect_good_atlas(torus(48, 24), o, 0.6);
  }
  {
    SCOPED_TRACE("sphere");
    expect_good_atlas(sphere(24, 48), o, 0.6);
  }
  {
    SCOPED_TRACE("cube (split normals)");
    expect_good_atlas(cube(), o, 0.6);
  }
  {
    SCOPED_TRACE("torus soup");
    expect_good_atlas(soup(torus(32, 16)), o, 0.6);
  }
}

// A flat half ring: one chart by its normals, whose flattening fills under half of its box
// (the hollow inside the arc). It is cut into straighter pieces, each a valid part of the same
// flattening, and the texture is used.
TEST(UvAtlas, AHollowChartIsCutSoItsHollowIsNotWasted) {
  Mesh m;
  const int steps = 64;
  for (int i = 0; i <= steps; ++i) {
    const double a = M_PI * i / steps;
    for (double r : {0.6, 1.0}) {
      m.positions.push_back(static_cast<float>(r * std::cos(a)));
      m.positions.push_back(static_cast<float>(r * std::sin(a)));
      m.positions.push_back(0.0f);
    }
  }
  for (uint32_t i = 0; i < static_cast<uint32_t>(steps); ++i) {
    const uint32_t a = 2 * i, b = 2 * i + 1, c = 2 * i + 2, d = 2 * i + 3;
    m.triangles.insert(m.triangles.end(), {a, c, b, b, c, d});
  }
  int64_t charts = 0;
  grow_charts(m, 60.0f, &charts);
  ASSERT_EQ(charts, 1);
  AtlasOptions o;
  o.size = 1024;
  AtlasReport r;
  auto out = make_uv_atlas(m, o, &r);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_GE(r.split_charts, 1);
  EXPECT_GE(r.charts, 2);
  EXPECT_LE(r.charts, 4);  // at most two cuts over
  // Uncut, the arc uses 0.49 of the texture; four pieces of it 0.57 (a square holds four
  // trapezoids with room to spare).
  expect_good_atlas(m, o, 0.55);
}

TEST(UvAtlas, EveryTextureSizeAndTheGutter) {
  for (int size : {1024, 2048, 4096}) {
    AtlasOptions o;
    o.size = size;
    AtlasReport r;
    auto out = make_uv_atlas(torus(24, 12), o, &r);
    ASSERT_TRUE(out.ok()) << size;
    EXPECT_EQ(r.overlapping, 0) << size;
    for (float uv : out->uvs) {
      ASSERT_GE(uv, 0.0f);
      ASSERT_LE(uv, 1.0f);
    }
  }
}

TEST(UvAtlas, ExistingUvsAreKeptUnlessReplaced) {
  Mesh m = cube();
  m.uvs.assign(m.positions.size() / 3 * 2, 0.25f);
  AtlasReport r;
  auto kept = make_uv_atlas(m, AtlasOptions{}, &r);
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(r.kept_existing);
  EXPECT_EQ(kept->uvs, m.uvs);
  AtlasOptions replace;
  replace.replace_existing = true;
  auto fresh = make_uv_atlas(m, replace, &r);
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(r.kept_existing);
  EXPECT_NE(fresh->uvs, m.uvs);
}

TEST(UvAtlas, DegenerateTrianglesDoNotBreakIt) {
  Mesh m = torus(16, 8);
  // A zero-area sliver and a triangle on one point.
  m.triangles.insert(m.triangles.end(), {0, 1, 1, 2, 2, 2});
  AtlasReport r;
  auto out = make_uv_atlas(m, AtlasOptions{}, &r);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(r.overlapping, 0);
  EXPECT_EQ(out->triangles.size(), m.triangles.size());
}

TEST(UvAtlas, BadInputIsRefusedByName) {
  AtlasOptions o;
  EXPECT_FALSE(make_uv_atlas(Mesh{}, o).ok());
  o.size = 1000;
  auto bad = make_uv_atlas(cube(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("1000"), std::string::npos);
  o = {};
  o.gutter = -1;
  auto gutter = make_uv_atlas(cube(), o);
  ASSERT_FALSE(gutter.ok());
  EXPECT_NE(gutter.status().message().find("gutter -1"), std::string::npos);
  Mesh flat;  // all triangles on one point
  flat.positions = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  flat.triangles = {0, 1, 2};
  auto zero = make_uv_atlas(flat, AtlasOptions{});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("zero area"), std::string::npos);
  std::atomic<bool> cancel{true};
  o = {};
  o.cancel = &cancel;
  EXPECT_EQ(make_uv_atlas(torus(16, 8), o).status().code(), ErrorCode::kCancelled);
}

TEST(UvAtlas, ChartsThatCannotFitAreRefused) {
  // 200 separate triangles in a 64-texel texture with a 16-texel gutter: each needs 10 x 10.
  std::vector<FlatChart> charts(200);
  for (FlatChart& c : charts) {
    c.triangles = {0, 1, 2};
    c.faces = {0};
    c.uv = {0, 0, 1, 0, 0, 1};
  }
  auto packed = pack_charts(&charts, 64, 16, nullptr);
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(packed.status().message().find("200 charts do not fit"), std::string::npos)
      << packed.status().message();
  // 4 of them do.
  charts.resize(4);
  EXPECT_TRUE(pack_charts(&charts, 64, 16, nullptr).ok());
}

// The atlas keeps the mesh's winding: on a consistently wound mesh every triangle's UV area is
// positive (a mirrored chart would pass the per-island flip count).
TEST(UvAtlas, EveryChartKeepsTheMeshsWinding) {
  AtlasOptions o;
  o.size = 1024;
  for (const Mesh& in : {torus(48, 24), sphere(24, 48), cube()}) {
    auto out = make_uv_atlas(in, o);
    ASSERT_TRUE(out.ok());
    int64_t negative = 0;
    for (size_t t = 0; t < out->triangles.size(); t += 3) {
      const float* a = &out->uvs[2 * out->triangles[t]];
      const float* b = &out->uvs[2 * out->triangles[t + 1]];
      const float* c = &out->uvs[2 * out->triangles[t + 2]];
      const double area2 = (double(b[0]) - a[0]) * (double(c[1]) - a[1]) -
                           (double(b[1]) - a[1]) * (double(c[0]) - a[0]);
      if (area2 * 1024.0 * 1024.0 < -2e-3) ++negative;
    }
    EXPECT_EQ(negative, 0);
  }
}

TEST(UvAtlas, OverlapCheckFindsOverlapsAndIgnoresTouching) {
  Mesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 1, 0};
  m.triangles = {0, 1, 2, 1, 3, 2};
  m.uvs = {0.1f, 0.1f, 0.5f, 0.1f, 0.1f, 0.5f, 0.5f, 0.5f};
  auto ok = check_uv_atlas(m, 1024);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->overlapping, 0);                               // two triangles sharing an edge
  m.uvs = {0.1f, 0.1f, 0.5f, 0.1f, 0.1f, 0.5f, 0.05f, 0.05f};  // the second folds over the first
  auto bad = check_uv_atlas(m, 1024);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->overlapping, 1);
  EXPECT_EQ(bad->flipped, 1);
}

}  // namespace
}  // namespace tessera::mesh
