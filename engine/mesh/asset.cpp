#include "engine/mesh/asset.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "engine/mesh/cleanup.h"
#include "engine/mesh/texture.h"

namespace tessera::mesh {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

uint64_t edge_key(uint32_t a, uint32_t b) {
  return (uint64_t{a} << 32) | b;
}

// Representative of each vertex: the first vertex at exactly its position (+0 and -0 agree).
std::vector<uint32_t> position_representatives(const Mesh& mesh) {
  struct Key {
    uint32_t x, y, z;
    bool operator==(const Key& o) const { return x == o.x && y == o.y && z == o.z; }
  };
  struct Hash {
    size_t operator()(const Key& k) const {
      return (size_t{k.x} * 0x9E3779B97F4A7C15ull) ^ (size_t{k.y} * 0xC2B2AE3D27D4EB4Full) ^
             (size_t{k.z} * 0x165667B19E3779F9ull);
    }
  };
  auto bits = [](float f) {
    if (f == 0.0f) f = 0.0f;  // -0 -> +0
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  const size_t n = static_cast<size_t>(mesh.vertex_count());
  std::vector<uint32_t> rep(n);
  std::unordered_map<Key, uint32_t, Hash> first;
  first.reserve(n);
  for (size_t v = 0; v < n; ++v) {
    const Key k{bits(mesh.positions[3 * v]), bits(mesh.positions[3 * v + 1]),
                bits(mesh.positions[3 * v + 2])};
    rep[v] = first.emplace(k, static_cast<uint32_t>(v)).first->second;
  }
  return rep;
}

}  // namespace

const std::vector<AssetPreset>& asset_presets() {
  static const std::vector<AssetPreset> kPresets = {
      {"roblox",
       "Roblox Studio's 3D importer",
       UpAxis::kY,
       false,
       LengthUnit::kStud,
       20000,
       true,
       {".fbx", ".obj"},
       1024},
      {"unity", "Unity", UpAxis::kY, false, LengthUnit::kMetre, 0, false, {".fbx", ".glb"}, 2048},
      {"unreal",
       "Unreal Engine",
       UpAxis::kZ,
       true,
       LengthUnit::kCentimetre,
       0,
       false,
       {".fbx"},
       4096},
      {"blender", "Blender", UpAxis::kZ, false, LengthUnit::kMetre, 0, false, {".fbx", ".glb"}, 0},
      {"godot", "Godot", UpAxis::kY, false, LengthUnit::kMetre, 0, false, {".glb"}, 4096},
      {"print",
       "3D printing (slicers)",
       UpAxis::kZ,
       false,
       LengthUnit::kMillimetre,
       0,
       true,
       {".stl", ".3mf"},
       0},
  };
  return kPresets;
}

const AssetPreset* find_preset(std::string_view name) {
  const std::string n = lower(name);
  for (const AssetPreset& p : asset_presets()) {
    if (p.name == n) return &p;
  }
  return nullptr;
}

std::string preset_names() {
  std::string out;
  for (const AssetPreset& p : asset_presets()) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

std::string describe_preset(const AssetPreset& p) {
  std::string s = p.up_axis == UpAxis::kZ ? "Z-up" : "Y-up";
  if (p.front_x) s += ", front +X";
  s += std::string(", ") + unit_name(p.unit);
  if (p.max_triangles > 0) s += ", at most " + std::to_string(p.max_triangles) + " triangles";
  if (p.closed) s += ", closed and manifold";
  if (p.max_texture_size > 0) s += ", textures up to " + std::to_string(p.max_texture_size);
  s += ", ";
  for (size_t i = 0; i < p.formats.size(); ++i) {
    if (i > 0) s += i + 1 == p.formats.size() ? " or " : ", ";
    s += p.formats[i];
  }
  return s;
}

ExportOptions preset_export_options(const AssetPreset& preset, const std::string& ext) {
  ExportOptions o;
  if (lower(ext) == ".glb") return o;  // glTF: Y-up metres by definition
  o.up_axis = preset.up_axis;
  o.front_x = preset.front_x;
  o.unit = preset.unit;
  return o;
}

HoleReport close_holes(Mesh& mesh, int64_t max_hole_edges) {
  HoleReport report;
  const std::vector<uint32_t> rep = position_representatives(mesh);
  // Undirected edge use counts and the directed edges, over representatives.
  std::unordered_map<uint64_t, int> uses;
  uses.reserve(mesh.triangles.size());
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t a = rep[mesh.triangles[t + k]], b = rep[mesh.triangles[t + (k + 1) % 3]];
      if (a == b) continue;
      ++uses[edge_key(std::min(a, b), std::max(a, b))];
    }
  }
  // Hole edges: a boundary edge a->b of a triangle is walked b->a by the hole's filling.
  struct HoleEdge {
    uint32_t from, to;                // representatives
    uint32_t from_vertex, to_vertex;  // the triangle's own vertices
    bool used = false;
  };
  std::vector<HoleEdge> edges;
  std::unordered_multimap<uint32_t, size_t> outgoing;
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t va = mesh.triangles[t + k], vb = mesh.triangles[t + (k + 1) % 3];
      const uint32_t a = rep[va], b = rep[vb];
      if (a == b || uses[edge_key(std::min(a, b), std::max(a, b))] != 1) continue;
      outgoing.emplace(b, edges.size());
      edges.push_back({b, a, vb, va});
    }
  }
  const bool has_uvs = !mesh.uvs.empty();
  for (size_t start = 0; start < edges.size(); ++start) {
    if (edges[start].used) continue;
    // Walk hole edges from `start` until back at its first vertex.
    std::vector<size_t> loop{start};
    edges[start].used = true;
    uint32_t at = edges[start].to;
    bool ok = true;
    while (at != edges[start].from) {
      size_t next = edges.size();
      auto range = outgoing.equal_range(at);
      for (auto it = range.first; it != range.second; ++it) {
        if (!edges[it->second].used) {
          next = it->second;
          break;
        }
      }
      if (next == edges.size()) {
        ok = false;  // a chain that does not close (cannot happen on consistent orientation)
        break;
      }
      edges[next].used = true;
      loop.push_back(next);
      at = edges[next].to;
    }
    ++report.holes_found;
    if (!ok || loop.size() < 3 || static_cast<int64_t>(loop.size()) > max_hole_edges) continue;
    if (loop.size() == 3) {
      mesh.triangles.insert(
          mesh.triangles.end(),
          {edges[loop[0]].from_vertex, edges[loop[0]].to_vertex, edges[loop[1]].to_vertex});
      report.triangles_added += 1;
    } else {
      double c[3] = {0, 0, 0};
      for (size_t e : loop) {
        for (int d = 0; d < 3; ++d) c[d] += mesh.positions[3 * edges[e].from_vertex + d];
      }
      const auto centre = static_cast<uint32_t>(mesh.vertex_count());
      for (int d = 0; d < 3; ++d) {
        mesh.positions.push_back(static_cast<float>(c[d] / static_cast<double>(loop.size())));
      }
      if (!mesh.normals.empty()) mesh.normals.insert(mesh.normals.end(), {0.0f, 0.0f, 1.0f});
      if (has_uvs) {
        const uint32_t v0 = edges[loop[0]].from_vertex;
        mesh.uvs.push_back(mesh.uvs[2 * v0]);
        mesh.uvs.push_back(mesh.uvs[2 * v0 + 1]);
      }
      for (size_t e : loop) {
        mesh.triangles.insert(mesh.triangles.end(),
                              {edges[e].from_vertex, edges[e].to_vertex, centre});
      }
      report.triangles_added += static_cast<int64_t>(loop.size());
    }
    ++report.holes_closed;
  }
  if (report.triangles_added > 0 && !mesh.normals.empty()) compute_vertex_normals(mesh);
  const Topology welded = compute_welded_topology(mesh);
  report.boundary_edges_left = welded.boundary_edges;
  report.non_manifold_edges = welded.non_manifold_edges;
  return report;
}

Status validate_asset_options(const AssetOptions& o, int64_t triangles) {
  if (o.lods < 0 || o.lods > kMaxLods) {
    return invalid_argument("--lods " + std::to_string(o.lods) + " outside [0, " +
                            std::to_string(kMaxLods) + "]");
  }
  if (o.max_texture_size != 0 && o.max_texture_size < kMinTextureLimit) {
    return invalid_argument("texture limit " + std::to_string(o.max_texture_size) +
                            " must be 0 (none) or at least " + std::to_string(kMinTextureLimit));
  }
  if (o.max_triangles < 0) {
    return invalid_argument("triangle budget " + std::to_string(o.max_triangles) + " must be >= 0");
  }
  if (o.max_hole_edges < 3) {
    return invalid_argument("largest hole to close must be at least 3 edges");
  }
  const int64_t floor = o.closed ? kMinClosedTriangles : 1;
  if (o.max_triangles > 0 && o.max_triangles < floor) {
    return invalid_argument("triangle budget " + std::to_string(o.max_triangles) +
                            " is below the " + std::to_string(floor) +
                            " triangles a closed mesh needs");
  }
  const int64_t base = o.max_triangles > 0 ? o.max_triangles : triangles;
  if (o.lods > 0 && base > 0 && (base >> o.lods) < floor) {
    return invalid_argument("--lods " + std::to_string(o.lods) + ": LOD" + std::to_string(o.lods) +
                            " would get " + std::to_string(base >> o.lods) +
                            " triangles of a budget of " + std::to_string(base) + ", below the " +
                            std::to_string(floor) +
                            (o.closed ? " a closed mesh needs" : " a mesh needs") +
                            " (fewer levels, or a larger budget)");
  }
  return Status();
}

namespace {

// One level within `budget` (0: as is), closed when asked.
Status finish_level(Mesh& m, int64_t budget, const AssetOptions& o, HoleReport* holes) {
  if (o.closed) *holes = close_holes(m, o.max_hole_edges);
  if (budget > 0 && m.triangle_count() > budget) {
    TESSERA_RETURN_IF_ERROR(reduce_triangles(m, budget));
    // Decimation keeps borders, but may pinch; close what it opened (a few triangles over the
    // budget at most, then brought back within it).
    if (o.closed) {
      *holes = close_holes(m, o.max_hole_edges);
      if (m.triangle_count() > budget) TESSERA_RETURN_IF_ERROR(reduce_triangles(m, budget));
    }
  }
  if (o.closed) {
    const Topology t = compute_welded_topology(m);
    holes->boundary_edges_left = t.boundary_edges;
    holes->non_manifold_edges = t.non_manifold_edges;
  }
  return Status();
}

}  // namespace

void limit_texture_size(Mesh* mesh, int64_t max_side, AssetReport* report) {
  TextureImage& t = mesh->texture;
  if (t.empty()) return;
  const int64_t side = std::max(t.width, t.height);
  if (max_side > 0 && side > max_side) {
    const double f = static_cast<double>(max_side) / static_cast<double>(side);
    const int64_t w = std::max<int64_t>(1, std::llround(static_cast<double>(t.width) * f));
    const int64_t h = std::max<int64_t>(1, std::llround(static_cast<double>(t.height) * f));
    if (report != nullptr) {
      report->texture_width_before = t.width;
      report->texture_height_before = t.height;
    }
    t = resize_texture(t, w, h);
  }
  if (report != nullptr) {
    report->texture_width = t.width;
    report->texture_height = t.height;
  }
}

Expected<std::vector<Mesh>> prepare_asset(const Mesh& mesh, const AssetOptions& o,
                                          AssetReport* report) {
  TESSERA_RETURN_IF_ERROR(validate(mesh));
  TESSERA_RETURN_IF_ERROR(validate_asset_options(o, mesh.triangle_count()));
  AssetReport local;
  AssetReport& r = report != nullptr ? *report : local;
  r = AssetReport();
  std::vector<Mesh> levels;
  levels.push_back(mesh);
  TESSERA_RETURN_IF_ERROR(finish_level(levels[0], o.max_triangles, o, &r.holes));
  limit_texture_size(&levels[0], o.max_texture_size, &r);
  r.lod_triangles.push_back(levels[0].triangle_count());
  r.lod_vertices.push_back(levels[0].vertex_count());
  if (o.closed) r.closed = r.holes.closed();
  const int64_t base = levels[0].triangle_count();
  for (int i = 1; i <= o.lods; ++i) {
    Mesh m = levels[0];
    HoleReport holes;
    TESSERA_RETURN_IF_ERROR(finish_level(m, std::max<int64_t>(base >> i, 1), o, &holes));
    if (o.closed && !holes.closed()) r.closed = false;
    r.lod_triangles.push_back(m.triangle_count());
    r.lod_vertices.push_back(m.vertex_count());
    levels.push_back(std::move(m));
  }
  return levels;
}

}  // namespace tessera::mesh
