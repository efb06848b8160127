#include "engine/mesh/marching_cubes.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/marching_tets.h"

namespace tessera::mesh {
namespace {

// Vertex on the edge from lattice point a (value va, position pa) to b, interpolated at iso.
uint32_t emit_vertex(Mesh& mesh, float iso, float va, float vb, const float pa[3],
                     const float pb[3]) {
  const float t = kernels::edge_param(iso, va, vb);
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
  const int cube_mask = kernels::cell_inside_mask(corner, iso);
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
  const kernels::TetTable& tab = kernels::kTetTable;
  for (int tet = 0; tet < 6; ++tet) {
    const kernels::TetCase& tc = tab.cases[tet][kernels::tet_mask(tab, tet, cube_mask)];
    for (int s = 0; s < 3 * tc.count; ++s) {
      const int a = tc.edge[s] >> 3, b = tc.edge[s] & 7;
      uint32_t& cached = slot(point[a], a ^ b);
      if (cached == kNoVertex)
        cached = emit_vertex(mesh, iso, corner[a], corner[b], pos[a], pos[b]);
      mesh.triangles.push_back(cached);
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
