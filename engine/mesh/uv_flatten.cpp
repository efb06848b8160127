// Flattening one chart for the UV atlas (uv_atlas.h).
//
// 1. The chart's welded vertices are projected onto the plane of its area-weighted mean normal.
//    That map is kept when no triangle flips and its stretch is low (xatlas's test: mean L2
//    stretch <= 1.1, max <= 1.25, after scaling the chart to its 3D area).
// 2. Otherwise least-squares conformal maps (Levy, Petitjean, Ray and Maillot 2002): per triangle
//    the residual of the Cauchy-Riemann equations, sqrt(A) (grad v - rot90 grad u), with the
//    gradients of the barycentric basis in the triangle's own plane; two far-apart vertices are
//    pinned where the projection put them and the rest solved by Jacobi-preconditioned conjugate
//    gradients on the normal equations (matrix-free), starting from the projection.
// 3. A result with a flipped triangle falls back to the projection when that one does not flip;
//    otherwise, when the chart overlaps itself in UV, or when it is no disc (a ring such as the
//    top of a torus: its hole would be wasted texels), the chart is cut in two by the plane
//    through its centroid across its longest extent, and each connected piece is flattened again
//    (a single triangle always flattens).
// 4. A flattening that fills less than 70 % of its smallest bounding box (an arc, half a ring)
//    is cut across the box's long side, keeping its map, while it holds 1 % of the mesh's area:
//    its hollow would be texels no other chart of a few-chart mesh could use.
// The UVs are then scaled so the chart's UV area equals its 3D area (even texel density).
#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <vector>

#include "engine/mesh/uv_atlas.h"
#include "engine/mesh/uv_internal.h"

namespace tessera::mesh {

namespace {

using namespace uv_detail;

constexpr int kMaxCgIterations = 400;
// A chart of at least kMinFillCutFaces triangles that fills less than kMinBoxFill of its
// smallest bounding box is cut in two, at most kFillCuts times over (4 pieces).
constexpr double kMinBoxFill = 0.7;
constexpr size_t kMinFillCutFaces = 16;
constexpr int kFillCuts = 2;
// ... and has at least this share of the mesh's area (smaller hollows cost less than the
// gutters that more charts would add).
constexpr double kHollowShare = 0.01;

struct Piece {
  std::vector<int64_t> faces;
  std::vector<uint32_t> welded_of;  // local vertex -> welded id
  std::vector<uint32_t> mesh_of;    // local vertex -> a mesh vertex at that position
  std::vector<uint32_t> triangles;  // local
};

Piece make_piece(const Mesh& mesh, const std::vector<uint32_t>& welded,
                 const std::vector<int64_t>& faces) {
  Piece p;
  p.faces = faces;
  std::unordered_map<uint32_t, uint32_t> local;
  local.reserve(faces.size() * 2);
  p.triangles.reserve(faces.size() * 3);
  for (int64_t f : faces) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t v = mesh.triangles[static_cast<size_t>(3 * f + k)];
      const auto [it, fresh] =
          local.try_emplace(welded[v], static_cast<uint32_t>(p.welded_of.size()));
      if (fresh) {
        p.welded_of.push_back(welded[v]);
        p.mesh_of.push_back(v);
      }
      p.triangles.push_back(it->second);
    }
  }
  return p;
}

// Connected components of a piece through shared edges (what keeps a chart one patch):
// union-find over the piece's local edge map.
std::vector<std::vector<int64_t>> components(const Piece& p) {
  const size_t n = p.faces.size();
  std::vector<size_t> parent(n);
  for (size_t i = 0; i < n; ++i) parent[i] = i;
  auto find = [&](size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::unordered_map<uint64_t, size_t> edge_face;
  edge_face.reserve(n * 3);
  for (size_t t = 0; t < n; ++t) {
    for (int k = 0; k < 3; ++k) {
      uint64_t a = p.triangles[3 * t + static_cast<size_t>(k)];
      uint64_t b = p.triangles[3 * t + static_cast<size_t>((k + 1) % 3)];
      if (a > b) std::swap(a, b);
      const auto [it, fresh] = edge_face.try_emplace((a << 32) | b, t);
      if (!fresh) parent[find(t)] = find(it->second);
    }
  }
  std::unordered_map<size_t, size_t> slot;
  std::vector<std::vector<int64_t>> out;
  for (size_t t = 0; t < n; ++t) {
    const auto [it, fresh] = slot.try_emplace(find(t), out.size());
    if (fresh) out.emplace_back();
    out[it->second].push_back(p.faces[t]);
  }
  return out;
}

Vec3d vertex(const Mesh& mesh, const Piece& p, uint32_t local) {
  return position(mesh, p.mesh_of[local]);
}

// The projection onto the plane of the area-weighted mean normal (t x b = n: counter-clockwise
// for faces that face along n).
std::vector<double> project(const Mesh& mesh, const Piece& p) {
  Vec3d sum{0, 0, 0};
  for (int64_t f : p.faces) {
    const FaceGeometry g = face_geometry(mesh, f);
    sum = add(sum, scale(g.normal, g.area));
  }
  double len = norm(sum);
  Vec3d n = len > 0 ? scale(sum, 1.0 / len) : Vec3d{0, 0, 1};
  const Vec3d helper = std::fabs(n[0]) < 0.9 ? Vec3d{1, 0, 0} : Vec3d{0, 1, 0};
  Vec3d t = cross(helper, n);
  t = scale(t, 1.0 / norm(t));
  const Vec3d b = cross(n, t);
  std::vector<double> uv(2 * p.welded_of.size());
  for (size_t v = 0; v < p.welded_of.size(); ++v) {
    const Vec3d q = vertex(mesh, p, static_cast<uint32_t>(v));
    uv[2 * v] = dot(q, t);
    uv[2 * v + 1] = dot(q, b);
  }
  return uv;
}

double area3d(const Mesh& mesh, const Piece& p) {
  double a = 0;
  for (int64_t f : p.faces) a += face_geometry(mesh, f).area;
  return a;
}

double area2d(const Piece& p, const std::vector<double>& uv) {
  double a = 0;
  for (size_t t = 0; t < p.faces.size(); ++t) {
    a += 0.5 * signed_area2(&uv[2 * p.triangles[3 * t]], &uv[2 * p.triangles[3 * t + 1]],
                            &uv[2 * p.triangles[3 * t + 2]]);
  }
  return a;
}

struct Quality {
  int64_t flips = 0;
  double mean_stretch = 0, max_stretch = 0;
};

// Flips (non-positive UV area for a face of positive 3D area) and stretch with the chart scaled
// to its 3D area.
Quality quality(const Mesh& mesh, const Piece& p, const std::vector<double>& uv) {
  Quality q;
  const double a3 = area3d(mesh, p), a2 = area2d(p, uv);
  const double s = a2 > 0 && a3 > 0 ? std::sqrt(a2 / a3) : 1.0;
  double weighted = 0;
  for (size_t t = 0; t < p.faces.size(); ++t) {
    const uint32_t* tri = &p.triangles[3 * t];
    const double area = face_geometry(mesh, p.faces[t]).area;
    if (area <= 0) continue;
    const double* a = &uv[2 * tri[0]];
    const double* b = &uv[2 * tri[1]];
    const double* c = &uv[2 * tri[2]];
    if (signed_area2(a, b, c) <= 0) {
      ++q.flips;
      continue;
    }
    const Vec3d qs[3] = {vertex(mesh, p, tri[0]), vertex(mesh, p, tri[1]), vertex(mesh, p, tri[2])};
    const double st[3][2] = {{a[0], a[1]}, {b[0], b[1]}, {c[0], c[1]}};
    const double l2 = l2_stretch(qs, st) * s;
    weighted += l2 * l2 * area;
    q.max_stretch = std::max(q.max_stretch, l2);
  }
  q.mean_stretch = a3 > 0 ? std::sqrt(weighted / a3) : 0;
  return q;
}

// LSCM from `uv` (the projection): pins the two vertices farthest apart along the projection's
// longer axis and relaxes the rest. Returns false when the system is degenerate.
bool lscm(const Mesh& mesh, const Piece& p, std::vector<double>* uv) {
  const size_t nv = p.welded_of.size(), nt = p.faces.size();
  if (nv < 4) return false;
  // Per triangle: sqrt(A) * the gradients of the three barycentric basis functions in the
  // triangle's own orthonormal frame.
  std::vector<double> g(nt * 6);
  for (size_t t = 0; t < nt; ++t) {
    const Vec3d a = vertex(mesh, p, p.triangles[3 * t]);
    const Vec3d b = vertex(mesh, p, p.triangles[3 * t + 1]);
    const Vec3d c = vertex(mesh, p, p.triangles[3 * t + 2]);
    const Vec3d e1 = sub(b, a);
    const double l1 = norm(e1);
    const Vec3d n = cross(e1, sub(c, a));
    const double twice = norm(n);
    if (l1 <= 0 || twice <= 0) {
      std::fill(&g[6 * t], &g[6 * t] + 6, 0.0);
      continue;
    }
    const Vec3d x = scale(e1, 1.0 / l1);
    const Vec3d y = scale(cross(n, e1), 1.0 / (l1 * twice));
    const double pts[3][2] = {{0, 0}, {l1, 0}, {dot(sub(c, a), x), dot(sub(c, a), y)}};
    const double root = std::sqrt(0.5 * twice);
    for (int j = 0; j < 3; ++j) {
      const double* p1 = pts[(j + 1) % 3];
      const double* p2 = pts[(j + 2) % 3];
      // grad phi_j = perp(p2 - p1) / (2A), perp(x, y) = (-y, x).
      g[6 * t + 2 * j] = -(p2[1] - p1[1]) / twice * root;
      g[6 * t + 2 * j + 1] = (p2[0] - p1[0]) / twice * root;
    }
  }
  // Pins: extreme vertices along the projection's longer axis.
  double lo[2] = {1e300, 1e300}, hi[2] = {-1e300, -1e300};
  for (size_t v = 0; v < nv; ++v) {
    for (int a = 0; a < 2; ++a) {
      lo[a] = std::min(lo[a], (*uv)[2 * v + a]);
      hi[a] = std::max(hi[a], (*uv)[2 * v + a]);
    }
  }
  const int axis = hi[0] - lo[0] >= hi[1] - lo[1] ? 0 : 1;
  size_t pin0 = 0, pin1 = 0;
  for (size_t v = 0; v < nv; ++v) {
    if ((*uv)[2 * v + axis] < (*uv)[2 * pin0 + axis]) pin0 = v;
    if ((*uv)[2 * v + axis] > (*uv)[2 * pin1 + axis]) pin1 = v;
  }
  if (pin0 == pin1) return false;
  std::vector<char> pinned(nv, 0);
  pinned[pin0] = pinned[pin1] = 1;
  // y = P J^T J P x (P zeroes the pinned unknowns), and J^T J's diagonal.
  const auto apply = [&](const std::vector<double>& x, std::vector<double>* y, bool mask) {
    std::fill(y->begin(), y->end(), 0.0);
    for (size_t t = 0; t < nt; ++t) {
      const double* gt = &g[6 * t];
      const uint32_t* tri = &p.triangles[3 * t];
      double rx = 0, ry = 0;
      for (int j = 0; j < 3; ++j) {
        const uint32_t v = tri[j];
        if (mask && pinned[v]) continue;
        const double u = x[2 * v], w = x[2 * v + 1];
        // r = (dv/dx + du/dy, dv/dy - du/dx)
        rx += w * gt[2 * j] + u * gt[2 * j + 1];
        ry += w * gt[2 * j + 1] - u * gt[2 * j];
      }
      for (int j = 0; j < 3; ++j) {
        const uint32_t v = tri[j];
        if (mask && pinned[v]) continue;
        (*y)[2 * v] += rx * gt[2 * j + 1] - ry * gt[2 * j];
        (*y)[2 * v + 1] += rx * gt[2 * j] + ry * gt[2 * j + 1];
      }
    }
  };
  std::vector<double> diag(2 * nv, 0.0);
  for (size_t t = 0; t < nt; ++t) {
    for (int j = 0; j < 3; ++j) {
      const double gx = g[6 * t + 2 * j], gy = g[6 * t + 2 * j + 1];
      diag[2 * p.triangles[3 * t + j]] += gx * gx + gy * gy;
      diag[2 * p.triangles[3 * t + j] + 1] += gx * gx + gy * gy;
    }
  }
  std::vector<double> x = *uv, r(2 * nv), z(2 * nv), d(2 * nv), q(2 * nv);
  apply(x, &r, false);  // J^T J x with the pins in: the residual is -(that) on the free unknowns
  for (size_t i = 0; i < 2 * nv; ++i) r[i] = pinned[i / 2] ? 0.0 : -r[i];
  auto precondition = [&](const std::vector<double>& in, std::vector<double>* out) {
    for (size_t i = 0; i < 2 * nv; ++i) {
      (*out)[i] = pinned[i / 2] || diag[i] <= 0 ? 0.0 : in[i] / diag[i];
    }
  };
  precondition(r, &z);
  d = z;
  double rz = 0, r0 = 0;
  for (size_t i = 0; i < 2 * nv; ++i) {
    rz += r[i] * z[i];
    r0 += r[i] * r[i];
  }
  if (!(r0 > 0)) return true;  // the projection is already conformal
  for (int it = 0; it < kMaxCgIterations; ++it) {
    apply(d, &q, true);
    double dq = 0;
    for (size_t i = 0; i < 2 * nv; ++i) dq += d[i] * q[i];
    if (!(dq > 0)) break;
    const double alpha = rz / dq;
    double rr = 0;
    for (size_t i = 0; i < 2 * nv; ++i) {
      x[i] += alpha * d[i];
      r[i] -= alpha * q[i];
      rr += r[i] * r[i];
    }
    if (rr <= 1e-14 * r0) break;
    precondition(r, &z);
    double rz_new = 0;
    for (size_t i = 0; i < 2 * nv; ++i) rz_new += r[i] * z[i];
    const double beta = rz_new / rz;
    rz = rz_new;
    for (size_t i = 0; i < 2 * nv; ++i) d[i] = z[i] + beta * d[i];
  }
  for (double v : x) {
    if (!std::isfinite(v)) return false;
  }
  *uv = std::move(x);
  return true;
}

bool overlaps_itself(const Piece& p, const std::vector<double>& uv) {
  std::vector<double> tri(p.faces.size() * 6);
  double lo[2] = {1e300, 1e300}, hi[2] = {-1e300, -1e300};
  for (size_t t = 0; t < p.faces.size(); ++t) {
    for (int k = 0; k < 3; ++k) {
      for (int a = 0; a < 2; ++a) {
        const double v = uv[2 * p.triangles[3 * t + k] + a];
        tri[6 * t + 2 * k + a] = v;
        lo[a] = std::min(lo[a], v);
        hi[a] = std::max(hi[a], v);
      }
    }
  }
  const double extent = std::max(hi[0] - lo[0], hi[1] - lo[1]);
  return count_overlaps(tri, 1e-7 * extent, 1) > 0;
}

void emit(const Piece& p, std::vector<double> uv, bool used_lscm, double a3,
          std::vector<FlatChart>* out) {
  const double a2 = area2d(p, uv);
  const double s = a2 > 0 && a3 > 0 ? std::sqrt(a3 / a2) : 1.0;
  FlatChart c;
  c.local_of = p.mesh_of;
  c.triangles = p.triangles;
  c.faces = p.faces;
  c.uv.resize(uv.size());
  for (size_t i = 0; i < uv.size(); ++i) c.uv[i] = static_cast<float>(uv[i] * s);
  c.lscm = used_lscm;
  out->push_back(std::move(c));
}

// V - E + F of the piece: 1 for a disc; a ring (the top of a torus), a handle or a closed
// surface differ, and their holes would be wasted texels (or the map could not be flat).
int64_t euler_characteristic(const Piece& p) {
  std::unordered_map<uint64_t, int> edges;
  edges.reserve(p.triangles.size());
  for (size_t i = 0; i < p.triangles.size(); i += 3) {
    for (int k = 0; k < 3; ++k) {
      uint64_t a = p.triangles[i + static_cast<size_t>(k)];
      uint64_t b = p.triangles[i + static_cast<size_t>((k + 1) % 3)];
      if (a > b) std::swap(a, b);
      ++edges[(a << 32) | b];
    }
  }
  return static_cast<int64_t>(p.welded_of.size()) - static_cast<int64_t>(edges.size()) +
         static_cast<int64_t>(p.faces.size());
}

// A flattened piece that is hollow (an arc, half a ring) fills little of its box, and what its
// hollow wastes only a smaller chart could use: while it has kMinFillCutFaces triangles and
// fills less than kMinBoxFill of its smallest box, it is cut across the box's long side at the
// area-weighted median, each connected part keeping its share of the flattening (a part of a
// valid map is valid), up to `cuts` times over. Emits the pieces; returns how many were cut off.
int64_t cut_hollow(const Mesh& mesh, const std::vector<uint32_t>& welded, const Piece& p,
                   std::vector<double> uv, bool used_lscm, int cuts, double min_area,
                   std::vector<FlatChart>* out) {
  if (cuts == 0 || p.faces.size() < kMinFillCutFaces || area3d(mesh, p) < min_area ||
      box_fill(uv, area2d(p, uv)) >= kMinBoxFill) {
    emit(p, std::move(uv), used_lscm, area3d(mesh, p), out);
    return 0;
  }
  const std::array<double, 2> axis = box_long_axis(uv);
  std::vector<std::pair<double, double>> along(p.faces.size());  // (position, area)
  double total = 0;
  for (size_t t = 0; t < p.faces.size(); ++t) {
    double c = 0;
    for (int k = 0; k < 3; ++k) {
      const uint32_t v = p.triangles[3 * t + static_cast<size_t>(k)];
      c += uv[2 * v] * axis[0] + uv[2 * v + 1] * axis[1];
    }
    const double a =
        std::fabs(0.5 * signed_area2(&uv[2 * p.triangles[3 * t]], &uv[2 * p.triangles[3 * t + 1]],
                                     &uv[2 * p.triangles[3 * t + 2]]));
    along[t] = {c / 3, a};
    total += a;
  }
  std::vector<std::pair<double, double>> sorted = along;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted.back().first, run = 0;
  for (const auto& [c, a] : sorted) {
    run += a;
    if (run >= total / 2) {
      median = c;
      break;
    }
  }
  std::vector<int64_t> halves[2];
  for (size_t t = 0; t < p.faces.size(); ++t) {
    halves[along[t].first <= median ? 0 : 1].push_back(p.faces[t]);
  }
  if (halves[0].empty() || halves[1].empty()) {
    emit(p, std::move(uv), used_lscm, area3d(mesh, p), out);
    return 0;
  }
  std::unordered_map<uint32_t, uint32_t> local;  // welded id -> this piece's vertex
  local.reserve(p.welded_of.size());
  for (size_t v = 0; v < p.welded_of.size(); ++v) {
    local.emplace(p.welded_of[v], static_cast<uint32_t>(v));
  }
  int64_t splits = 1;
  for (const auto& half : halves) {
    for (auto& part : components(make_piece(mesh, welded, half))) {
      Piece q = make_piece(mesh, welded, part);
      std::vector<double> sub(2 * q.welded_of.size());
      for (size_t v = 0; v < q.welded_of.size(); ++v) {
        const uint32_t from = local.at(q.welded_of[v]);
        sub[2 * v] = uv[2 * from];
        sub[2 * v + 1] = uv[2 * from + 1];
      }
      splits += cut_hollow(mesh, welded, q, std::move(sub), used_lscm, cuts - 1, min_area, out);
    }
  }
  return splits;
}

int64_t flatten_piece(const Mesh& mesh, const std::vector<uint32_t>& welded, Piece p,
                      double cut_area, std::vector<FlatChart>* out) {
  const double a3 = area3d(mesh, p);
  std::vector<double> ortho = project(mesh, p);
  const Quality qo = quality(mesh, p, ortho);
  if (p.faces.size() == 1) {
    emit(p, std::move(ortho), false, a3, out);
    return 0;
  }
  const bool disc = euler_characteristic(p) == 1;
  std::vector<double> chosen;
  bool used_lscm = false;
  if (disc && qo.flips == 0 && qo.mean_stretch <= 1.1 && qo.max_stretch <= 1.25 &&
      !overlaps_itself(p, ortho)) {
    chosen = ortho;
  } else {
    std::vector<double> relaxed = ortho;
    if (disc && lscm(mesh, p, &relaxed) && quality(mesh, p, relaxed).flips == 0 &&
        !overlaps_itself(p, relaxed)) {
      chosen = std::move(relaxed);
      used_lscm = true;
    } else if (disc && qo.flips == 0 && !overlaps_itself(p, ortho)) {
      chosen = ortho;
    }
  }
  if (!chosen.empty())
    return cut_hollow(mesh, welded, p, std::move(chosen), used_lscm, kFillCuts, cut_area, out);
  // Cut across the longest extent of the face centroids, at their area-weighted centre.
  Vec3d lo{1e300, 1e300, 1e300}, hi{-1e300, -1e300, -1e300}, centre{0, 0, 0};
  std::vector<Vec3d> centroid(p.faces.size());
  for (size_t t = 0; t < p.faces.size(); ++t) {
    const FaceGeometry g = face_geometry(mesh, p.faces[t]);
    centroid[t] = g.centroid;
    centre = add(centre, g.centroid);
    for (int a = 0; a < 3; ++a) {
      lo[static_cast<size_t>(a)] =
          std::min(lo[static_cast<size_t>(a)], g.centroid[static_cast<size_t>(a)]);
      hi[static_cast<size_t>(a)] =
          std::max(hi[static_cast<size_t>(a)], g.centroid[static_cast<size_t>(a)]);
    }
  }
  centre = scale(centre, 1.0 / static_cast<double>(p.faces.size()));
  size_t axis = 0;
  for (size_t a = 1; a < 3; ++a) {
    if (hi[a] - lo[a] > hi[axis] - lo[axis]) axis = a;
  }
  std::vector<int64_t> halves[2];
  for (size_t t = 0; t < p.faces.size(); ++t) {
    halves[centroid[t][axis] < centre[axis] ? 0 : 1].push_back(p.faces[t]);
  }
  if (halves[0].empty() || halves[1].empty()) {  // all centroids equal: halve the list
    halves[0].assign(p.faces.begin(), p.faces.begin() + static_cast<long>(p.faces.size() / 2));
    halves[1].assign(p.faces.begin() + static_cast<long>(p.faces.size() / 2), p.faces.end());
  }
  int64_t splits = 1;
  for (const auto& half : halves) {
    for (auto& part : components(make_piece(mesh, welded, half))) {
      splits += flatten_piece(mesh, welded, make_piece(mesh, welded, part), cut_area, out);
    }
  }
  return splits;
}

}  // namespace

int64_t flatten_chart(const Mesh& mesh, const std::vector<int64_t>& faces,
                      std::vector<FlatChart>* out) {
  const std::vector<uint32_t> welded = weld_positions(mesh);
  return flatten_chart_welded(mesh, welded, faces, hollow_cut_area(mesh), out);
}

double hollow_cut_area(const Mesh& mesh) {
  return kHollowShare * surface_area(mesh);
}

int64_t flatten_chart_welded(const Mesh& mesh, const std::vector<uint32_t>& welded,
                             const std::vector<int64_t>& faces, double cut_area,
                             std::vector<FlatChart>* out) {
  int64_t splits = 0;
  Piece whole = make_piece(mesh, welded, faces);
  for (auto& part : components(whole)) {
    splits += flatten_piece(mesh, welded, make_piece(mesh, welded, part), cut_area, out);
  }
  return splits;
}

}  // namespace tessera::mesh
