#include "engine/mesh/stl.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "engine/mesh/cleanup.h"

namespace tessera::mesh {
namespace {

constexpr size_t kHeaderBytes = 80;
constexpr size_t kTriangleBytes = 50;

void put_f32(std::string& out, float v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

float get_f32(const char* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// Corners as read (three vertices per triangle) -> the indexed mesh: corners at exactly the same
// position become one vertex (cleanup.h weld_vertices with tolerance 0; +0 and -0 agree).
struct Corners {
  Mesh mesh;
  uint32_t add(const float p[3]) {
    const auto id = static_cast<uint32_t>(mesh.vertex_count());
    mesh.positions.insert(mesh.positions.end(), p, p + 3);
    return id;
  }
  Mesh welded() {
    weld_vertices(mesh, 0.0f);
    return std::move(mesh);
  }
};

Status check_corner(const float p[3], const std::string& name, const std::string& where) {
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(p[c])) {
      return corrupt_data(name + ": " + where + " has a non-finite coordinate");
    }
  }
  return Status();
}

Expected<Mesh> parse_binary(std::string_view bytes, const std::string& name) {
  uint32_t count = 0;
  std::memcpy(&count, bytes.data() + kHeaderBytes, 4);
  Corners w;
  w.mesh.triangles.reserve(static_cast<size_t>(count) * 3);
  w.mesh.positions.reserve(static_cast<size_t>(count) * 9);
  for (uint32_t t = 0; t < count; ++t) {
    const char* rec = bytes.data() + kHeaderBytes + 4 + static_cast<size_t>(t) * kTriangleBytes;
    uint32_t ids[3];
    for (int c = 0; c < 3; ++c) {
      const float p[3] = {get_f32(rec + 12 + 12 * c), get_f32(rec + 16 + 12 * c),
                          get_f32(rec + 20 + 12 * c)};
      TESSERA_RETURN_IF_ERROR(check_corner(p, name, "triangle " + std::to_string(t)));
      ids[c] = w.add(p);
    }
    w.mesh.triangles.insert(w.mesh.triangles.end(), ids, ids + 3);
  }
  return w.welded();
}

// Next whitespace-separated word of `text` from `pos` (advancing it, counting newlines in `line`).
std::string_view next_word(std::string_view text, size_t& pos, int64_t& line) {
  while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) {
    if (text[pos] == '\n') ++line;
    ++pos;
  }
  const size_t start = pos;
  while (pos < text.size() && !std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  return text.substr(start, pos - start);
}

Expected<Mesh> parse_ascii(std::string_view text, const std::string& name) {
  size_t pos = 0;
  int64_t line = 1;
  auto fail = [&](const std::string& what) {
    return corrupt_data(name + ": line " + std::to_string(line) + ": " + what);
  };
  if (next_word(text, pos, line) != "solid") return fail("not an STL file (no \"solid\")");
  // The solid's name: the rest of the first line.
  while (pos < text.size() && text[pos] != '\n') ++pos;
  Corners w;
  for (;;) {
    const std::string_view word = next_word(text, pos, line);
    if (word.empty()) return fail("the file ends before \"endsolid\"");
    if (word == "endsolid") break;
    if (word != "facet")
      return fail("expected \"facet\" or \"endsolid\", found \"" + std::string(word.substr(0, 32)) +
                  "\"");
    // "normal nx ny nz" (ignored), "outer loop", 3 vertices, "endloop", "endfacet".
    if (next_word(text, pos, line) != "normal") return fail("expected \"normal\" after \"facet\"");
    for (int c = 0; c < 3; ++c) next_word(text, pos, line);
    if (next_word(text, pos, line) != "outer" || next_word(text, pos, line) != "loop") {
      return fail("expected \"outer loop\"");
    }
    uint32_t ids[3];
    for (int v = 0; v < 3; ++v) {
      if (next_word(text, pos, line) != "vertex") return fail("expected \"vertex\"");
      float p[3];
      for (int c = 0; c < 3; ++c) {
        const std::string word_c(next_word(text, pos, line));
        char* end = nullptr;
        p[c] = std::strtof(word_c.c_str(), &end);
        if (word_c.empty() || end != word_c.c_str() + word_c.size()) {
          return fail("bad coordinate \"" + word_c.substr(0, 32) + "\"");
        }
      }
      TESSERA_RETURN_IF_ERROR(check_corner(p, name, "line " + std::to_string(line)));
      ids[v] = w.add(p);
    }
    if (next_word(text, pos, line) != "endloop")
      return fail("expected \"endloop\" (triangles only)");
    if (next_word(text, pos, line) != "endfacet") return fail("expected \"endfacet\"");
    w.mesh.triangles.insert(w.mesh.triangles.end(), ids, ids + 3);
  }
  return w.welded();
}

}  // namespace

Expected<std::string> to_stl(const Mesh& mesh, const ExportOptions& options) {
  TESSERA_RETURN_IF_ERROR(validate(mesh));
  TESSERA_RETURN_IF_ERROR(validate_export_options(options));
  if (mesh.triangle_count() > int64_t{UINT32_MAX}) {
    return invalid_argument("STL: more triangles than a binary STL can count");
  }
  const Mesh m = transform_for_export(mesh, options);
  std::string out(kHeaderBytes, ' ');
  const char header[] = "tessera binary STL";
  std::memcpy(out.data(), header, sizeof header - 1);
  const auto count = static_cast<uint32_t>(m.triangle_count());
  out.append(reinterpret_cast<const char*>(&count), 4);
  out.reserve(kHeaderBytes + 4 + kTriangleBytes * count);
  for (int64_t t = 0; t < m.triangle_count(); ++t) {
    const float* p[3];
    for (int c = 0; c < 3; ++c) p[c] = &m.positions[3 * m.triangles[3 * t + c]];
    const double e1[3] = {double{p[1][0]} - p[0][0], double{p[1][1]} - p[0][1],
                          double{p[1][2]} - p[0][2]};
    const double e2[3] = {double{p[2][0]} - p[0][0], double{p[2][1]} - p[0][1],
                          double{p[2][2]} - p[0][2]};
    double n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                   e1[0] * e2[1] - e1[1] * e2[0]};
    const double len = std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
    for (double& x : n) x = len > 0 ? x / len : 0.0;
    for (double x : n) put_f32(out, static_cast<float>(x));
    for (int c = 0; c < 3; ++c) {
      for (int k = 0; k < 3; ++k) put_f32(out, p[c][k]);
    }
    out.append(2, '\0');
  }
  return out;
}

Status write_stl(const Mesh& mesh, const std::string& path, const ExportOptions& options) {
  Expected<std::string> bytes = to_stl(mesh, options);
  if (!bytes.ok()) return bytes.status().with_context(path);
  return write_file_atomic(path, bytes->data(), bytes->size());
}

Expected<Mesh> parse_stl(std::string_view bytes, const std::string& name) {
  Expected<Mesh> mesh = not_found(name);
  if (bytes.size() >= kHeaderBytes + 4) {
    uint32_t count = 0;
    std::memcpy(&count, bytes.data() + kHeaderBytes, 4);
    if (bytes.size() == kHeaderBytes + 4 + static_cast<size_t>(count) * kTriangleBytes) {
      mesh = parse_binary(bytes, name);
    } else if (bytes.substr(0, 5) != "solid") {
      return corrupt_data(
          name + ": binary STL of " + std::to_string(bytes.size()) + " bytes cannot hold the " +
          std::to_string(count) + " triangles its header counts (" +
          std::to_string(kHeaderBytes + 4 + size_t{count} * kTriangleBytes) + " bytes)");
    }
  }
  if (!mesh.ok() && mesh.status().code() == ErrorCode::kNotFound) {
    if (bytes.substr(0, 5) != "solid") {
      return corrupt_data(name + ": not an STL file (too short for a binary STL, no \"solid\")");
    }
    mesh = parse_ascii(bytes, name);
  }
  if (!mesh.ok()) return mesh;
  if (mesh->triangles.empty()) return not_found(name + ": the STL holds no triangles");
  return mesh;
}

}  // namespace tessera::mesh
