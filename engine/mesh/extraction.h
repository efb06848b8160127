// Surface extraction from an occupancy function over the cube [-bound, bound]^3.
//
// Two paths produce the same surface:
// - extract_dense: samples every point of a (2^resolution_base + 1)^3 lattice (the reference
//   path, as the Cube 3D reference does; 17 M queries at resolution_base 8). Kept for tests.
// - extract_coarse_to_fine: samples a coarse lattice (2^coarse_base + 1 per axis), then level by
//   level subdivides only the cells that hold surface: cells whose corners change sign, or whose
//   smallest |logit| is below near_surface_logit (catches features thinner than a coarse cell
//   whose corners all agree). Each subdivided cell needs the 27 points of its 2x2x2 children;
//   points shared with neighbours or earlier levels are queried once. At the finest level the cells
//   with a sign change are polygonized on the same lattice as the dense path, so wherever the
//   coarse levels found the surface the two meshes are identical. Each level's points are queried
//   in one pass (batches of batch_points); the bookkeeping is flat arrays: surface cells carry
//   their 8 corner values down the levels, and the points new at a level are deduplicated with an
//   open-addressing hash of their lattice index. Memory is O(surface cells) per level, never
//   O(lattice) beyond the coarse one.
//
// The occupancy function takes a batch of points and writes one logit per point (inside > 0, the
// surface is logit = iso). It is called with at most `batch_points` points at a time from the
// calling thread; the point buffer is allocated once per extraction.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::kernels {
struct CellGrid;  // kernels/marching_tets.h
}  // namespace tessera::kernels

namespace tessera::mesh {

// points: n x 3 floats (xyz); logits: n floats to write. A non-ok Status aborts the extraction and
// is returned as is (e.g. kCancelled from a cancel token).
using OccupancyFn = std::function<Status(const float* points, int64_t n, float* logits)>;

// Polygonizes the finest level's surface cells somewhere else (a GPU: Backend::polygonize_cells):
// the contract of kernels::cpu::polygonize_cells (iso, lattice, cells as lattice indices of corner
// 0, 8 corner values each; writes a welded mesh); kernels::cpu::polygonize_cells is one.
using CellPolygonizeFn = std::function<Status(
    const kernels::CellGrid& grid, const int64_t* cells, const float* corners, int64_t n,
    std::vector<float>* positions, std::vector<uint32_t>* triangles)>;

struct ExtractionOptions {
  int resolution_base = 8;          // finest lattice: 2^resolution_base + 1 points per axis
  int coarse_base = 5;              // coarse-to-fine: first lattice 2^coarse_base + 1 per axis
  float bound = 1.05f;              // the cube [-bound, bound]^3
  float iso = 0.0f;                 // surface level of the logits
  float near_surface_logit = 0.0f;  // also refine cells with min |logit - iso| below this
  int64_t batch_points = 65536;     // points per call of the occupancy function
  // Coarse-to-fine only: when set, the finest level's cells are polygonized by this instead of on
  // the host (same surface; vertices numbered in edge-key order instead of first use).
  CellPolygonizeFn polygonize;
};

struct ExtractionStats {
  int64_t queries = 0;        // points evaluated
  int64_t surface_cells = 0;  // finest-level cells polygonized
  int levels = 0;             // lattices evaluated
  // Where the queries went: per lattice, coarsest first (levels entries; they sum to `queries`);
  // of the finest's, those its surface tracking added (cells the seeds did not reach).
  std::vector<int64_t> level_queries;
  int64_t tracking_queries = 0;
};

// The queries per level for a log line, e.g. "35937 + 88120 + 301544 + 754112 (tracking 6120)";
// empty when no level was recorded.
std::string describe_level_queries(const ExtractionStats& stats);

// Errors: kInvalidArgument for bad options (resolution_base outside [1, 10], coarse_base outside
// [1, resolution_base], bound <= 0, batch_points < 1) or a non-finite logit (names the point);
// kInvalidArgument "no surface" when the field never crosses iso (all inside or all outside);
// any error of `occupancy`. `stats` may be null.
Expected<Mesh> extract_dense(const OccupancyFn& occupancy, const ExtractionOptions& options,
                             ExtractionStats* stats = nullptr);
Expected<Mesh> extract_coarse_to_fine(const OccupancyFn& occupancy,
                                      const ExtractionOptions& options,
                                      ExtractionStats* stats = nullptr);

}  // namespace tessera::mesh
