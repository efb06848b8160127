// read_with_assimp: an Assimp scene turned into one Mesh (import_assimp.h). Runs only inside
// tessera-mesh-reader, the child process of isolated_import.cpp.
#include "engine/mesh/import_assimp.h"

#include <assimp/scene.h>
#include <assimp/version.h>

#include <algorithm>
#include <assimp/Importer.hpp>
#include <assimp/postprocess.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <optional>
#include <sstream>

#include "core/mapped_file.h"
#include "engine/mesh/import_internal.h"

// JPEG, TGA and BMP textures (the formats DAE, 3DS and FBX files from older tools name) are decoded
// here, in the child process only; PNG goes through the checks every reader uses.
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_JPEG
#define STBI_ONLY_TGA
#define STBI_ONLY_BMP
#define STBI_NO_STDIO
#define STBI_NO_HDR
#define STBI_NO_LINEAR
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace tessera::mesh {
namespace {

// A texture image of any of the formats above, within the size every reader allows.
Expected<TextureImage> decode_image(std::string_view bytes, const std::string& what) {
  if (bytes.substr(0, 4) == "\x89PNG") return import_detail::decode_import_png(bytes, what);
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) return invalid_argument(what + ": too large");
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int size = static_cast<int>(bytes.size());
  int width = 0, height = 0, channels = 0;
  if (stbi_info_from_memory(data, size, &width, &height, &channels) == 0) {
    return invalid_argument(what + ": not an image this reads (PNG, JPEG, TGA or BMP)");
  }
  if (width <= 0 || height <= 0 ||
      int64_t{width} * height > import_detail::kMaxImportTexturePixels) {
    return invalid_argument(what + ": a " + std::to_string(width) + "x" + std::to_string(height) +
                            " image is outside what is read (1 to 8192 x 8192 pixels)");
  }
  stbi_uc* pixels = stbi_load_from_memory(data, size, &width, &height, &channels, 3);
  if (pixels == nullptr) {
    return invalid_argument(what + ": the image does not decode (" +
                            std::string(stbi_failure_reason()) + ")");
  }
  TextureImage image;
  image.width = width;
  image.height = height;
  image.rgb.assign(pixels, pixels + 3 * static_cast<size_t>(width) * height);
  stbi_image_free(pixels);
  return image;
}

using import_detail::Mat4;

// Assimp's row-major aiMatrix4x4 as the readers' column-major Mat4.
Mat4 to_mat4(const aiMatrix4x4& m) {
  const ai_real* rows[4] = {m[0], m[1], m[2], m[3]};
  Mat4 out{};
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) out[c * 4 + r] = static_cast<double>(rows[r][c]);
  }
  return out;
}

// The FBX importer's UpAxis / UpAxisSign (as the native FBX reader reads GlobalSettings) as a
// rotation taking the file's up to +Y; identity for +Y, other formats, or no metadata.
Mat4 up_axis_rotation(const aiScene& scene) {
  Mat4 r = import_detail::mat_identity();
  if (scene.mMetaData == nullptr) return r;
  int32_t axis = 1, sign = 1;
  if (!scene.mMetaData->Get("UpAxis", axis)) return r;
  scene.mMetaData->Get("UpAxisSign", sign);
  sign = sign < 0 ? -1 : 1;
  // Column-major: r[col * 4 + row]; the new (x, y, z) of the old (x, y, z).
  auto set = [&r](double xx, double xy, double xz, double yx, double yy, double yz, double zx,
                  double zy, double zz) {
    r = import_detail::mat_identity();
    r[0] = xx;  // new x from old x
    r[4] = xy;  // new x from old y
    r[8] = xz;
    r[1] = yx;
    r[5] = yy;
    r[9] = yz;
    r[2] = zx;
    r[6] = zy;
    r[10] = zz;
  };
  if (axis == 2 && sign == 1) {
    set(1, 0, 0, 0, 0, 1, 0, -1, 0);  // +Z up: y' = z, z' = -y
  } else if (axis == 2) {
    set(1, 0, 0, 0, 0, -1, 0, 1, 0);  // -Z up: y' = -z, z' = y
  } else if (axis == 1 && sign == -1) {
    set(1, 0, 0, 0, -1, 0, 0, 0, -1);  // -Y up
  } else if (axis == 0 && sign == 1) {
    set(0, -1, 0, 1, 0, 0, 0, 0, 1);  // +X up: x' = -y, y' = x
  } else if (axis == 0) {
    set(0, 1, 0, -1, 0, 0, 0, 0, 1);  // -X up: x' = y, y' = -x
  }
  return r;
}

class SceneReader {
 public:
  SceneReader(const std::string& path, const aiScene& scene, std::vector<std::string>* warnings)
      : path_(path), scene_(scene), warnings_(warnings) {}

  Expected<Mesh> read() {
    Mat4 root = up_axis_rotation(scene_);
    if (scene_.mRootNode != nullptr) {
      TESSERA_RETURN_IF_ERROR(visit(*scene_.mRootNode, root, 0));
    }
    if (out_.empty()) {
      return Status(ErrorCode::kNotFound,
                    path_ +
                        ": no triangles in the file (Assimp read it: points, lines or an "
                        "empty scene)");
    }
    finish_uvs();
    if (!out_.uvs.empty() && first_material_ >= 0) attach_texture();
    return std::move(out_);
  }

 private:
  void warn(const std::string& what) { import_detail::warn(warnings_, path_ + ": " + what); }

  Status visit(const aiNode& node, const Mat4& parent, int depth) {
    if (depth > 256) return corrupt_data(path_ + ": the node tree is deeper than 256 levels");
    const Mat4 world = import_detail::mat_mul(parent, to_mat4(node.mTransformation));
    for (unsigned i = 0; i < node.mNumMeshes; ++i) {
      const unsigned index = node.mMeshes[i];
      if (index >= scene_.mNumMeshes || scene_.mMeshes[index] == nullptr) {
        return corrupt_data(path_ + ": node '" + std::string(node.mName.C_Str()) + "' names mesh " +
                            std::to_string(index) + " of " + std::to_string(scene_.mNumMeshes));
      }
      TESSERA_RETURN_IF_ERROR(add_mesh(*scene_.mMeshes[index], world));
    }
    for (unsigned c = 0; c < node.mNumChildren; ++c) {
      if (node.mChildren[c] == nullptr) continue;
      TESSERA_RETURN_IF_ERROR(visit(*node.mChildren[c], world, depth + 1));
    }
    return Status();
  }

  Status add_mesh(const aiMesh& mesh, const Mat4& world) {
    if (mesh.mVertices == nullptr || mesh.mNumVertices == 0) return Status();
    const uint64_t base = static_cast<uint64_t>(out_.vertex_count());
    if (base + mesh.mNumVertices > 0xFFFFFFFFu)
      return corrupt_data(path_ + ": more than 2^32 vertices");
    // Only the triangles (points and lines were sorted out; a polygon Triangulate left is skipped).
    size_t triangles = 0;
    for (unsigned f = 0; f < mesh.mNumFaces; ++f) {
      const aiFace& face = mesh.mFaces[f];
      if (face.mNumIndices != 3 || face.mIndices == nullptr) continue;
      for (int k = 0; k < 3; ++k) {
        if (face.mIndices[k] >= mesh.mNumVertices) {
          return corrupt_data(path_ + ": mesh '" + std::string(mesh.mName.C_Str()) + "' index " +
                              std::to_string(face.mIndices[k]) + " is out of range for " +
                              std::to_string(mesh.mNumVertices) + " vertices");
        }
      }
      ++triangles;
    }
    if (triangles == 0) return Status();
    out_.positions.reserve(out_.positions.size() + 3 * size_t{mesh.mNumVertices});
    for (unsigned v = 0; v < mesh.mNumVertices; ++v) {
      const aiVector3D& p = mesh.mVertices[v];
      float w[3];
      if (!import_detail::transform_point(world, p.x, p.y, p.z, w)) {
        return corrupt_data(path_ + ": mesh '" + std::string(mesh.mName.C_Str()) + "' vertex " +
                            std::to_string(v) + " is not finite");
      }
      out_.positions.insert(out_.positions.end(), w, w + 3);
    }
    out_.triangles.reserve(out_.triangles.size() + 3 * triangles);
    for (unsigned f = 0; f < mesh.mNumFaces; ++f) {
      const aiFace& face = mesh.mFaces[f];
      if (face.mNumIndices != 3 || face.mIndices == nullptr) continue;
      for (int k = 0; k < 3; ++k) {
        out_.triangles.push_back(static_cast<uint32_t>(base + face.mIndices[k]));
      }
    }
    // UV channel 0, while every mesh has one.
    if (uvs_ok_) {
      if (mesh.mTextureCoords[0] == nullptr) {
        if (!uvs_.empty())
          warn("a mesh without texture coordinates: the mesh is shown without uvs");
        uvs_ok_ = false;
      } else {
        for (unsigned v = 0; v < mesh.mNumVertices; ++v) {
          uvs_.push_back(mesh.mTextureCoords[0][v].x);
          uvs_.push_back(mesh.mTextureCoords[0][v].y);
        }
      }
    }
    if (first_material_ < 0) first_material_ = static_cast<int>(mesh.mMaterialIndex);
    return Status();
  }

  void finish_uvs() {
    if (!uvs_ok_ || uvs_.size() != 2 * static_cast<size_t>(out_.vertex_count())) return;
    if (!import_detail::uvs_in_unit_range(uvs_)) {
      warn(
          "texture coordinates outside [0, 1] (tiling is not shown): the mesh is shown without "
          "uvs");
      return;
    }
    out_.uvs = std::move(uvs_);
  }

  void attach_texture() {
    if (static_cast<unsigned>(first_material_) >= scene_.mNumMaterials) return;
    const aiMaterial* material = scene_.mMaterials[first_material_];
    if (material == nullptr) return;
    aiString file;
    if (material->GetTexture(aiTextureType_BASE_COLOR, 0, &file) != aiReturn_SUCCESS &&
        material->GetTexture(aiTextureType_DIFFUSE, 0, &file) != aiReturn_SUCCESS) {
      return;
    }
    const std::string reference = file.C_Str();
    if (reference.empty()) return;
    const std::string what = "texture '" + reference + "'";
    if (const aiTexture* embedded = scene_.GetEmbeddedTexture(file.C_Str())) {
      if (embedded->mHeight == 0) {
        // Compressed bytes (mWidth of them) in the format of achFormatHint.
        const std::string_view bytes(reinterpret_cast<const char*>(embedded->pcData),
                                     embedded->mWidth);
        take(decode_image(bytes, path_ + ": embedded " + what), what);
      } else {
        take(texels(*embedded), what);
      }
      return;
    }
    std::string directory = std::filesystem::path(path_).parent_path().string();
    if (directory.empty()) directory.push_back('.');
    std::string tried;
    auto bytes = import_detail::read_sidecar(directory, reference, false, &tried);
    if (!bytes.ok()) {
      warn(what + " is not shown (" + bytes.status().message() + ")");
      return;
    }
    take(decode_image(*bytes, tried), what);
  }

  // Uncompressed embedded texels (aiTexel: b, g, r, a), top row first as Assimp stores them.
  Expected<TextureImage> texels(const aiTexture& t) const {
    const int64_t pixels = int64_t{t.mWidth} * t.mHeight;
    if (pixels <= 0 || pixels > import_detail::kMaxImportTexturePixels) {
      return invalid_argument(path_ + ": embedded texture of " + std::to_string(t.mWidth) + " x " +
                              std::to_string(t.mHeight) + " pixels is not read");
    }
    TextureImage image;
    image.width = t.mWidth;
    image.height = t.mHeight;
    image.rgb.resize(3 * static_cast<size_t>(pixels));
    for (int64_t i = 0; i < pixels; ++i) {
      image.rgb[3 * i] = t.pcData[i].r;
      image.rgb[3 * i + 1] = t.pcData[i].g;
      image.rgb[3 * i + 2] = t.pcData[i].b;
    }
    return image;
  }

  void take(Expected<TextureImage> image, const std::string& what) {
    if (!image.ok()) {
      warn(what + " is not shown (" + image.status().message() + ")");
      return;
    }
    out_.texture = std::move(*image);
  }

  const std::string& path_;
  const aiScene& scene_;
  std::vector<std::string>* warnings_;
  Mesh out_;
  std::vector<float> uvs_;
  bool uvs_ok_ = true;
  int first_material_ = -1;
};

}  // namespace

Expected<Mesh> read_with_assimp(const std::string& path, std::vector<std::string>* warnings) {
  try {
    Assimp::Importer importer;
    // Points and lines are dropped by SortByPType; Triangulate turns polygons into triangles.
    importer.SetPropertyInteger(AI_CONFIG_PP_SBP_REMOVE,
                                aiPrimitiveType_POINT | aiPrimitiveType_LINE);
    const unsigned flags =
        aiProcess_Triangulate | aiProcess_SortByPType | aiProcess_ValidateDataStructure;
    // UTF-16 text (a COLLADA or PLY with a byte-order mark: Assimp's parsers take UTF-8 only) is
    // read from memory as UTF-8; sidecar textures are still found beside `path` (SceneReader).
    std::optional<std::string> utf8;
    char bom[2] = {0, 0};
    std::ifstream(path, std::ios::binary).read(bom, 2);
    const bool utf16 =
        (bom[0] == '\xFF' && bom[1] == '\xFE') || (bom[0] == '\xFE' && bom[1] == '\xFF');
    if (auto bytes = utf16 ? read_file(path) : Expected<std::string>(std::string()); bytes.ok()) {
      utf8 = import_detail::utf16_to_utf8(*bytes);
    }
    const std::string hint = import_detail::lower_extension(path).substr(1);
    const aiScene* scene =
        utf8 ? importer.ReadFileFromMemory(utf8->data(), utf8->size(), flags, hint.c_str())
             : importer.ReadFile(path, flags);
    if (scene == nullptr) {
      std::string why = importer.GetErrorString();
      if (why.empty()) why = "no reason given";
      // Assimp catches a failed allocation itself and says so only in its message.
      if (why.find("bad_alloc") != std::string::npos) {
        return out_of_memory(path + ": reading it needs more memory than the reader may use");
      }
      return unsupported(path + ": Assimp cannot read it (" + why + ")");
    }
    Expected<Mesh> mesh = SceneReader(path, *scene, warnings).read();
    if (mesh.ok()) TESSERA_RETURN_IF_ERROR(validate(*mesh));
    return mesh;
  } catch (const std::bad_alloc&) {
    return out_of_memory(path + ": reading it needs more memory than the reader may use");
  } catch (const std::exception& e) {
    return unsupported(path + ": Assimp cannot read it (" + e.what() + ")");
  }
}

std::vector<std::string> assimp_extensions() {
  Assimp::Importer importer;
  std::string list;  // "*.3ds;*.dae;..."
  importer.GetExtensionList(list);
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ';')) {
    if (item.rfind("*.", 0) != 0 || item.size() < 3) continue;
    std::string ext = item.substr(1);
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    out.push_back(ext);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string assimp_version() {
  return std::to_string(aiGetVersionMajor()) + "." + std::to_string(aiGetVersionMinor()) + "." +
         std::to_string(aiGetVersionPatch());
}

}  // namespace tessera::mesh
