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

#include "engine/core/mapped_file.h"
#include "engine/core/png.h"
#include "ui/render/mesh_file.h"

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

// The base colour image of `material` (diffuse, else glTF's base colour), decoded to RGB8: an
// embedded texture ("*N", compressed PNG bytes) or a PNG file relative to `dir`. nullopt-like empty
// image with a warning when there is a reference that cannot be used; empty and no warning when
// the material has no texture.
mesh::TextureImage read_material_texture(const aiScene* scene, const aiMaterial* material,
                                         const std::filesystem::path& dir, const std::string& path,
                                         std::vector<std::string>* warnings) {
  auto warn = [&](const std::string& what) {
    if (warnings) warnings->push_back("'" + path + "': " + what + "; the texture is not shown");
  };
  aiString ref;
  if (material->GetTexture(aiTextureType_DIFFUSE, 0, &ref) != AI_SUCCESS &&
      material->GetTexture(aiTextureType_BASE_COLOR, 0, &ref) != AI_SUCCESS) {
    return {};
  }
  const std::string name = ref.C_Str();
  if (name.empty()) return {};
  std::string bytes;
  std::string what;
  if (const aiTexture* embedded = scene->GetEmbeddedTexture(ref.C_Str()); embedded != nullptr) {
    what = "embedded texture '" + name + "'";
    if (embedded->mHeight != 0 || embedded->pcData == nullptr) {
      warn(what + " is not a compressed image (raw texel data is not read)");
      return {};
    }
    bytes.assign(reinterpret_cast<const char*>(embedded->pcData), embedded->mWidth);
  } else if (!name.empty() && name[0] == '*') {
    warn("texture '" + name + "' refers to a missing embedded image");
    return {};
  } else {
    std::string rel = name;
    std::replace(rel.begin(), rel.end(), '\\', '/');
    std::filesystem::path file = dir / rel;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) {
      // Exporters also store absolute paths of the machine that wrote the file: try the name
      // beside the mesh.
      file = dir / std::filesystem::path(rel).filename();
    }
    what = "texture file '" + file.string() + "'";
    auto read = read_file(file.string());
    if (!read.ok()) {
      warn(what + " cannot be read (" + read.status().message() + ")");
      return {};
    }
    bytes = std::move(read).value();
  }
  auto decoded = decode_png(bytes.data(), bytes.size(), 3, what);
  if (!decoded.ok()) {
    warn(decoded.status().message());
    return {};
  }
  mesh::TextureImage image;
  image.width = decoded.value().width;
  image.height = decoded.value().height;
  image.rgb = std::move(decoded.value().pixels);
  return image;
}

// glTF text and FBX through Assimp, with uvs and texture.
Expected<mesh::Mesh> import_with_assimp(const std::string& path,
                                        std::vector<std::string>* warnings) {
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
  bool all_have_uvs = true;
  const aiMaterial* textured_material = nullptr;
  for (unsigned m = 0; m < scene->mNumMeshes; ++m) {
    const aiMesh* am = scene->mMeshes[m];
    if (am == nullptr || !(am->mPrimitiveTypes & aiPrimitiveType_TRIANGLE)) continue;
    const uint64_t base = static_cast<uint64_t>(out.vertex_count());
    if (base + am->mNumVertices > std::numeric_limits<uint32_t>::max()) {
      return invalid_argument("'" + path + "' has too many vertices to view");
    }
    const aiVector3D* uv = am->mTextureCoords[0];
    all_have_uvs = all_have_uvs && uv != nullptr;
    for (unsigned v = 0; v < am->mNumVertices; ++v) {
      out.positions.insert(out.positions.end(),
                           {am->mVertices[v].x, am->mVertices[v].y, am->mVertices[v].z});
      if (uv != nullptr) out.uvs.insert(out.uvs.end(), {uv[v].x, uv[v].y});
    }
    if (uv != nullptr && textured_material == nullptr && am->mMaterialIndex < scene->mNumMaterials &&
        scene->mMaterials[am->mMaterialIndex] != nullptr &&
        scene->mMaterials[am->mMaterialIndex]->GetTextureCount(aiTextureType_DIFFUSE) +
                scene->mMaterials[am->mMaterialIndex]->GetTextureCount(aiTextureType_BASE_COLOR) >
            0) {
      textured_material = scene->mMaterials[am->mMaterialIndex];
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
  for (float x : out.positions) {
    if (!std::isfinite(x)) return corrupt_data("'" + path + "' has a non-finite vertex position");
  }
  if (out.empty()) return not_found("'" + path + "' contains no triangles");
  // uvs: all meshes or none, finite and in [0, 1] (Mesh's invariant; tiling is not shown).
  if (!all_have_uvs) {
    if (!out.uvs.empty() && warnings) {
      warnings->push_back("'" + path + "': only some meshes have texture coordinates; the texture "
                          "is not shown");
    }
    out.uvs.clear();
  }
  for (float t : out.uvs) {
    if (!std::isfinite(t) || t < 0.0f || t > 1.0f) {
      if (warnings) {
        warnings->push_back("'" + path + "': texture coordinates outside [0, 1] (tiling is not "
                            "shown); the texture is not shown");
      }
      out.uvs.clear();
      break;
    }
  }
  if (!out.uvs.empty() && textured_material != nullptr) {
    out.texture = read_material_texture(scene, textured_material,
                                        std::filesystem::path(path).parent_path(), path, warnings);
  }
  return out;
}

}  // namespace

Expected<mesh::Mesh> import_mesh_file(const std::string& path, std::vector<std::string>* warnings) {
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
  Expected<mesh::Mesh> mesh = ext == ".obj" || ext == ".glb"
                                  ? render::load_mesh_file(path, warnings)
                                  : import_with_assimp(path, warnings);
  if (!mesh.ok()) return mesh;
  // Normals are recomputed by the renderer; files may have them for some meshes only, so drop
  // them all rather than mixing.
  mesh.value().normals.clear();
  return mesh;
}

std::string assimp_version() {
  return std::to_string(aiGetVersionMajor()) + "." + std::to_string(aiGetVersionMinor()) + "." +
         std::to_string(aiGetVersionPatch());
}

}  // namespace tessera::studio
