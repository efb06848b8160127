// The painter's views and what each one is given to generate (docs/texture-painting.md):
// - plan_views: the cameras around a mesh, in the order they are painted (front, back, the
//   sides, then top and bottom), each with the direction words added to its prompt;
// - prepare_view: for one view, the depth map (the depth ControlNet's input), the mesh as painted
//   so far seen from there (the init image) and the mask of the pixels to generate: the ones no
//   earlier view saw, and the ones this view sees much more squarely than any earlier view did,
//   widened by a narrow band so the new paint blends into the old.
// The generated image is then baked with bake_view (texture_bake.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"
#include "engine/mesh/texture_bake.h"
#include "engine/mesh/view_raster.h"

namespace tessera::mesh {

struct ViewSetOptions {
  int ring = 4;                    // views around the object (1..16), front first
  double ring_elevation_deg = 15;  // their height above the horizon (-60..60)
  bool top = true, bottom = true;  // a view from above (80 degrees) and from below (-80)
  double fov_y_deg = 40;           // perspective field of view
};

struct PaintView {
  std::string name;           // "front", "back", "left", "right", "azimuth 45", "top", "bottom"
  std::string prompt_suffix;  // ", front view" ... (direction words, as TEXTure adds)
  double azimuth_deg = 0, elevation_deg = 0;
  ViewCamera camera;
};

// The ring's view counts validate_view_set accepts.
inline constexpr int kMinPaintRing = 1;
inline constexpr int kMaxPaintRing = 16;
// kInvalidArgument naming the option for a ring outside 1..16, an elevation outside -60..60 or a
// field of view outside 10..90.
Status validate_view_set(const ViewSetOptions& options);
// Cameras on a sphere around the mesh's bounding box centre, far enough that the bounding sphere
// fills the view with a small margin. Errors: validate_view_set(), or a mesh without triangles.
Expected<std::vector<PaintView>> plan_views(const Mesh& mesh, const ViewSetOptions& options);

// The view sides prepare_view accepts, pixels.
inline constexpr int kMinPaintViewSize = 64;
inline constexpr int kMaxPaintViewSize = 2048;

struct PaintMaskOptions {
  float seen_facing = 0.05f;  // a texel some view saw at least this squarely is painted
  float refine_gain = 0.3f;   // ... and is painted again where this view sees it this much better
  int band = 4;               // pixels the mask is widened by (at 512)
};

struct ViewInputs {
  ViewRaster raster;
  TextureImage depth;  // inverse depth (view_raster.h), RGB8
  TextureImage init;   // the painted mesh from this view (black background), RGB8
  TextureImage mask;   // white = generate, black = keep, RGB8
  int64_t object_pixels = 0, generate_pixels = 0;
};

// `mesh` must have uvs (its texture, if any, is ignored: `state` is the paint so far, `texels` its
// texel map). `size` is the view's side in pixels (64..2048). `painted`: finish_bake(mesh, texels,
// state)'s texture when the caller has it already (null: made here).
Expected<ViewInputs> prepare_view(const Mesh& mesh, const TexelMap& texels,
                                  const BakeAccumulator& state, const PaintView& view, int size,
                                  const PaintMaskOptions& options = {},
                                  const TextureImage* painted = nullptr);

}  // namespace tessera::mesh
