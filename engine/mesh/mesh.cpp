#include "engine/mesh/mesh.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/mesh/cleanup.h"

namespace tessera::mesh {

double Bounds::diagonal() const {
  double s = 0;
  for (int d = 0; d < 3; ++d) {
    const double e = static_cast<double>(max[d]) - min[d];
    s += e * e;
  }
  return std::sqrt(s);
}

Status validate(const Mesh& mesh) {
  if (mesh.positions.size() % 3 != 0) {
    return invalid_argument("mesh: positions size " + std::to_string(mesh.positions.size()) +
                            " is not a multiple of 3");
  }
  if (!mesh.normals.empty() && mesh.normals.size() != mesh.positions.size()) {
    return invalid_argument("mesh: normals size " + std::to_string(mesh.normals.size()) +
                            " != positions size " + std::to_string(mesh.positions.size()));
  }
  if (mesh.triangles.size() % 3 != 0) {
    return invalid_argument("mesh: triangles size " + std::to_string(mesh.triangles.size()) +
                            " is not a multiple of 3");
  }
  const auto n = static_cast<uint64_t>(mesh.vertex_count());
  for (size_t i = 0; i < mesh.triangles.size(); ++i) {
    if (mesh.triangles[i] >= n) {
      return invalid_argument("mesh: triangle " + std::to_string(i / 3) + " references vertex " +
                              std::to_string(mesh.triangles[i]) + " of " + std::to_string(n));
    }
  }
  for (size_t i = 0; i < mesh.positions.size(); ++i) {
    if (!std::isfinite(mesh.positions[i])) {
      return invalid_argument("mesh: vertex " + std::to_string(i / 3) +
                              " has a non-finite position");
    }
  }
  if (!mesh.uvs.empty() && mesh.uvs.size() != 2 * n) {
    return invalid_argument("mesh: uvs size " + std::to_string(mesh.uvs.size()) + " != 2 * " +
                            std::to_string(n) + " vertices");
  }
  for (size_t i = 0; i < mesh.uvs.size(); ++i) {
    // The small tolerance admits the rounding of uvs computed as (x - min) / extent.
    if (!std::isfinite(mesh.uvs[i]) || mesh.uvs[i] < -1e-6f || mesh.uvs[i] > 1.0f + 1e-6f) {
      return invalid_argument("mesh: vertex " + std::to_string(i / 2) + " has uv " +
                              (i % 2 == 0 ? "u" : "v") + " = " + std::to_string(mesh.uvs[i]) +
                              ", not a finite value in [0, 1]");
    }
  }
  const TextureImage& t = mesh.texture;
  if (!t.empty()) {
    if (t.width <= 0 || t.height <= 0) {
      return invalid_argument("mesh: texture size " + std::to_string(t.width) + "x" +
                              std::to_string(t.height) + " is not positive");
    }
    if (t.width > (int64_t{1} << 20) || t.height > (int64_t{1} << 20) ||
        t.rgb.size() != static_cast<uint64_t>(t.width) * static_cast<uint64_t>(t.height) * 3) {
      return invalid_argument("mesh: texture holds " + std::to_string(t.rgb.size()) +
                              " bytes, not 3 * " + std::to_string(t.width) + " * " +
                              std::to_string(t.height));
    }
    if (mesh.uvs.empty() && n > 0) {
      return invalid_argument("mesh: has a texture but no uvs");
    }
  } else if (!t.rgb.empty() || t.height != 0) {
    return invalid_argument("mesh: texture width is 0 but its height or pixels are set");
  }
  return Status();
}

Bounds compute_bounds(const Mesh& mesh) {
  Bounds b;
  if (mesh.positions.empty()) return b;
  for (int d = 0; d < 3; ++d) b.min[d] = b.max[d] = mesh.positions[d];
  for (size_t i = 0; i < mesh.positions.size(); i += 3) {
    for (int d = 0; d < 3; ++d) {
      b.min[d] = std::min(b.min[d], mesh.positions[i + d]);
      b.max[d] = std::max(b.max[d], mesh.positions[i + d]);
    }
  }
  return b;
}

namespace {
struct Vec3d {
  double x, y, z;
};
Vec3d vertex(const Mesh& m, uint32_t i) {
  return {m.positions[3 * i], m.positions[3 * i + 1], m.positions[3 * i + 2]};
}
Vec3d sub(Vec3d a, Vec3d b) {
  return {a.x - b.x, a.y - b.y, a.z - b.z};
}
Vec3d cross(Vec3d a, Vec3d b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
}  // namespace

double surface_area(const Mesh& mesh) {
  double area = 0;
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    const Vec3d a = vertex(mesh, mesh.triangles[t]);
    const Vec3d n = cross(sub(vertex(mesh, mesh.triangles[t + 1]), a),
                          sub(vertex(mesh, mesh.triangles[t + 2]), a));
    area += 0.5 * std::sqrt(n.x * n.x + n.y * n.y + n.z * n.z);
  }
  return area;
}

double signed_volume(const Mesh& mesh) {
  // Sum of signed tetrahedra (origin, a, b, c): the divergence theorem for a closed surface.
  double v = 0;
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    const Vec3d a = vertex(mesh, mesh.triangles[t]);
    const Vec3d b = vertex(mesh, mesh.triangles[t + 1]);
    const Vec3d c = vertex(mesh, mesh.triangles[t + 2]);
    const Vec3d bc = cross(b, c);
    v += (a.x * bc.x + a.y * bc.y + a.z * bc.z) / 6.0;
  }
  return v;
}

Topology compute_topology(const Mesh& mesh) {
  Topology topo;
  // Per unordered edge: triangles using it, and the sum of their directions (+1 when a triangle
  // walks it from the smaller index to the larger): a consistently oriented two-triangle edge sums
  // to 0.
  struct EdgeUse {
    int count = 0;
    int direction = 0;
  };
  std::unordered_map<uint64_t, EdgeUse> edge_use;
  edge_use.reserve(mesh.triangles.size() * 2);
  const size_t nv = static_cast<size_t>(mesh.vertex_count());
  std::vector<char> used(nv, 0);
  std::vector<uint32_t> parent(nv);
  for (size_t v = 0; v < nv; ++v) parent[v] = static_cast<uint32_t>(v);
  auto root = [&](uint32_t x) {
    while (parent[x] != x) {
      parent[x] = parent[parent[x]];
      x = parent[x];
    }
    return x;
  };
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    for (int e = 0; e < 3; ++e) {
      const uint32_t a = mesh.triangles[t + e];
      const uint32_t b = mesh.triangles[t + (e + 1) % 3];
      used[a] = 1;
      const uint64_t key = (static_cast<uint64_t>(std::min(a, b)) << 32) | std::max(a, b);
      EdgeUse& use = edge_use[key];
      ++use.count;
      use.direction += a < b ? 1 : -1;
      const uint32_t ra = root(a), rb = root(b);
      if (ra != rb) parent[rb] = ra;
    }
  }
  for (size_t v = 0; v < nv; ++v) {
    if (used[v] == 0) continue;
    ++topo.vertices_used;
    if (root(static_cast<uint32_t>(v)) == v) ++topo.components;
  }
  topo.edges = static_cast<int64_t>(edge_use.size());
  for (const auto& [key, use] : edge_use) {
    if (use.count == 1) ++topo.boundary_edges;
    if (use.count > 2) ++topo.non_manifold_edges;
    if (use.count == 2 && use.direction != 0) ++topo.misoriented_edges;
  }
  topo.euler_characteristic = topo.vertices_used - topo.edges + mesh.triangle_count();
  return topo;
}

Topology compute_welded_topology(const Mesh& mesh) {
  Mesh welded;
  welded.positions = mesh.positions;
  welded.triangles = mesh.triangles;
  weld_vertices(welded, 0.0f);  // exact positions (+0 and -0 agree); uvs and normals left out
  return compute_topology(welded);
}

}  // namespace tessera::mesh
