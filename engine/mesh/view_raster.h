// A software rasteriser for painting a mesh from views (the texture painter's eyes, on any
// machine, without OpenGL): per pixel of a view, the nearest triangle, its depth along the view
// and its perspective-correct barycentrics. The painter turns this into the depth map a depth
// ControlNet reads, the mask of what a view sees, and the visibility test of back-projection
// (texture_bake.h).
//
// Camera: a pinhole at `eye` looking at `target`, `up` giving the roll; `fov_y_deg` the vertical
// field of view. Pixel (x, y) with y down covers [x, x + 1] x [y, y + 1]; its centre is sampled.
// Triangles are two-sided; those crossing the near plane (depth <= near) are skipped whole (views
// sit outside the object).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

struct ViewCamera {
  std::array<double, 3> eye{0, 0, 3};
  std::array<double, 3> target{0, 0, 0};
  std::array<double, 3> up{0, 1, 0};
  double fov_y_deg = 35;
  double near = 1e-3;
};

// A point in the camera's frame: x right, y up, z forward (the depth).
struct ViewPoint {
  double x = 0, y = 0, z = 0;
  double px = 0, py = 0;  // its pixel position (x right, y down) in a width x height view
};

// The camera's frame and projection for a width x height view.
class ViewProjection {
 public:
  ViewProjection(const ViewCamera& camera, int width, int height);
  ViewPoint project(const std::array<double, 3>& p) const;
  const std::array<double, 3>& eye() const { return eye_; }
  // The view angle one pixel spans (radians, vertical).
  double pixel_angle() const { return pixel_angle_; }

 private:
  std::array<double, 3> eye_, right_, up_, forward_;
  double tan_half_ = 0, aspect_ = 1, pixel_angle_ = 0;
  int width_ = 0, height_ = 0;
};

struct ViewRaster {
  int width = 0, height = 0;
  std::vector<int32_t> face;  // per pixel, -1 = background
  std::vector<float> depth;   // per pixel, along the view axis (0 for background)
  std::vector<float> bary;    // per pixel, barycentrics of corners 1 and 2 (corner 0 = 1 - both)
};

// Rasterises every triangle of `mesh` (depth test, nearest wins). kInvalidArgument for a view
// size outside 1..8192, an eye on the target, or an up parallel to the view direction.
Expected<ViewRaster> rasterize_view(const Mesh& mesh, const ViewCamera& camera, int width,
                                    int height);

// The view's depth map as a depth ControlNet reads it (MiDaS-style inverse depth): grey
// near / depth for covered pixels, where near is the closest covered depth (so the nearest point
// is white), 0 (black) for the background; RGB8, row-major, top row first.
std::vector<uint8_t> inverse_depth_rgb(const ViewRaster& raster);

}  // namespace tessera::mesh
