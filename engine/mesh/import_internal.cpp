#include "engine/mesh/import_internal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "core/mapped_file.h"
#include "core/utf8.h"
#include "engine/mesh/texture.h"

namespace tessera::mesh::import_detail {

Mat4 mat_identity() {
  Mat4 m{};
  m[0] = m[5] = m[10] = m[15] = 1;
  return m;
}

Mat4 mat_mul(const Mat4& a, const Mat4& b) {
  Mat4 r{};
  for (int c = 0; c < 4; ++c) {
    for (int row = 0; row < 4; ++row) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += a[k * 4 + row] * b[c * 4 + k];
      r[c * 4 + row] = s;
    }
  }
  return r;
}

bool transform_point(const Mat4& m, double x, double y, double z, float out[3]) {
  for (int r = 0; r < 3; ++r) {
    const double value = m[r] * x + m[4 + r] * y + m[8 + r] * z + m[12 + r];
    if (!std::isfinite(value) || std::fabs(value) > 3.0e38) return false;
    out[r] = static_cast<float>(value);
  }
  return true;
}

void warn(std::vector<std::string>* warnings, std::string message) {
  if (warnings != nullptr) warnings->push_back(std::move(message));
}

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

bool uvs_in_unit_range(std::vector<float>& uvs) {
  constexpr float kSlack = 1e-5f;
  for (float& c : uvs) {
    if (!(c >= -kSlack && c <= 1.0f + kSlack)) return false;  // NaN fails too
    c = std::clamp(c, 0.0f, 1.0f);
  }
  return true;
}

Status assign_corner_uvs(const std::vector<UvCorner>& corners, const std::vector<float>& uv_values,
                         const std::string& name, Mesh* mesh) {
  const size_t file_vertices = mesh->positions.size() / 3;
  mesh->triangles.clear();
  mesh->triangles.reserve(corners.size());
  for (const UvCorner& c : corners) mesh->triangles.push_back(c.vertex);
  const bool any_uv =
      std::any_of(corners.begin(), corners.end(), [](const UvCorner& c) { return c.uv >= 0; });
  if (!any_uv) {
    mesh->uvs.clear();
    return Status();
  }
  // The first uv each vertex is used with stays on it.
  mesh->uvs.assign(2 * file_vertices, 0.0f);
  std::vector<int64_t> first_uv(file_vertices, -1);
  for (const UvCorner& c : corners) {
    if (c.uv < 0 || first_uv[c.vertex] >= 0) continue;
    first_uv[c.vertex] = c.uv;
    mesh->uvs[2 * size_t{c.vertex}] = uv_values[2 * static_cast<size_t>(c.uv)];
    mesh->uvs[2 * size_t{c.vertex} + 1] = uv_values[2 * static_cast<size_t>(c.uv) + 1];
  }
  // Corners whose (vertex, uv) needs a copy. Sorted rather than hashed: 16 bytes per such corner,
  // whatever the file does, and copies numbered in the order their first corner appears.
  struct Split {
    uint32_t vertex;
    uint32_t group;  // after grouping: the copy's index among the copies
    int64_t uv;
    size_t corner;
  };
  std::vector<Split> splits;
  for (size_t i = 0; i < corners.size(); ++i) {
    const UvCorner& c = corners[i];
    if (c.uv < 0 || c.uv == first_uv[c.vertex]) continue;
    const size_t v = c.vertex, u = static_cast<size_t>(c.uv);
    if (mesh->uvs[2 * v] == uv_values[2 * u] && mesh->uvs[2 * v + 1] == uv_values[2 * u + 1])
      continue;
    splits.push_back({c.vertex, 0, c.uv, i});
  }
  if (splits.empty()) return Status();
  std::sort(splits.begin(), splits.end(), [](const Split& a, const Split& b) {
    return a.vertex != b.vertex ? a.vertex < b.vertex
           : a.uv != b.uv       ? a.uv < b.uv
                                : a.corner < b.corner;
  });
  // Groups of equal (vertex, uv): the first corner of each decides the copies' order.
  std::vector<std::pair<size_t, size_t>> groups;  // (first corner, first index in splits)
  for (size_t i = 0; i < splits.size(); ++i) {
    if (i == 0 || splits[i].vertex != splits[i - 1].vertex || splits[i].uv != splits[i - 1].uv) {
      groups.emplace_back(splits[i].corner, i);
    }
  }
  if (file_vertices + groups.size() > 0xFFFFFFFFull) {
    return corrupt_data(name + ": more than 2^32 vertices after splitting UV seams");
  }
  std::sort(groups.begin(), groups.end());
  mesh->positions.reserve(mesh->positions.size() + 3 * groups.size());
  mesh->uvs.reserve(mesh->uvs.size() + 2 * groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t first = groups[g].second;
    const size_t v = splits[first].vertex, u = static_cast<size_t>(splits[first].uv);
    const auto copy = static_cast<uint32_t>(file_vertices + g);
    for (size_t k = 0; k < 3; ++k) mesh->positions.push_back(mesh->positions[3 * v + k]);
    mesh->uvs.push_back(uv_values[2 * u]);
    mesh->uvs.push_back(uv_values[2 * u + 1]);
    for (size_t i = first; i < splits.size() && splits[i].vertex == splits[first].vertex &&
                           splits[i].uv == splits[first].uv;
         ++i) {
      mesh->triangles[splits[i].corner] = copy;
    }
  }
  return Status();
}

namespace {
uint32_t be32(std::string_view b, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(b[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(b[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3]));
}
}  // namespace

Expected<TextureImage> decode_import_png(std::string_view bytes, const std::string& what) {
  static constexpr char kSignature[8] = {'\x89', 'P', 'N', 'G', '\r', '\n', '\x1a', '\n'};
  if (bytes.size() < 33 || bytes.substr(0, 8) != std::string_view(kSignature, 8) ||
      bytes.substr(12, 4) != "IHDR") {
    return invalid_argument(what + ": not a PNG image (only PNG textures are read)");
  }
  const uint64_t width = be32(bytes, 16), height = be32(bytes, 20);
  const unsigned depth = static_cast<unsigned char>(bytes[24]);
  const unsigned colour = static_cast<unsigned char>(bytes[25]);
  const unsigned channels = colour == 0   ? 1
                            : colour == 2 ? 3
                            : colour == 3 ? 1
                            : colour == 4 ? 2
                                          : 4;
  if (width == 0 || height == 0 ||
      width * height > static_cast<uint64_t>(kMaxImportTexturePixels)) {
    return invalid_argument(what + ": a " + std::to_string(width) + "x" + std::to_string(height) +
                            " image is outside what is read (1 to 8192 x 8192 pixels)");
  }
  // Each scanline is a filter byte plus its packed samples; zlib inflates at most 1032:1.
  const uint64_t raw = ((width * channels * std::max(depth, 1u) + 7) / 8 + 1) * height;
  if (raw > 1032 * static_cast<uint64_t>(bytes.size()) + 1024) {
    return invalid_argument(what + ": a " + std::to_string(width) + "x" + std::to_string(height) +
                            " image cannot be encoded in " + std::to_string(bytes.size()) +
                            " bytes (a lying header)");
  }
  return decode_texture_png(std::string(bytes), what);
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

Expected<std::string> read_sidecar(const std::string& directory, const std::string& reference,
                                   bool uri, std::string* path) {
  namespace fs = std::filesystem;
  std::string rel;
  rel.reserve(reference.size());
  for (size_t i = 0; i < reference.size(); ++i) {
    const char c = reference[i];
    if (uri && c == '%' && i + 2 < reference.size() && hex_value(reference[i + 1]) >= 0 &&
        hex_value(reference[i + 2]) >= 0) {
      rel.push_back(
          static_cast<char>(hex_value(reference[i + 1]) * 16 + hex_value(reference[i + 2])));
      i += 2;
    } else {
      rel.push_back(c == '\\' ? '/' : c);
    }
  }
  if (rel.empty() || rel.find('\0') != std::string::npos) {
    return invalid_argument("an empty or malformed file reference");
  }
  const size_t colon = rel.find(':');
  const size_t slash = rel.find('/');
  // "C:/x.png" (a Windows drive) is an absolute path, not a scheme; "http://..." is a scheme.
  if (colon != std::string::npos && colon > 1 && (slash == std::string::npos || colon < slash)) {
    return invalid_argument("'" + reference + "' is a URI (only relative files are read)");
  }
  const fs::path dir(directory);
  const fs::path relative(rel);
  const bool absolute = relative.is_absolute() || (rel.size() > 1 && rel[1] == ':');
  std::string tried;
  std::error_code ec;
  if (!absolute) {
    tried = (dir / relative).string();
    if (fs::is_regular_file(tried, ec)) {
      if (path) *path = tried;
      return read_file(tried);
    }
  }
  const fs::path bare = relative.filename();
  if (!bare.empty() && bare != relative) {
    tried = (dir / bare).string();
    if (fs::is_regular_file(tried, ec)) {
      if (path) *path = tried;
      return read_file(tried);
    }
  }
  if (tried.empty()) tried = (dir / bare).string();
  if (path) *path = tried;
  return not_found("'" + tried + "' does not exist");
}

std::optional<std::string> utf16_to_utf8(std::string_view bytes) {
  if (bytes.size() < 2 || bytes.size() % 2 != 0) return std::nullopt;
  const auto b0 = static_cast<uint8_t>(bytes[0]), b1 = static_cast<uint8_t>(bytes[1]);
  const bool little = b0 == 0xFF && b1 == 0xFE;
  if (!little && !(b0 == 0xFE && b1 == 0xFF)) return std::nullopt;
  std::string out;
  out.reserve(bytes.size() / 2);
  auto unit = [&](size_t i) -> uint32_t {
    const auto lo = static_cast<uint8_t>(bytes[i + (little ? 0 : 1)]);
    const auto hi = static_cast<uint8_t>(bytes[i + (little ? 1 : 0)]);
    return static_cast<uint32_t>(hi) << 8 | lo;
  };
  for (size_t i = 2; i < bytes.size(); i += 2) {
    uint32_t c = unit(i);
    if (c >= 0xD800 && c <= 0xDBFF) {
      if (i + 2 >= bytes.size()) return std::nullopt;
      const uint32_t low = unit(i + 2);
      if (low < 0xDC00 || low > 0xDFFF) return std::nullopt;
      c = 0x10000 + ((c - 0xD800) << 10) + (low - 0xDC00);
      i += 2;
    } else if (c >= 0xDC00 && c <= 0xDFFF) {
      return std::nullopt;
    }
    if (c == 0) return std::nullopt;  // binary data, not text
    append_utf8(out, static_cast<char32_t>(c));
  }
  return out;
}

}  // namespace tessera::mesh::import_detail
