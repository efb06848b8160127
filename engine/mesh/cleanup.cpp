#include "engine/mesh/cleanup.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#if __has_include(<meshoptimizer.h>) && defined(TESSERA_HAVE_MESHOPTIMIZER)
#include <meshoptimizer.h>
#define TESSERA_MESHOPT 1
#else
#define TESSERA_MESHOPT 0
#endif

namespace tessera::mesh {
namespace {

template <size_t N>
struct KeyHashN {
  size_t operator()(const std::array<int64_t, N>& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};
using KeyHash = KeyHashN<3>;

int64_t float_key(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return f == 0.0f ? 0 : bits;  // exact match; +0 and -0 agree
}

int64_t find_root(std::vector<int64_t>& parent, int64_t x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];
    x = parent[x];
  }
  return x;
}

}  // namespace

int64_t weld_vertices(Mesh& mesh, float tolerance) {
  const int64_t n = mesh.vertex_count();
  if (n == 0) return 0;
  const double inv = tolerance > 0 ? 1.0 / tolerance : 0.0;
  // The key is the snapped position plus, on a mesh with uvs, the exact uv: vertices split on a
  // texture seam (same position, different uv) must stay apart.
  const bool has_uvs = !mesh.uvs.empty();
  std::unordered_map<std::array<int64_t, 5>, uint32_t, KeyHashN<5>> first;
  first.reserve(static_cast<size_t>(n));
  std::vector<uint32_t> remap(static_cast<size_t>(n));
  std::vector<float> positions, uvs;
  positions.reserve(mesh.positions.size());
  uvs.reserve(mesh.uvs.size());
  for (int64_t v = 0; v < n; ++v) {
    std::array<int64_t, 5> key{};
    for (int d = 0; d < 3; ++d) {
      const float p = mesh.positions[3 * v + d];
      key[d] = inv > 0 ? static_cast<int64_t>(std::llround(p * inv)) : float_key(p);
    }
    if (has_uvs) {
      for (int d = 0; d < 2; ++d) key[3 + d] = float_key(mesh.uvs[2 * v + d]);
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

int64_t remove_degenerate_triangles(Mesh& mesh, double min_area) {
  std::vector<uint32_t> kept;
  kept.reserve(mesh.triangles.size());
  std::unordered_set<std::array<int64_t, 3>, KeyHash> seen;
  seen.reserve(mesh.triangles.size() / 3);
  const auto& p = mesh.positions;
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    const uint32_t a = mesh.triangles[t], b = mesh.triangles[t + 1], c = mesh.triangles[t + 2];
    if (a == b || b == c || a == c) continue;
    const double u[3] = {p[3 * b] - p[3 * a], p[3 * b + 1] - p[3 * a + 1],
                         p[3 * b + 2] - p[3 * a + 2]};
    const double w[3] = {p[3 * c] - p[3 * a], p[3 * c + 1] - p[3 * a + 1],
                         p[3 * c + 2] - p[3 * a + 2]};
    const double nx = u[1] * w[2] - u[2] * w[1], ny = u[2] * w[0] - u[0] * w[2],
                 nz = u[0] * w[1] - u[1] * w[0];
    if (0.5 * std::sqrt(nx * nx + ny * ny + nz * nz) <= min_area) continue;
    std::array<int64_t, 3> key{a, b, c};
    std::sort(key.begin(), key.end());
    if (!seen.insert(key).second) continue;
    kept.insert(kept.end(), {a, b, c});
  }
  const auto removed = static_cast<int64_t>((mesh.triangles.size() - kept.size()) / 3);
  mesh.triangles = std::move(kept);
  return removed;
}

int64_t remove_small_components(Mesh& mesh, double fraction) {
  const int64_t nv = mesh.vertex_count(), nt = mesh.triangle_count();
  if (nt == 0 || fraction <= 0) return 0;
  std::vector<int64_t> parent(static_cast<size_t>(nv));
  std::iota(parent.begin(), parent.end(), 0);
  for (int64_t t = 0; t < nt; ++t) {
    const int64_t a = find_root(parent, mesh.triangles[3 * t]);
    for (int v = 1; v < 3; ++v) {
      const int64_t b = find_root(parent, mesh.triangles[3 * t + v]);
      if (a != b) parent[b] = a;
    }
  }
  if (!mesh.uvs.empty()) {
    // Texture seams split vertices (same position, different uv); they still join one surface.
    std::unordered_map<std::array<int64_t, 3>, int64_t, KeyHash> at;
    at.reserve(static_cast<size_t>(nv));
    for (int64_t v = 0; v < nv; ++v) {
      std::array<int64_t, 3> key{};
      for (int d = 0; d < 3; ++d) key[d] = float_key(mesh.positions[3 * v + d]);
      auto [it, inserted] = at.try_emplace(key, v);
      if (!inserted) {
        const int64_t a = find_root(parent, it->second), b = find_root(parent, v);
        if (a != b) parent[b] = a;
      }
    }
  }
  struct Component {
    float lo[3] = {INFINITY, INFINITY, INFINITY};
    float hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    int64_t triangles = 0;
  };
  std::unordered_map<int64_t, Component> comps;
  for (int64_t t = 0; t < nt; ++t) {
    Component& c = comps[find_root(parent, mesh.triangles[3 * t])];
    ++c.triangles;
    for (int v = 0; v < 3; ++v) {
      const uint32_t i = mesh.triangles[3 * t + v];
      for (int d = 0; d < 3; ++d) {
        c.lo[d] = std::min(c.lo[d], mesh.positions[3 * i + d]);
        c.hi[d] = std::max(c.hi[d], mesh.positions[3 * i + d]);
      }
    }
  }
  const double limit = fraction * compute_bounds(mesh).diagonal();
  int64_t largest = -1, largest_count = -1;
  for (const auto& [root, c] : comps) {
    if (c.triangles > largest_count) {
      largest = root;
      largest_count = c.triangles;
    }
  }
  std::unordered_set<int64_t> drop;
  for (const auto& [root, c] : comps) {
    double s = 0;
    for (int d = 0; d < 3; ++d) s += (static_cast<double>(c.hi[d]) - c.lo[d]) * (c.hi[d] - c.lo[d]);
    if (root != largest && std::sqrt(s) < limit) drop.insert(root);
  }
  if (drop.empty()) return 0;
  std::vector<uint32_t> kept;
  kept.reserve(mesh.triangles.size());
  for (int64_t t = 0; t < nt; ++t) {
    if (drop.count(find_root(parent, mesh.triangles[3 * t])) != 0) continue;
    kept.insert(kept.end(), mesh.triangles.begin() + 3 * t, mesh.triangles.begin() + 3 * t + 3);
  }
  const int64_t removed = nt - static_cast<int64_t>(kept.size() / 3);
  mesh.triangles = std::move(kept);
  compact_vertices(mesh);
  return removed;
}

void compact_vertices(Mesh& mesh) {
  const int64_t n = mesh.vertex_count();
  std::vector<int64_t> remap(static_cast<size_t>(n), -1);
  int64_t next = 0;
  for (uint32_t t : mesh.triangles) {
    if (remap[t] < 0) remap[t] = next++;
  }
  if (next == n) {
    // Already compact, but keep first-use order stable only when it changes something.
    bool identity = true;
    for (int64_t v = 0; v < n && identity; ++v) identity = remap[static_cast<size_t>(v)] == v;
    if (identity) return;
  }
  const bool has_normals = !mesh.normals.empty(), has_uvs = !mesh.uvs.empty();
  std::vector<float> pos(static_cast<size_t>(next) * 3), nor(has_normals ? pos.size() : 0);
  std::vector<float> uv(has_uvs ? static_cast<size_t>(next) * 2 : 0);
  for (int64_t v = 0; v < n; ++v) {
    const int64_t r = remap[static_cast<size_t>(v)];
    if (r < 0) continue;
    for (int d = 0; d < 3; ++d) {
      pos[3 * r + d] = mesh.positions[3 * v + d];
      if (has_normals) nor[3 * r + d] = mesh.normals[3 * v + d];
    }
    if (has_uvs) {
      for (int d = 0; d < 2; ++d) uv[2 * r + d] = mesh.uvs[2 * v + d];
    }
  }
  for (uint32_t& t : mesh.triangles) t = static_cast<uint32_t>(remap[t]);
  mesh.positions = std::move(pos);
  mesh.normals = std::move(nor);
  mesh.uvs = std::move(uv);
}

void compute_vertex_normals(Mesh& mesh) {
  std::vector<double> acc(mesh.positions.size(), 0.0);
  const auto& p = mesh.positions;
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    const uint32_t a = mesh.triangles[t], b = mesh.triangles[t + 1], c = mesh.triangles[t + 2];
    const double u[3] = {p[3 * b] - p[3 * a], p[3 * b + 1] - p[3 * a + 1],
                         p[3 * b + 2] - p[3 * a + 2]};
    const double w[3] = {p[3 * c] - p[3 * a], p[3 * c + 1] - p[3 * a + 1],
                         p[3 * c + 2] - p[3 * a + 2]};
    // The unnormalised cross product is twice the area: area weighting for free.
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

Status decimate(Mesh& mesh, int64_t max_triangles) {
  if (max_triangles < 1) {
    return invalid_argument("decimate: face budget " + std::to_string(max_triangles) +
                            " must be >= 1");
  }
  if (mesh.triangle_count() <= max_triangles) return Status();
#if TESSERA_MESHOPT
  // meshopt_simplify collapses edges without checking that the result stays a 2-manifold: now and
  // then two sheets end up sharing an edge (a non-manifold edge in a mesh that was closed). A
  // closed input must give a closed output, so the budget is tried a little lower a few times (each
  // try is a different collapse order) and the first closed result is kept; failing that, the one
  // with the fewest defects.
  const bool closed_in = compute_welded_topology(mesh).watertight();
  std::vector<uint32_t> best;
  int64_t best_defects = -1;
  Mesh candidate;  // the positions once; each try's triangles swapped in
  if (closed_in) candidate.positions = mesh.positions;
  for (int attempt = 0; attempt < 8; ++attempt) {
    const auto target = std::max<int64_t>(1, max_triangles - max_triangles * 3 * attempt / 100);
    std::vector<uint32_t> out(mesh.triangles.size());
    // target_error is relative to the mesh extent; 1.0 lets the face budget decide.
    const size_t count =
        meshopt_simplify(out.data(), mesh.triangles.data(), mesh.triangles.size(),
                         mesh.positions.data(), static_cast<size_t>(mesh.vertex_count()),
                         3 * sizeof(float), static_cast<size_t>(target) * 3, 1.0f, 0, nullptr);
    out.resize(count);
    if (!closed_in) {
      best = std::move(out);
      break;
    }
    candidate.triangles.swap(out);
    const Topology t = compute_welded_topology(candidate);
    candidate.triangles.swap(out);
    const int64_t defects = t.boundary_edges + t.non_manifold_edges;
    if (best_defects < 0 || defects < best_defects) {
      best = std::move(out);
      best_defects = defects;
    }
    if (defects == 0) break;
  }
  // meshopt_simplify only picks a subset of the existing vertices (it never moves one), so each
  // kept vertex keeps its uv and the texture stays valid; seam vertices are split, so the seams are
  // borders to the simplifier and survive as such.
  mesh.triangles = std::move(best);
  compact_vertices(mesh);
  if (!mesh.normals.empty()) compute_vertex_normals(mesh);
  return Status();
#else
  return unsupported(
      "decimate: this build of Tessera has no meshoptimizer (install "
      "libmeshoptimizer-dev and reconfigure)");
#endif
}

Status reduce_triangles(Mesh& mesh, int64_t max_triangles) {
  if (max_triangles <= 0 || mesh.triangle_count() <= max_triangles) return Status();
  TESSERA_RETURN_IF_ERROR(decimate(mesh, max_triangles));
  compact_vertices(mesh);
  compute_vertex_normals(mesh);  // the old normals belong to the removed faces' neighbourhoods
  return Status();
}

void smooth_taubin(Mesh& mesh, int iterations, float lambda, float mu) {
  const int64_t nv = mesh.vertex_count();
  if (iterations <= 0 || nv == 0) return;
  // Neighbours of each vertex (through triangle edges) as CSR arrays, ascending, each once. Built
  // by counting: every triangle edge a-b (a != b) lists b under a and a under b, so b appears under
  // a as many times as triangles use the edge {a, b}; that multiplicity, read while each vertex's
  // short list is sorted and deduplicated, finds the edges not used by exactly two triangles.
  const std::vector<uint32_t>& tri = mesh.triangles;
  std::vector<size_t> start(static_cast<size_t>(nv) + 1, 0);
  std::vector<uint8_t> self_edges(static_cast<size_t>(nv), 0);  // a-a edges (saturating count)
  for (size_t t = 0; t + 2 < tri.size(); t += 3) {
    for (int e = 0; e < 3; ++e) {
      const uint32_t a = tri[t + e], b = tri[t + (e + 1) % 3];
      if (a == b) {
        self_edges[a] = static_cast<uint8_t>(std::min(3, self_edges[a] + 1));
        continue;
      }
      ++start[a + 1];
      ++start[b + 1];
    }
  }
  for (int64_t v = 0; v < nv; ++v) start[v + 1] += start[v];
  std::vector<uint32_t> nbr(start[static_cast<size_t>(nv)]);
  {
    std::vector<size_t> fill(start.begin(), start.end() - 1);
    for (size_t t = 0; t + 2 < tri.size(); t += 3) {
      for (int e = 0; e < 3; ++e) {
        const uint32_t a = tri[t + e], b = tri[t + (e + 1) % 3];
        if (a == b) continue;
        nbr[fill[a]++] = b;
        nbr[fill[b]++] = a;
      }
    }
  }
  // Vertices on a boundary or non-manifold edge stay where they are (smoothing would pull an open
  // rim inwards): an edge used by exactly two triangles is interior. A self edge (a triangle that
  // repeats a vertex) counts too, as an edge a-a.
  std::vector<char> pinned(static_cast<size_t>(nv), 0);
  size_t out = 0;
  for (int64_t v = 0; v < nv; ++v) {
    const size_t b = start[v], e = start[v + 1];
    std::sort(nbr.begin() + b, nbr.begin() + e);
    start[v] = out;
    if (self_edges[static_cast<size_t>(v)] != 0 && self_edges[static_cast<size_t>(v)] != 2) {
      pinned[static_cast<size_t>(v)] = 1;
    }
    for (size_t i = b; i < e;) {
      size_t j = i + 1;
      while (j < e && nbr[j] == nbr[i]) ++j;
      if (j - i != 2) {
        pinned[static_cast<size_t>(v)] = 1;
        pinned[nbr[i]] = 1;
      }
      nbr[out++] = nbr[i];
      i = j;
    }
  }
  start[static_cast<size_t>(nv)] = out;
  nbr.resize(out);
  std::vector<float> next(mesh.positions.size());
  auto pass = [&](float factor) {
    const float* pos = mesh.positions.data();
    for (int64_t v = 0; v < nv; ++v) {
      const size_t b = start[v], e = start[v + 1];
      const float* p = pos + 3 * v;
      float* q = next.data() + 3 * v;
      if (b == e || pinned[static_cast<size_t>(v)] != 0) {
        q[0] = p[0];
        q[1] = p[1];
        q[2] = p[2];
        continue;
      }
      // Each coordinate summed in double over the neighbours in ascending order.
      double sum[3] = {0.0, 0.0, 0.0};
      for (size_t i = b; i < e; ++i) {
        const float* n = pos + 3 * static_cast<size_t>(nbr[i]);
        sum[0] += n[0];
        sum[1] += n[1];
        sum[2] += n[2];
      }
      const double count = static_cast<double>(e - b);
      for (int d = 0; d < 3; ++d) {
        const double mean = sum[d] / count;
        q[d] = static_cast<float>(p[d] + factor * (mean - p[d]));
      }
    }
    mesh.positions.swap(next);
  };
  for (int it = 0; it < iterations; ++it) {
    pass(lambda);
    pass(mu);
  }
  if (!mesh.normals.empty()) compute_vertex_normals(mesh);
}

Status cleanup(Mesh& mesh, const CleanupOptions& options) {
  TESSERA_RETURN_IF_ERROR(validate(mesh));
  const double diagonal = compute_bounds(mesh).diagonal();
  weld_vertices(mesh, static_cast<float>(options.weld_tolerance_fraction * diagonal));
  // Only triangles the weld collapsed (a repeated vertex) and repeated triangles go: a sliver with
  // three distinct vertices and zero area still closes the surface, and removing it would open a
  // hole in an otherwise closed mesh.
  remove_degenerate_triangles(mesh, -1.0);
  remove_small_components(mesh, options.min_component_fraction);
  // Texture seams split vertices, and smoothing by index would tear them apart: a textured mesh
  // keeps its positions.
  if (mesh.uvs.empty()) smooth_taubin(mesh, options.smooth_iterations);
  if (options.max_triangles > 0) TESSERA_RETURN_IF_ERROR(decimate(mesh, options.max_triangles));
  compact_vertices(mesh);
  if (options.normals) compute_vertex_normals(mesh);
  return Status();
}

}  // namespace tessera::mesh
