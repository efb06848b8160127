// import_mesh_file: reads the file, picks the reader by magic bytes and extension (import.h).
#include "engine/mesh/import.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <optional>
#include <string_view>

#include "core/mapped_file.h"
#include "engine/mesh/import_internal.h"
#include "engine/mesh/isolated_import.h"
#include "engine/mesh/stl.h"
#include "engine/mesh/threemf.h"

namespace tessera::mesh {

namespace {

const char* const kNativeExtensions[] = {".obj", ".glb", ".gltf", ".fbx", ".stl", ".3mf"};

// Formats artists send that only Assimp reads here: named when the Assimp reader is missing.
const char* const kCommonAssimpExtensions[] = {".dae", ".ply", ".3ds", ".blend", ".x",    ".lwo",
                                               ".ase", ".ac",  ".off", ".dxf",   ".ms3d", ".x3d"};

bool is_native(const std::string& ext) {
  return std::find(std::begin(kNativeExtensions), std::end(kNativeExtensions), ext) !=
         std::end(kNativeExtensions);
}

std::string native_list() {
  return ".obj, .glb, .gltf, .fbx, .stl and .3mf";
}

// The project's own readers, by magic bytes and extension (`ext` is one of kNativeExtensions).
Expected<Mesh> read_native(const std::string& path, const std::string& ext,
                           std::vector<std::string>* warnings) {
  TESSERA_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  if (bytes.empty()) return invalid_argument("'" + path + "' is empty, not a mesh");
  if (ext == ".obj" || ext == ".gltf") {
    if (auto text = import_detail::utf16_to_utf8(bytes)) bytes = std::move(*text);
  }
  std::string directory = std::filesystem::path(path).parent_path().string();
  if (directory.empty()) directory.push_back('.');
  const std::string_view head(bytes.data(), std::min<size_t>(bytes.size(), 4096));
  const bool glb_magic = head.substr(0, 4) == "glTF";
  const bool fbx_magic = head.substr(0, 18) == "Kaydara FBX Binary";
  const bool binary = head.find('\0') != std::string_view::npos;

  if (ext == ".stl" && !glb_magic && !fbx_magic) return parse_stl(bytes, path);
  if (ext == ".3mf" && !glb_magic && !fbx_magic) {
    auto file = parse_3mf(bytes, path);
    if (!file.ok()) return file.status();
    return std::move(file->mesh);
  }
  if (glb_magic) return parse_glb(bytes, path, warnings, directory);
  if (fbx_magic) return parse_fbx(bytes, path, warnings, directory);
  if (ext == ".glb") {
    return invalid_argument("'" + path + "' is not a glTF binary (no \"glTF\" magic)");
  }
  // parse_fbx tells ASCII FBX (kUnsupported) from other data.
  if (ext == ".fbx") return parse_fbx(bytes, path, warnings, directory);
  if (binary) {
    return invalid_argument("'" + path + "' is binary data, not a text " +
                            std::string(ext == ".obj" ? "OBJ" : "glTF") + " file");
  }
  if (ext == ".gltf") {
    if (head.find('{') == std::string_view::npos) {
      return invalid_argument("'" + path + "' is not glTF JSON");
    }
    return parse_gltf(bytes, path, warnings, directory);
  }
  return parse_obj(bytes, path, warnings, directory);
}

}  // namespace

std::string import_filter() {
  const IsolatedFormats assimp = isolated_formats();
  std::string all = "*.obj *.glb *.gltf *.fbx *.stl *.3mf";
  std::string others;
  for (const std::string& ext : assimp.extensions) {
    if (is_native(ext)) continue;
    others += others.empty() ? "*" : " *";
    others += ext;
  }
  if (!others.empty()) all += " " + others;
  std::string filter = "Meshes (" + all +
                       ");;Wavefront OBJ (*.obj);;glTF binary (*.glb);;glTF (*.gltf);;FBX (*.fbx);;"
                       "STL (*.stl);;3MF (*.3mf)";
  if (!others.empty()) filter += ";;Other formats, read through Assimp (" + others + ")";
  return filter;
}

std::string import_formats_text() {
  const IsolatedFormats assimp = isolated_formats();
  std::string text = "read natively: " + native_list() + " (binary FBX; glTF 2)";
  if (assimp.available) {
    std::string others;
    for (const std::string& ext : assimp.extensions) {
      if (is_native(ext)) continue;
      if (!others.empty()) others += ' ';
      others += ext;
    }
    text += "\nread through Assimp " + assimp.version + " (" + assimp.reader +
            "), with ASCII FBX and glTF 1.0: " + others;
  } else {
    std::string common;
    for (const char* ext : kCommonAssimpExtensions) {
      if (!common.empty()) common += ' ';
      common += ext;
    }
    text += "\nunavailable (" + assimp.why_not +
            "): ASCII FBX, glTF 1.0 and every format Assimp reads (" + common + " ...)";
  }
  return text;
}

Expected<Mesh> import_mesh_file(const std::string& path, std::vector<std::string>* warnings) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return not_found("'" + path + "' is not a file");
  const std::string ext = import_detail::lower_extension(path);
  Expected<Mesh> mesh = not_found(path);
  if (is_native(ext)) {
    mesh = read_native(path, ext, warnings);
    // What the own readers refuse as unsupported (ASCII FBX, glTF 1.0, ...) rather than malformed
    // goes to Assimp; when that fails too, both reasons are given.
    if (!mesh.ok() && mesh.status().code() == ErrorCode::kUnsupported) {
      const IsolatedFormats assimp = isolated_formats();
      if (!assimp.available) {
        return Status(ErrorCode::kUnsupported,
                      mesh.status().message() +
                          " (Assimp, which could read it, is unavailable: " + assimp.why_not + ")");
      }
      std::vector<std::string> assimp_warnings;
      Expected<Mesh> other = import_isolated(path, &assimp_warnings);
      if (!other.ok()) {
        return Status(mesh.status().code(), mesh.status().message() +
                                                "; Assimp cannot read it either (" +
                                                other.status().message() + ")");
      }
      if (warnings != nullptr) {
        warnings->insert(warnings->end(), assimp_warnings.begin(), assimp_warnings.end());
      }
      mesh = std::move(other);
    }
  } else {
    const IsolatedFormats assimp = isolated_formats();
    const bool assimp_reads = std::find(assimp.extensions.begin(), assimp.extensions.end(), ext) !=
                              assimp.extensions.end();
    if (assimp_reads) {
      mesh = import_isolated(path, warnings);
    } else if (!assimp.available &&
               std::find(std::begin(kCommonAssimpExtensions), std::end(kCommonAssimpExtensions),
                         ext) != std::end(kCommonAssimpExtensions)) {
      return unsupported("'" + path + "': " + ext +
                         " files are read through Assimp, which is unavailable (" + assimp.why_not +
                         "); without it Tessera opens " + native_list() + " only");
    } else {
      std::string more;
      if (assimp.available) {
        more = " or one of the " + std::to_string(assimp.extensions.size()) +
               " formats Assimp reads, such as .dae, .ply, .3ds or .blend";
      }
      return invalid_argument("'" + path + "' is not a mesh file Tessera reads (extension '" + ext +
                              "'; open " + native_list() + more + ")");
    }
  }
  if (!mesh.ok()) return mesh;
  // Normals are recomputed by the renderer; files may have them for some meshes only.
  mesh->normals.clear();
  return mesh;
}

}  // namespace tessera::mesh
