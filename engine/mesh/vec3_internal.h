// Double-precision 3-vectors for the geometric checks of engine/mesh (check.cpp's
// self-intersections, distance.cpp's point-triangle distances).
#pragma once

#include <array>

namespace tessera::mesh::vec3 {

using Vec = std::array<double, 3>;

inline Vec sub(const Vec& a, const Vec& b) {
  return {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
}
inline Vec cross(const Vec& a, const Vec& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
inline double dot(const Vec& a, const Vec& b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}
inline double dist2(const Vec& a, const Vec& b) {
  const Vec d = sub(a, b);
  return dot(d, d);
}

}  // namespace tessera::mesh::vec3
