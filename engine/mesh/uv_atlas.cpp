// The UV atlas's orchestration and checks (uv_atlas.h): charts, flattening, packing, the output
// mesh with border vertices split per chart, and the measurements the report gives.
#include "engine/mesh/uv_atlas.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/mesh/uv_internal.h"

namespace tessera::mesh {

namespace uv_detail {

double l2_stretch(const Vec3d q[3], const double s[3][2]) {
  const double a2 = (s[1][0] - s[0][0]) * (s[2][1] - s[0][1]) -
                    (s[2][0] - s[0][0]) * (s[1][1] - s[0][1]);  // 2 x the UV area
  if (a2 == 0) return 0;
  Vec3d ss{0, 0, 0}, st{0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const int j = (i + 1) % 3, k = (i + 2) % 3;
    ss = add(ss, scale(q[i], s[j][1] - s[k][1]));
    st = add(st, scale(q[i], s[k][0] - s[j][0]));
  }
  ss = scale(ss, 1.0 / a2);
  st = scale(st, 1.0 / a2);
  return std::sqrt(0.5 * (dot(ss, ss) + dot(st, st)));
}

namespace {

// Overlap of the interiors of two triangles by more than eps along each of their six edge
// normals (the separating axis theorem).
bool interiors_overlap(const double* a, const double* b, double eps) {
  for (const double* t : {a, b}) {
    for (int e = 0; e < 3; ++e) {
      const double* p = t + 2 * e;
      const double* q = t + 2 * ((e + 1) % 3);
      const double nx = -(q[1] - p[1]), ny = q[0] - p[0];
      const double len = std::hypot(nx, ny);
      if (len <= 0) return false;
      double lo[2] = {1e300, 1e300}, hi[2] = {-1e300, -1e300};
      for (int w = 0; w < 2; ++w) {
        const double* tri = w == 0 ? a : b;
        for (int k = 0; k < 3; ++k) {
          const double d = (tri[2 * k] * nx + tri[2 * k + 1] * ny) / len;
          lo[w] = std::min(lo[w], d);
          hi[w] = std::max(hi[w], d);
        }
      }
      if (std::min(hi[0], hi[1]) - std::max(lo[0], lo[1]) <= eps) return false;
    }
  }
  return true;
}

}  // namespace

int64_t count_overlaps(const std::vector<double>& tri, double eps, int64_t limit) {
  const size_t n = tri.size() / 6;
  std::vector<size_t> live;
  live.reserve(n);
  double lo[2] = {1e300, 1e300}, hi[2] = {-1e300, -1e300}, extent_sum = 0;
  for (size_t t = 0; t < n; ++t) {
    const double* p = &tri[6 * t];
    if (std::fabs(signed_area2(p, p + 2, p + 4)) <= eps * eps) continue;
    live.push_back(t);
    double tl[2] = {1e300, 1e300}, th[2] = {-1e300, -1e300};
    for (int k = 0; k < 3; ++k) {
      for (int a = 0; a < 2; ++a) {
        tl[a] = std::min(tl[a], p[2 * k + a]);
        th[a] = std::max(th[a], p[2 * k + a]);
      }
    }
    for (int a = 0; a < 2; ++a) {
      lo[a] = std::min(lo[a], tl[a]);
      hi[a] = std::max(hi[a], th[a]);
    }
    extent_sum += std::max(th[0] - tl[0], th[1] - tl[1]);
  }
  if (live.size() < 2) return 0;
  // Cells about twice the mean triangle size, at most ~4 cells per triangle overall.
  const double cell = std::max(2.0 * extent_sum / static_cast<double>(live.size()),
                               std::max(hi[0] - lo[0], hi[1] - lo[1]) / 4096.0);
  const int64_t gx = std::max<int64_t>(1, static_cast<int64_t>((hi[0] - lo[0]) / cell) + 1);
  std::unordered_map<int64_t, std::vector<size_t>> grid;
  grid.reserve(live.size() * 2);
  for (size_t t : live) {
    const double* p = &tri[6 * t];
    const double x0 = std::min({p[0], p[2], p[4]}), x1 = std::max({p[0], p[2], p[4]});
    const double y0 = std::min({p[1], p[3], p[5]}), y1 = std::max({p[1], p[3], p[5]});
    for (int64_t cy = static_cast<int64_t>((y0 - lo[1]) / cell);
         cy <= static_cast<int64_t>((y1 - lo[1]) / cell); ++cy) {
      for (int64_t cx = static_cast<int64_t>((x0 - lo[0]) / cell);
           cx <= static_cast<int64_t>((x1 - lo[0]) / cell); ++cx) {
        grid[cy * gx + cx].push_back(t);
      }
    }
  }
  std::vector<std::pair<size_t, size_t>> pairs;
  for (const auto& [key, list] : grid) {
    for (size_t i = 0; i < list.size(); ++i) {
      for (size_t j = i + 1; j < list.size(); ++j) {
        if (interiors_overlap(&tri[6 * list[i]], &tri[6 * list[j]], eps)) {
          pairs.emplace_back(std::min(list[i], list[j]), std::max(list[i], list[j]));
          if (limit > 0 && static_cast<int64_t>(pairs.size()) >= limit) return limit;
        }
      }
    }
  }
  std::sort(pairs.begin(), pairs.end());
  return std::unique(pairs.begin(), pairs.end()) - pairs.begin();
}

}  // namespace uv_detail

namespace {

using namespace uv_detail;
using Clock = std::chrono::steady_clock;
constexpr double kSliverTexelArea2 = 2e-3;  // twice the UV area, texels^2
constexpr double kOverlapTexels = 2e-3;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double percentile(std::vector<std::pair<double, double>>& values, double total, double p) {
  if (values.empty() || !(total > 0)) return 0;
  double acc = 0;
  for (const auto& [v, w] : values) {
    acc += w;
    if (acc >= p * total) return v;
  }
  return values.back().first;
}

}  // namespace

Expected<AtlasReport> check_uv_atlas(const Mesh& mesh, int size) {
  if (mesh.uvs.size() != mesh.positions.size() / 3 * 2 || mesh.uvs.empty()) {
    return invalid_argument("UV atlas check: the mesh has no uvs");
  }
  AtlasReport r;
  const size_t nt = mesh.triangles.size() / 3;
  std::vector<double> tri(nt * 6);
  double area3 = 0, area2 = 0;
  for (size_t t = 0; t < nt; ++t) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t v = mesh.triangles[3 * t + static_cast<size_t>(k)];
      tri[6 * t + 2 * static_cast<size_t>(k)] = mesh.uvs[2 * v] * size;
      tri[6 * t + 2 * static_cast<size_t>(k) + 1] = (1.0 - mesh.uvs[2 * v + 1]) * size;
    }
    area3 += face_geometry(mesh, static_cast<int64_t>(t)).area;
    area2 += 0.5 * std::fabs(signed_area2(&tri[6 * t], &tri[6 * t + 2], &tri[6 * t + 4]));
  }
  // Overlaps deeper than float uvs can resolve (their spacing near 1 is 2.4e-4 texels at 4096).
  r.overlapping = count_overlaps(tri, kOverlapTexels);
  r.utilization = area2 / (static_cast<double>(size) * size);
  r.texels_per_unit = area3 > 0 ? std::sqrt(area2 / area3) : 0;
  // Flips: in texel space (y down) a chart keeps one winding; count the minority per connected
  // UV island (vertices shared by index).
  std::vector<size_t> parent(mesh.positions.size() / 3);
  for (size_t i = 0; i < parent.size(); ++i) parent[i] = i;
  auto find = [&](size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (size_t t = 0; t < nt; ++t) {
    parent[find(mesh.triangles[3 * t])] = find(mesh.triangles[3 * t + 1]);
    parent[find(mesh.triangles[3 * t + 1])] = find(mesh.triangles[3 * t + 2]);
  }
  std::unordered_map<size_t, std::pair<int64_t, int64_t>> winding;  // island -> (ccw, cw)
  std::vector<std::pair<double, double>> stretch;
  stretch.reserve(nt);
  for (size_t t = 0; t < nt; ++t) {
    const double a = signed_area2(&tri[6 * t], &tri[6 * t + 2], &tri[6 * t + 4]);
    const FaceGeometry g = face_geometry(mesh, static_cast<int64_t>(t));
    // Slivers under a thousandth of a texel have no winding worth the name (float rounding of
    // their uvs decides it) and cover nothing.
    if (std::fabs(a) < kSliverTexelArea2 || g.area <= 0) continue;
    auto& w = winding[find(mesh.triangles[3 * t])];
    (a > 0 ? w.first : w.second) += 1;
    const Vec3d q[3] = {position(mesh, mesh.triangles[3 * t]),
                        position(mesh, mesh.triangles[3 * t + 1]),
                        position(mesh, mesh.triangles[3 * t + 2])};
    const double s[3][2] = {{tri[6 * t], tri[6 * t + 1]},
                            {tri[6 * t + 2], tri[6 * t + 3]},
                            {tri[6 * t + 4], tri[6 * t + 5]}};
    stretch.push_back({l2_stretch(q, s) * r.texels_per_unit, g.area});
  }
  for (const auto& [island, w] : winding) r.flipped += std::min(w.first, w.second);
  r.charts = static_cast<int64_t>(winding.size());
  std::sort(stretch.begin(), stretch.end());
  r.stretch_p50 = percentile(stretch, area3, 0.5);
  r.stretch_p90 = percentile(stretch, area3, 0.9);
  r.stretch_p99 = percentile(stretch, area3, 0.99);
  return r;
}

bool is_atlas_size(int size) {
  return size == 1024 || size == 2048 || size == 4096;
}

Expected<Mesh> make_uv_atlas(const Mesh& mesh, const AtlasOptions& options, AtlasReport* report) {
  TESSERA_RETURN_IF_ERROR(validate(mesh));
  if (mesh.triangles.empty()) return invalid_argument("UV atlas: the mesh has no triangles");
  if (!is_atlas_size(options.size)) {
    return invalid_argument("UV atlas: texture size " + std::to_string(options.size) +
                            " is not 1024, 2048 or 4096");
  }
  if (options.gutter < 0 || options.gutter > options.size / 16) {
    return invalid_argument("UV atlas: gutter " + std::to_string(options.gutter) +
                            " texels is outside 0.." + std::to_string(options.size / 16));
  }
  if (!(options.max_chart_angle_deg > 0.0f && options.max_chart_angle_deg < 90.0f)) {
    return invalid_argument("UV atlas: chart angle " + std::to_string(options.max_chart_angle_deg) +
                            " degrees is outside (0, 90)");
  }
  AtlasReport own;
  AtlasReport& r = report ? *report : own;
  r = AtlasReport{};
  if (!mesh.uvs.empty() && !options.replace_existing) {
    r.kept_existing = true;
    return mesh;
  }
  if (!(surface_area(mesh) > 0)) return invalid_argument("UV atlas: the surface has zero area");
  const auto cancelled_now = [&] { return options.cancel && options.cancel->load(); };
  const int gutter = options.gutter > 0 ? options.gutter : options.size / 256;

  auto t0 = Clock::now();
  int64_t chart_count = 0;
  const std::vector<int32_t> chart_of =
      grow_charts(mesh, options.max_chart_angle_deg, &chart_count);
  std::vector<std::vector<int64_t>> faces_of(static_cast<size_t>(chart_count));
  for (size_t f = 0; f < chart_of.size(); ++f) {
    faces_of[static_cast<size_t>(chart_of[f])].push_back(static_cast<int64_t>(f));
  }
  r.charts_ms = ms_since(t0);
  if (cancelled_now()) return cancelled("UV atlas: cancelled");

  t0 = Clock::now();
  const std::vector<uint32_t> welded = weld_positions(mesh);
  std::vector<FlatChart> flat;
  flat.reserve(faces_of.size());
  const double cut_area = hollow_cut_area(mesh);
  for (const auto& faces : faces_of) {
    r.split_charts += flatten_chart_welded(mesh, welded, faces, cut_area, &flat);
    if (cancelled_now()) return cancelled("UV atlas: cancelled");
  }
  for (const FlatChart& c : flat) r.lscm_charts += c.lscm ? 1 : 0;
  r.flatten_ms = ms_since(t0);

  t0 = Clock::now();
  TESSERA_ASSIGN_OR_RETURN(const double density,
                           pack_charts(&flat, options.size, gutter, options.cancel));
  r.pack_ms = ms_since(t0);

  // The output: one vertex per (mesh vertex, chart).
  Mesh out;
  out.triangles.resize(mesh.triangles.size());
  std::unordered_map<uint64_t, uint32_t> made;
  made.reserve(mesh.positions.size() / 3 * 2);
  const bool normals = !mesh.normals.empty();
  const double inv = 1.0 / options.size;
  for (size_t c = 0; c < flat.size(); ++c) {
    const FlatChart& fc = flat[c];
    for (size_t t = 0; t < fc.faces.size(); ++t) {
      const int64_t f = fc.faces[t];
      for (int k = 0; k < 3; ++k) {
        const uint32_t v = mesh.triangles[static_cast<size_t>(3 * f + k)];
        const uint32_t local = fc.triangles[3 * t + static_cast<size_t>(k)];
        const uint64_t key = (static_cast<uint64_t>(c) << 32) | v;
        auto [it, fresh] = made.try_emplace(key, static_cast<uint32_t>(out.positions.size() / 3));
        if (fresh) {
          out.positions.insert(out.positions.end(), mesh.positions.begin() + 3 * v,
                               mesh.positions.begin() + 3 * v + 3);
          if (normals) {
            out.normals.insert(out.normals.end(), mesh.normals.begin() + 3 * v,
                               mesh.normals.begin() + 3 * v + 3);
          }
          const double u = std::clamp(fc.uv[2 * local] * inv, 0.0, 1.0);
          const double w = std::clamp(1.0 - fc.uv[2 * local + 1] * inv, 0.0, 1.0);
          out.uvs.push_back(static_cast<float>(u));
          out.uvs.push_back(static_cast<float>(w));
        }
        out.triangles[static_cast<size_t>(3 * f + k)] = it->second;
      }
    }
  }
  int64_t used = 0;
  {
    std::vector<char> seen(mesh.positions.size() / 3, 0);
    for (uint32_t v : mesh.triangles) {
      if (!seen[v]) {
        seen[v] = 1;
        ++used;
      }
    }
  }
  r.seam_vertices = static_cast<int64_t>(out.positions.size() / 3) - used;
  const int64_t lscm = r.lscm_charts, split = r.split_charts;
  const double charts_ms = r.charts_ms, flatten_ms = r.flatten_ms, pack_ms = r.pack_ms;
  const int64_t seams = r.seam_vertices;
  TESSERA_ASSIGN_OR_RETURN(r, check_uv_atlas(out, options.size));
  r.charts = static_cast<int64_t>(flat.size());
  r.lscm_charts = lscm;
  r.split_charts = split;
  r.seam_vertices = seams;
  r.charts_ms = charts_ms;
  r.flatten_ms = flatten_ms;
  r.pack_ms = pack_ms;
  r.texels_per_unit = density;
  return out;
}

}  // namespace tessera::mesh
