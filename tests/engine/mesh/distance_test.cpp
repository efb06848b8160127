// surface_distance against distances worked out by hand: nested cubes (face and corner regions),
// a point over each Voronoi region of one triangle, a shifted copy, points around a finely
// tessellated sphere (the grid's ring search), zero-area triangles and empty meshes.
#include "engine/mesh/distance.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/mesh/extraction.h"

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

// A finely tessellated sphere (marching cubes on 65^3: a grid of many cells) against single points
// near it, inside it and far outside the grid's box: the ring search must find |‖p‖ - r| (up to the
// facets' distance from the true sphere) however many shells it has to search.
TEST(SurfaceDistance, PointsAroundAFineSphereNeedTheRingSearch) {
  const float r = 0.6f;
  const OccupancyFn sphere = [r](const float* p, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = r - std::sqrt(p[3 * i] * p[3 * i] + p[3 * i + 1] * p[3 * i + 1] +
                             p[3 * i + 2] * p[3 * i + 2]);
    }
    return Status();
  };
  ExtractionOptions o;
  o.resolution_base = 6;
  auto ball = extract_dense(sphere, o);
  ASSERT_TRUE(ball.ok());
  ASSERT_GT(ball->triangle_count(), 10000);
  const float points[][3] = {{0.0f, 0.0f, 0.0f},   {0.61f, 0.0f, 0.0f}, {0.0f, -0.3f, 0.2f},
                             {1.0f, 1.0f, 1.0f},   {-3.0f, 0.5f, 0.0f}, {0.0f, 0.0f, 9.0f},
                             {0.35f, 0.35f, 0.35f}};
  for (const auto& q : points) {
    Mesh p;
    p.positions = {q[0], q[1], q[2], q[0], q[1], q[2], q[0], q[1], q[2]};
    p.triangles = {0, 1, 2};  // a zero-area triangle: the point itself
    auto d = surface_distance(p, *ball);
    ASSERT_TRUE(d.ok());
    const double want =
        std::fabs(std::sqrt(double(q[0]) * q[0] + double(q[1]) * q[1] + double(q[2]) * q[2]) - r);
    // Marching cubes' facets lie within a small fraction of a voxel (2.1 / 64) of the sphere.
    EXPECT_NEAR(d->a_to_b, want, 0.004) << q[0] << " " << q[1] << " " << q[2];
    // From the ball to the point: the far side of the sphere.
    const double far =
        std::sqrt(double(q[0]) * q[0] + double(q[1]) * q[1] + double(q[2]) * q[2]) + r;
    EXPECT_NEAR(d->b_to_a, far, 0.004);
  }
}

TEST(SurfaceDistance, ZeroAreaTrianglesMeasureTheirEdges) {
  Mesh sliver;  // a == b: the segment from a to c
  sliver.positions = {0, 0, 0, 0, 0, 0, 1, 0, 0};
  sliver.triangles = {0, 1, 2};
  Mesh p;
  p.positions = {0.5f, 1, 0, 0.5f, 1, 0, 0.5f, 1, 0};
  p.triangles = {0, 1, 2};
  auto d = surface_distance(p, sliver);
  ASSERT_TRUE(d.ok());
  EXPECT_NEAR(d->a_to_b, 1.0, 1e-9);  // not NaN, not the distance to a vertex (sqrt 1.25)
  Mesh line;                          // collinear corners
  line.positions = {0, 0, 0, 1, 0, 0, 2, 0, 0};
  line.triangles = {0, 1, 2};
  d = surface_distance(p, line);
  ASSERT_TRUE(d.ok());
  EXPECT_NEAR(d->a_to_b, 1.0, 1e-9);
}

}  // namespace
}  // namespace tessera::mesh
