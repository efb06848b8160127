// Iso-surface extraction from a sampled scalar field on a regular lattice.
//
// Algorithm: marching cubes (Lorensen & Cline, "Marching Cubes: A High Resolution 3D Surface
// Construction Algorithm", SIGGRAPH 1987) with each cube split into the six Kuhn (Freudenthal)
// tetrahedra around its main diagonal, i.e. marching tetrahedra within the cubes (Doi & Koide,
// "An Efficient Method of Triangulating Equi-Valued Surfaces by Using Tetrahedral Cells", IEICE
// 1991). Why the tetrahedral split: the classic 256-case cube table has ambiguous faces whose
// resolution can differ between neighbouring cubes and leave cracks; the Kuhn split cuts every cube
// face along the same diagonal as its neighbour does, and a tetrahedron has no ambiguous case, so
// the output is consistent by construction: for a field that is "outside" on the lattice boundary
// the surface is closed and every edge is shared by exactly two triangles. Vertices lie on lattice
// edges (axis, face-diagonal and body-diagonal edges), linearly interpolated, and are welded by
// edge id, so neighbouring cells share them without any position comparison.
//
// Convention: a value > iso is inside (occupancy logits: inside > 0). Triangles are
// counter-clockwise seen from outside (their normals point from inside to outside).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

// n[0] x n[1] x n[2] points; point (i, j, k) sits at origin + spacing * (i, j, k) and has linear
// index i + n0 * (j + n1 * k) (x fastest), the layout of dense value arrays.
struct Lattice {
  std::array<int64_t, 3> n{0, 0, 0};
  std::array<float, 3> origin{0, 0, 0};
  float spacing = 1.0f;

  int64_t num_points() const { return n[0] * n[1] * n[2]; }
  int64_t index(int64_t i, int64_t j, int64_t k) const { return i + n[0] * (j + n[1] * k); }
};

// "No vertex yet" in the edge-vertex caches.
inline constexpr uint32_t kNoVertex = 0xffffffffu;

// Edge id (smaller lattice point * 8 + direction mask) -> vertex index: an open-addressing hash
// table (linear probing, at most half full), for cells that arrive in any order. slot() returns a
// reference to the key's value, kNoVertex when the key was not there before (it is then inserted);
// the reference is valid until the next slot() call. Keys must not be ~0.
class EdgeVertexMap {
 public:
  uint32_t& slot(uint64_t key);
  void clear();

 private:
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  static uint64_t hash(uint64_t key) { return (key * 0x9e3779b97f4a7c15ull) >> 17; }
  void grow();

  std::vector<uint64_t> keys_;
  std::vector<uint32_t> values_;
  size_t size_ = 0;
};

// Polygonizes cells one at a time (the coarse-to-fine extractor feeds it only the cells that hold
// surface). Cells may come in any order; each must be added at most once.
class CellPolygonizer {
 public:
  CellPolygonizer(const Lattice& lattice, float iso);

  // Cell (i, j, k) spans points (i..i+1, j..j+1, k..k+1); requires i + 1 < n[0] etc.
  // corner[c] is the value at point (i + (c & 1), j + ((c >> 1) & 1), k + ((c >> 2) & 1)).
  void add_cell(int64_t i, int64_t j, int64_t k, const float corner[8]);

  int64_t triangle_count() const { return static_cast<int64_t>(mesh_.triangles.size() / 3); }
  // Moves the mesh out (no normals; clean-up computes them). The polygonizer is empty afterwards.
  Mesh take_mesh();

 private:
  Lattice lattice_;
  float iso_;
  Mesh mesh_;
  EdgeVertexMap edge_vertices_;
};

// Dense path: `values` holds lattice.num_points() samples in lattice index order. Every cell is
// polygonized, layer by layer, with the edge vertices cached over two z-slabs (marching_cubes.cpp);
// the output equals CellPolygonizer fed the same cells in index order. kInvalidArgument if the
// lattice has fewer than 2 points along an axis or values is null; the result may be empty when no
// cell straddles `iso` (callers decide whether that is an error).
Expected<Mesh> marching_cubes(const float* values, const Lattice& lattice, float iso);

}  // namespace tessera::mesh
