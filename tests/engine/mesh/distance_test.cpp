// surface_distance against distances worked out by hand: nested cubes (face and corner regions),
// a point over each Voronoi region of one triangle, a shifted copy, and empty meshes.
#include "engine/mesh/distance.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessera::mesh {
namespace {

// An axis-aligned cube [-h, h]^3 as 12 outward triangles.
Mesh cube(float h) {
  Mesh m;
  for (int i = 0; i < 8; ++i) {
    m.positions.insert(m.positions.end(), {(i & 1) ? h : -h, (i & 2) ? h : -h, (i & 4) ? h : -h});
  }
  m.triangles = {0, 2, 1, 1, 2, 3, 4, 5, 6, 5, 7, 6, 0, 1, 4, 1, 5, 4,
                 2, 6, 3, 3, 6, 7, 0, 4, 2, 2, 4, 6, 1, 3, 5, 3, 7, 5};
  return m;
}

TEST(SurfaceDistance, NestedCubesGiveTheFaceAndCornerDistances) {
  auto d = surface_distance(cube(1.0f), cube(1.1f));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  // Inner corners lie 0.1 below the outer faces; outer corners sqrt(3) * 0.1 from the inner one.
  EXPECT_NEAR(d->a_to_b, 0.1, 1e-6);
  EXPECT_NEAR(d->b_to_a, std::sqrt(3.0) * 0.1, 1e-6);
  EXPECT_NEAR(d->hausdorff(), std::sqrt(3.0) * 0.1, 1e-6);
  EXPECT_NEAR(d->mean_a_to_b, 0.1, 1e-6);
  auto same = surface_distance(cube(1.0f), cube(1.0f));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->hausdorff(), 0.0);
}

TEST(SurfaceDistance, PointsOverEachRegionOfATriangle) {
  Mesh tri;
  tri.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  tri.triangles = {0, 1, 2};
  struct Case {
    float x, y, z;
    double want;
  };
  const Case cases[] = {
      {0.25f, 0.25f, 0.5f, 0.5},                 // over the face
      {-1.0f, -1.0f, 0.0f, std::sqrt(2.0)},      // beyond vertex 0
      {2.0f, 0.0f, 0.0f, 1.0},                   // beyond vertex 1
      {0.0f, 3.0f, 0.0f, 2.0},                   // beyond vertex 2
      {0.5f, -2.0f, 0.0f, 2.0},                  // beyond edge 01
      {-3.0f, 0.5f, 0.0f, 3.0},                  // beyond edge 02
      {1.0f, 1.0f, 0.0f, std::sqrt(0.5)},        // beyond edge 12
      {1.0f, 1.0f, 1.0f, std::sqrt(0.5 + 1.0)},  // beyond edge 12, off the plane
  };
  for (const Case& c : cases) {
    // A second mesh: one tiny triangle at the point (its vertices measure the distance).
    Mesh p;
    p.positions = {c.x, c.y, c.z, c.x, c.y, c.z, c.x, c.y, c.z};
    p.triangles = {0, 1, 2};
    auto d = surface_distance(p, tri);
    ASSERT_TRUE(d.ok());
    EXPECT_NEAR(d->a_to_b, c.want, 1e-6) << c.x << " " << c.y << " " << c.z;
  }
}

TEST(SurfaceDistance, ShiftedCopyAndEmptyMeshes) {
  Mesh a = cube(0.5f), b = cube(0.5f);
  for (size_t i = 0; i < b.positions.size(); i += 3) b.positions[i] += 0.01f;
  auto d = surface_distance(a, b);
  ASSERT_TRUE(d.ok());
  EXPECT_NEAR(d->hausdorff(), 0.01, 1e-6);
  auto none = surface_distance(Mesh{}, a);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("first mesh has no triangles"), std::string::npos);
  EXPECT_FALSE(surface_distance(a, Mesh{}).ok());
}

}  // namespace
}  // namespace tessera::mesh
