// import_mesh_file: reads the file, picks the reader by magic bytes and extension (import.h).
#include "engine/mesh/import.h"

#include <filesystem>

#include "engine/core/mapped_file.h"
#include "engine/mesh/import_internal.h"
#include "engine/mesh/stl.h"
#include "engine/mesh/threemf.h"

namespace tessera::mesh {

Expected<Mesh> import_mesh_file(const std::string& path, std::vector<std::string>* warnings) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return not_found("'" + path + "' is not a file");
  const std::string ext = import_detail::lower_extension(path);
  if (ext != ".obj" && ext != ".glb" && ext != ".gltf" && ext != ".fbx" && ext != ".stl" &&
      ext != ".3mf") {
    return invalid_argument("'" + path + "' is not a mesh file this viewer reads (extension '" +
                            ext + "'; open .obj, .glb, .gltf, .fbx, .stl or .3mf)");
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string bytes, read_file(path));
  if (bytes.empty()) return invalid_argument("'" + path + "' is empty, not a mesh");
  std::string directory = fs::path(path).parent_path().string();
  if (directory.empty()) directory = ".";
  const std::string_view head(bytes.data(), std::min<size_t>(bytes.size(), 4096));
  const bool glb_magic = head.substr(0, 4) == "glTF";
  const bool fbx_magic = head.substr(0, 18) == "Kaydara FBX Binary";
  const bool binary = head.find('\0') != std::string_view::npos;

  Expected<Mesh> mesh = not_found(path);
  if (ext == ".stl" && !glb_magic && !fbx_magic) {
    mesh = parse_stl(bytes, path);
  } else if (ext == ".3mf" && !glb_magic && !fbx_magic) {
    auto file = parse_3mf(bytes, path);
    if (!file.ok()) return file.status();
    mesh = std::move(file->mesh);
  } else if (glb_magic) {
    mesh = parse_glb(bytes, path, warnings, directory);
  } else if (fbx_magic) {
    mesh = parse_fbx(bytes, path, warnings, directory);
  } else if (ext == ".glb") {
    return invalid_argument("'" + path + "' is not a glTF binary (no \"glTF\" magic)");
  } else if (ext == ".fbx") {
    // parse_fbx tells ASCII FBX (kUnsupported) from other data.
    mesh = parse_fbx(bytes, path, warnings, directory);
  } else if (binary) {
    return invalid_argument("'" + path + "' is binary data, not a text " +
                            std::string(ext == ".obj" ? "OBJ" : "glTF") + " file");
  } else if (ext == ".gltf") {
    if (head.find('{') == std::string_view::npos) {
      return invalid_argument("'" + path + "' is not glTF JSON");
    }
    mesh = parse_gltf(bytes, path, warnings, directory);
  } else {
    mesh = parse_obj(bytes, path, warnings, directory);
  }
  if (!mesh.ok()) return mesh;
  // Normals are recomputed by the renderer; files may have them for some meshes only.
  mesh->normals.clear();
  return mesh;
}

}  // namespace tessera::mesh
