// Mesh clean-up after extraction: the steps of the Cube 3D reference's post-processing, plus
// normals. Every step edits the mesh in place and keeps it valid (mesh.h invariants); vertices no
// triangle uses are dropped and indices compacted.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

// Merges vertices whose positions agree to within `tolerance` (absolute units; they are snapped to
// a grid of that size, so two vertices closer than the tolerance but in different grid cells are
// kept apart). On a mesh with uvs, vertices must also have exactly equal uvs to merge (texture
// seams stay split); the survivor keeps its uv. Normals, if present, are dropped: recompute them
// afterwards. Returns vertices merged.
int64_t weld_vertices(Mesh& mesh, float tolerance);

// Removes triangles that repeat a vertex index, have area <= min_area (min_area < 0: no area test),
// or repeat another triangle's vertex set (any orientation). Returns triangles removed. Note that
// removing a zero-area triangle with three distinct vertices opens a closed surface.
int64_t remove_degenerate_triangles(Mesh& mesh, double min_area = 0.0);

// Drops connected components (triangles connected through shared vertices) whose bounding-box
// diagonal is below `fraction` of the whole mesh's diagonal. The largest component is always kept.
// On a mesh with uvs, vertices at exactly the same position are connected too (texture seams).
// Returns triangles removed.
int64_t remove_small_components(Mesh& mesh, double fraction);

// Removes vertices that no triangle references (compacts indices, keeps normals and uvs aligned).
void compact_vertices(Mesh& mesh);

// Area-weighted vertex normals (unit length; (0, 0, 1) for a vertex whose faces have zero area).
void compute_vertex_normals(Mesh& mesh);

// Quadric-error decimation (meshoptimizer's meshopt_simplify) down to at most `max_triangles`
// where the topology allows it; borders are kept. No-op when the mesh is already within budget.
// Uvs and the texture are kept (the simplifier keeps a subset of the vertices, each with its uv).
// kUnsupported when Tessera was built without meshoptimizer, kInvalidArgument for max_triangles
// < 1.
Status decimate(Mesh& mesh, int64_t max_triangles);

// A finished mesh brought within an export budget (the decimation step of cleanup() alone):
// decimate(), then compaction and fresh vertex normals when it changed anything. No-op when
// max_triangles is 0 or the mesh is within budget. Errors: decimate()'s.
Status reduce_triangles(Mesh& mesh, int64_t max_triangles);

// Taubin's lambda|mu smoothing ("A Signal Processing Approach to Fair Surface Design", SIGGRAPH
// 1995): each iteration moves every vertex towards the mean of its neighbours by lambda, then away
// by -mu, which removes the one-cell stair steps marching a coarse lattice leaves on a curved
// surface without the shrinking of plain Laplacian smoothing. Vertices move, the connectivity does
// not: a closed, manifold mesh stays so. Vertices on boundary or non-manifold edges do not move.
// Smooths by vertex index, so call it before texturing (uv seams split vertices; cleanup() skips it
// on a mesh with uvs). Normals, when present, are recomputed.
void smooth_taubin(Mesh& mesh, int iterations, float lambda = 0.5f, float mu = -0.53f);

struct CleanupOptions {
  double weld_tolerance_fraction = 1e-6;  // of the bbox diagonal
  double min_component_fraction = 0.15;  // of the bbox diagonal (the reference's 15 %); 0: keep all
  int smooth_iterations = 20;            // smooth_taubin() iterations after the weld (the
                                         // one-cell stair steps of a coarse lattice); 0: none
  int64_t max_triangles = 0;             // decimation budget; 0: no decimation
  bool normals = true;
};

// Wall time of cleanup()'s stages, ms (faces: collapsed and repeated faces; normals: compaction
// and normals).
struct CleanupStats {
  double weld_ms = 0, faces_ms = 0, components_ms = 0, smooth_ms = 0, decimate_ms = 0,
         normals_ms = 0;
};

// weld -> collapsed and repeated faces (zero-area slivers are kept: they close the surface) ->
// small components -> optional smoothing -> optional decimation -> compaction -> normals.
// Errors: the mesh fails validate(), or decimate() fails. `stats` (may be null) gets the stages'
// times.
Status cleanup(Mesh& mesh, const CleanupOptions& options, CleanupStats* stats = nullptr);

}  // namespace tessera::mesh
