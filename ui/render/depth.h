// Depth maps for a depth ControlNet, drawn by the renderer (docs/diffusion.md, "Depth maps"): per
// pixel v = z_near / z, z the depth along the view axis and z_near the nearest visible point's, so
// the nearest point is white (255), farther points darker, the background black (0); the same
// value in R, G and B. That is MiDaS's normalised inverse depth for an object in empty space,
// which the published SD 1.5 depth ControlNets were trained on, and what tessera-tiny's depth
// ControlNet learned from its renders (tools/train/diffusion/render.py, depth_map).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"
#include "ui/render/camera.h"
#include "ui/render/image.h"

namespace tessera::render {

// A named camera direction around a mesh (OrbitCamera's yaw / pitch, degrees).
struct NamedView {
  std::string name;
  float yaw_degrees = 0, pitch_degrees = 0;
};
// front (looking down -Z from +Z, 20 degrees above), back, left, right, three-quarter (35 degrees
// round from the front, 25 above: the training renders' view) and top.
const std::vector<NamedView>& named_views();
// kInvalidArgument listing the names for an unknown one.
Expected<NamedView> parse_view(const std::string& name);

// A frame drawn with ShadingMode::kDepth over a black background (OffscreenContext::read_pixels)
// as the depth map above (RGB8, top row first). Edge pixels the multisampling blended with the
// background come out darker, as an anti-aliased edge.
mesh::TextureImage depth_map_from_frame(const Image& frame);

// `mesh` drawn from `view` at width x height in a headless context of its own (EGL; kUnsupported
// when none can be made), framed to fit, as a depth map. kInvalidArgument for a mesh without
// triangles or one the renderer refuses.
Expected<mesh::TextureImage> render_depth_map(const mesh::Mesh& mesh, const NamedView& view,
                                              int width, int height);

}  // namespace tessera::render
