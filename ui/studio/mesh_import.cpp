#include "ui/studio/mesh_import.h"

#include <assimp/postprocess.h>
#include <assimp/scene.h>
#include <assimp/version.h>

#include <algorithm>
#include <assimp/Importer.hpp>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace tessera::studio {

namespace {

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

// Checks the first bytes against the format the extension promises.
Status sniff(const std::string& path, const std::string& ext) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("'" + path + "': cannot open the file");
  char head[4096];
  in.read(head, sizeof(head));
  const size_t n = static_cast<size_t>(in.gcount());
  if (n == 0) return invalid_argument("'" + path + "' is empty, not a mesh");
  const std::string_view bytes(head, n);
  if (ext == ".glb") {
    if (n < 12 || bytes.substr(0, 4) != "glTF") {
      return invalid_argument("'" + path + "' is not a glTF binary (no \"glTF\" magic)");
    }
  } else if (ext == ".fbx") {
    if (bytes.substr(0, 18) != "Kaydara FBX Binary") {
      return invalid_argument("'" + path +
                              "' is not a binary FBX (ASCII FBX and other files are not read)");
    }
  } else if (ext == ".obj" || ext == ".gltf") {
    if (bytes.find('\0') != std::string_view::npos) {
      return invalid_argument("'" + path + "' is binary data, not a text " +
                              (ext == ".obj" ? std::string("OBJ") : std::string("glTF")) + " file");
    }
    if (ext == ".gltf" && bytes.find('{') == std::string_view::npos) {
      return invalid_argument("'" + path + "' is not glTF JSON");
    }
  }
  return Status();
}

}  // namespace

Expected<mesh::Mesh> import_mesh_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return not_found("'" + path + "' is not a file");
  }
  const std::string ext = lower_extension(path);
  if (ext != ".obj" && ext != ".glb" && ext != ".gltf" && ext != ".fbx") {
    return invalid_argument("'" + path + "' is not a mesh file this viewer reads (extension '" +
                            ext + "'; open .obj, .glb, .gltf or .fbx)");
  }
  TESSERA_RETURN_IF_ERROR(sniff(path, ext));

  Assimp::Importer importer;
  importer.SetPropertyInteger(AI_CONFIG_PP_SBP_REMOVE, aiPrimitiveType_POINT | aiPrimitiveType_LINE);
  const aiScene* scene = importer.ReadFile(
      path, aiProcess_Triangulate | aiProcess_JoinIdenticalVertices | aiProcess_PreTransformVertices |
                aiProcess_SortByPType | aiProcess_GenSmoothNormals);
  if (scene == nullptr) {
    return invalid_argument("'" + path + "' could not be read as a mesh: " +
                            importer.GetErrorString());
  }
  mesh::Mesh out;
  for (unsigned m = 0; m < scene->mNumMeshes; ++m) {
    const aiMesh* am = scene->mMeshes[m];
    if (am == nullptr || !(am->mPrimitiveTypes & aiPrimitiveType_TRIANGLE)) continue;
    const uint64_t base = static_cast<uint64_t>(out.vertex_count());
    if (base + am->mNumVertices > std::numeric_limits<uint32_t>::max()) {
      return invalid_argument("'" + path + "' has too many vertices to view");
    }
    for (unsigned v = 0; v < am->mNumVertices; ++v) {
      out.positions.insert(out.positions.end(),
                           {am->mVertices[v].x, am->mVertices[v].y, am->mVertices[v].z});
    }
    for (unsigned f = 0; f < am->mNumFaces; ++f) {
      const aiFace& face = am->mFaces[f];
      if (face.mNumIndices != 3) continue;
      for (unsigned k = 0; k < 3; ++k) {
        if (face.mIndices[k] >= am->mNumVertices) {
          return corrupt_data("'" + path + "': face index out of range in mesh " +
                              std::to_string(m));
        }
        out.triangles.push_back(static_cast<uint32_t>(base + face.mIndices[k]));
      }
    }
  }
  // Normals are recomputed by the renderer when absent; Assimp's may be missing for some meshes,
  // so drop them all rather than mixing.
  out.normals.clear();
  for (float x : out.positions) {
    if (!std::isfinite(x)) return corrupt_data("'" + path + "' has a non-finite vertex position");
  }
  if (out.empty()) return not_found("'" + path + "' contains no triangles");
  return out;
}

std::string assimp_version() {
  return std::to_string(aiGetVersionMajor()) + "." + std::to_string(aiGetVersionMinor()) + "." +
         std::to_string(aiGetVersionPatch());
}

}  // namespace tessera::studio
