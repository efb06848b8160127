// Charts for the UV atlas (uv_atlas.h): region growing over shared edges with a normal cone, after
// D-Charts (Julius, Kraevoy and Sheffer 2005) as xatlas reduces it. Seeds are taken largest face
// first; a chart grows by the candidate face whose normal deviates least from the chart's
// area-weighted mean normal (a priority queue over the chart's border), and stops when even that
// face leaves the cone. Faces are connected through edges between welded vertices (same position),
// so meshes with split normals or no shared vertices at all (STL) still make whole charts;
// non-manifold edges (three or more faces) are chart borders. Zero-area faces take a neighbour's
// chart after growing (or one of their own).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <queue>
#include <unordered_map>
#include <vector>

#include "engine/mesh/uv_atlas.h"
#include "engine/mesh/uv_internal.h"

namespace tessera::mesh {

namespace uv_detail {

std::vector<uint32_t> weld_positions(const Mesh& mesh) {
  struct Key {
    std::array<uint32_t, 3> bits;
    bool operator==(const Key& o) const { return bits == o.bits; }
  };
  struct Hash {
    size_t operator()(const Key& k) const {
      uint64_t h = 1469598103934665603ull;
      for (uint32_t b : k.bits) h = (h ^ b) * 1099511628211ull;
      return static_cast<size_t>(h);
    }
  };
  const size_t n = mesh.positions.size() / 3;
  std::unordered_map<Key, uint32_t, Hash> ids;
  ids.reserve(n);
  std::vector<uint32_t> welded(n);
  for (size_t v = 0; v < n; ++v) {
    Key k;
    for (int a = 0; a < 3; ++a) {
      float f = mesh.positions[3 * v + static_cast<size_t>(a)];
      if (f == 0.0f) f = 0.0f;  // -0 and +0 weld
      std::memcpy(&k.bits[static_cast<size_t>(a)], &f, sizeof(f));
    }
    welded[v] = ids.emplace(k, static_cast<uint32_t>(ids.size())).first->second;
  }
  return welded;
}

std::vector<std::array<int64_t, 3>> face_neighbours(const Mesh& mesh,
                                                    const std::vector<uint32_t>& welded) {
  const int64_t faces = static_cast<int64_t>(mesh.triangles.size() / 3);
  std::unordered_map<uint64_t, std::array<int64_t, 3>> edges;  // -> up to 2 faces, count
  edges.reserve(static_cast<size_t>(faces) * 2);
  auto key = [&](int64_t f, int k) {
    uint64_t a = welded[mesh.triangles[static_cast<size_t>(3 * f + k)]];
    uint64_t b = welded[mesh.triangles[static_cast<size_t>(3 * f + (k + 1) % 3)]];
    if (a > b) std::swap(a, b);
    return (a << 32) | b;
  };
  for (int64_t f = 0; f < faces; ++f) {
    for (int k = 0; k < 3; ++k) {
      auto [it, fresh] = edges.try_emplace(key(f, k), std::array<int64_t, 3>{f, -1, 1});
      if (!fresh) {
        auto& e = it->second;
        if (e[2] == 1 && e[0] != f) e[1] = f;
        ++e[2];
      }
    }
  }
  std::vector<std::array<int64_t, 3>> out(static_cast<size_t>(faces), {-1, -1, -1});
  for (int64_t f = 0; f < faces; ++f) {
    for (int k = 0; k < 3; ++k) {
      const auto& e = edges[key(f, k)];
      if (e[2] != 2 || e[1] < 0) continue;  // border or non-manifold
      out[static_cast<size_t>(f)][static_cast<size_t>(k)] = e[0] == f ? e[1] : e[0];
    }
  }
  return out;
}

FaceGeometry face_geometry(const Mesh& mesh, int64_t f) {
  const float* p = mesh.positions.data();
  const uint32_t* t = mesh.triangles.data() + 3 * f;
  Vec3d a{p[3 * t[0]], p[3 * t[0] + 1], p[3 * t[0] + 2]};
  Vec3d b{p[3 * t[1]], p[3 * t[1] + 1], p[3 * t[1] + 2]};
  Vec3d c{p[3 * t[2]], p[3 * t[2] + 1], p[3 * t[2] + 2]};
  const Vec3d n = cross(sub(b, a), sub(c, a));
  const double len = norm(n);
  FaceGeometry g;
  g.area = 0.5 * len;
  g.normal = len > 0 ? scale(n, 1.0 / len) : Vec3d{0, 0, 0};
  g.centroid = scale(add(add(a, b), c), 1.0 / 3.0);
  return g;
}

}  // namespace uv_detail

std::vector<int32_t> grow_charts(const Mesh& mesh, float max_angle_deg, int64_t* charts) {
  using namespace uv_detail;
  const int64_t faces = static_cast<int64_t>(mesh.triangles.size() / 3);
  const std::vector<uint32_t> welded = weld_positions(mesh);
  const auto nbr = face_neighbours(mesh, welded);
  std::vector<FaceGeometry> geo(static_cast<size_t>(faces));
  double total_area = 0;
  for (int64_t f = 0; f < faces; ++f) {
    geo[static_cast<size_t>(f)] = face_geometry(mesh, f);
    total_area += geo[static_cast<size_t>(f)].area;
  }
  // A face below this area is degenerate (its normal means nothing).
  const double tiny = 1e-12 * std::max(total_area, 1e-30);
  const double max_dev = 1.0 - std::cos(static_cast<double>(max_angle_deg) * M_PI / 180.0);
  std::vector<int64_t> order(static_cast<size_t>(faces));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return geo[static_cast<size_t>(a)].area > geo[static_cast<size_t>(b)].area;
  });
  std::vector<int32_t> chart(static_cast<size_t>(faces), -1);
  int32_t next = 0;
  using Item = std::pair<double, int64_t>;  // cost, face
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  for (int64_t seed : order) {
    if (chart[static_cast<size_t>(seed)] >= 0) continue;
    if (geo[static_cast<size_t>(seed)].area <= tiny) break;  // only degenerate faces are left
    const int32_t id = next++;
    Vec3d sum = scale(geo[static_cast<size_t>(seed)].normal, geo[static_cast<size_t>(seed)].area);
    Vec3d mean = geo[static_cast<size_t>(seed)].normal;
    chart[static_cast<size_t>(seed)] = id;
    heap = {};
    auto push_neighbours = [&](int64_t f) {
      for (int64_t g : nbr[static_cast<size_t>(f)]) {
        if (g < 0 || chart[static_cast<size_t>(g)] >= 0) continue;
        const FaceGeometry& fg = geo[static_cast<size_t>(g)];
        if (fg.area <= tiny) continue;
        heap.push({1.0 - dot(fg.normal, mean), g});
      }
    };
    push_neighbours(seed);
    while (!heap.empty()) {
      const int64_t g = heap.top().second;
      heap.pop();
      if (chart[static_cast<size_t>(g)] >= 0) continue;
      const FaceGeometry& fg = geo[static_cast<size_t>(g)];
      // The mean moved since the face was queued: judge it against the current one.
      if (1.0 - dot(fg.normal, mean) > max_dev) continue;
      chart[static_cast<size_t>(g)] = id;
      sum = add(sum, scale(fg.normal, fg.area));
      const double len = norm(sum);
      if (len > 0) mean = scale(sum, 1.0 / len);
      push_neighbours(g);
    }
  }
  // Degenerate faces: a neighbour's chart (repeated, for strips of them), else their own.
  for (bool changed = true; changed;) {
    changed = false;
    for (int64_t f = 0; f < faces; ++f) {
      if (chart[static_cast<size_t>(f)] >= 0) continue;
      for (int64_t g : nbr[static_cast<size_t>(f)]) {
        if (g >= 0 && chart[static_cast<size_t>(g)] >= 0) {
          chart[static_cast<size_t>(f)] = chart[static_cast<size_t>(g)];
          changed = true;
          break;
        }
      }
    }
  }
  for (int64_t f = 0; f < faces; ++f) {
    if (chart[static_cast<size_t>(f)] < 0) chart[static_cast<size_t>(f)] = next++;
  }
  if (charts) *charts = next;
  return chart;
}

}  // namespace tessera::mesh
