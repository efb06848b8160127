// The clean-up's parallel steps (weld, collapsed and repeated faces, small components, Taubin
// smoothing, normals) against plain sequential references written here: same bits, on meshes large
// enough to be split over the thread pool, with one thread and with several, and on meshes with
// the defects each step exists for (coincident vertices, repeated and collapsed faces, small
// pieces, texture seams, non-manifold edges).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {
namespace {

// ---- references: one pass each, ordered containers, no threads ----------------------------------

int64_t ref_float_key(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return f == 0.0f ? 0 : bits;
}

int64_t ref_weld(Mesh& mesh, float tolerance) {
  const int64_t n = mesh.vertex_count();
  const double inv = tolerance > 0 ? 1.0 / tolerance : 0.0;
  const bool has_uvs = !mesh.uvs.empty();
  std::map<std::array<int64_t, 5>, uint32_t> first;
  std::vector<uint32_t> remap(static_cast<size_t>(n));
  std::vector<float> positions, uvs;
  for (int64_t v = 0; v < n; ++v) {
    std::array<int64_t, 5> key{};
    for (int d = 0; d < 3; ++d) {
      const float p = mesh.positions[3 * v + d];
      key[d] = inv > 0 ? static_cast<int64_t>(std::llround(p * inv)) : ref_float_key(p);
    }
    if (has_uvs) {
      for (int d = 0; d < 2; ++d) key[3 + d] = ref_float_key(mesh.uvs[2 * v + d]);
    }
    auto [it, inserted] = first.try_emplace(key, static_cast<uint32_t>(positions.size() / 3));
    if (inserted) {
      for (int d = 0; d < 3; ++d) positions.push_back(mesh.positions[3 * v + d]);
      if (has_uvs) {
        for (int d = 0; d < 2; ++d) uvs.push_back(mesh.uvs[2 * v + d]);
      }
    }
    remap[static_cast<size_t>(v)] = it->second;
  }
  for (uint32_t& t : mesh.triangles) t = remap[t];
  const int64_t merged = n - static_cast<int64_t>(positions.size() / 3);
  mesh.positions = std::move(positions);
  mesh.uvs = std::move(uvs);
  mesh.normals.clear();
  return merged;
}

int64_t ref_remove_degenerate(Mesh& mesh, double min_area) {
  std::vector<uint32_t> kept;
  std::set<std::array<uint32_t, 3>> seen;
  const auto& p = mesh.positions;
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    const uint32_t a = mesh.triangles[t], b = mesh.triangles[t + 1], c = mesh.triangles[t + 2];
    if (a == b || b == c || a == c) continue;
    if (min_area >= 0) {
      const double u[3] = {p[3 * b] - p[3 * a], p[3 * b + 1] - p[3 * a + 1],
                           p[3 * b + 2] - p[3 * a + 2]};
      const double w[3] = {p[3 * c] - p[3 * a], p[3 * c + 1] - p[3 * a + 1],
                           p[3 * c + 2] - p[3 * a + 2]};
      const double nx = u[1] * w[2] - u[2] * w[1], ny = u[2] * w[0] - u[0] * w[2],
                   nz = u[0] * w[1] - u[1] * w[0];
      if (0.5 * std::sqrt(nx * nx + ny * ny + nz * nz) <= min_area) continue;
    }
    std::array<uint32_t, 3> key{a, b, c};
    std::sort(key.begin(), key.end());
    if (!seen.insert(key).second) continue;
    kept.insert(kept.end(), {a, b, c});
  }
  const auto removed = static_cast<int64_t>((mesh.triangles.size() - kept.size()) / 3);
  mesh.triangles = std::move(kept);
  return removed;
}

void ref_compact(Mesh& mesh) {
  const int64_t n = mesh.vertex_count();
  std::vector<int64_t> remap(static_cast<size_t>(n), -1);
  int64_t next = 0;
  for (uint32_t t : mesh.triangles) {
    if (remap[t] < 0) remap[t] = next++;
  }
  std::vector<float> pos(static_cast<size_t>(next) * 3), nor(mesh.normals.empty() ? 0 : pos.size());
  std::vector<float> uv(mesh.uvs.empty() ? 0 : static_cast<size_t>(next) * 2);
  for (int64_t v = 0; v < n; ++v) {
    const int64_t r = remap[static_cast<size_t>(v)];
    if (r < 0) continue;
    for (int d = 0; d < 3; ++d) {
      pos[3 * r + d] = mesh.positions[3 * v + d];
      if (!nor.empty()) nor[3 * r + d] = mesh.normals[3 * v + d];
    }
    for (size_t d = 0; d < 2 && !uv.empty(); ++d) uv[2 * r + d] = mesh.uvs[2 * v + d];
  }
  for (uint32_t& t : mesh.triangles) t = static_cast<uint32_t>(remap[t]);
  mesh.positions = std::move(pos);
  mesh.normals = std::move(nor);
  mesh.uvs = std::move(uv);
}

int64_t ref_find(std::vector<int64_t>& parent, int64_t x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

int64_t ref_remove_small_components(Mesh& mesh, double fraction) {
  const int64_t nv = mesh.vertex_count(), nt = mesh.triangle_count();
  std::vector<int64_t> parent(static_cast<size_t>(nv));
  std::iota(parent.begin(), parent.end(), 0);
  auto join = [&](int64_t a, int64_t b) {
    a = ref_find(parent, a);
    b = ref_find(parent, b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  };
  for (int64_t t = 0; t < nt; ++t) {
    join(mesh.triangles[3 * t], mesh.triangles[3 * t + 1]);
    join(mesh.triangles[3 * t], mesh.triangles[3 * t + 2]);
  }
  if (!mesh.uvs.empty()) {
    std::map<std::array<int64_t, 3>, int64_t> at;
    for (int64_t v = 0; v < nv; ++v) {
      std::array<int64_t, 3> key{};
      for (int d = 0; d < 3; ++d) key[d] = ref_float_key(mesh.positions[3 * v + d]);
      auto [it, inserted] = at.try_emplace(key, v);
      if (!inserted) join(it->second, v);
    }
  }
  struct Piece {
    std::array<float, 3> lo{INFINITY, INFINITY, INFINITY}, hi{-INFINITY, -INFINITY, -INFINITY};
    int64_t triangles = 0;
  };
  std::map<int64_t, Piece> pieces;
  for (int64_t t = 0; t < nt; ++t) {
    Piece& c = pieces[ref_find(parent, mesh.triangles[3 * t])];
    ++c.triangles;
    for (int k = 0; k < 3; ++k) {
      for (int d = 0; d < 3; ++d) {
        c.lo[d] = std::min(c.lo[d], mesh.positions[3 * mesh.triangles[3 * t + k] + d]);
        c.hi[d] = std::max(c.hi[d], mesh.positions[3 * mesh.triangles[3 * t + k] + d]);
      }
    }
  }
  int64_t largest = -1, most = -1;
  for (const auto& [root, c] : pieces) {
    if (c.triangles > most) {
      largest = root;
      most = c.triangles;
    }
  }
  const double limit = fraction * compute_bounds(mesh).diagonal();
  std::set<int64_t> drop;
  for (const auto& [root, c] : pieces) {
    double s = 0;
    for (int d = 0; d < 3; ++d) s += (static_cast<double>(c.hi[d]) - c.lo[d]) * (c.hi[d] - c.lo[d]);
    if (root != largest && std::sqrt(s) < limit) drop.insert(root);
  }
  if (drop.empty()) return 0;
  std::vector<uint32_t> kept;
  for (int64_t t = 0; t < nt; ++t) {
    if (drop.count(ref_find(parent, mesh.triangles[3 * t])) != 0) continue;
    kept.insert(kept.end(), mesh.triangles.begin() + 3 * t, mesh.triangles.begin() + 3 * t + 3);
  }
  const int64_t removed = nt - static_cast<int64_t>(kept.size() / 3);
  mesh.triangles = std::move(kept);
  ref_compact(mesh);
  return removed;
}

void ref_normals(Mesh& mesh) {
  std::vector<double> acc(mesh.positions.size(), 0.0);
  const auto& p = mesh.positions;
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    const uint32_t a = mesh.triangles[t], b = mesh.triangles[t + 1], c = mesh.triangles[t + 2];
    const double u[3] = {p[3 * b] - p[3 * a], p[3 * b + 1] - p[3 * a + 1],
                         p[3 * b + 2] - p[3 * a + 2]};
    const double w[3] = {p[3 * c] - p[3 * a], p[3 * c + 1] - p[3 * a + 1],
                         p[3 * c + 2] - p[3 * a + 2]};
    const double n[3] = {u[1] * w[2] - u[2] * w[1], u[2] * w[0] - u[0] * w[2],
                         u[0] * w[1] - u[1] * w[0]};
    for (uint32_t v : {a, b, c}) {
      for (int d = 0; d < 3; ++d) acc[3 * v + d] += n[d];
    }
  }
  mesh.normals.assign(mesh.positions.size(), 0.0f);
  for (size_t v = 0; v + 2 < acc.size(); v += 3) {
    const double len =
        std::sqrt(acc[v] * acc[v] + acc[v + 1] * acc[v + 1] + acc[v + 2] * acc[v + 2]);
    if (len > 0) {
      for (int d = 0; d < 3; ++d) mesh.normals[v + d] = static_cast<float>(acc[v + d] / len);
    } else {
      mesh.normals[v + 2] = 1.0f;
    }
  }
}

void ref_smooth(Mesh& mesh, int iterations, float lambda = 0.5f, float mu = -0.53f) {
  const int64_t nv = mesh.vertex_count();
  // Edge multiplicities from an ordered map; a vertex on an edge not used by exactly two faces
  // (a self edge a-a included) stays put.
  std::map<std::pair<uint32_t, uint32_t>, int> uses;
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    for (int e = 0; e < 3; ++e) {
      const uint32_t a = mesh.triangles[t + e], b = mesh.triangles[t + (e + 1) % 3];
      ++uses[{std::min(a, b), std::max(a, b)}];
    }
  }
  std::vector<std::vector<uint32_t>> nbrs(static_cast<size_t>(nv));
  std::vector<char> pinned(static_cast<size_t>(nv), 0);
  for (const auto& [edge, count] : uses) {
    if (count != 2) pinned[edge.first] = pinned[edge.second] = 1;
    if (edge.first != edge.second) {  // the map's order: each list ascending
      nbrs[edge.first].push_back(edge.second);
      nbrs[edge.second].push_back(edge.first);
    }
  }
  for (auto& list : nbrs) std::sort(list.begin(), list.end());
  for (int it = 0; it < 2 * iterations; ++it) {
    const double factor = it % 2 == 0 ? lambda : mu;
    std::vector<float> next = mesh.positions;
    for (int64_t v = 0; v < nv; ++v) {
      if (pinned[static_cast<size_t>(v)] != 0 || nbrs[static_cast<size_t>(v)].empty()) continue;
      double sum[3] = {0, 0, 0};
      for (uint32_t u : nbrs[static_cast<size_t>(v)]) {
        for (int d = 0; d < 3; ++d) sum[d] += mesh.positions[3 * u + d];
      }
      const double count = static_cast<double>(nbrs[static_cast<size_t>(v)].size());
      for (int d = 0; d < 3; ++d) {
        const float p = mesh.positions[3 * v + d];
        next[3 * v + d] = static_cast<float>(p + factor * (sum[d] / count - p));
      }
    }
    mesh.positions = std::move(next);
  }
  if (!mesh.normals.empty()) ref_normals(mesh);
}

// ---- inputs
// ----------------------------------------------------------------------------------------

// A noisy surface in many pieces (random plane waves, coarse-to-fine at 2^base + 1), then the
// defects: every 7th vertex duplicated (a copy at the same position, or 1e-7 away, that some of
// its faces use), every 11th face repeated (half of them reversed), every 13th collapsed onto a
// vertex, and a few faces that share an edge with two others (non-manifold).
Mesh noisy_mesh(int base, uint32_t seed, bool with_uvs) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> phase(0.0f, 6.2831853f);
  std::vector<std::array<float, 4>> waves(12);
  for (auto& w : waves) {
    for (int d = 0; d < 3; ++d) w[d] = 9.0f * normal(rng);
    w[3] = phase(rng);
  }
  ExtractionOptions ex;
  ex.resolution_base = base;
  ex.coarse_base = 3;
  auto field = [&](const float* p, int64_t n, float* logits) {
    for (int64_t i = 0; i < n; ++i) {
      float v = -1.2f;
      for (const auto& w : waves) {
        v += std::sin(w[0] * p[3 * i] + w[1] * p[3 * i + 1] + w[2] * p[3 * i + 2] + w[3]);
      }
      logits[i] = v;
    }
    return Status();
  };
  Mesh m = extract_coarse_to_fine(field, ex).value();
  const int64_t nv = m.vertex_count();
  if (with_uvs) {
    m.uvs.resize(2 * static_cast<size_t>(nv));
    for (int64_t v = 0; v < nv; ++v) {
      m.uvs[2 * v] = 0.5f + 0.45f * std::sin(3.0f * m.positions[3 * v]);
      m.uvs[2 * v + 1] = 0.5f + 0.45f * std::cos(2.0f * m.positions[3 * v + 2]);
    }
  }
  for (int64_t v = 0; v < nv; v += 7) {
    const auto copy = static_cast<uint32_t>(m.vertex_count());
    for (int d = 0; d < 3; ++d) {
      m.positions.push_back(m.positions[3 * v + d] + (v % 14 == 0 ? 0.0f : 1e-7f));
    }
    if (with_uvs) {
      // Half the copies on a seam (another uv), half the same uv.
      const bool seam = v % 3 == 0;
      m.uvs.push_back(seam ? 0.25f : m.uvs[2 * v]);
      m.uvs.push_back(m.uvs[2 * v + 1]);
    }
    for (size_t i = 0; i < m.triangles.size(); i += 5) {
      if (m.triangles[i] == static_cast<uint32_t>(v)) m.triangles[i] = copy;
    }
  }
  const size_t faces = m.triangles.size() / 3;
  for (size_t t = 0; t < faces; t += 11) {
    const uint32_t a = m.triangles[3 * t], b = m.triangles[3 * t + 1], c = m.triangles[3 * t + 2];
    if (t % 22 == 0) {
      m.triangles.insert(m.triangles.end(), {a, c, b});
    } else {
      m.triangles.insert(m.triangles.end(), {b, c, a});
    }
  }
  for (size_t t = 0; t < faces; t += 13) m.triangles[3 * t + 1] = m.triangles[3 * t];
  for (size_t t = 5; t < faces; t += 997) {
    const uint32_t a = m.triangles[3 * t], b = m.triangles[3 * t + 1];
    m.triangles.insert(m.triangles.end(), {a, b, static_cast<uint32_t>((a + 17) % nv)});
  }
  EXPECT_TRUE(validate(m).ok());
  return m;
}

void expect_same(const Mesh& got, const Mesh& want, const std::string& what) {
  ASSERT_EQ(got.positions.size(), want.positions.size()) << what;
  ASSERT_EQ(got.triangles.size(), want.triangles.size()) << what;
  EXPECT_TRUE(got.triangles == want.triangles) << what << ": triangles differ";
  EXPECT_EQ(std::memcmp(got.positions.data(), want.positions.data(),
                        got.positions.size() * sizeof(float)),
            0)
      << what << ": positions differ";
  ASSERT_EQ(got.uvs.size(), want.uvs.size()) << what;
  EXPECT_TRUE(got.uvs == want.uvs) << what << ": uvs differ";
  ASSERT_EQ(got.normals.size(), want.normals.size()) << what;
  EXPECT_EQ(
      std::memcmp(got.normals.data(), want.normals.data(), got.normals.size() * sizeof(float)), 0)
      << what << ": normals differ";
}

class CleanupReference : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { set_default_threads(GetParam()); }
  void TearDown() override { set_default_threads(0); }
};

TEST_P(CleanupReference, EveryStepGivesTheSequentialReferencesBits) {
  for (const bool with_uvs : {false, true}) {
    const Mesh input = noisy_mesh(5, 3, with_uvs);
    const std::string what = std::string(with_uvs ? "with uvs" : "no uvs") + ", " +
                             std::to_string(GetParam()) + " threads";
    ASSERT_GT(input.vertex_count(), 40000) << "too small to be split over the pool";

    const float tolerance = 1e-6f * static_cast<float>(compute_bounds(input).diagonal());
    Mesh got = input, want = input;
    const int64_t merged = weld_vertices(got, tolerance);
    EXPECT_EQ(merged, ref_weld(want, tolerance)) << what;
    EXPECT_GT(merged, 1000) << what;
    expect_same(got, want, "weld, " + what);
    // Tolerance 0: exact positions.
    Mesh exact_got = input, exact_want = input;
    EXPECT_EQ(weld_vertices(exact_got, 0.0f), ref_weld(exact_want, 0.0f)) << what;
    expect_same(exact_got, exact_want, "exact weld, " + what);

    for (const double min_area : {-1.0, 0.0, 1e-5}) {
      Mesh g = got, w = want;
      EXPECT_EQ(remove_degenerate_triangles(g, min_area), ref_remove_degenerate(w, min_area))
          << what << ", min_area " << min_area;
      expect_same(g, w, "faces, " + what);
    }
    remove_degenerate_triangles(got, -1.0);
    ref_remove_degenerate(want, -1.0);

    const int64_t removed = remove_small_components(got, 0.15);
    EXPECT_EQ(removed, ref_remove_small_components(want, 0.15)) << what;
    EXPECT_GT(removed, 0) << what;
    expect_same(got, want, "components, " + what);

    Mesh smooth_got = got, smooth_want = want;
    smooth_got.uvs.clear();
    smooth_want.uvs.clear();
    smooth_taubin(smooth_got, 5);
    ref_smooth(smooth_want, 5);
    expect_same(smooth_got, smooth_want, "smoothing, " + what);

    compute_vertex_normals(smooth_got);
    ref_normals(smooth_want);
    expect_same(smooth_got, smooth_want, "normals, " + what);
  }
}

TEST_P(CleanupReference, WholeCleanupIsTheReferenceStepsInOrder) {
  for (const bool with_uvs : {false, true}) {
    const Mesh input = noisy_mesh(5, 5, with_uvs);
    Mesh got = input, want = input;
    CleanupStats stats;
    ASSERT_TRUE(cleanup(got, CleanupOptions(), &stats).ok());
    ref_weld(want, static_cast<float>(1e-6 * compute_bounds(want).diagonal()));
    ref_remove_degenerate(want, -1.0);
    ref_remove_small_components(want, 0.15);
    if (want.uvs.empty()) ref_smooth(want, 20);
    ref_compact(want);
    ref_normals(want);
    expect_same(got, want, with_uvs ? "cleanup with uvs" : "cleanup");
    EXPECT_GT(
        stats.weld_ms + stats.faces_ms + stats.components_ms + stats.smooth_ms + stats.normals_ms,
        0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CleanupReference, ::testing::Values(1, 4));

}  // namespace
}  // namespace tessera::mesh
