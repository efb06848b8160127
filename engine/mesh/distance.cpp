#include "engine/mesh/distance.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "engine/mesh/vec3_internal.h"

namespace tessera::mesh {

namespace {

using vec3::dist2;
using vec3::dot;
using vec3::sub;
using vec3::Vec;

Vec lerp3(const Vec& a, const Vec& ab, const Vec& ac, double v, double w) {
  return {a[0] + v * ab[0] + w * ac[0], a[1] + v * ab[1] + w * ac[1], a[2] + v * ab[2] + w * ac[2]};
}

// Squared distance from p to segment ab (a point when a == b).
double point_segment_dist2(const Vec& p, const Vec& a, const Vec& b) {
  const Vec ab = sub(b, a);
  const double len2 = dot(ab, ab);
  if (len2 <= 0) return dist2(p, a);
  const double t = std::clamp(dot(sub(p, a), ab) / len2, 0.0, 1.0);
  return dist2(p, lerp3(a, ab, ab, t, 0));
}

// Squared distance from p to triangle abc: the closest point by the triangle's Voronoi regions
// (vertex, edge, face), as in Ericson's Real-Time Collision Detection, 5.1.5. A zero-area triangle
// (repeated or collinear corners) is its three edges, whose divisions below would be 0 / 0.
double point_triangle_dist2(const Vec& p, const Vec& a, const Vec& b, const Vec& c) {
  const Vec ab = sub(b, a), ac = sub(c, a), ap = sub(p, a);
  const Vec n = vec3::cross(ab, ac);
  if (dot(n, n) <= 1e-24 * dot(ab, ab) * dot(ac, ac)) {
    return std::min(
        {point_segment_dist2(p, a, b), point_segment_dist2(p, b, c), point_segment_dist2(p, a, c)});
  }
  const double d1 = dot(ab, ap), d2 = dot(ac, ap);
  if (d1 <= 0 && d2 <= 0) return dist2(p, a);
  const Vec bp = sub(p, b);
  const double d3 = dot(ab, bp), d4 = dot(ac, bp);
  if (d3 >= 0 && d4 <= d3) return dist2(p, b);
  const double vc = d1 * d4 - d3 * d2;
  if (vc <= 0 && d1 >= 0 && d3 <= 0) {
    const double v = d1 / (d1 - d3);
    return dist2(p, lerp3(a, ab, ac, v, 0));
  }
  const Vec cp = sub(p, c);
  const double d5 = dot(ab, cp), d6 = dot(ac, cp);
  if (d6 >= 0 && d5 <= d6) return dist2(p, c);
  const double vb = d5 * d2 - d1 * d6;
  if (vb <= 0 && d2 >= 0 && d6 <= 0) {
    const double w = d2 / (d2 - d6);
    return dist2(p, lerp3(a, ab, ac, 0, w));
  }
  const double va = d3 * d6 - d5 * d4;
  if (va <= 0 && (d4 - d3) >= 0 && (d5 - d6) >= 0) {
    const double w = (d4 - d3) / ((d4 - d3) + (d5 - d6));
    const Vec bc = sub(c, b);
    return dist2(p, {b[0] + w * bc[0], b[1] + w * bc[1], b[2] + w * bc[2]});
  }
  const double denom = va + vb + vc;  // > 0: the triangle has an area
  return dist2(p, lerp3(a, ab, ac, vb / denom, vc / denom));
}

// The triangles of a mesh binned by their bounding boxes into a uniform grid of cubic cells.
class TriangleGrid {
 public:
  explicit TriangleGrid(const Mesh& m) : m_(m) {
    const Bounds b = compute_bounds(m);
    const int64_t t = m.triangle_count();
    // About two triangles per occupied cell on a surface: cells of ~2 mean edge lengths.
    double edge = 0;
    for (int64_t i = 0; i < t; ++i)
      edge += std::sqrt(dist2(vertex(m.triangles[3 * i]), vertex(m.triangles[3 * i + 1])));
    edge /= static_cast<double>(std::max<int64_t>(t, 1));
    double extent = 0;
    for (int d = 0; d < 3; ++d) extent = std::max(extent, double(b.max[d]) - b.min[d]);
    cell_ = std::max({2.0 * edge, extent / 128.0, 1e-9});  // at most 129^3 cells
    for (int d = 0; d < 3; ++d) {
      origin_[d] = b.min[d];
      dims_[d] = std::max<int64_t>(1, static_cast<int64_t>((b.max[d] - b.min[d]) / cell_) + 1);
    }
    std::vector<int64_t> count(static_cast<size_t>(dims_[0] * dims_[1] * dims_[2]) + 1, 0);
    auto for_cells = [&](int64_t tri, auto&& fn) {
      std::array<int64_t, 3> lo{}, hi{};
      for (int d = 0; d < 3; ++d) {
        double mn = std::numeric_limits<double>::max(), mx = -mn;
        for (int v = 0; v < 3; ++v) {
          const double x = m.positions[3 * m.triangles[3 * tri + v] + d];
          mn = std::min(mn, x);
          mx = std::max(mx, x);
        }
        lo[d] = coord(mn, d);
        hi[d] = coord(mx, d);
      }
      for (int64_t z = lo[2]; z <= hi[2]; ++z)
        for (int64_t y = lo[1]; y <= hi[1]; ++y)
          for (int64_t x = lo[0]; x <= hi[0]; ++x) fn(index(x, y, z));
    };
    for (int64_t i = 0; i < t; ++i) for_cells(i, [&](int64_t c) { ++count[c + 1]; });
    for (size_t c = 1; c < count.size(); ++c) count[c] += count[c - 1];
    start_ = count;
    items_.resize(static_cast<size_t>(count.back()));
    for (int64_t i = 0; i < t; ++i) for_cells(i, [&](int64_t c) { items_[count[c]++] = i; });
  }

  // Distance from p to the nearest triangle.
  double distance(const Vec& p) const {
    std::array<int64_t, 3> c{};
    for (int d = 0; d < 3; ++d) c[d] = coord(p[d], d);
    double best = std::numeric_limits<double>::max();
    const int64_t max_ring = std::max({dims_[0], dims_[1], dims_[2]}) + 1;
    for (int64_t r = 0; r <= max_ring; ++r) {
      for (int64_t z = c[2] - r; z <= c[2] + r; ++z) {
        if (z < 0 || z >= dims_[2]) continue;
        for (int64_t y = c[1] - r; y <= c[1] + r; ++y) {
          if (y < 0 || y >= dims_[1]) continue;
          const bool inner = std::abs(z - c[2]) < r && std::abs(y - c[1]) < r;
          for (int64_t x = c[0] - r; x <= c[0] + r; x += (inner && r > 0) ? 2 * r : 1) {
            if (x < 0 || x >= dims_[0]) continue;
            const int64_t cell = index(x, y, z);
            for (int64_t k = start_[cell]; k < start_[cell + 1]; ++k) {
              const int64_t t = items_[static_cast<size_t>(k)];
              best = std::min(best, point_triangle_dist2(p, vertex(m_.triangles[3 * t]),
                                                         vertex(m_.triangles[3 * t + 1]),
                                                         vertex(m_.triangles[3 * t + 2])));
            }
          }
        }
      }
      // Every triangle not yet seen lies in cells beyond ring r, at least r * cell away from p's
      // cell (p is inside its cell, so r * cell is a lower bound on the distance to them).
      if (best < std::numeric_limits<double>::max() &&
          std::sqrt(best) <= static_cast<double>(r) * cell_) {
        break;
      }
    }
    return std::sqrt(best);
  }

 private:
  Vec vertex(uint32_t v) const {
    return {m_.positions[3 * v], m_.positions[3 * v + 1], m_.positions[3 * v + 2]};
  }
  int64_t coord(double x, int d) const {
    return std::clamp<int64_t>(static_cast<int64_t>(std::floor((x - origin_[d]) / cell_)), 0,
                               dims_[d] - 1);
  }
  int64_t index(int64_t x, int64_t y, int64_t z) const { return (z * dims_[1] + y) * dims_[0] + x; }

  const Mesh& m_;
  double cell_ = 1;
  std::array<double, 3> origin_{};
  std::array<int64_t, 3> dims_{};
  std::vector<int64_t> start_;
  std::vector<int64_t> items_;
};

// Largest and mean distance of a's used vertices to b's surface.
std::pair<double, double> one_sided(const Mesh& a, const TriangleGrid& b) {
  std::vector<char> used(static_cast<size_t>(a.vertex_count()), 0);
  for (uint32_t v : a.triangles) used[v] = 1;
  std::vector<uint32_t> verts;
  for (size_t v = 0; v < used.size(); ++v)
    if (used[v]) verts.push_back(static_cast<uint32_t>(v));
  std::vector<double> d(verts.size());
  default_thread_pool().parallel_for(
      static_cast<int64_t>(verts.size()), 1024, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const float* p = &a.positions[3 * static_cast<size_t>(verts[i])];
          d[static_cast<size_t>(i)] = b.distance({p[0], p[1], p[2]});
        }
      });
  double mx = 0, sum = 0;
  for (double x : d) {
    mx = std::max(mx, x);
    sum += x;
  }
  return {mx, d.empty() ? 0.0 : sum / static_cast<double>(d.size())};
}

}  // namespace

Expected<SurfaceDistance> surface_distance(const Mesh& a, const Mesh& b) {
  if (a.empty()) return invalid_argument("surface distance: the first mesh has no triangles");
  if (b.empty()) return invalid_argument("surface distance: the second mesh has no triangles");
  const TriangleGrid grid_a(a), grid_b(b);
  SurfaceDistance r;
  const auto ab = one_sided(a, grid_b);
  r.a_to_b = ab.first;
  r.mean_a_to_b = ab.second;
  r.b_to_a = one_sided(b, grid_a).first;
  return r;
}

}  // namespace tessera::mesh
