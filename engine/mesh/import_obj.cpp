// Wavefront OBJ reader (import.h has the contract): v / vt / f, with the MTL's map_Kd texture.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "engine/mesh/import.h"
#include "engine/mesh/import_internal.h"

namespace tessera::mesh {
namespace {

using import_detail::warn;

bool parse_float(const char*& p, float* out) {
  while (*p == ' ' || *p == '\t') ++p;
  char* end = nullptr;
  const float v = std::strtof(p, &end);
  if (end == p) return false;
  p = end;
  *out = v;
  return true;
}

std::string trimmed(const char* p) {
  while (*p == ' ' || *p == '\t') ++p;
  std::string s(p);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

// What an OBJ says about its material: the mtllib file names (relative to the OBJ) and the first
// usemtl name (empty without one).
struct ObjMaterialRefs {
  std::vector<std::string> mtllibs;
  std::string material;
};

Expected<Mesh> parse_obj_geometry(std::string_view text, const std::string& name,
                                  std::vector<std::string>* warnings, ObjMaterialRefs* refs) {
  if (text.find('\0') != std::string_view::npos) {
    return corrupt_data(name + ": binary data, not a text OBJ file");
  }
  std::vector<float> positions;  // the file's `v`s
  std::vector<float> texcoords;  // the file's `vt`s (u, v)
  // Face corners, fan-triangulated: 3 per triangle.
  std::vector<import_detail::UvCorner> corners;
  std::vector<import_detail::UvCorner> face;
  bool points_or_lines = false;  // `p` or `l` statements seen
  size_t line_start = 0;
  int64_t line_number = 0;
  std::string line;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    line.assign(text.substr(line_start, line_end - line_start));
    line_start = line_end + 1;
    ++line_number;
    const char* p = line.c_str();
    while (*p == ' ' || *p == '\t') ++p;
    const auto where = [&] { return name + ":" + std::to_string(line_number) + ": "; };
    if (p[0] == 'v' && (p[1] == ' ' || p[1] == '\t')) {
      ++p;
      float xyz[3];
      for (float& c : xyz) {
        if (!parse_float(p, &c)) return corrupt_data(where() + "vertex needs three numbers");
        if (!std::isfinite(c)) return corrupt_data(where() + "vertex coordinate is not finite");
      }
      positions.insert(positions.end(), xyz, xyz + 3);
    } else if (p[0] == 'v' && p[1] == 't' && (p[2] == ' ' || p[2] == '\t')) {
      p += 2;
      float uv[2];  // an optional third (w) coordinate is ignored
      for (float& c : uv) {
        if (!parse_float(p, &c)) return corrupt_data(where() + "vt needs two numbers");
        if (!std::isfinite(c)) return corrupt_data(where() + "vt coordinate is not finite");
      }
      texcoords.insert(texcoords.end(), uv, uv + 2);
    } else if (p[0] == 'f' && (p[1] == ' ' || p[1] == '\t')) {
      ++p;
      face.clear();
      while (true) {
        while (*p == ' ' || *p == '\t' || *p == '\r') ++p;
        if (*p == '\0' || *p == '#') break;
        char* end = nullptr;
        const long long index = std::strtoll(p, &end, 10);
        if (end == p) return corrupt_data(where() + "face index is not a number");
        p = end;
        const int64_t count = static_cast<int64_t>(positions.size() / 3);
        // 1-based; negative counts back from the latest vertex.
        const int64_t resolved = index > 0 ? index - 1 : count + index;
        if (index == 0 || resolved < 0 || resolved >= count || resolved > 0xFFFFFFFEll) {
          return corrupt_data(where() + "face index " + std::to_string(index) +
                              " does not name one of the " + std::to_string(count) +
                              " vertices defined so far");
        }
        int64_t vt = -1;
        if (*p == '/' && p[1] != '/' && p[1] != ' ' && p[1] != '\t' && p[1] != '\r' &&
            p[1] != '\0') {
          ++p;
          const long long t = std::strtoll(p, &end, 10);
          if (end == p) return corrupt_data(where() + "face texture index is not a number");
          p = end;
          const int64_t vt_count = static_cast<int64_t>(texcoords.size() / 2);
          vt = t > 0 ? t - 1 : vt_count + t;
          if (t == 0 || vt < 0 || vt >= vt_count) {
            return corrupt_data(where() + "face texture index " + std::to_string(t) +
                                " does not name one of the " + std::to_string(vt_count) +
                                " vt lines defined so far");
          }
        }
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\r') ++p;  // skip /vn
        face.push_back({static_cast<uint32_t>(resolved), vt});
      }
      if (face.size() < 3) return corrupt_data(where() + "face with fewer than 3 vertices");
      for (size_t k = 1; k + 1 < face.size(); ++k) {
        corners.push_back(face[0]);
        corners.push_back(face[k]);
        corners.push_back(face[k + 1]);
      }
    } else if (refs != nullptr && std::strncmp(p, "mtllib", 6) == 0 &&
               (p[6] == ' ' || p[6] == '\t')) {
      // Usually one file; names with spaces are rare enough that one name per line is read.
      const std::string file = trimmed(p + 6);
      if (!file.empty()) refs->mtllibs.push_back(file);
    } else if (refs != nullptr && std::strncmp(p, "usemtl", 6) == 0 &&
               (p[6] == ' ' || p[6] == '\t') && refs->material.empty()) {
      refs->material = trimmed(p + 6);
    } else if ((p[0] == 'l' || p[0] == 'p') && (p[1] == ' ' || p[1] == '\t')) {
      points_or_lines = true;
    }
    // Everything else (vn, o, g, s, comments) does not change what is shown.
  }
  if (corners.empty()) {
    return Status(ErrorCode::kNotFound,
                  name + ": no faces in the OBJ file" +
                      (points_or_lines ? " (only points or lines, which have no surface)" : ""));
  }
  Mesh out;
  out.positions = std::move(positions);
  TESSERA_RETURN_IF_ERROR(import_detail::assign_corner_uvs(corners, texcoords, name, &out));
  if (!out.uvs.empty() && !import_detail::uvs_in_unit_range(out.uvs)) {
    warn(warnings, name +
                       ": texture coordinates outside [0, 1] (tiling) are not supported; "
                       "the mesh is shown without its texture");
    out.uvs.clear();
  }
  return out;
}

// map_Kd's value without its options ("-s 1 1 1 -clamp on file.png" -> "file.png"). Empty when
// nothing is left.
std::string map_file_name(const std::string& value) {
  static const std::pair<const char*, int> kOptions[] = {
      {"-blendu", 1},  {"-blendv", 1}, {"-bm", 1}, {"-boost", 1}, {"-cc", 1}, {"-clamp", 1},
      {"-imfchan", 1}, {"-mm", 2},     {"-o", 3},  {"-s", 3},     {"-t", 3},  {"-texres", 1}};
  size_t at = 0;
  const auto skip_space = [&] {
    while (at < value.size() && (value[at] == ' ' || value[at] == '\t')) ++at;
  };
  const auto skip_word = [&] {
    while (at < value.size() && value[at] != ' ' && value[at] != '\t') ++at;
  };
  while (true) {
    skip_space();
    if (at >= value.size() || value[at] != '-') break;
    const size_t word_start = at;
    skip_word();
    const std::string option = value.substr(word_start, at - word_start);
    int args = 0;
    for (const auto& [opt, n] : kOptions) {
      if (option == opt) args = n;
    }
    if (args == 0) return std::string();  // unknown option: we cannot tell where the name starts
    for (int a = 0; a < args; ++a) {
      skip_space();
      // -o/-s/-t take 1 to 3 numbers: stop at the first word that is not a number.
      if (a > 0 && (option == "-o" || option == "-s" || option == "-t")) {
        char* end = nullptr;
        std::strtod(value.c_str() + at, &end);
        if (end == value.c_str() + at) break;
      }
      skip_word();
    }
  }
  return value.substr(std::min(at, value.size()));
}

// The map_Kd of material `material` in MTL text (of the first material with one when `material`
// is empty); empty when there is none.
std::string find_map_kd(const std::string& mtl, const std::string& material) {
  std::string current;
  size_t line_start = 0;
  std::string line;
  while (line_start < mtl.size()) {
    size_t line_end = mtl.find('\n', line_start);
    if (line_end == std::string::npos) line_end = mtl.size();
    line.assign(mtl, line_start, line_end - line_start);
    line_start = line_end + 1;
    const char* p = line.c_str();
    while (*p == ' ' || *p == '\t') ++p;
    if (std::strncmp(p, "newmtl", 6) == 0 && (p[6] == ' ' || p[6] == '\t')) {
      current = trimmed(p + 6);
    } else if (std::strncmp(p, "map_Kd", 6) == 0 && (p[6] == ' ' || p[6] == '\t')) {
      if (material.empty() || current == material) return map_file_name(trimmed(p + 6));
    }
  }
  return std::string();
}

// Attaches the texture named by the OBJ's materials to `*mesh`, or warns.
void attach_obj_texture(const std::string& name, const std::string& directory,
                        const ObjMaterialRefs& refs, std::vector<std::string>* warnings,
                        Mesh* mesh) {
  std::string image;
  for (const std::string& lib : refs.mtllibs) {
    std::string mtl_path;
    Expected<std::string> mtl = import_detail::read_sidecar(directory, lib, false, &mtl_path);
    if (!mtl.ok()) {
      warn(warnings, name + ": material file " + lib +
                         " cannot be read; the mesh is shown without its texture (" +
                         mtl.status().message() + ")");
      return;
    }
    image = find_map_kd(*mtl, refs.material);
    if (!image.empty()) break;
  }
  if (image.empty()) return;  // an untextured material: nothing to warn about
  if (mesh->uvs.empty()) {
    warn(warnings, name + ": map_Kd " + image +
                       " is given but the faces have no usable texture coordinates; it is not "
                       "shown");
    return;
  }
  std::string image_path;
  Expected<std::string> bytes = import_detail::read_sidecar(directory, image, false, &image_path);
  Expected<TextureImage> texture = bytes.ok() ? import_detail::decode_import_png(*bytes, image_path)
                                              : Expected<TextureImage>(bytes.status());
  if (!texture.ok()) {
    warn(warnings, name + ": texture " + image_path +
                       " not loaded, the mesh is shown without it (" + texture.status().message() +
                       ")");
    return;
  }
  mesh->texture = std::move(*texture);
}

}  // namespace

Expected<Mesh> parse_obj(std::string_view text, const std::string& name,
                         std::vector<std::string>* warnings, const std::string& directory) {
  ObjMaterialRefs refs;
  TESSERA_ASSIGN_OR_RETURN(
      Mesh mesh, parse_obj_geometry(text, name, warnings, directory.empty() ? nullptr : &refs));
  if (!directory.empty()) attach_obj_texture(name, directory, refs, warnings, &mesh);
  return mesh;
}

}  // namespace tessera::mesh
