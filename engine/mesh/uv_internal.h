// Shared pieces of the UV atlas files (uv_charts.cpp, uv_flatten.cpp, uv_pack.cpp, uv_atlas.cpp):
// small double-precision vector helpers, welding and face adjacency, and the 2D checks.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/mesh/mesh.h"

namespace tessera::mesh::uv_detail {

using Vec3d = std::array<double, 3>;
inline Vec3d add(const Vec3d& a, const Vec3d& b) {
  return {a[0] + b[0], a[1] + b[1], a[2] + b[2]};
}
inline Vec3d sub(const Vec3d& a, const Vec3d& b) {
  return {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
}
inline Vec3d scale(const Vec3d& a, double s) {
  return {a[0] * s, a[1] * s, a[2] * s};
}
inline double dot(const Vec3d& a, const Vec3d& b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}
inline Vec3d cross(const Vec3d& a, const Vec3d& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
inline double norm(const Vec3d& a) {
  return std::sqrt(dot(a, a));
}
inline Vec3d position(const Mesh& m, uint32_t v) {
  return {m.positions[3 * v], m.positions[3 * v + 1], m.positions[3 * v + 2]};
}

struct FaceGeometry {
  double area = 0;
  Vec3d normal{0, 0, 0};  // unit, zero for a degenerate face
  Vec3d centroid{0, 0, 0};
};
FaceGeometry face_geometry(const Mesh& mesh, int64_t f);

// Vertex -> welded id (vertices at exactly the same position share one; -0 == +0).
std::vector<uint32_t> weld_positions(const Mesh& mesh);
// Face -> the face across each of its edges (k = edge from corner k to k + 1), -1 at a border or
// a non-manifold edge; edges join faces through welded vertices.
std::vector<std::array<int64_t, 3>> face_neighbours(const Mesh& mesh,
                                                    const std::vector<uint32_t>& welded);

// Twice the signed area of the 2D triangle (a, b, c): positive counter-clockwise.
inline double signed_area2(const double* a, const double* b, const double* c) {
  return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]);
}

// Pairs of 2D triangles whose interiors overlap by more than `eps` along every separating axis
// (touching along an edge or at a vertex is not overlap). `tri` holds 6 doubles per triangle;
// triangles with |area| <= eps^2 are skipped. Grid-bucketed; `limit` > 0 stops counting there.
int64_t count_overlaps(const std::vector<double>& tri, double eps, int64_t limit = 0);

// Sander's L2 stretch of a triangle (3D corners q, UV corners s): sqrt((|Ss|^2 + |St|^2) / 2),
// 0 for a degenerate UV triangle.
double l2_stretch(const Vec3d q[3], const double s[3][2]);

// `area` over the area of the smallest bounding box of the 2D points `uv` (any rotation; the
// packer's box, uv_pack.cpp): how much of its box a chart fills.
double box_fill(const std::vector<double>& uv, double area);

// The smallest bounding box of the 2D points `uv` (2 per point) over its hull's edge directions:
// `along` its extent along (co, si), `across` the extent across.
struct Box {
  double co = 1, si = 0, along = 0, across = 0;
};
Box smallest_box(const std::vector<double>& uv);
// The unit direction of that box's longer side.
std::array<double, 2> box_long_axis(const std::vector<double>& uv);

}  // namespace tessera::mesh::uv_detail

namespace tessera::mesh {
struct FlatChart;
// flatten_chart with the mesh's welded vertex ids computed once by the caller; pieces under
// `cut_area` (3D) are never cut for being hollow (uv_flatten.cpp: kHollowShare of the mesh).
int64_t flatten_chart_welded(const Mesh& mesh, const std::vector<uint32_t>& welded,
                             const std::vector<int64_t>& faces, double cut_area,
                             std::vector<FlatChart>* out);
double hollow_cut_area(const Mesh& mesh);
}  // namespace tessera::mesh
