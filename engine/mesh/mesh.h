// Mesh: an indexed triangle mesh, the engine's one geometry exchange type (extraction produces it,
// clean-up edits it in place, exporters and the viewer read it).
//
// Conventions: positions and normals are xyz float triples per vertex (object units: the shape
// decoder's [-1.05, 1.05]^3 cube); `normals` is either empty or exactly as long as `positions`;
// triangles are index triples, counter-clockwise when seen from outside (right-hand normal points
// out of the solid). The struct owns its arrays; it is a plain value (copyable, movable).
//
// Texturing: `uvs` is either empty or one (u, v) pair per vertex (u to the right, v up, both in
// [0, 1], the glTF/OBJ convention with v flipped as OBJ expects: v = 0 is the image's bottom row);
// `texture` is the image those coordinates sample. A texture without uvs is invalid; uvs without a
// texture are allowed (a UV layout only). A vertex has one uv, so a vertex on a UV seam is
// duplicated (same position, two uvs).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace tessera::mesh {

// An 8-bit RGB image carried by a mesh as its base colour texture.
struct TextureImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // RGB8, row-major, top row first: 3 * width * height bytes
  bool empty() const { return width == 0; }
};

struct Mesh {
  std::vector<float> positions;     // 3 * vertex_count()
  std::vector<float> normals;       // empty or 3 * vertex_count()
  std::vector<uint32_t> triangles;  // 3 * triangle_count()
  std::vector<float> uvs;           // empty or 2 * vertex_count(): u right, v up, in [0, 1]
  TextureImage texture;             // empty (width == 0) when untextured

  int64_t vertex_count() const { return static_cast<int64_t>(positions.size() / 3); }
  int64_t triangle_count() const { return static_cast<int64_t>(triangles.size() / 3); }
  bool empty() const { return triangles.empty(); }
};

struct Bounds {
  std::array<float, 3> min{0, 0, 0};
  std::array<float, 3> max{0, 0, 0};
  double diagonal() const;
};

// Checks the invariants above (array sizes, every index < vertex_count(), finite positions, uvs
// finite and in [0, 1], texture dimensions positive with 3 * width * height bytes, a texture only
// together with uvs).
// kInvalidArgument naming the first violation.
Status validate(const Mesh& mesh);

// Axis-aligned bounds of all vertices (zeros for a mesh without vertices).
Bounds compute_bounds(const Mesh& mesh);

// Total triangle area, and the signed volume enclosed (positive for a closed, outward-oriented
// mesh; meaningless for open meshes). Computed in double.
double surface_area(const Mesh& mesh);
double signed_volume(const Mesh& mesh);

// Topology summary: edges counted once per unordered vertex pair.
struct Topology {
  int64_t vertices_used = 0;  // vertices referenced by at least one triangle
  int64_t edges = 0;
  int64_t boundary_edges = 0;        // edges used by one triangle
  int64_t non_manifold_edges = 0;    // edges used by more than two triangles
  int64_t euler_characteristic = 0;  // V - E + F over referenced vertices
  int64_t components = 0;            // connected through shared vertices
  int64_t misoriented_edges = 0;     // two-triangle edges both triangles walk the same way
  bool watertight() const { return boundary_edges == 0 && non_manifold_edges == 0; }
};
Topology compute_topology(const Mesh& mesh);

// compute_topology() after merging the vertices that sit at exactly the same position (uvs and
// normals ignored): what a consumer that welds coincident vertices sees (an STL, which has no
// shared vertices at all; Blender's "merge by distance"; a slicer). A mesh can be watertight by
// index and not after this, when two distinct vertices coincide.
Topology compute_welded_topology(const Mesh& mesh);

}  // namespace tessera::mesh
