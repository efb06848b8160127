#include "engine/mesh/marching_cubes.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace tessera::mesh {
namespace {

// Cube corner c has offset (c & 1, (c >> 1) & 1, (c >> 2) & 1). Kuhn tetrahedra: for each order of
// the three axes, the monotone path 0 -> e_a -> e_a + e_b -> 7. Any two corners of one tetrahedron
// are ordered componentwise, so every tetrahedron edge goes from a corner to a "larger" one and the
// offset between them is one of the 7 non-zero bit masks: that mask plus the smaller point's
// lattice index is a unique edge id shared by all cells touching the edge.
constexpr int kTets[6][4] = {{0, 1, 3, 7}, {0, 1, 5, 7}, {0, 2, 3, 7},
                             {0, 2, 6, 7}, {0, 4, 5, 7}, {0, 4, 6, 7}};

struct TetCase {
  int count = 0;          // triangles (0..2)
  int edges[2][3][2]{};   // [triangle][vertex] = (tet corner a, tet corner b), a < b in cube order
};

struct Tables {
  TetCase cases[6][16];
};

double corner_coord(int c, int d) { return static_cast<double>((c >> d) & 1); }

// Orders the triangle whose vertices are the midpoints of the given cube-corner edges so that its
// normal points from the inside corners towards the outside ones. Midpoints suffice: moving the
// vertices along their edges never flips the triangle (each stays strictly between the inside and
// the outside corners it separates).
void orient(int tri[3][2], const std::vector<int>& inside, const std::vector<int>& outside) {
  double p[3][3];
  for (int v = 0; v < 3; ++v) {
    for (int d = 0; d < 3; ++d) {
      p[v][d] = 0.5 * (corner_coord(tri[v][0], d) + corner_coord(tri[v][1], d));
    }
  }
  const double u[3] = {p[1][0] - p[0][0], p[1][1] - p[0][1], p[1][2] - p[0][2]};
  const double w[3] = {p[2][0] - p[0][0], p[2][1] - p[0][1], p[2][2] - p[0][2]};
  const double n[3] = {u[1] * w[2] - u[2] * w[1], u[2] * w[0] - u[0] * w[2],
                       u[0] * w[1] - u[1] * w[0]};
  double dir[3] = {0, 0, 0};
  for (int c : outside) {
    for (int d = 0; d < 3; ++d) dir[d] += corner_coord(c, d) / static_cast<double>(outside.size());
  }
  for (int c : inside) {
    for (int d = 0; d < 3; ++d) dir[d] -= corner_coord(c, d) / static_cast<double>(inside.size());
  }
  if (n[0] * dir[0] + n[1] * dir[1] + n[2] * dir[2] < 0) {
    std::swap(tri[1][0], tri[2][0]);
    std::swap(tri[1][1], tri[2][1]);
  }
}

void set_edge(int out[2], int a, int b) {
  out[0] = std::min(a, b);
  out[1] = std::max(a, b);
}

Tables build_tables() {
  Tables t;
  for (int tet = 0; tet < 6; ++tet) {
    for (int mask = 0; mask < 16; ++mask) {
      std::vector<int> in, out;
      for (int v = 0; v < 4; ++v) ((mask >> v) & 1 ? in : out).push_back(kTets[tet][v]);
      TetCase& tc = t.cases[tet][mask];
      if (in.size() == 1 || in.size() == 3) {
        const bool lone_inside = in.size() == 1;
        const int lone = lone_inside ? in[0] : out[0];
        const std::vector<int>& others = lone_inside ? out : in;
        tc.count = 1;
        for (int v = 0; v < 3; ++v) set_edge(tc.edges[0][v], lone, others[v]);
        orient(tc.edges[0], in, out);
      } else if (in.size() == 2) {
        // The quad's vertices in cyclic order: consecutive edges share a corner.
        int quad[4][2];
        set_edge(quad[0], in[0], out[0]);
        set_edge(quad[1], in[0], out[1]);
        set_edge(quad[2], in[1], out[1]);
        set_edge(quad[3], in[1], out[0]);
        tc.count = 2;
        const int order[2][3] = {{0, 1, 2}, {0, 2, 3}};
        for (int tri = 0; tri < 2; ++tri) {
          for (int v = 0; v < 3; ++v) {
            tc.edges[tri][v][0] = quad[order[tri][v]][0];
            tc.edges[tri][v][1] = quad[order[tri][v]][1];
          }
          orient(tc.edges[tri], in, out);
        }
      }
    }
  }
  return t;
}

const Tables& tables() {
  static const Tables t = build_tables();
  return t;
}

// Vertex on the edge from lattice point a (value va, position pa) to b, interpolated at iso.
// The two values straddle iso, so the denominator is non-zero; clamp guards rounding.
uint32_t emit_vertex(Mesh& mesh, float iso, float va, float vb, const float pa[3],
                     const float pb[3]) {
  float t = (iso - va) / (vb - va);
  if (!(t >= 0.0f)) t = 0.0f;
  if (t > 1.0f) t = 1.0f;
  const auto index = static_cast<uint32_t>(mesh.positions.size() / 3);
  for (int d = 0; d < 3; ++d) mesh.positions.push_back(pa[d] + t * (pb[d] - pa[d]));
  return index;
}

// Polygonizes cell (i, j, k) into `mesh`. slot(point_a, dir) returns a reference to the vertex
// index cached for the edge (point_a, dir), kNoVertex when the edge has none yet: new vertices are
// created in the order the triangles first use them, whichever cache backs the slots.
template <typename SlotFn>
void polygonize_cell(const Lattice& lattice, float iso, int64_t i, int64_t j, int64_t k,
                     const float corner[8], Mesh& mesh, const SlotFn& slot) {
  int cube_mask = 0;
  for (int c = 0; c < 8; ++c) cube_mask |= (corner[c] > iso ? 1 : 0) << c;
  if (cube_mask == 0 || cube_mask == 255) return;
  int64_t point[8];
  float pos[8][3];
  for (int c = 0; c < 8; ++c) {
    const int64_t ci = i + (c & 1), cj = j + ((c >> 1) & 1), ck = k + ((c >> 2) & 1);
    point[c] = lattice.index(ci, cj, ck);
    pos[c][0] = lattice.origin[0] + lattice.spacing * static_cast<float>(ci);
    pos[c][1] = lattice.origin[1] + lattice.spacing * static_cast<float>(cj);
    pos[c][2] = lattice.origin[2] + lattice.spacing * static_cast<float>(ck);
  }
  const Tables& tab = tables();
  for (int tet = 0; tet < 6; ++tet) {
    int mask = 0;
    for (int v = 0; v < 4; ++v) mask |= ((cube_mask >> kTets[tet][v]) & 1) << v;
    const TetCase& tc = tab.cases[tet][mask];
    for (int tri = 0; tri < tc.count; ++tri) {
      for (int v = 0; v < 3; ++v) {
        const int a = tc.edges[tri][v][0], b = tc.edges[tri][v][1];
        uint32_t& cached = slot(point[a], a ^ b);
        if (cached == kNoVertex)
          cached = emit_vertex(mesh, iso, corner[a], corner[b], pos[a], pos[b]);
        mesh.triangles.push_back(cached);
      }
    }
  }
}

}  // namespace

// ---- EdgeVertexMap ------------------------------------------------------------------------------

uint32_t& EdgeVertexMap::slot(uint64_t key) {
  if (2 * (size_ + 1) > keys_.size()) grow();
  const uint64_t mask = keys_.size() - 1;
  for (uint64_t h = hash(key) & mask;; h = (h + 1) & mask) {
    if (keys_[h] == key) return values_[h];
    if (keys_[h] == kEmptyKey) {
      keys_[h] = key;
      values_[h] = kNoVertex;
      ++size_;
      return values_[h];
    }
  }
}

void EdgeVertexMap::grow() {
  std::vector<uint64_t> old_keys = std::move(keys_);
  std::vector<uint32_t> old_values = std::move(values_);
  const size_t capacity = std::max<size_t>(1024, 2 * old_keys.size());
  keys_.assign(capacity, kEmptyKey);
  values_.assign(capacity, kNoVertex);
  const uint64_t mask = capacity - 1;
  for (size_t e = 0; e < old_keys.size(); ++e) {
    if (old_keys[e] == kEmptyKey) continue;
    uint64_t h = hash(old_keys[e]) & mask;
    while (keys_[h] != kEmptyKey) h = (h + 1) & mask;
    keys_[h] = old_keys[e];
    values_[h] = old_values[e];
  }
}

void EdgeVertexMap::clear() {
  keys_.clear();
  values_.clear();
  size_ = 0;
}

// ---- CellPolygonizer ----------------------------------------------------------------------------

CellPolygonizer::CellPolygonizer(const Lattice& lattice, float iso)
    : lattice_(lattice), iso_(iso) {}

void CellPolygonizer::add_cell(int64_t i, int64_t j, int64_t k, const float corner[8]) {
  polygonize_cell(lattice_, iso_, i, j, k, corner, mesh_,
                  [&](int64_t point_a, int dir) -> uint32_t& {
                    return edge_vertices_.slot(static_cast<uint64_t>(point_a) * 8u +
                                               static_cast<uint64_t>(dir));
                  });
}

Mesh CellPolygonizer::take_mesh() {
  Mesh out = std::move(mesh_);
  mesh_ = Mesh();
  edge_vertices_.clear();
  return out;
}

Expected<Mesh> marching_cubes(const float* values, const Lattice& lattice, float iso) {
  for (int d = 0; d < 3; ++d) {
    if (lattice.n[d] < 2) {
      return invalid_argument("marching_cubes: lattice has " + std::to_string(lattice.n[d]) +
                              " points along axis " + std::to_string(d) + " (need >= 2)");
    }
  }
  if (values == nullptr) return invalid_argument("marching_cubes: values is null");
  if (!std::isfinite(iso)) return invalid_argument("marching_cubes: iso level is not finite");
  // Edge-vertex cache over two z-slabs. The cells of layer k only touch edges whose smaller point
  // lies in plane k (every edge with a z step starts there) or in plane k + 1 (edges within that
  // plane, shared with layer k + 1): slab[0] holds plane k's edges, slab[1] plane k + 1's, 7
  // directions per point. After each layer the slabs swap and the new plane's is cleared, so memory
  // is 2 x n0 x n1 x 7 indices and a lookup is an array access (was a hash map over the whole
  // grid). Cells are visited in the same order as before, so vertices and triangles come out
  // identical.
  const int64_t plane = lattice.n[0] * lattice.n[1];
  std::vector<uint32_t> slabs[2] = {
      std::vector<uint32_t>(static_cast<size_t>(plane * 7), kNoVertex),
      std::vector<uint32_t>(static_cast<size_t>(plane * 7), kNoVertex)};
  Mesh mesh;
  float corner[8];
  for (int64_t k = 0; k + 1 < lattice.n[2]; ++k) {
    if (k > 0) {
      std::swap(slabs[0], slabs[1]);
      std::fill(slabs[1].begin(), slabs[1].end(), kNoVertex);
    }
    const int64_t base = k * plane;
    auto slot = [&](int64_t point_a, int dir) -> uint32_t& {
      const int64_t local = point_a - base;  // in [0, 2 * plane)
      const int64_t which = local >= plane ? 1 : 0;
      return slabs[which][static_cast<size_t>((local - which * plane) * 7 + (dir - 1))];
    };
    for (int64_t j = 0; j + 1 < lattice.n[1]; ++j) {
      for (int64_t i = 0; i + 1 < lattice.n[0]; ++i) {
        for (int c = 0; c < 8; ++c) {
          corner[c] = values[lattice.index(i + (c & 1), j + ((c >> 1) & 1), k + ((c >> 2) & 1))];
        }
        polygonize_cell(lattice, iso, i, j, k, corner, mesh, slot);
      }
    }
  }
  return mesh;
}

}  // namespace tessera::mesh
