// Analytic meshes for the mesh, atlas and painting tests: a latitude-longitude ellipsoid and a
// torus, consistently wound (counter-clockwise seen from outside).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "engine/mesh/mesh.h"

namespace tessera::test {

// An ellipsoid of `stacks` x `slices` quads (the poles as fans), radii (rx, ry, rz) around
// `centre`, Y up.
inline mesh::Mesh ellipsoid(int stacks, int slices, std::array<double, 3> radii = {1, 1, 1},
                            std::array<double, 3> centre = {0, 0, 0}) {
  mesh::Mesh m;
  for (int i = 0; i <= stacks; ++i) {
    const double t = M_PI * i / stacks;
    for (int j = 0; j < slices; ++j) {
      const double p = 2 * M_PI * j / slices;
      m.positions.push_back(static_cast<float>(centre[0] + radii[0] * std::sin(t) * std::cos(p)));
      m.positions.push_back(static_cast<float>(centre[1] + radii[1] * std::cos(t)));
      m.positions.push_back(static_cast<float>(centre[2] + radii[2] * std::sin(t) * std::sin(p)));
    }
  }
  for (int i = 0; i < stacks; ++i) {
    for (int j = 0; j < slices; ++j) {
      const uint32_t a = static_cast<uint32_t>(i * slices + j);
      const uint32_t b = static_cast<uint32_t>(i * slices + (j + 1) % slices);
      const uint32_t c = static_cast<uint32_t>((i + 1) * slices + (j + 1) % slices);
      const uint32_t d = static_cast<uint32_t>((i + 1) * slices + j);
      if (i > 0) m.triangles.insert(m.triangles.end(), {a, b, d});
      if (i + 1 < stacks) m.triangles.insert(m.triangles.end(), {b, c, d});
    }
  }
  return m;
}

// A torus around the Y axis: `rings` segments around, `sides` around the tube.
inline mesh::Mesh torus(int rings, int sides, float big = 1.0f, float small = 0.35f) {
  mesh::Mesh m;
  for (int i = 0; i < rings; ++i) {
    for (int j = 0; j < sides; ++j) {
      const double a = 2 * M_PI * i / rings, b = 2 * M_PI * j / sides;
      const double r = big + small * std::cos(b);
      m.positions.push_back(static_cast<float>(r * std::cos(a)));
      m.positions.push_back(static_cast<float>(small * std::sin(b)));
      m.positions.push_back(static_cast<float>(r * std::sin(a)));
    }
  }
  for (int i = 0; i < rings; ++i) {
    for (int j = 0; j < sides; ++j) {
      const uint32_t a = static_cast<uint32_t>(i * sides + j);
      const uint32_t b = static_cast<uint32_t>(((i + 1) % rings) * sides + j);
      const uint32_t c = static_cast<uint32_t>(((i + 1) % rings) * sides + (j + 1) % sides);
      const uint32_t d = static_cast<uint32_t>(i * sides + (j + 1) % sides);
      m.triangles.insert(m.triangles.end(), {a, c, b, a, d, c});
    }
  }
  return m;
}

}  // namespace tessera::test
