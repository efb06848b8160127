// UV atlases for any mesh: charts, a flattening per chart and packing into one square texture,
// so a painter (or any texture) can give every triangle its own texels.
//
// No Debian 12 package makes a complete atlas one can link (xatlas, UVAtlas and geogram are not
// packaged; CGAL's parameterisers are GPL and need a disc per chart and leave packing to the
// caller; OpenMesh and Assimp have no parameterisation; docs/uv-atlas.md), so the steps are our
// own, one algorithm per file, after what xatlas does reduced to its core:
//   uv_charts.cpp  charts grown from seeds over shared edges while a face's normal stays within a
//                  cone around the chart's mean normal (D-Charts, Julius et al. 2005, reduced);
//   uv_flatten.cpp each chart projected onto its mean plane, then relaxed to least-squares
//                  conformal maps (LSCM, Levy et al. 2002) by conjugate gradients from that start;
//                  a chart that flips or overlaps itself is split until it does not, and a
//                  hollow one (an arc) is cut into straighter pieces;
//   uv_pack.cpp    charts at one texel density, rotated to their smallest bounding box,
//                  rasterised with half a gutter around them and placed on a skyline (column
//                  profiles) or, for up to 512 charts, into any free place of a texel bitmap, the
//                  density searched so the charts fill the texture.
//   uv_atlas.cpp   the orchestration, the output mesh (a vertex on a chart border is split, one
//                  copy per chart) and the checks (overlap, flips, stretch, utilisation).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

struct AtlasOptions {
  // Texture side in texels: 1024, 2048 or 4096 (anything else is refused).
  int size = 2048;
  // Empty texels between two charts (each keeps half of them around itself, where a painter
  // dilates its colours so bilinear sampling and mip-maps do not pull in another chart's):
  // 0 = size / 256 (4 at 1024, 8 at 2048, 16 at 4096).
  int gutter = 0;
  // A face joins a chart while its normal is within this angle of the chart's mean normal.
  float max_chart_angle_deg = 60.0f;
  // A mesh that already has uvs keeps them unless this is set.
  bool replace_existing = false;
  // Checked between phases; set -> kCancelled.
  const std::atomic<bool>* cancel = nullptr;
};

// What an atlas came out as.
struct AtlasReport {
  bool kept_existing = false;  // the mesh had uvs and keeps them (nothing else below is filled)
  int64_t charts = 0;
  int64_t lscm_charts = 0;     // relaxed by LSCM (the others kept their planar projection)
  int64_t split_charts = 0;    // charts that were split because they flipped or overlapped
  int64_t seam_vertices = 0;   // vertices added by cutting the mesh into charts
  double utilization = 0;      // share of the texture's texels inside some triangle
  double texels_per_unit = 0;  // texels per mesh unit along a surface
  // Area-weighted percentiles of the per-triangle L2 stretch (Sander et al. 2001), each triangle's
  // UV scaled to the mesh's overall density: 1 = no stretch.
  double stretch_p50 = 0, stretch_p90 = 0, stretch_p99 = 0;
  int64_t flipped = 0;      // triangles whose UV winding is opposite to their chart's
  int64_t overlapping = 0;  // pairs of triangles whose UV interiors overlap
  double charts_ms = 0, flatten_ms = 0, pack_ms = 0;
};

// The texture sides an atlas is made for: 1024, 2048 and 4096.
bool is_atlas_size(int size);

// A copy of `mesh` with an atlas in `uvs` (u right, v up, in [0, 1]; texel centres of a
// `options.size` texture are at (i + 0.5) / size). Vertices on chart borders are duplicated
// (same position and normal). The texture, if any, is dropped when the uvs are replaced.
// Errors: kInvalidArgument (no triangles, a size that is not 1024 / 2048 / 4096, a negative gutter,
// invalid mesh arrays, a surface of zero area, more separate parts than the texture can hold at any
// density), kCancelled. Degenerate triangles (zero area) join a neighbour's chart (or make one of
// their own) and come out as segments or points there; the checks leave them out.
Expected<Mesh> make_uv_atlas(const Mesh& mesh, const AtlasOptions& options,
                             AtlasReport* report = nullptr);

// The checks of an atlas already in `mesh.uvs` at texture side `size`: overlap of triangle
// interiors (exact 2D test on a grid), flips (per connected UV chart), stretch and utilisation.
// kInvalidArgument when the mesh has no uvs.
Expected<AtlasReport> check_uv_atlas(const Mesh& mesh, int size);

// ---- the steps (uv_charts.cpp, uv_flatten.cpp, uv_pack.cpp), for the tests and the benchmark --

// The chart of every triangle (0..charts-1), grown over edges shared by welded vertices (same
// position); degenerate triangles join a neighbour's chart or a chart of their own.
std::vector<int32_t> grow_charts(const Mesh& mesh, float max_angle_deg, int64_t* charts);

// A chart's triangles flattened: `uv` 2 floats per chart-local vertex, in mesh units (area close to
// the 3D area). `local_of` maps chart-local vertex -> mesh vertex.
struct FlatChart {
  std::vector<uint32_t> local_of;   // chart vertex -> mesh vertex
  std::vector<uint32_t> triangles;  // 3 chart-local indices per triangle
  std::vector<int64_t> faces;       // mesh triangle of each chart triangle
  std::vector<float> uv;            // 2 per chart vertex
  bool lscm = false;
};

// Flattens the triangles `faces` of `mesh` (one chart): planar projection, LSCM relaxation, and
// splits where the result flips or overlaps itself. Appends one FlatChart per resulting piece;
// returns how many pieces were split off.
int64_t flatten_chart(const Mesh& mesh, const std::vector<int64_t>& faces,
                      std::vector<FlatChart>* out);

// Packs `charts` (uv in mesh units) into a size x size texture, `gutter` texels apart:
// rewrites every chart's uv to texels (x right, y down from the top-left corner, in [0, size]).
// Returns the texels per mesh unit used; kInvalidArgument when the charts cannot fit at any
// density (more charts than texels).
Expected<double> pack_charts(std::vector<FlatChart>* charts, int size, int gutter,
                             const std::atomic<bool>* cancel);

}  // namespace tessera::mesh
