#include "engine/mesh/cleanup.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"

#if __has_include(<meshoptimizer.h>) && defined(TESSERA_HAVE_MESHOPTIMIZER)
#include <meshoptimizer.h>
#define TESSERA_MESHOPT 1
#else
#define TESSERA_MESHOPT 0
#endif

namespace tessera::mesh {
namespace {

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

struct KeyHash {
  size_t operator()(const std::array<int64_t, 3>& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

uint64_t mix64(uint64_t h) {  // splitmix64's finaliser
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

// Items per task of the clean-up's parallel loops: small enough to balance, large enough that a
// small mesh runs on the calling thread alone.
constexpr int64_t kGrain = 16384;

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= kGrain) {
    if (n > 0) fn(0, n);
    return;
  }
  default_thread_pool().parallel_for(n, kGrain, fn);
}

}  // namespace

// The weld is an equivalence of keys; each class keeps its first (lowest) vertex and the survivors
// keep their order, so the result is that of a sequential first-occurrence pass. The classes are
// found in parallel with a lock-free open-addressing table: a slot holds 1 + the lowest vertex of
// its key seen so far, lowered by compare-and-swap; a vertex's key is recomputed from its position
// when compared, never stored.
int64_t weld_vertices(Mesh& mesh, float tolerance) {
  const int64_t n = mesh.vertex_count();
  if (n == 0) return 0;
  const double inv = tolerance > 0 ? 1.0 / tolerance : 0.0;
  // The key is the snapped position plus, on a mesh with uvs, the exact uv: vertices split on a
  // texture seam (same position, different uv) must stay apart.
  const bool has_uvs = !mesh.uvs.empty();
  const float* pos = mesh.positions.data();
  const float* uv = mesh.uvs.data();
  using Key = std::array<int64_t, 5>;
  auto key_of = [&](int64_t v) {
    Key key{};
    for (int d = 0; d < 3; ++d) {
      const float p = pos[3 * v + d];
      key[d] = inv > 0 ? static_cast<int64_t>(std::llround(p * inv)) : float_key(p);
    }
    if (has_uvs) {
      for (int d = 0; d < 2; ++d) key[3 + d] = float_key(uv[2 * v + d]);
    }
    return key;
  };
  auto hash_of = [](const Key& k) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int64_t v : k) h = mix64(h ^ static_cast<uint64_t>(v));
    return h;
  };
  size_t capacity = 1024;
  while (capacity < 2 * static_cast<size_t>(n)) capacity *= 2;
  const size_t mask = capacity - 1;
  const std::unique_ptr<std::atomic<uint32_t>[]> table(new std::atomic<uint32_t>[capacity]());
  std::vector<size_t> slot_of(static_cast<size_t>(n));
  parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      const Key key = key_of(v);
      size_t h = hash_of(key) & mask;
      const auto mine = static_cast<uint32_t>(v + 1);
      for (;;) {
        uint32_t cur = table[h].load(std::memory_order_acquire);
        if (cur == 0) {
          if (table[h].compare_exchange_strong(cur, mine, std::memory_order_acq_rel)) break;
          // Another vertex took the slot first: look at what it holds (cur was updated).
        }
        if (cur != 0 && key_of(cur - 1) == key) {
          // Same class: keep the lowest vertex (a slot never changes class once set).
          while (mine < cur &&
                 !table[h].compare_exchange_weak(cur, mine, std::memory_order_acq_rel)) {
          }
          break;
        }
        if (cur != 0) h = (h + 1) & mask;
      }
      slot_of[static_cast<size_t>(v)] = h;
    }
  });
  // Survivors (the lowest vertex of each class) numbered in vertex order; a merged vertex takes
  // its survivor's new index (the survivor is lower, so already numbered).
  auto first_of = [&](int64_t v) {
    return table[slot_of[static_cast<size_t>(v)]].load(std::memory_order_relaxed);
  };
  std::vector<uint32_t> remap(static_cast<size_t>(n));
  uint32_t kept = 0;
  for (int64_t v = 0; v < n; ++v) {
    const uint32_t first = first_of(v);
    remap[static_cast<size_t>(v)] =
        first == static_cast<uint32_t>(v + 1) ? kept++ : remap[first - 1];
  }
  if (kept == static_cast<uint32_t>(n)) {
    mesh.normals.clear();
    return 0;
  }
  std::vector<float> positions(static_cast<size_t>(kept) * 3), uvs(has_uvs ? kept * size_t{2} : 0);
  parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      if (first_of(v) != static_cast<uint32_t>(v + 1)) continue;
      const uint32_t r = remap[static_cast<size_t>(v)];
      std::memcpy(&positions[3 * size_t{r}], pos + 3 * v, 3 * sizeof(float));
      if (has_uvs) std::memcpy(&uvs[2 * size_t{r}], uv + 2 * v, 2 * sizeof(float));
    }
  });
  parallel_for(static_cast<int64_t>(mesh.triangles.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) mesh.triangles[i] = remap[mesh.triangles[i]];
  });
  mesh.positions = std::move(positions);
  mesh.uvs = std::move(uvs);
  mesh.normals.clear();
  return n - static_cast<int64_t>(kept);
}

// Repeated vertex sets are found without a hash set: the kept candidates are bucketed by their
// lowest vertex (a handful of triangles each on a surface), each bucket is sorted by the other two
// vertices and the triangle's index, and within a run of equal sets all but the first triangle go.
int64_t remove_degenerate_triangles(Mesh& mesh, double min_area) {
  const int64_t nt = mesh.triangle_count();
  const int64_t nv = mesh.vertex_count();
  if (nt == 0) return 0;
  const uint32_t* tri = mesh.triangles.data();
  const float* p = mesh.positions.data();
  // 0: dropped; else kept so far. sorted[t]: the triangle's vertices ascending.
  std::vector<uint8_t> keep(static_cast<size_t>(nt));
  std::vector<std::array<uint32_t, 3>> sorted(static_cast<size_t>(nt));
  parallel_for(nt, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const uint32_t a = tri[3 * t], b = tri[3 * t + 1], c = tri[3 * t + 2];
      keep[t] = 0;
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
      sorted[t] = key;
      keep[t] = 1;
    }
  });
  // Buckets by lowest vertex (counting sort; the order inside a bucket is fixed by the sort below).
  std::vector<int64_t> start(static_cast<size_t>(nv) + 1, 0);
  for (int64_t t = 0; t < nt; ++t) {
    if (keep[t] != 0) ++start[sorted[t][0] + 1];
  }
  for (int64_t v = 0; v < nv; ++v) start[v + 1] += start[v];
  std::vector<uint32_t> bucket(static_cast<size_t>(start[static_cast<size_t>(nv)]));
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t t = 0; t < nt; ++t) {
      if (keep[t] != 0) bucket[fill[sorted[t][0]]++] = static_cast<uint32_t>(t);
    }
  }
  parallel_for(nv, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      const auto b = bucket.begin() + start[v], e = bucket.begin() + start[v + 1];
      if (e - b < 2) continue;
      std::sort(b, e, [&](uint32_t x, uint32_t y) {
        const auto& kx = sorted[x];
        const auto& ky = sorted[y];
        if (kx[1] != ky[1]) return kx[1] < ky[1];
        if (kx[2] != ky[2]) return kx[2] < ky[2];
        return x < y;
      });
      for (auto it = b + 1; it != e; ++it) {
        if (sorted[*it][1] == sorted[*(it - 1)][1] && sorted[*it][2] == sorted[*(it - 1)][2]) {
          keep[*it] = 0;
        }
      }
    }
  });
  std::vector<uint32_t> kept;
  kept.reserve(mesh.triangles.size());
  for (int64_t t = 0; t < nt; ++t) {
    if (keep[t] != 0) kept.insert(kept.end(), tri + 3 * t, tri + 3 * t + 3);
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
  // Every vertex points at its root from here (roots are vertex indices).
  for (int64_t v = 0; v < nv; ++v) parent[v] = find_root(parent, v);
  struct Component {
    float lo[3] = {INFINITY, INFINITY, INFINITY};
    float hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    int64_t triangles = 0;
  };
  std::vector<Component> comps(static_cast<size_t>(nv));
  for (int64_t t = 0; t < nt; ++t) {
    Component& c = comps[static_cast<size_t>(parent[mesh.triangles[3 * t]])];
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
  // The largest component by triangles; on a tie, the one whose root is the lowest vertex.
  int64_t largest = -1, largest_count = -1;
  for (int64_t r = 0; r < nv; ++r) {
    if (comps[static_cast<size_t>(r)].triangles > largest_count) {
      largest = r;
      largest_count = comps[static_cast<size_t>(r)].triangles;
    }
  }
  std::vector<uint8_t> drop(static_cast<size_t>(nv), 0);
  bool any = false;
  for (int64_t r = 0; r < nv; ++r) {
    const Component& c = comps[static_cast<size_t>(r)];
    if (c.triangles == 0 || r == largest) continue;
    double s = 0;
    for (int d = 0; d < 3; ++d) s += (static_cast<double>(c.hi[d]) - c.lo[d]) * (c.hi[d] - c.lo[d]);
    if (std::sqrt(s) < limit) drop[static_cast<size_t>(r)] = any = true;
  }
  if (!any) return 0;
  std::vector<uint32_t> kept;
  kept.reserve(mesh.triangles.size());
  for (int64_t t = 0; t < nt; ++t) {
    if (drop[static_cast<size_t>(parent[mesh.triangles[3 * t]])] != 0) continue;
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

// Each vertex sums its faces' cross products in ascending face order, in double: the same sums
// as one pass over the faces, computed per vertex in parallel through a vertex -> face table.
void compute_vertex_normals(Mesh& mesh) {
  const int64_t nv = mesh.vertex_count(), nt = mesh.triangle_count();
  const auto& p = mesh.positions;
  const uint32_t* tri = mesh.triangles.data();
  // The unnormalised cross product of each face is twice its area: area weighting for free.
  std::vector<std::array<double, 3>> face(static_cast<size_t>(nt));
  parallel_for(nt, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const uint32_t a = tri[3 * t], b = tri[3 * t + 1], c = tri[3 * t + 2];
      const double u[3] = {p[3 * b] - p[3 * a], p[3 * b + 1] - p[3 * a + 1],
                           p[3 * b + 2] - p[3 * a + 2]};
      const double w[3] = {p[3 * c] - p[3 * a], p[3 * c + 1] - p[3 * a + 1],
                           p[3 * c + 2] - p[3 * a + 2]};
      face[t] = {u[1] * w[2] - u[2] * w[1], u[2] * w[0] - u[0] * w[2], u[0] * w[1] - u[1] * w[0]};
    }
  });
  // Corners by vertex, ascending face order (a face that repeats a vertex counts once per corner).
  std::vector<size_t> start(static_cast<size_t>(nv) + 1, 0);
  for (size_t i = 0; i < 3 * static_cast<size_t>(nt); ++i) ++start[size_t{tri[i]} + 1];
  for (int64_t v = 0; v < nv; ++v) start[v + 1] += start[v];
  std::vector<uint32_t> corner_face(mesh.triangles.size());
  {
    std::vector<size_t> fill(start.begin(), start.end() - 1);
    for (size_t i = 0; i < 3 * static_cast<size_t>(nt); ++i) {
      corner_face[fill[tri[i]]++] = static_cast<uint32_t>(i / 3);
    }
  }
  mesh.normals.assign(mesh.positions.size(), 0.0f);
  float* out = mesh.normals.data();
  parallel_for(nv, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      double acc[3] = {0.0, 0.0, 0.0};
      for (size_t i = start[v]; i < start[v + 1]; ++i) {
        const auto& n = face[corner_face[i]];
        for (int d = 0; d < 3; ++d) acc[d] += n[d];
      }
      const double len = std::sqrt(acc[0] * acc[0] + acc[1] * acc[1] + acc[2] * acc[2]);
      if (len > 0) {
        for (int d = 0; d < 3; ++d) out[3 * v + d] = static_cast<float>(acc[d] / len);
      } else {
        out[3 * v + 2] = 1.0f;
      }
    }
  });
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
  // repeats a vertex) counts too, as an edge a-a. An edge's multiplicity is the same in both of
  // its vertices' lists, so each vertex reads its own. Each list is sorted and deduplicated in
  // place (its length in `count`).
  std::vector<char> pinned(static_cast<size_t>(nv), 0);
  std::vector<uint32_t> count(static_cast<size_t>(nv));
  parallel_for(nv, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      const size_t b = start[v], e = start[v + 1];
      std::sort(nbr.begin() + b, nbr.begin() + e);
      const uint8_t self = self_edges[static_cast<size_t>(v)];
      char pin = self != 0 && self != 2 ? 1 : 0;
      size_t out = b;
      for (size_t i = b; i < e;) {
        size_t j = i + 1;
        while (j < e && nbr[j] == nbr[i]) ++j;
        if (j - i != 2) pin = 1;
        nbr[out++] = nbr[i];
        i = j;
      }
      pinned[static_cast<size_t>(v)] = pin;
      count[static_cast<size_t>(v)] = static_cast<uint32_t>(out - b);
    }
  });
  // The passes gather every neighbour's position, so they run in a spatial order: vertices
  // bucketed by the Morton code of a coarse grid over the bounds (about 8 a bucket; vertex order
  // within a bucket), which keeps most neighbours within a few cache lines of each other whatever
  // order the mesh came in. order[k] is the vertex at place k, place[v] the place of vertex v;
  // each vertex's neighbours stay in ascending vertex order, so every sum is the same.
  std::vector<uint32_t> order(static_cast<size_t>(nv)), place(static_cast<size_t>(nv));
  {
    const Bounds box = compute_bounds(mesh);
    int bits = 1;
    while (bits < 7 && (int64_t{1} << (3 * (bits + 1))) * 8 <= nv) ++bits;
    const uint32_t cells = 1u << bits;
    double scale[3];
    for (int d = 0; d < 3; ++d) {
      const double extent = static_cast<double>(box.max[d]) - box.min[d];
      scale[d] = extent > 0 ? cells / extent : 0.0;
    }
    auto spread = [](uint32_t x) {  // bit i of x to bit 3i
      uint32_t r = 0;
      for (int i = 0; i < 7; ++i) r |= ((x >> i) & 1u) << (3 * i);
      return r;
    };
    std::vector<uint32_t> key(static_cast<size_t>(nv));
    parallel_for(nv, [&](int64_t first, int64_t last) {
      for (int64_t v = first; v < last; ++v) {
        uint32_t code = 0;
        for (int d = 0; d < 3; ++d) {
          // In double and clamped before the cast: NaN and out-of-range values land in a cell.
          const double f = (static_cast<double>(mesh.positions[3 * v + d]) - box.min[d]) * scale[d];
          const uint32_t c = f > 0 ? static_cast<uint32_t>(std::min<double>(cells - 1, f)) : 0;
          code |= spread(c) << d;
        }
        key[static_cast<size_t>(v)] = code;
      }
    });
    std::vector<uint32_t> bucket_start((size_t{1} << (3 * bits)) + 1, 0);
    for (uint32_t k : key) ++bucket_start[k + 1];
    for (size_t i = 1; i < bucket_start.size(); ++i) bucket_start[i] += bucket_start[i - 1];
    for (int64_t v = 0; v < nv; ++v) {
      const uint32_t k = bucket_start[key[static_cast<size_t>(v)]]++;
      order[k] = static_cast<uint32_t>(v);
      place[static_cast<size_t>(v)] = k;
    }
  }
  // The neighbour lists in place order, as places; a pinned vertex gets none (it stays put).
  std::vector<size_t> pstart(static_cast<size_t>(nv) + 1, 0);
  for (int64_t k = 0; k < nv; ++k) {
    const uint32_t v = order[k];
    pstart[k + 1] = pstart[k] + (pinned[v] != 0 ? 0 : count[v]);
  }
  std::vector<uint32_t> pnbr(pstart[static_cast<size_t>(nv)]);
  parallel_for(nv, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      const size_t b = start[order[k]];
      for (size_t i = pstart[k]; i < pstart[k + 1]; ++i) pnbr[i] = place[nbr[b + i - pstart[k]]];
    }
  });
  std::vector<float> cur(4 * static_cast<size_t>(nv), 0.0f), next(cur.size(), 0.0f);
  parallel_for(nv, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      for (int d = 0; d < 3; ++d) cur[4 * k + d] = mesh.positions[3 * size_t{order[k]} + d];
    }
  });
  auto pass = [&](const double factor) {
    const float* pos = cur.data();
    float* out = next.data();
    parallel_for(nv, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k) {
        const float* p = pos + 4 * k;
        float* q = out + 4 * k;
        const size_t b = pstart[k], e = pstart[k + 1];
        if (b == e) {
          for (int d = 0; d < 4; ++d) q[d] = p[d];
          continue;
        }
        // Each coordinate summed in double over the neighbours in ascending vertex order.
        double sum[3] = {0.0, 0.0, 0.0};
        for (size_t i = b; i < e; ++i) {
          const float* n = pos + 4 * size_t{pnbr[i]};
          for (int d = 0; d < 3; ++d) sum[d] += static_cast<double>(n[d]);
        }
        const double degree = static_cast<double>(e - b);
        for (int d = 0; d < 3; ++d) {
          const double mean = sum[d] / degree;
          q[d] = static_cast<float>(p[d] + factor * (mean - p[d]));
        }
      }
    });
    cur.swap(next);
  };
  for (int it = 0; it < iterations; ++it) {
    pass(lambda);
    pass(mu);
  }
  parallel_for(nv, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      for (int d = 0; d < 3; ++d) mesh.positions[3 * size_t{order[k]} + d] = cur[4 * k + d];
    }
  });
  if (!mesh.normals.empty()) compute_vertex_normals(mesh);
}

Status cleanup(Mesh& mesh, const CleanupOptions& options, CleanupStats* stats) {
  CleanupStats local;
  CleanupStats& s = stats != nullptr ? *stats : local;
  s = CleanupStats();
  auto clock = std::chrono::steady_clock::now();
  auto lap = [&clock](double* ms) {
    const auto now = std::chrono::steady_clock::now();
    *ms += std::chrono::duration<double, std::milli>(now - clock).count();
    clock = now;
  };
  TESSERA_RETURN_IF_ERROR(validate(mesh));
  const double diagonal = compute_bounds(mesh).diagonal();
  weld_vertices(mesh, static_cast<float>(options.weld_tolerance_fraction * diagonal));
  lap(&s.weld_ms);
  // Only triangles the weld collapsed (a repeated vertex) and repeated triangles go: a sliver with
  // three distinct vertices and zero area still closes the surface, and removing it would open a
  // hole in an otherwise closed mesh.
  remove_degenerate_triangles(mesh, -1.0);
  lap(&s.faces_ms);
  remove_small_components(mesh, options.min_component_fraction);
  lap(&s.components_ms);
  // Texture seams split vertices, and smoothing by index would tear them apart: a textured mesh
  // keeps its positions.
  if (mesh.uvs.empty()) smooth_taubin(mesh, options.smooth_iterations);
  lap(&s.smooth_ms);
  if (options.max_triangles > 0) TESSERA_RETURN_IF_ERROR(decimate(mesh, options.max_triangles));
  lap(&s.decimate_ms);
  compact_vertices(mesh);
  if (options.normals) compute_vertex_normals(mesh);
  lap(&s.normals_ms);
  return Status();
}

}  // namespace tessera::mesh
