// `tessera check`: what a printer, Roblox or a game engine will find in a mesh, measured the way
// they see it (coincident vertices welded: an STL shares none, slicers weld them).
//
// Reported: vertices and triangles as stored, vertices merged by welding, boundary edges (used
// by one triangle: holes), non-manifold edges (used by more than two), misoriented edges,
// connected components, genus (closed manifold meshes only: chi = 2C - 2g), signed volume and
// area, bounds, zero-area triangles, and self-intersections: a bounded check that tests pairs of
// triangles sharing no vertex whose boxes overlap (a uniform grid finds them), each by its edges
// against the other triangle (Moller-Trumbore on the segment); coplanar overlaps are not counted.
// At most `max_pair_tests` pairs are tested: the report says whether the check was complete.
#pragma once

#include <cstdint>
#include <string>

#include "engine/mesh/mesh.h"

namespace tessera::mesh {

struct CheckOptions {
  int64_t max_pair_tests = 20'000'000;  // self-intersection: pairs tested at most
};

struct MeshReport {
  int64_t vertices = 0, triangles = 0;
  int64_t welded_vertices = 0;  // vertices that coincide with an earlier one
  Topology topology;            // after welding
  int64_t genus = -1;           // -1: not closed and manifold
  double volume = 0.0;          // signed (negative: inside out)
  double area = 0.0;
  Bounds bounds;
  int64_t zero_area_triangles = 0;
  int64_t intersecting_pairs = 0;
  int64_t pairs_tested = 0;
  bool intersection_check_complete = true;

  bool closed() const { return topology.boundary_edges == 0; }
  bool manifold() const { return topology.non_manifold_edges == 0; }
  // What `tessera check` exits 0 for: closed and manifold.
  bool watertight() const { return closed() && manifold() && triangles > 0; }
};

MeshReport check_mesh(const Mesh& mesh, const CheckOptions& options = {});

// Human-readable lines (one fact a line) and a JSON object (nlohmann dump) of the report.
std::string report_text(const MeshReport& report);
std::string report_json(const MeshReport& report);

}  // namespace tessera::mesh
