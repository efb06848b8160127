// Marching tetrahedra over the Kuhn split of lattice cells, one cell at a time, as functions that
// compile for the host and for CUDA devices: the host polygonizers (engine/mesh/marching_cubes.cpp,
// kernels::cpu::polygonize_cells) and the CUDA one (kernels/cuda/marching.cu) read the same case
// table and interpolate the same way.
//
// A cell's cube corner c sits at offset (c & 1, (c >> 1) & 1, (c >> 2) & 1). The six Kuhn
// tetrahedra are the monotone paths 0 -> e_a -> e_a + e_b -> 7, so every tetrahedron edge joins a
// corner to a componentwise larger one: its direction is one of the 7 non-zero bit masks, and
// (lattice index of the smaller end) * 8 + mask is an edge key shared by every cell touching the
// edge (what welds vertices across cells). A value > iso is inside; triangles are counter-clockwise
// seen from outside. engine/mesh/marching_cubes.h says why tetrahedra (no ambiguous cases: closed,
// crack-free surfaces by construction).
#pragma once

#include <cstdint>

#include "kernels/sampling.h"  // TESSERA_HOST_DEVICE

namespace tessera::kernels {

// Triangles of one tetrahedron for one inside-mask of its 4 vertices: count (0..2) and, per
// triangle vertex, the cube-corner edge a * 8 + b (a < b) it lies on, in output order.
struct TetCase {
  int8_t count;
  uint8_t edge[6];
};
struct TetTable {
  uint8_t tets[6][4];    // cube corners of each tetrahedron
  TetCase cases[6][16];  // [tetrahedron][inside mask over its 4 vertices]
};

// Generated from the rules above (orientation: each triangle's normal points from the inside
// corners towards the outside ones; a quad is split along the same diagonal in every cell).
inline constexpr TetTable kTetTable = {
    {{0, 1, 3, 7}, {0, 1, 5, 7}, {0, 2, 3, 7}, {0, 2, 6, 7}, {0, 4, 5, 7}, {0, 4, 6, 7}},
    {{{0, {0, 0, 0, 0, 0, 0}},
      {1, {1, 3, 7, 0, 0, 0}},
      {1, {1, 15, 11, 0, 0, 0}},
      {2, {3, 7, 15, 3, 15, 11}},
      {1, {3, 11, 31, 0, 0, 0}},
      {2, {1, 31, 7, 1, 11, 31}},
      {2, {1, 15, 31, 1, 31, 3}},
      {1, {7, 15, 31, 0, 0, 0}},
      {1, {7, 31, 15, 0, 0, 0}},
      {2, {1, 3, 31, 1, 31, 15}},
      {2, {1, 31, 11, 1, 7, 31}},
      {1, {3, 31, 11, 0, 0, 0}},
      {2, {3, 11, 15, 3, 15, 7}},
      {1, {1, 11, 15, 0, 0, 0}},
      {1, {1, 7, 3, 0, 0, 0}},
      {0, {0, 0, 0, 0, 0, 0}}},
     {{0, {0, 0, 0, 0, 0, 0}},
      {1, {1, 7, 5, 0, 0, 0}},
      {1, {1, 13, 15, 0, 0, 0}},
      {2, {5, 15, 7, 5, 13, 15}},
      {1, {5, 47, 13, 0, 0, 0}},
      {2, {1, 7, 47, 1, 47, 13}},
      {2, {1, 47, 15, 1, 5, 47}},
      {1, {7, 47, 15, 0, 0, 0}},
      {1, {7, 15, 47, 0, 0, 0}},
      {2, {1, 47, 5, 1, 15, 47}},
      {2, {1, 13, 47, 1, 47, 7}},
      {1, {5, 13, 47, 0, 0, 0}},
      {2, {5, 15, 13, 5, 7, 15}},
      {1, {1, 15, 13, 0, 0, 0}},
      {1, {1, 5, 7, 0, 0, 0}},
      {0, {0, 0, 0, 0, 0, 0}}},
     {{0, {0, 0, 0, 0, 0, 0}},
      {1, {2, 7, 3, 0, 0, 0}},
      {1, {2, 19, 23, 0, 0, 0}},
      {2, {3, 23, 7, 3, 19, 23}},
      {1, {3, 31, 19, 0, 0, 0}},
      {2, {2, 7, 31, 2, 31, 19}},
      {2, {2, 31, 23, 2, 3, 31}},
      {1, {7, 31, 23, 0, 0, 0}},
      {1, {7, 23, 31, 0, 0, 0}},
      {2, {2, 31, 3, 2, 23, 31}},
      {2, {2, 19, 31, 2, 31, 7}},
      {1, {3, 19, 31, 0, 0, 0}},
      {2, {3, 23, 19, 3, 7, 23}},
      {1, {2, 23, 19, 0, 0, 0}},
      {1, {2, 3, 7, 0, 0, 0}},
      {0, {0, 0, 0, 0, 0, 0}}},
     {{0, {0, 0, 0, 0, 0, 0}},
      {1, {2, 6, 7, 0, 0, 0}},
      {1, {2, 23, 22, 0, 0, 0}},
      {2, {6, 7, 23, 6, 23, 22}},
      {1, {6, 22, 55, 0, 0, 0}},
      {2, {2, 55, 7, 2, 22, 55}},
      {2, {2, 23, 55, 2, 55, 6}},
      {1, {7, 23, 55, 0, 0, 0}},
      {1, {7, 55, 23, 0, 0, 0}},
      {2, {2, 6, 55, 2, 55, 23}},
      {2, {2, 55, 22, 2, 7, 55}},
      {1, {6, 55, 22, 0, 0, 0}},
      {2, {6, 22, 23, 6, 23, 7}},
      {1, {2, 22, 23, 0, 0, 0}},
      {1, {2, 7, 6, 0, 0, 0}},
      {0, {0, 0, 0, 0, 0, 0}}},
     {{0, {0, 0, 0, 0, 0, 0}},
      {1, {4, 5, 7, 0, 0, 0}},
      {1, {4, 39, 37, 0, 0, 0}},
      {2, {5, 7, 39, 5, 39, 37}},
      {1, {5, 37, 47, 0, 0, 0}},
      {2, {4, 47, 7, 4, 37, 47}},
      {2, {4, 39, 47, 4, 47, 5}},
      {1, {7, 39, 47, 0, 0, 0}},
      {1, {7, 47, 39, 0, 0, 0}},
      {2, {4, 5, 47, 4, 47, 39}},
      {2, {4, 47, 37, 4, 7, 47}},
      {1, {5, 47, 37, 0, 0, 0}},
      {2, {5, 37, 39, 5, 39, 7}},
      {1, {4, 37, 39, 0, 0, 0}},
      {1, {4, 7, 5, 0, 0, 0}},
      {0, {0, 0, 0, 0, 0, 0}}},
     {{0, {0, 0, 0, 0, 0, 0}},
      {1, {4, 7, 6, 0, 0, 0}},
      {1, {4, 38, 39, 0, 0, 0}},
      {2, {6, 39, 7, 6, 38, 39}},
      {1, {6, 55, 38, 0, 0, 0}},
      {2, {4, 7, 55, 4, 55, 38}},
      {2, {4, 55, 39, 4, 6, 55}},
      {1, {7, 55, 39, 0, 0, 0}},
      {1, {7, 39, 55, 0, 0, 0}},
      {2, {4, 55, 6, 4, 39, 55}},
      {2, {4, 38, 55, 4, 55, 7}},
      {1, {6, 38, 55, 0, 0, 0}},
      {2, {6, 39, 38, 6, 7, 39}},
      {1, {4, 39, 38, 0, 0, 0}},
      {1, {4, 6, 7, 0, 0, 0}},
      {0, {0, 0, 0, 0, 0, 0}}}}};

// The lattice of the cells: n[0] x n[1] x n[2] points, point (i, j, k) at origin + spacing *
// (i, j, k), linear index i + n[0] * (j + n[1] * k).
struct CellGrid {
  int64_t n[3] = {0, 0, 0};
  float origin[3] = {0, 0, 0};
  float spacing = 1.0f;
  float iso = 0.0f;
};

// Bit c set when corner c is inside.
TESSERA_HOST_DEVICE inline int cell_inside_mask(const float corner[8], float iso) {
  int cube = 0;
  for (int c = 0; c < 8; ++c) cube |= (corner[c] > iso ? 1 : 0) << c;
  return cube;
}

TESSERA_HOST_DEVICE inline int tet_mask(const TetTable& table, int tet, int cube) {
  int mask = 0;
  for (int v = 0; v < 4; ++v) mask |= ((cube >> table.tets[tet][v]) & 1) << v;
  return mask;
}

// Triangles the cell produces (0..12).
TESSERA_HOST_DEVICE inline int cell_triangle_count(const TetTable& table, const float corner[8],
                                                   float iso) {
  const int cube = cell_inside_mask(corner, iso);
  if (cube == 0 || cube == 255) return 0;
  int n = 0;
  for (int tet = 0; tet < 6; ++tet) n += table.cases[tet][tet_mask(table, tet, cube)].count;
  return n;
}

// How close to a lattice point an edge vertex may sit, as a fraction of its edge. A value exactly
// at iso counts as outside, so the surface passes through that lattice point, and every edge from
// it to an inside neighbour would put its vertex at the very same position: distinct vertices by
// edge key, one point in space, which any consumer that welds coincident vertices (Blender's merge,
// an STL slicer, cleanup's weld) turns into non-manifold edges. Keeping each vertex
// kEdgeParamMargin away from the ends of its edge keeps vertices of different edges apart (by ~1 %
// of a cell) and leaves the surface where it was to within that.
inline constexpr float kEdgeParamMargin = 1.0f / 128.0f;

// The vertex on the edge from value va at pa to vb at pb where the linear interpolation crosses
// iso (the two values straddle iso, so vb != va), kept within [margin, 1 - margin] of the edge
// (the clamp also guards rounding and NaN).
TESSERA_HOST_DEVICE inline float edge_param(float iso, float va, float vb) {
  float t = (iso - va) / (vb - va);
  if (!(t >= kEdgeParamMargin)) t = kEdgeParamMargin;
  if (t > 1.0f - kEdgeParamMargin) t = 1.0f - kEdgeParamMargin;
  return t;
}

// Writes the cell's triangles, 3 slots each, in tetrahedron order: slot s gets the edge key of its
// vertex (keys[s]) and the interpolated position (xyz[3 s .. 3 s + 2]). cell = the lattice index
// of the cell's corner 0 (its corners must lie in the grid).
TESSERA_HOST_DEVICE inline void cell_emit(const TetTable& table, const CellGrid& g, int64_t cell,
                                          const float corner[8], uint64_t* keys, float* xyz) {
  const int cube = cell_inside_mask(corner, g.iso);
  if (cube == 0 || cube == 255) return;
  const int64_t i = cell % g.n[0], j = (cell / g.n[0]) % g.n[1], k = cell / (g.n[0] * g.n[1]);
  int slot = 0;
  for (int tet = 0; tet < 6; ++tet) {
    const TetCase& tc = table.cases[tet][tet_mask(table, tet, cube)];
    for (int s = 0; s < 3 * tc.count; ++s, ++slot) {
      const int a = tc.edge[s] >> 3, b = tc.edge[s] & 7;
      const int64_t ai = i + (a & 1), aj = j + ((a >> 1) & 1), ak = k + ((a >> 2) & 1);
      keys[slot] = static_cast<uint64_t>(ai + g.n[0] * (aj + g.n[1] * ak)) * 8u +
                   static_cast<uint64_t>(a ^ b);
      const float t = edge_param(g.iso, corner[a], corner[b]);
      const int64_t p[2][3] = {{ai, aj, ak}, {i + (b & 1), j + ((b >> 1) & 1), k + ((b >> 2) & 1)}};
      for (int d = 0; d < 3; ++d) {
        const float pa = g.origin[d] + g.spacing * static_cast<float>(p[0][d]);
        const float pb = g.origin[d] + g.spacing * static_cast<float>(p[1][d]);
        xyz[3 * slot + d] = pa + t * (pb - pa);
      }
    }
  }
}

}  // namespace tessera::kernels

#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::kernels::cpu {

// The data-parallel polygonizer, on the host: the reference of the CUDA one
// (kernels/cuda/marching.cu runs the same passes as kernels). n cells, given by the lattice index
// of their corner 0, with their 8 corner values each (cell a's corner c at corners[8 a + c]) ->
// a welded triangle mesh: positions xyz per vertex, triangles as index triples.
//   1. count: triangles per cell (cell_triangle_count), exclusive scan -> each cell's first slot;
//   2. emit: each cell writes the edge key and position of its triangles' corners (cell_emit);
//   3. weld: the corner slots sorted by key (stable): one vertex per distinct key, vertices in key
//      order, triangles in cell order.
// The surface equals what engine/mesh/CellPolygonizer makes of the same cells, with the vertices
// numbered in key order instead of first use. Errors: kInvalidArgument for a grid with fewer than
// 2 points along an axis, n < 0, null arrays with n > 0, or a cell whose corners leave the grid
// (named by its position in the list); kOutOfMemory naming the size when the mesh would have
// 2^32 vertices or more.
Status polygonize_cells(const CellGrid& grid, const int64_t* cells, const float* corners, int64_t n,
                        std::vector<float>* positions, std::vector<uint32_t>* triangles);

// Checks polygonize_cells' arguments (shared with the CUDA version; inline: the CUDA library
// does not link the CPU one).
inline Status check_cells(const CellGrid& grid, const int64_t* cells, const float* corners,
                          int64_t n, const char* who) {
  const std::string name = who;
  if (grid.n[0] < 2 || grid.n[1] < 2 || grid.n[2] < 2) {
    return invalid_argument(name + ": the grid needs at least 2 points along every axis, got " +
                            std::to_string(grid.n[0]) + " x " + std::to_string(grid.n[1]) + " x " +
                            std::to_string(grid.n[2]));
  }
  if (n < 0) return invalid_argument(name + ": negative cell count " + std::to_string(n));
  if (n > 0 && (cells == nullptr || corners == nullptr)) {
    return invalid_argument(name + ": null cell or corner array");
  }
  for (int64_t a = 0; a < n; ++a) {
    const int64_t cell = cells[a];
    const int64_t i = cell % grid.n[0], j = (cell / grid.n[0]) % grid.n[1],
                  k = cell / (grid.n[0] * grid.n[1]);
    if (cell < 0 || i + 1 >= grid.n[0] || j + 1 >= grid.n[1] || k + 1 >= grid.n[2]) {
      return invalid_argument(name + ": cell " + std::to_string(a) + " (lattice index " +
                              std::to_string(cell) + ") has corners outside the grid");
    }
  }
  return Status();
}

}  // namespace tessera::kernels::cpu
