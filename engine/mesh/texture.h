// Texturing a mesh with an image ("apply as texture"): a planar projection from the front view,
// with a blended treatment for the faces the front view cannot see, and PNG I/O for textures.
//
// Front view: the view the studio's viewport (ui/render/camera.h at yaw = pitch = 0) and
// `tessera render` call the front: for the engine's Y-up meshes the camera sits on +Z looking down
// -Z, +X to the right, +Y up. For a Z-up mesh (ExportOptions UpAxis::kZ frame) the same view looks
// from -Y towards +Y, +X right, +Z up (Blender's front view). The image is fitted to the mesh's
// projected bounds preserving its aspect ratio (centred; the image's left edge is the mesh's -X
// side, the top row its top), so a concept image rendered from the front lands on the same parts.
//
// The result texture is an atlas of 2 x 2 regions, each the input image's size plus a gutter of
// kTextureGutter replicated texels (so bilinear filtering and mip-mapping do not bleed across
// regions). Every triangle is assigned one region by how much its face normal n faces the camera,
// c = dot(n, towards_camera):
//   front       c >= 0.35        the image itself                         (top-left region)
//   front side  0 <= c < 0.35    image blended 1/3 towards the back image  (top-right)
//   back side   -0.35 <= c < 0   image blended 2/3 towards the back image  (bottom-left)
//   back        c < -0.35        the back image                           (bottom-right)
// The back image is the input softened (box blur) and blended by `back_blend` towards the image's
// mean colour. Every region is sampled with the same planar projection, so a back face shows what
// lies "through" the object at that point: mirrored when seen from behind (the image's left is the
// viewer's right there), its colours continuous with the front across the silhouette. The side
// bands soften the stretched texels where the projection grazes the surface.
//
// Seams: a vertex shared by triangles in different regions is split (same position and normal, one
// copy per region); vertices used by one region only are not duplicated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "engine/mesh/export.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

inline constexpr int64_t kTextureGutter = 4;      // texels around each atlas region
inline constexpr int64_t kMaxTextureSide = 4096;  // input images larger than this are refused

// A pixel rectangle of an image, [x0, x1) x [y0, y1), rows counted from the top.
struct ImageRect {
  int64_t x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int64_t width() const { return x1 - x0; }
  int64_t height() const { return y1 - y0; }
};

// Where the object of a concept render is. The background of each row is estimated from its
// kObjectBorder leftmost and rightmost pixels (per channel median: flat backgrounds and vertical
// gradients, as the tiny model's training renders have); a pixel is object when one channel
// differs from its row's background by more than kObjectThreshold. The rectangle spans the 1st to
// 99th percentile of the object pixels' columns and rows (isolated speckles do not stretch it).
// nullopt when fewer than kObjectMinFraction of the pixels are object, or when the object touches
// more than half of the border band (then the image has no background to tell it from: a
// full-frame texture).
inline constexpr int64_t kObjectBorder = 2;
inline constexpr int kObjectThreshold = 30;
inline constexpr double kObjectMinFraction = 0.005;
std::optional<ImageRect> find_object_bounds(const TextureImage& image);

enum class ImageFit { kFrame, kObject };

struct ProjectionOptions {
  // How the image is fitted to the mesh (see above).
  ImageFit fit = ImageFit::kFrame;
  // The mesh's up axis, which fixes the front view (see above). Engine meshes are Y-up.
  UpAxis up_axis = UpAxis::kY;
  // Fraction of the image, on each side, that lies outside the mesh's projected bounds (the
  // background around the object in a concept render); in [0, 0.45]. 0 fits the bounds to the
  // image. Used by kFrame (and by kObject when no object is found).
  float margin = 0.0f;
  // How far the back image goes from the softened image towards its mean colour, in [0, 1].
  float back_blend = 0.5f;
};

// kInvalidArgument naming the field for a margin outside [0, 0.45] or a non-finite one, or a
// back_blend outside [0, 1].
Status validate_projection_options(const ProjectionOptions& options);

// kInvalidArgument unless width and height are in [1, kMaxTextureSide] and rgb holds exactly
// 3 * width * height bytes. `what` names the image in the message (e.g. a file name).
Status validate_texture_image(const TextureImage& image, const std::string& what = "texture");

// Projects `image` onto `*mesh` from the front view: replaces mesh->uvs and mesh->texture (the
// atlas described above) and splits seam vertices (positions, normals and triangles are rewritten;
// the geometry is unchanged). Normals are used for the split only through the face normals, so a
// mesh without normals keeps none. `mesh` must be non-null and valid (validate()) with at least one
// triangle. Errors: kInvalidArgument for a bad image, bad options, an invalid or empty mesh, or a
// mesh with no extent in the front view's plane; `*mesh` is left unchanged on error.
// fitted_object, when given, receives the object rectangle the kObject fit used (nullopt for the
// frame fit, chosen or fallen back to).
Status project_texture_front(const TextureImage& image, const ProjectionOptions& options,
                             Mesh* mesh, std::optional<ImageRect>* fitted_object = nullptr);

// PNG files <-> TextureImage. read_texture_png accepts any PNG stb_image decodes (8/16-bit, grey,
// palette, alpha: alpha is dropped, not composited); kIoError naming the path when it cannot be
// read, kInvalidArgument naming it when it is not a decodable PNG or too large.
Expected<TextureImage> read_texture_png(const std::string& path);
Expected<TextureImage> decode_texture_png(const std::string& bytes, const std::string& what);
// Encodes `image` as an RGB8 PNG (kInvalidArgument for an invalid image).
Expected<std::string> encode_texture_png(const TextureImage& image);

// `image` at w x h (both >= 1): area average when shrinking an axis, bilinear (pixel centres
// aligned) when enlarging it; `nearest`: nearest neighbour on both axes.
TextureImage resize_texture(const TextureImage& image, int64_t w, int64_t h, bool nearest = false);

}  // namespace tessera::mesh
