// How far apart two surfaces are: the symmetric Hausdorff distance between triangle meshes,
// measured from every vertex of each to the nearest point of the other's triangles (exact
// point-triangle distances, a uniform grid of triangles searched in growing shells). For meshes
// from the same lattice (extraction's vertices lie on lattice edges) the vertices sample each
// surface at least once per cell, so this is the surface distance up to a fraction of a cell.
#pragma once

#include "core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

struct SurfaceDistance {
  double a_to_b = 0.0;  // largest distance of a vertex of a to the surface of b
  double b_to_a = 0.0;
  double mean_a_to_b = 0.0;  // mean over a's vertices used by a triangle
  double hausdorff() const { return a_to_b > b_to_a ? a_to_b : b_to_a; }
};

// kInvalidArgument when either mesh has no triangles (the message says which).
Expected<SurfaceDistance> surface_distance(const Mesh& a, const Mesh& b);

}  // namespace tessera::mesh
