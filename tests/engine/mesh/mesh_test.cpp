// Marching cubes, coarse-to-fine extraction, clean-up and exporters on analytic fields.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/export.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/marching_cubes.h"
#include "engine/mesh/mesh.h"
#include "kernels/marching_tets.h"

namespace tessera::mesh {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Occupancy-style logits: positive inside, scaled so that |logit| grows quickly off the surface.
OccupancyFn sphere(float r, int64_t* calls = nullptr) {
  return [r, calls](const float* p, int64_t n, float* out) {
    if (calls != nullptr) *calls += n;
    for (int64_t i = 0; i < n; ++i) {
      out[i] = 10.0f * (r - std::sqrt(p[3 * i] * p[3 * i] + p[3 * i + 1] * p[3 * i + 1] +
                                      p[3 * i + 2] * p[3 * i + 2]));
    }
    return Status();
  };
}

OccupancyFn torus(float major, float minor) {
  return [major, minor](const float* p, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      const float q = std::sqrt(p[3 * i] * p[3 * i] + p[3 * i + 1] * p[3 * i + 1]) - major;
      out[i] = 10.0f * (minor - std::sqrt(q * q + p[3 * i + 2] * p[3 * i + 2]));
    }
    return Status();
  };
}

TEST(MarchingCubes, SphereIsClosedWithAnalyticAreaAndVolume) {
  ExtractionOptions o;
  o.resolution_base = 6;
  auto mesh = extract_dense(sphere(0.7f), o);
  ASSERT_TRUE(mesh.ok()) << mesh.status().to_string();
  const Topology t = compute_topology(*mesh);
  EXPECT_TRUE(t.watertight()) << t.boundary_edges << " boundary, " << t.non_manifold_edges;
  EXPECT_EQ(t.euler_characteristic, 2);
  const double r = 0.7;
  EXPECT_NEAR(surface_area(*mesh), 4 * kPi * r * r, 0.01 * 4 * kPi * r * r);
  EXPECT_NEAR(signed_volume(*mesh), 4.0 / 3 * kPi * r * r * r, 0.01 * 4.0 / 3 * kPi * r * r * r);
}

TEST(MarchingCubes, TorusHasGenusOne) {
  ExtractionOptions o;
  o.resolution_base = 6;
  auto mesh = extract_dense(torus(0.6f, 0.25f), o);
  ASSERT_TRUE(mesh.ok()) << mesh.status().to_string();
  const Topology t = compute_topology(*mesh);
  EXPECT_TRUE(t.watertight());
  EXPECT_EQ(t.euler_characteristic, 0);
  EXPECT_NEAR(signed_volume(*mesh), 2 * kPi * kPi * 0.6 * 0.25 * 0.25,
              0.02 * 2 * kPi * kPi * 0.6 * 0.0625);
}

TEST(MarchingCubes, RandomFieldIsConsistent) {
  // A noisy field has every ambiguous configuration; the Kuhn split must still close every edge
  // (the lattice boundary is forced outside so the surface is closed).
  Lattice l;
  l.n = {12, 11, 10};
  std::vector<float> v(static_cast<size_t>(l.num_points()));
  uint32_t s = 12345;
  for (int64_t k = 0; k < l.n[2]; ++k) {
    for (int64_t j = 0; j < l.n[1]; ++j) {
      for (int64_t i = 0; i < l.n[0]; ++i) {
        s = s * 1664525u + 1013904223u;
        const bool border =
            i == 0 || j == 0 || k == 0 || i == l.n[0] - 1 || j == l.n[1] - 1 || k == l.n[2] - 1;
        v[static_cast<size_t>(l.index(i, j, k))] =
            border ? -1.0f : static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
      }
    }
  }
  auto mesh = marching_cubes(v.data(), l, 0.0f);
  ASSERT_TRUE(mesh.ok());
  ASSERT_GT(mesh->triangle_count(), 100);
  EXPECT_TRUE(compute_topology(*mesh).watertight());
  EXPECT_GT(signed_volume(*mesh), 0.0);
}

TEST(MarchingCubes, RejectsDegenerateLattice) {
  Lattice l;
  l.n = {1, 4, 4};
  float v[16] = {};
  EXPECT_FALSE(marching_cubes(v, l, 0.0f).ok());
}

TEST(Extraction, CoarseToFineMatchesDenseWithFarFewerQueries) {
  for (const auto& [name, field] :
       {std::pair{"sphere", sphere(0.8f)}, std::pair{"torus", torus(0.6f, 0.25f)}}) {
    ExtractionOptions o;
    o.resolution_base = 6;
    ExtractionStats dense_stats, c2f_stats;
    auto dense = extract_dense(field, o, &dense_stats);
    auto c2f = extract_coarse_to_fine(field, o, &c2f_stats);
    ASSERT_TRUE(dense.ok() && c2f.ok()) << name;
    // Every surface cell found: the same lattice vertices, hence the same mesh up to ordering.
    EXPECT_EQ(c2f->triangle_count(), dense->triangle_count()) << name;
    EXPECT_EQ(c2f->vertex_count(), dense->vertex_count()) << name;
    EXPECT_NEAR(surface_area(*c2f), surface_area(*dense), 1e-6 * surface_area(*dense)) << name;
    EXPECT_TRUE(compute_topology(*c2f).watertight()) << name;
    EXPECT_EQ(dense_stats.queries, 65 * 65 * 65);
    // At 2^8 + 1 the dense grid would need 257^3 queries; count the coarse-to-fine ones.
    o.resolution_base = 8;
    auto fine = extract_coarse_to_fine(field, o, &c2f_stats);
    ASSERT_TRUE(fine.ok()) << name;
    EXPECT_LE(c2f_stats.queries * 20, int64_t{257} * 257 * 257)
        << name << ": " << c2f_stats.queries;
    EXPECT_EQ(c2f_stats.levels, 4);
    // Where they went: one count per lattice, coarse (33^3, every point) first, summing to all.
    ASSERT_EQ(c2f_stats.level_queries.size(), 4u) << name;
    EXPECT_EQ(c2f_stats.level_queries[0], 33 * 33 * 33) << name;
    int64_t sum = 0;
    for (int64_t q : c2f_stats.level_queries) sum += q;
    EXPECT_EQ(sum, c2f_stats.queries) << name;
    EXPECT_LE(c2f_stats.tracking_queries, c2f_stats.level_queries[3]) << name;
    EXPECT_NE(describe_level_queries(c2f_stats).find("35937 + "), std::string::npos)
        << describe_level_queries(c2f_stats);
    EXPECT_TRUE(compute_topology(*fine).watertight()) << name;
  }
}

// Each triangle as its three corner positions (quantised to 1e-5), rotated so the smallest corner
// comes first (orientation kept), the list sorted: equal for the same surface however its
// vertices are numbered.
std::vector<std::array<std::array<int64_t, 3>, 3>> canonical_triangles(const Mesh& m) {
  std::vector<std::array<std::array<int64_t, 3>, 3>> out;
  for (size_t t = 0; t + 2 < m.triangles.size(); t += 3) {
    std::array<std::array<int64_t, 3>, 3> tri;
    for (int v = 0; v < 3; ++v) {
      for (int d = 0; d < 3; ++d) {
        tri[static_cast<size_t>(v)][static_cast<size_t>(d)] = std::llround(
            1e5 *
            m.positions[3 * m.triangles[t + static_cast<size_t>(v)] + static_cast<size_t>(d)]);
      }
    }
    const auto first = std::min_element(tri.begin(), tri.end()) - tri.begin();
    std::rotate(tri.begin(), tri.begin() + first, tri.end());
    out.push_back(tri);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The data-parallel polygonizer (the CUDA one's host reference) makes the same surface as the
// host polygonizer from the extractor's surface cells: same triangles (as positions, oriented),
// same number of welded vertices, watertight; vertices numbered in edge-key order.
TEST(Extraction, DataParallelPolygonizerMakesTheSameSurface) {
  for (const auto& [name, field] :
       {std::pair{"sphere", sphere(0.8f)}, std::pair{"torus", torus(0.6f, 0.25f)}}) {
    for (int base : {5, 7}) {
      ExtractionOptions o;
      o.resolution_base = base;
      o.coarse_base = 4;
      auto host = extract_coarse_to_fine(field, o);
      o.polygonize = kernels::cpu::polygonize_cells;
      auto parallel = extract_coarse_to_fine(field, o);
      ASSERT_TRUE(host.ok() && parallel.ok()) << name;
      EXPECT_EQ(parallel->vertex_count(), host->vertex_count()) << name << " " << base;
      EXPECT_EQ(parallel->triangle_count(), host->triangle_count()) << name << " " << base;
      EXPECT_EQ(canonical_triangles(*parallel), canonical_triangles(*host)) << name << " " << base;
      EXPECT_TRUE(compute_topology(*parallel).watertight()) << name;
      EXPECT_NEAR(signed_volume(*parallel), signed_volume(*host), 1e-9) << name;
    }
  }
}

TEST(Extraction, DataParallelPolygonizerMatchesOnANoisyFieldInAnyCellOrder) {
  // Every ambiguous configuration, cells given in a shuffled order.
  kernels::CellGrid g;
  g.n[0] = 9;
  g.n[1] = 8;
  g.n[2] = 7;
  g.origin[0] = -1.0f;
  g.spacing = 0.25f;
  Lattice l;
  l.n = {9, 8, 7};
  l.origin = {-1.0f, 0.0f, 0.0f};
  l.spacing = 0.25f;
  std::vector<float> v(static_cast<size_t>(l.num_points()));
  uint32_t s = 777;
  for (size_t p = 0; p < v.size(); ++p) {
    s = s * 1664525u + 1013904223u;
    v[p] = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
  std::vector<int64_t> cells;
  std::vector<float> corners;
  for (int64_t k = 0; k + 1 < l.n[2]; ++k) {
    for (int64_t j = 0; j + 1 < l.n[1]; ++j) {
      for (int64_t i = 0; i + 1 < l.n[0]; ++i) cells.push_back(l.index(i, j, k));
    }
  }
  std::mt19937 rng(5);
  std::shuffle(cells.begin(), cells.end(), rng);
  CellPolygonizer poly(l, 0.0f);
  for (int64_t cell : cells) {
    const int64_t i = cell % l.n[0], j = (cell / l.n[0]) % l.n[1], k = cell / (l.n[0] * l.n[1]);
    float c[8];
    for (int q = 0; q < 8; ++q) {
      c[q] = v[static_cast<size_t>(l.index(i + (q & 1), j + ((q >> 1) & 1), k + (q >> 2)))];
    }
    corners.insert(corners.end(), c, c + 8);
    poly.add_cell(i, j, k, c);
  }
  const Mesh host = poly.take_mesh();
  Mesh parallel;
  ASSERT_TRUE(kernels::cpu::polygonize_cells(g, cells.data(), corners.data(),
                                             static_cast<int64_t>(cells.size()),
                                             &parallel.positions, &parallel.triangles)
                  .ok());
  ASSERT_GT(host.triangle_count(), 200);
  EXPECT_EQ(parallel.vertex_count(), host.vertex_count());
  EXPECT_EQ(canonical_triangles(parallel), canonical_triangles(host));
  EXPECT_TRUE(validate(parallel).ok());

  // Bad input: a cell whose corners leave the grid, a degenerate grid, null arrays.
  std::vector<float> pos;
  std::vector<uint32_t> tri;
  const int64_t outside = l.index(8, 0, 0);
  Status st = kernels::cpu::polygonize_cells(g, &outside, corners.data(), 1, &pos, &tri);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cell 0"), std::string::npos) << st.message();
  kernels::CellGrid flat = g;
  flat.n[2] = 1;
  EXPECT_EQ(
      kernels::cpu::polygonize_cells(flat, cells.data(), corners.data(), 1, &pos, &tri).code(),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(kernels::cpu::polygonize_cells(g, nullptr, nullptr, 3, &pos, &tri).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_TRUE(kernels::cpu::polygonize_cells(g, nullptr, nullptr, 0, &pos, &tri).ok());
  EXPECT_TRUE(pos.empty() && tri.empty());
}

// The last level queries only the corners of the cells the surface crosses (seeded from the
// parents' sign-changing edges, completed by tracking), each point once, and still finds the dense
// path's surface: on smooth shapes, on a sum of blobs with thin necks, with and without the
// near-surface margin (whose sign-less parents are refined as whole blocks).
TEST(Extraction, FinestLevelQueriesEachSurfaceCornerOnce) {
  auto blobs = [](const float* p, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      const float x = p[3 * i], y = p[3 * i + 1], z = p[3 * i + 2];
      const float a = std::exp(-((x - 0.3f) * (x - 0.3f) + y * y + z * z) / 0.05f);
      const float b = std::exp(-((x + 0.3f) * (x + 0.3f) + y * y + z * z) / 0.05f);
      const float c = std::exp(-(x * x + (y - 0.5f) * (y - 0.5f) + z * z) / 0.02f);
      out[i] = 20.0f * (a + b + c - 0.3f) + 0.3f * std::sin(17.0f * x + 5.0f * z);
    }
    return Status();
  };
  const std::pair<const char*, OccupancyFn> fields[] = {
      {"sphere", sphere(0.8f)}, {"torus", torus(0.6f, 0.25f)}, {"blobs", blobs}};
  for (const auto& [name, field] : fields) {
    for (float margin : {0.0f, 1.0f}) {
      SCOPED_TRACE(std::string(name) + " margin " + std::to_string(margin));
      std::set<std::array<int64_t, 3>> seen;
      int64_t repeats = 0;
      const OccupancyFn recording = [&](const float* p, int64_t n, float* out) {
        for (int64_t i = 0; i < n; ++i) {
          const std::array<int64_t, 3> key{std::llround(p[3 * i] * 1e4),
                                           std::llround(p[3 * i + 1] * 1e4),
                                           std::llround(p[3 * i + 2] * 1e4)};
          if (!seen.insert(key).second) ++repeats;
        }
        return field(p, n, out);
      };
      ExtractionOptions o;
      o.resolution_base = 6;
      o.coarse_base = 4;
      o.near_surface_logit = margin;
      ExtractionStats stats;
      auto dense = extract_dense(field, o);
      auto c2f = extract_coarse_to_fine(recording, o, &stats);
      ASSERT_TRUE(dense.ok() && c2f.ok());
      EXPECT_EQ(repeats, 0);
      EXPECT_EQ(canonical_triangles(*c2f), canonical_triangles(*dense));
      EXPECT_TRUE(compute_topology(*c2f).watertight());
      // The finest level's new points are at most the corners of its surface cells.
      EXPECT_LE(stats.queries, 8 * stats.surface_cells + 33 * 33 * 33);
    }
  }
  // At 2^8 + 1 on the sphere: 490 k queries (the 3x3x3 blocks of every parent took 624 k) for
  // 179 k surface cells.
  ExtractionOptions o;
  o.resolution_base = 8;
  ExtractionStats stats;
  ASSERT_TRUE(extract_coarse_to_fine(sphere(0.8f), o, &stats).ok());
  EXPECT_LT(stats.queries, 500000);
  EXPECT_EQ(stats.surface_cells, 179312);
}

TEST(Extraction, CoarseToFineWithoutRefinementIsTheDensePath) {
  // coarse_base == resolution_base: one level, every cell examined, same mesh as dense.
  ExtractionOptions o;
  o.resolution_base = 5;
  o.coarse_base = 5;
  o.batch_points = 1000;  // several occupancy calls per level
  ExtractionStats dense_stats, c2f_stats;
  auto dense = extract_dense(torus(0.6f, 0.25f), o, &dense_stats);
  auto c2f = extract_coarse_to_fine(torus(0.6f, 0.25f), o, &c2f_stats);
  ASSERT_TRUE(dense.ok() && c2f.ok());
  EXPECT_EQ(c2f_stats.levels, 1);
  EXPECT_EQ(c2f_stats.queries, dense_stats.queries);
  EXPECT_EQ(c2f->triangle_count(), dense->triangle_count());
  EXPECT_NEAR(surface_area(*c2f), surface_area(*dense), 1e-6 * surface_area(*dense));
}

TEST(Extraction, NearSurfaceThresholdRefinesMoreButSameSurface) {
  ExtractionOptions o;
  o.resolution_base = 6;
  ExtractionStats plain, near;
  auto a = extract_coarse_to_fine(sphere(0.5f), o, &plain);
  o.near_surface_logit = 1.0f;
  auto b = extract_coarse_to_fine(sphere(0.5f), o, &near);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(near.queries, plain.queries);
  EXPECT_EQ(a->triangle_count(), b->triangle_count());
}

TEST(Extraction, EmptyFieldReportsNoSurface) {
  auto outside = [](const float*, int64_t n, float* out) {
    std::fill(out, out + n, -3.0f);
    return Status();
  };
  ExtractionOptions o;
  o.resolution_base = 5;
  auto dense = extract_dense(outside, o);
  auto c2f = extract_coarse_to_fine(outside, o);
  ASSERT_FALSE(dense.ok());
  ASSERT_FALSE(c2f.ok());
  EXPECT_NE(dense.status().message().find("no surface"), std::string::npos);
  EXPECT_NE(c2f.status().message().find("no surface"), std::string::npos);
}

TEST(Extraction, ReportsNaNAndCallbackErrorsAndBadOptions) {
  auto nan_field = [](const float*, int64_t n, float* out) {
    std::fill(out, out + n, NAN);
    return Status();
  };
  ExtractionOptions o;
  o.resolution_base = 4;
  o.coarse_base = 3;
  auto r = extract_coarse_to_fine(nan_field, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not finite"), std::string::npos);
  auto cancel = [](const float*, int64_t, float*) { return cancelled("stop"); };
  EXPECT_EQ(extract_coarse_to_fine(cancel, o).status().code(), ErrorCode::kCancelled);
  o.coarse_base = 9;
  EXPECT_EQ(extract_coarse_to_fine(sphere(0.5f), o).status().code(), ErrorCode::kInvalidArgument);
}

TEST(Cleanup, RemovesSmallFloatingBlobAndComputesNormals) {
  ExtractionOptions o;
  o.resolution_base = 6;
  auto two = [](const float* p, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      const float x = p[3 * i], y = p[3 * i + 1], z = p[3 * i + 2];
      const float big = 0.6f - std::sqrt(x * x + y * y + z * z);
      const float bx = x - 0.9f, by = y - 0.9f, bz = z - 0.9f;
      const float blob = 0.08f - std::sqrt(bx * bx + by * by + bz * bz);
      out[i] = std::max(big, blob);
    }
    return Status();
  };
  auto mesh = extract_dense(two, o);
  ASSERT_TRUE(mesh.ok());
  const int64_t before = mesh->triangle_count();
  CleanupOptions c;
  ASSERT_TRUE(cleanup(*mesh, c).ok());
  EXPECT_LT(mesh->triangle_count(), before);
  const Bounds b = compute_bounds(*mesh);
  EXPECT_LT(b.max[0], 0.65f);  // the blob near (0.9, 0.9, 0.9) is gone
  EXPECT_EQ(compute_topology(*mesh).euler_characteristic, 2);
  ASSERT_EQ(mesh->normals.size(), mesh->positions.size());
  // Outward normals on a sphere: n . p > 0.
  for (int64_t v = 0; v < mesh->vertex_count(); v += 97) {
    const float d = mesh->normals[3 * v] * mesh->positions[3 * v] +
                    mesh->normals[3 * v + 1] * mesh->positions[3 * v + 1] +
                    mesh->normals[3 * v + 2] * mesh->positions[3 * v + 2];
    EXPECT_GT(d, 0.0f);
  }
}

TEST(Cleanup, WeldsDuplicatesAndDropsDegenerateFaces) {
  Mesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 2, 2, 2};
  m.triangles = {0, 1, 2, 4, 3, 2, 0, 0, 1, 2, 1, 0};  // tri 1 duplicates tri 0 after welding
  EXPECT_EQ(weld_vertices(m, 1e-6f), 2);
  EXPECT_EQ(remove_degenerate_triangles(m), 3);
  compact_vertices(m);
  EXPECT_EQ(m.triangle_count(), 1);
  EXPECT_EQ(m.vertex_count(), 3);
}

TEST(Cleanup, DecimatesToFaceBudget) {
  ExtractionOptions o;
  o.resolution_base = 6;
  auto mesh = extract_dense(sphere(0.7f), o);
  ASSERT_TRUE(mesh.ok());
  CleanupOptions c;
  c.max_triangles = 2000;
  Status st = cleanup(*mesh, c);
  if (st.code() == ErrorCode::kUnsupported) GTEST_SKIP() << st.message();
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_LE(mesh->triangle_count(), 2000);
  EXPECT_GT(mesh->triangle_count(), 500);
  EXPECT_NEAR(signed_volume(*mesh), 4.0 / 3 * kPi * 0.343, 0.03 * 4.0 / 3 * kPi * 0.343);
  EXPECT_EQ(decimate(*mesh, 0).code(), ErrorCode::kInvalidArgument);
}

// The definition smooth_taubin is held to: neighbours from a sorted list of directed edges, an
// edge's use counted in a map (pinned ends unless used by exactly two triangles, self edges a-a
// included), and each coordinate's mean summed in double over the neighbours in ascending order.
void smooth_taubin_reference(Mesh& mesh, int iterations, float lambda, float mu) {
  const auto nv = static_cast<size_t>(mesh.vertex_count());
  std::vector<std::set<uint32_t>> nbrs(nv);
  std::map<std::pair<uint32_t, uint32_t>, int> use;
  const auto& t = mesh.triangles;
  for (size_t i = 0; i + 2 < t.size(); i += 3) {
    for (int e = 0; e < 3; ++e) {
      const uint32_t a = t[i + e], b = t[i + (e + 1) % 3];
      ++use[{std::min(a, b), std::max(a, b)}];
      if (a == b) continue;
      nbrs[a].insert(b);
      nbrs[b].insert(a);
    }
  }
  std::vector<bool> pinned(nv, false);
  for (const auto& [edge, count] : use) {
    if (count != 2) pinned[edge.first] = pinned[edge.second] = true;
  }
  for (int it = 0; it < 2 * iterations; ++it) {
    const float factor = it % 2 == 0 ? lambda : mu;
    std::vector<float> next = mesh.positions;
    for (size_t v = 0; v < nv; ++v) {
      if (pinned[v] || nbrs[v].empty()) continue;
      for (int d = 0; d < 3; ++d) {
        double sum = 0;
        for (uint32_t n : nbrs[v]) sum += mesh.positions[3 * n + d];
        const double mean = sum / static_cast<double>(nbrs[v].size());
        const float p = mesh.positions[3 * v + d];
        next[3 * v + d] = static_cast<float>(p + factor * (mean - p));
      }
    }
    mesh.positions = std::move(next);
  }
}

TEST(Cleanup, SmoothTaubinMatchesItsReferenceBitForBit) {
  // A closed surface, then triangle soups over few vertices: boundaries, non-manifold edges,
  // triangles that repeat a vertex, vertices no triangle uses.
  std::vector<Mesh> meshes;
  ExtractionOptions o;
  o.resolution_base = 4;
  auto closed = extract_dense(torus(0.6f, 0.3f), o);
  ASSERT_TRUE(closed.ok());
  meshes.push_back(*closed);
  std::mt19937 rng(7);
  for (int k = 0; k < 20; ++k) {
    Mesh m;
    const int nv = 4 + k * 3;
    std::uniform_real_distribution<float> pos(-1.0f, 1.0f);
    for (int i = 0; i < 3 * nv; ++i) m.positions.push_back(pos(rng));
    std::uniform_int_distribution<int> vert(0, nv - 1 - (k % 3 == 0 ? 2 : 0));
    for (int i = 0; i < 3 * (2 + 2 * k); ++i)
      m.triangles.push_back(static_cast<uint32_t>(vert(rng)));
    meshes.push_back(m);
  }
  for (size_t i = 0; i < meshes.size(); ++i) {
    Mesh fast = meshes[i], ref = meshes[i];
    smooth_taubin(fast, 5);
    smooth_taubin_reference(ref, 5, 0.5f, -0.53f);
    ASSERT_EQ(fast.positions.size(), ref.positions.size());
    for (size_t j = 0; j < ref.positions.size(); ++j) {
      ASSERT_EQ(fast.positions[j], ref.positions[j]) << "mesh " << i << ", coordinate " << j;
    }
    EXPECT_EQ(fast.triangles, meshes[i].triangles) << "mesh " << i;
  }
}

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() /
        ("tessera_mesh_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    ExtractionOptions o;
    o.resolution_base = 4;
    auto m = extract_dense(torus(0.6f, 0.3f), o);
    ASSERT_TRUE(m.ok());
    mesh_ = std::move(*m);
    ASSERT_TRUE(cleanup(mesh_, CleanupOptions()).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  Mesh mesh_;
};

TEST_F(ExportTest, ObjRoundTrip) {
  const std::string path = (dir_ / "t.obj").string();
  ASSERT_TRUE(write_mesh(mesh_, path).ok());
  auto text = read_file(path);
  ASSERT_TRUE(text.ok());
  std::istringstream in(*text);
  std::string line;
  int64_t v = 0, vn = 0, f = 0;
  std::vector<float> pos;
  while (std::getline(in, line)) {
    if (line.rfind("v ", 0) == 0) {
      float x, y, z;
      ASSERT_EQ(std::sscanf(line.c_str(), "v %f %f %f", &x, &y, &z), 3);
      pos.insert(pos.end(), {x, y, z});
      ++v;
    } else if (line.rfind("vn ", 0) == 0) {
      ++vn;
    } else if (line.rfind("f ", 0) == 0) {
      unsigned a, b, c, a2, b2, c2;
      ASSERT_EQ(std::sscanf(line.c_str(), "f %u//%u %u//%u %u//%u", &a, &a2, &b, &b2, &c, &c2), 6);
      EXPECT_EQ(a, a2);
      EXPECT_EQ(mesh_.triangles[3 * f] + 1, a);
      EXPECT_LE(std::max({a, b, c}), static_cast<unsigned>(mesh_.vertex_count()));
      ++f;
    }
  }
  EXPECT_EQ(v, mesh_.vertex_count());
  EXPECT_EQ(vn, mesh_.vertex_count());
  EXPECT_EQ(f, mesh_.triangle_count());
  for (size_t i = 0; i < pos.size(); ++i) EXPECT_NEAR(pos[i], mesh_.positions[i], 1e-6f);
}

TEST_F(ExportTest, GlbRoundTrip) {
  const std::string path = (dir_ / "t.glb").string();
  ASSERT_TRUE(write_mesh(mesh_, path).ok());
  auto bytes = read_file(path);
  ASSERT_TRUE(bytes.ok());
  const std::string& s = *bytes;
  auto u32 = [&](size_t off) {
    uint32_t v;
    std::memcpy(&v, s.data() + off, 4);
    return v;
  };
  ASSERT_GE(s.size(), 28u);
  EXPECT_EQ(u32(0), 0x46546C67u);
  EXPECT_EQ(u32(4), 2u);
  EXPECT_EQ(u32(8), s.size());
  const uint32_t json_len = u32(12);
  EXPECT_EQ(json_len % 4, 0u);
  EXPECT_EQ(u32(16), 0x4E4F534Au);
  const auto doc = nlohmann::json::parse(s.substr(20, json_len));
  const size_t bin_off = 20 + json_len;
  const uint32_t bin_len = u32(bin_off);
  EXPECT_EQ(u32(bin_off + 4), 0x004E4942u);
  EXPECT_EQ(bin_len % 4, 0u);
  EXPECT_EQ(bin_off + 8 + bin_len, s.size());
  const char* bin = s.data() + bin_off + 8;
  const auto& prim = doc["meshes"][0]["primitives"][0];
  const auto& pos_acc = doc["accessors"][prim["attributes"]["POSITION"].get<int>()];
  const auto& idx_acc = doc["accessors"][prim["indices"].get<int>()];
  EXPECT_EQ(pos_acc["count"].get<int64_t>(), mesh_.vertex_count());
  EXPECT_EQ(idx_acc["count"].get<int64_t>(), mesh_.triangle_count() * 3);
  EXPECT_TRUE(prim["attributes"].contains("NORMAL"));
  const Bounds b = compute_bounds(mesh_);
  for (int d = 0; d < 3; ++d) {
    EXPECT_FLOAT_EQ(pos_acc["min"][d].get<float>(), b.min[d]);
    EXPECT_FLOAT_EQ(pos_acc["max"][d].get<float>(), b.max[d]);
  }
  for (const auto& view : doc["bufferViews"]) EXPECT_EQ(view["byteOffset"].get<size_t>() % 4, 0u);
  const auto& iview = doc["bufferViews"][idx_acc["bufferView"].get<int>()];
  std::vector<uint32_t> idx(mesh_.triangles.size());
  ASSERT_EQ(iview["byteLength"].get<size_t>(), idx.size() * 4);
  std::memcpy(idx.data(), bin + iview["byteOffset"].get<size_t>(), idx.size() * 4);
  EXPECT_EQ(idx, mesh_.triangles);
}

TEST_F(ExportTest, ErrorsNameThePath) {
  const std::string path = (dir_ / "missing_dir" / "t.obj").string();
  Status st = write_obj(mesh_, path);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("missing_dir"), std::string::npos) << st.message();
  EXPECT_FALSE(write_mesh(mesh_, (dir_ / "t.ply").string()).ok());
  Mesh bad = mesh_;
  bad.triangles[0] = 1u << 30;
  EXPECT_FALSE(write_glb(bad, (dir_ / "b.glb").string()).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "b.glb"));
}

}  // namespace
}  // namespace tessera::mesh
