// Closed, manifold meshes by default (issue 22): whatever the field, the extracted surface has no
// boundary edges and no non-manifold edges, by index and after welding coincident vertices, through
// extraction, clean-up, decimation and export. The fields here provoke what opened meshes before:
// a solid that reaches the extraction box, logits exactly at iso on lattice points (vertices of
// several edges at one lattice point), and thin noisy features.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/mesh/cleanup.h"
#include "engine/mesh/export.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/import.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {
namespace {

std::string describe(const Topology& t) {
  return std::to_string(t.boundary_edges) + " boundary, " + std::to_string(t.non_manifold_edges) +
         " non-manifold, " + std::to_string(t.misoriented_edges) + " misoriented edges, " +
         std::to_string(t.components) + " components, euler " +
         std::to_string(t.euler_characteristic);
}

void expect_closed(const Mesh& m, const std::string& what) {
  const Topology by_index = compute_topology(m);
  EXPECT_TRUE(by_index.watertight()) << what << " (by index): " << describe(by_index);
  EXPECT_EQ(by_index.misoriented_edges, 0) << what;
  const Topology welded = compute_welded_topology(m);
  EXPECT_TRUE(welded.watertight()) << what << " (welded): " << describe(welded);
  EXPECT_EQ(welded.misoriented_edges, 0) << what;
  EXPECT_EQ(welded.vertices_used, by_index.vertices_used) << what << ": coincident vertices";
}

// A ball of radius r centred at c: reaches out of the [-1.05, 1.05]^3 box when |c| + r > 1.05.
OccupancyFn ball(float r, float cx, float cy, float cz) {
  return [=](const float* p, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      const float x = p[3 * i] - cx, y = p[3 * i + 1] - cy, z = p[3 * i + 2] - cz;
      out[i] = 8.0f * (r - std::sqrt(x * x + y * y + z * z));
    }
    return Status();
  };
}

// Logits quantised to steps of 1/4: a large share of the lattice sits exactly at iso 0.
OccupancyFn terraced(float r) {
  return [=](const float* p, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      const float d = std::sqrt(p[3 * i] * p[3 * i] + 2.0f * p[3 * i + 1] * p[3 * i + 1] +
                                p[3 * i + 2] * p[3 * i + 2]);
      out[i] = std::floor(16.0f * (r - d)) / 4.0f;
    }
    return Status();
  };
}

// A sum of random Gaussian bumps minus a threshold: blobby, thin necks, several components, some
// cut by the box.
OccupancyFn blobs(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pos(-1.2f, 1.2f), rad(0.08f, 0.45f);
  std::vector<std::array<float, 4>> b(24);
  for (auto& v : b) v = {pos(rng), pos(rng), pos(rng), rad(rng)};
  return [b](const float* p, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      float s = 0.0f;
      for (const auto& v : b) {
        const float x = p[3 * i] - v[0], y = p[3 * i + 1] - v[1], z = p[3 * i + 2] - v[2];
        s += std::exp(-(x * x + y * y + z * z) / (v[3] * v[3]));
      }
      out[i] = 6.0f * (s - 0.5f);
    }
    return Status();
  };
}

TEST(ClosedMesh, SolidReachingTheBoxIsCappedThere) {
  ExtractionOptions o;
  o.resolution_base = 6;
  for (const auto& [name, field] : std::vector<std::pair<std::string, OccupancyFn>>{
           {"ball r 1.4", ball(1.4f, 0, 0, 0)},
           {"ball through a corner", ball(0.8f, 0.9f, 0.9f, 0.9f)}}) {
    auto dense = extract_dense(field, o);
    ASSERT_TRUE(dense.ok()) << name << ": " << dense.status().to_string();
    expect_closed(*dense, name + " dense");
    auto c2f = extract_coarse_to_fine(field, o);
    ASSERT_TRUE(c2f.ok()) << name;
    expect_closed(*c2f, name + " coarse-to-fine");
    EXPECT_EQ(compute_topology(*c2f).euler_characteristic, 2) << name;
    const Bounds b = compute_bounds(*c2f);
    for (int d = 0; d < 3; ++d) {
      EXPECT_GE(b.min[d], -o.bound) << name;
      EXPECT_LE(b.max[d], o.bound) << name;
    }
  }
  // Inside everywhere is no shape (the model drew no surface), though the box faces would close it.
  auto full = extract_coarse_to_fine(ball(9.0f, 0, 0, 0), o);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("no surface"), std::string::npos);
  EXPECT_FALSE(extract_dense(ball(9.0f, 0, 0, 0), o).ok());
}

// Smoothing (on by default in cleanup) keeps the connectivity and the volume, and leaves an open
// rim where it is.
TEST(ClosedMesh, SmoothingKeepsTopologyVolumeAndRims) {
  ExtractionOptions o;
  o.resolution_base = 5;
  auto raw = extract_coarse_to_fine(ball(0.7f, 0, 0, 0), o);
  ASSERT_TRUE(raw.ok());
  Mesh smooth = *raw;
  ASSERT_TRUE(cleanup(smooth, CleanupOptions{}).ok());
  expect_closed(smooth, "smoothed ball");
  const double v = 4.0 / 3.0 * 3.14159265358979 * 0.343;
  EXPECT_NEAR(signed_volume(smooth), v, 0.03 * v);
  // On a field with stair steps (logits in steps of 1/4, the way saturated occupancy logits make
  // vertices snap to cell middles), the radius varies less after smoothing.
  // Standard deviation of sqrt(x^2 + wy y^2 + z^2) over the vertices (constant on the level sets
  // of both fields).
  auto spread = [](const Mesh& m, double wy = 1.0) {
    double sum = 0, sum2 = 0;
    const auto n = static_cast<double>(m.vertex_count());
    for (int64_t i = 0; i < m.vertex_count(); ++i) {
      const double x = m.positions[3 * i], y = m.positions[3 * i + 1], z = m.positions[3 * i + 2];
      const double r = std::sqrt(x * x + wy * y * y + z * z);
      sum += r;
      sum2 += r * r;
    }
    return std::sqrt(std::max(0.0, sum2 / n - (sum / n) * (sum / n)));
  };
  auto steps = extract_coarse_to_fine(terraced(0.8f), o);
  ASSERT_TRUE(steps.ok());
  Mesh steps_smooth = *steps;
  ASSERT_TRUE(cleanup(steps_smooth, CleanupOptions{}).ok());
  expect_closed(steps_smooth, "smoothed terraced field");
  EXPECT_LT(spread(steps_smooth, 2.0), 0.8 * spread(*steps, 2.0));
  EXPECT_LT(spread(smooth), 0.01);  // an accurate surface stays accurate
  // An open square: its rim does not move.
  Mesh quad;
  quad.positions = {0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0.5f, 0.5f, 0.3f};
  quad.triangles = {0, 1, 4, 1, 2, 4, 2, 3, 4, 3, 0, 4};
  const std::vector<float> before = quad.positions;
  smooth_taubin(quad, 10);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(quad.positions[i], before[i]) << i;
  EXPECT_LT(quad.positions[14], 0.3f);  // the apex moved towards its neighbours' plane
}

TEST(ClosedMesh, LogitsExactlyAtIsoKeepVerticesApart) {
  ExtractionOptions o;
  o.resolution_base = 6;
  auto c2f = extract_coarse_to_fine(terraced(0.8f), o);
  ASSERT_TRUE(c2f.ok()) << c2f.status().to_string();
  expect_closed(*c2f, "terraced field");
  auto dense = extract_dense(terraced(0.8f), o);
  ASSERT_TRUE(dense.ok());
  expect_closed(*dense, "terraced field, dense");
}

TEST(ClosedMesh, CleanupDecimationAndExportKeepRandomFieldsClosed) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera_closed_mesh_test";
  std::filesystem::create_directories(dir);
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    ExtractionOptions o;
    o.resolution_base = 6;
    auto raw = extract_coarse_to_fine(blobs(seed), o);
    if (!raw.ok()) continue;  // no surface for this seed
    const std::string what = "blobs seed " + std::to_string(seed);
    auto dense = extract_dense(blobs(seed), o);
    ASSERT_TRUE(dense.ok());
    expect_closed(*dense, what + " dense");
    EXPECT_EQ(dense->triangle_count(), raw->triangle_count()) << what;
    expect_closed(*raw, what + " extracted");
    Mesh clean = *raw;
    ASSERT_TRUE(cleanup(clean, CleanupOptions{}).ok());
    expect_closed(clean, what + " cleaned");
    for (int64_t budget : {4000, 1000}) {
      Mesh small = clean;
      const Status st = reduce_triangles(small, budget);
      if (st.code() == ErrorCode::kUnsupported) break;
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_LE(small.triangle_count(), budget);
      expect_closed(small, what + " decimated to " + std::to_string(budget));
    }
    for (const char* ext : {".obj", ".glb", ".fbx"}) {
      const auto path = dir / ("blobs" + std::to_string(seed) + ext);
      ASSERT_TRUE(write_mesh(clean, path.string()).ok()) << path;
      auto back = import_mesh_file(path.string());
      ASSERT_TRUE(back.ok()) << path << ": " << back.status().to_string();
      const Topology t = compute_welded_topology(*back);
      EXPECT_TRUE(t.watertight()) << what << " as " << ext << ": " << describe(t);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::mesh
