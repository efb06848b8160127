#include "engine/mesh/check.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/mesh/cleanup.h"
#include "engine/mesh/vec3_internal.h"

namespace tessera::mesh {
namespace {

using vec3::cross;
using vec3::dot;
using vec3::sub;
using vec3::Vec;

// Does segment p-q cross triangle (a, b, c) strictly inside the segment?
bool segment_hits_triangle(const Vec& p, const Vec& q, const Vec& a, const Vec& b, const Vec& c) {
  const Vec dir = sub(q, p);
  const Vec e1 = sub(b, a), e2 = sub(c, a);
  const Vec h = cross(dir, e2);
  const double det = dot(e1, h);
  const double scale = std::max({dot(e1, e1), dot(e2, e2), dot(dir, dir), 1e-30});
  if (std::fabs(det) < 1e-12 * scale * std::sqrt(scale)) return false;  // parallel / coplanar
  const double inv = 1.0 / det;
  const Vec s = sub(p, a);
  const double u = inv * dot(s, h);
  if (u < 0.0 || u > 1.0) return false;
  const Vec qv = cross(s, e1);
  const double v = inv * dot(dir, qv);
  if (v < 0.0 || u + v > 1.0) return false;
  const double t = inv * dot(e2, qv);
  return t > 1e-9 && t < 1.0 - 1e-9;
}

}  // namespace

MeshReport check_mesh(const Mesh& mesh, const CheckOptions& options) {
  MeshReport r;
  r.vertices = mesh.vertex_count();
  r.triangles = mesh.triangle_count();
  // What a consumer that welds coincident vertices sees (compute_welded_topology's weld, done
  // once here: its triangles also tell which pairs share a vertex below).
  Mesh welded;
  welded.positions = mesh.positions;
  welded.triangles = mesh.triangles;
  r.welded_vertices = weld_vertices(welded, 0.0f);
  r.topology = compute_topology(welded);
  r.volume = signed_volume(mesh);
  r.area = surface_area(mesh);
  r.bounds = compute_bounds(mesh);
  const std::vector<uint32_t>& id = welded.triangles;
  if (r.topology.watertight() && r.triangles > 0) {
    // chi = 2C - 2g over the closed surfaces.
    r.genus = (2 * r.topology.components - r.topology.euler_characteristic) / 2;
  }
  const int64_t n = r.triangles;
  auto corner = [&](int64_t t, int c) {
    const float* p = &mesh.positions[3 * static_cast<size_t>(mesh.triangles[3 * t + c])];
    return Vec{p[0], p[1], p[2]};
  };
  for (int64_t t = 0; t < n; ++t) {
    const Vec a = corner(t, 0), b = corner(t, 1), c = corner(t, 2);
    const Vec nrm = cross(sub(b, a), sub(c, a));
    if (dot(nrm, nrm) == 0.0) ++r.zero_area_triangles;
  }
  if (n < 2) return r;

  // Self-intersections: a uniform grid of about n cells over the bounds; each triangle goes into
  // the cells its box overlaps; a pair is tested in the first cell (lowest index) both share.
  const double diag = std::max(r.bounds.diagonal(), 1e-12);
  double extent[3];
  for (int k = 0; k < 3; ++k) {
    extent[k] = std::max(static_cast<double>(r.bounds.max[k] - r.bounds.min[k]), diag * 1e-6);
  }
  const double volume = extent[0] * extent[1] * extent[2];
  const double cell = std::cbrt(volume / static_cast<double>(std::min<int64_t>(n, 1 << 21)));
  int64_t dims[3];
  for (int k = 0; k < 3; ++k) {
    dims[k] = std::clamp<int64_t>(static_cast<int64_t>(extent[k] / cell) + 1, 1, 256);
  }
  struct Box {
    int64_t lo[3], hi[3];
  };
  std::vector<Box> boxes(static_cast<size_t>(n));
  std::unordered_map<int64_t, std::vector<int64_t>> cells;
  for (int64_t t = 0; t < n; ++t) {
    Box& bx = boxes[static_cast<size_t>(t)];
    for (int k = 0; k < 3; ++k) {
      double lo = INFINITY, hi = -INFINITY;
      for (int c = 0; c < 3; ++c) {
        const double x = corner(t, c)[k];
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
      auto idx = [&](double x) {
        return std::clamp<int64_t>(
            static_cast<int64_t>((x - r.bounds.min[k]) / extent[k] * static_cast<double>(dims[k])),
            0, dims[k] - 1);
      };
      bx.lo[k] = idx(lo);
      bx.hi[k] = idx(hi);
    }
    for (int64_t z = bx.lo[2]; z <= bx.hi[2]; ++z) {
      for (int64_t y = bx.lo[1]; y <= bx.hi[1]; ++y) {
        for (int64_t x = bx.lo[0]; x <= bx.hi[0]; ++x) {
          cells[(z * dims[1] + y) * dims[0] + x].push_back(t);
        }
      }
    }
  }
  auto shares_vertex = [&](int64_t s, int64_t t) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        if (id[3 * s + i] == id[3 * t + j]) return true;
      }
    }
    return false;
  };
  auto crosses = [&](int64_t s, int64_t t) {
    const Vec a[3] = {corner(s, 0), corner(s, 1), corner(s, 2)};
    const Vec b[3] = {corner(t, 0), corner(t, 1), corner(t, 2)};
    for (int e = 0; e < 3; ++e) {
      if (segment_hits_triangle(a[e], a[(e + 1) % 3], b[0], b[1], b[2])) return true;
      if (segment_hits_triangle(b[e], b[(e + 1) % 3], a[0], a[1], a[2])) return true;
    }
    return false;
  };
  for (const auto& [key, list] : cells) {
    for (size_t i = 0; i < list.size(); ++i) {
      for (size_t j = i + 1; j < list.size(); ++j) {
        const int64_t s = list[i], t = list[j];
        const Box& bs = boxes[static_cast<size_t>(s)];
        const Box& bt = boxes[static_cast<size_t>(t)];
        int64_t first[3];
        bool overlap = true;
        for (int k = 0; k < 3; ++k) {
          first[k] = std::max(bs.lo[k], bt.lo[k]);
          if (first[k] > std::min(bs.hi[k], bt.hi[k])) overlap = false;
        }
        if (!overlap || (first[2] * dims[1] + first[1]) * dims[0] + first[0] != key) continue;
        if (shares_vertex(s, t)) continue;
        if (r.pairs_tested >= options.max_pair_tests) {
          r.intersection_check_complete = false;
          return r;
        }
        ++r.pairs_tested;
        if (crosses(s, t)) ++r.intersecting_pairs;
      }
    }
  }
  return r;
}

std::string report_text(const MeshReport& r) {
  char buf[2048];
  std::string genus = r.genus >= 0 ? std::to_string(r.genus) : "n/a (not closed and manifold)";
  std::snprintf(
      buf, sizeof buf,
      "vertices            %lld (%lld coincide with another and are welded for the checks)\n"
      "triangles           %lld (%lld of zero area)\n"
      "boundary edges      %lld\n"
      "non-manifold edges  %lld\n"
      "misoriented edges   %lld\n"
      "components          %lld\n"
      "genus               %s\n"
      "closed              %s\n"
      "volume              %.6g%s\n"
      "area                %.6g\n"
      "bounds              [%.4g, %.4g, %.4g] .. [%.4g, %.4g, %.4g]\n"
      "size                %.4g x %.4g x %.4g (file units)\n"
      "self-intersections  %lld intersecting pairs of %lld tested%s\n",
      static_cast<long long>(r.vertices), static_cast<long long>(r.welded_vertices),
      static_cast<long long>(r.triangles), static_cast<long long>(r.zero_area_triangles),
      static_cast<long long>(r.topology.boundary_edges),
      static_cast<long long>(r.topology.non_manifold_edges),
      static_cast<long long>(r.topology.misoriented_edges),
      static_cast<long long>(r.topology.components), genus.c_str(),
      r.watertight() ? "yes (closed and manifold)"
                     : (r.closed() ? "no (non-manifold edges)" : "no (holes)"),
      r.volume,
      r.closed() ? (r.volume < 0 ? " (negative: inside out)" : "") : " (open: not meaningful)",
      r.area, r.bounds.min[0], r.bounds.min[1], r.bounds.min[2], r.bounds.max[0], r.bounds.max[1],
      r.bounds.max[2], double(r.bounds.max[0]) - r.bounds.min[0],
      double(r.bounds.max[1]) - r.bounds.min[1], double(r.bounds.max[2]) - r.bounds.min[2],
      static_cast<long long>(r.intersecting_pairs), static_cast<long long>(r.pairs_tested),
      r.intersection_check_complete ? " (all candidate pairs)" : " (stopped at the limit)");
  return buf;
}

std::string report_json(const MeshReport& r) {
  nlohmann::json j = {{"vertices", r.vertices},
                      {"welded_vertices", r.welded_vertices},
                      {"triangles", r.triangles},
                      {"zero_area_triangles", r.zero_area_triangles},
                      {"boundary_edges", r.topology.boundary_edges},
                      {"non_manifold_edges", r.topology.non_manifold_edges},
                      {"misoriented_edges", r.topology.misoriented_edges},
                      {"components", r.topology.components},
                      {"genus", r.genus >= 0 ? nlohmann::json(r.genus) : nlohmann::json()},
                      {"closed", r.closed()},
                      {"manifold", r.manifold()},
                      {"watertight", r.watertight()},
                      {"volume", r.volume},
                      {"area", r.area},
                      {"bounds_min", r.bounds.min},
                      {"bounds_max", r.bounds.max},
                      {"self_intersecting_pairs", r.intersecting_pairs},
                      {"self_intersection_pairs_tested", r.pairs_tested},
                      {"self_intersection_check_complete", r.intersection_check_complete}};
  return j.dump(2);
}

}  // namespace tessera::mesh
