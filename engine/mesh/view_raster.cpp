#include "engine/mesh/view_raster.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace tessera::mesh {

namespace {

using V3 = std::array<double, 3>;
V3 vsub(const V3& a, const V3& b) {
  return {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
}
double vdot(const V3& a, const V3& b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}
V3 vcross(const V3& a, const V3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
V3 vunit(const V3& a) {
  const double n = std::sqrt(vdot(a, a));
  return n > 0 ? V3{a[0] / n, a[1] / n, a[2] / n} : V3{0, 0, 0};
}

}  // namespace

ViewProjection::ViewProjection(const ViewCamera& camera, int width, int height)
    : eye_(camera.eye), width_(width), height_(height) {
  forward_ = vunit(vsub(camera.target, camera.eye));
  right_ = vunit(vcross(forward_, camera.up));
  up_ = vcross(right_, forward_);
  tan_half_ = std::tan(camera.fov_y_deg * M_PI / 360.0);
  aspect_ = height > 0 ? static_cast<double>(width) / height : 1.0;
  pixel_angle_ = height > 0 ? 2.0 * tan_half_ / height : 0.0;
}

ViewPoint ViewProjection::project(const std::array<double, 3>& p) const {
  const V3 d = vsub(p, eye_);
  ViewPoint v;
  v.x = vdot(d, right_);
  v.y = vdot(d, up_);
  v.z = vdot(d, forward_);
  if (v.z > 0) {
    const double nx = v.x / (v.z * tan_half_ * aspect_), ny = v.y / (v.z * tan_half_);
    v.px = (nx + 1.0) * 0.5 * width_;
    v.py = (1.0 - ny) * 0.5 * height_;
  }
  return v;
}

Expected<ViewRaster> rasterize_view(const Mesh& mesh, const ViewCamera& camera, int width,
                                    int height) {
  if (width < 1 || height < 1 || width > 8192 || height > 8192) {
    return invalid_argument("view raster: size " + std::to_string(width) + "x" +
                            std::to_string(height) + " is outside 1..8192");
  }
  const V3 view = vsub(camera.target, camera.eye);
  if (!(vdot(view, view) > 0)) return invalid_argument("view raster: the eye is on the target");
  const V3 side = vcross(vunit(view), camera.up);
  if (!(vdot(side, side) > 1e-12)) {
    return invalid_argument("view raster: the up direction is parallel to the view direction");
  }
  if (!(camera.fov_y_deg > 0 && camera.fov_y_deg < 180)) {
    return invalid_argument("view raster: field of view " + std::to_string(camera.fov_y_deg) +
                            " degrees is outside (0, 180)");
  }
  const ViewProjection proj(camera, width, height);
  ViewRaster r;
  r.width = width;
  r.height = height;
  const size_t pixels = static_cast<size_t>(width) * height;
  r.face.assign(pixels, -1);
  r.depth.assign(pixels, 0.0f);
  r.bary.assign(2 * pixels, 0.0f);
  std::vector<double> inv_z(pixels, 0.0);  // 1 / depth of the nearest so far (0 = none)
  const size_t nv = mesh.positions.size() / 3;
  std::vector<ViewPoint> pts(nv);
  for (size_t v = 0; v < nv; ++v) {
    pts[v] =
        proj.project({mesh.positions[3 * v], mesh.positions[3 * v + 1], mesh.positions[3 * v + 2]});
  }
  const int64_t faces = mesh.triangle_count();
  for (int64_t f = 0; f < faces; ++f) {
    const ViewPoint& a = pts[mesh.triangles[static_cast<size_t>(3 * f)]];
    const ViewPoint& b = pts[mesh.triangles[static_cast<size_t>(3 * f + 1)]];
    const ViewPoint& c = pts[mesh.triangles[static_cast<size_t>(3 * f + 2)]];
    if (a.z <= camera.near || b.z <= camera.near || c.z <= camera.near) continue;
    const double area = (b.px - a.px) * (c.py - a.py) - (b.py - a.py) * (c.px - a.px);
    if (area == 0 || !std::isfinite(area)) continue;
    const int x0 = std::max(0, static_cast<int>(std::floor(std::min({a.px, b.px, c.px}))));
    const int x1 = std::min(width - 1, static_cast<int>(std::floor(std::max({a.px, b.px, c.px}))));
    const int y0 = std::max(0, static_cast<int>(std::floor(std::min({a.py, b.py, c.py}))));
    const int y1 = std::min(height - 1, static_cast<int>(std::floor(std::max({a.py, b.py, c.py}))));
    for (int y = y0; y <= y1; ++y) {
      const double sy = y + 0.5;
      for (int x = x0; x <= x1; ++x) {
        const double sx = x + 0.5;
        // Screen-space barycentrics (either winding).
        const double w0 = ((b.px - sx) * (c.py - sy) - (b.py - sy) * (c.px - sx)) / area;
        const double w1 = ((c.px - sx) * (a.py - sy) - (c.py - sy) * (a.px - sx)) / area;
        const double w2 = 1.0 - w0 - w1;
        if (w0 < 0 || w1 < 0 || w2 < 0) continue;
        const double iz = w0 / a.z + w1 / b.z + w2 / c.z;  // 1 / depth is linear on screen
        const size_t i = static_cast<size_t>(y) * width + x;
        if (iz <= inv_z[i]) continue;
        inv_z[i] = iz;
        r.face[i] = static_cast<int32_t>(f);
        r.depth[i] = static_cast<float>(1.0 / iz);
        r.bary[2 * i] = static_cast<float>(w1 / b.z / iz);
        r.bary[2 * i + 1] = static_cast<float>(w2 / c.z / iz);
      }
    }
  }
  return r;
}

std::vector<uint8_t> inverse_depth_rgb(const ViewRaster& raster) {
  const size_t pixels = raster.face.size();
  float nearest = std::numeric_limits<float>::max();
  for (size_t i = 0; i < pixels; ++i) {
    if (raster.face[i] >= 0) nearest = std::min(nearest, raster.depth[i]);
  }
  std::vector<uint8_t> rgb(3 * pixels, 0);
  for (size_t i = 0; i < pixels; ++i) {
    if (raster.face[i] < 0 || !(raster.depth[i] > 0)) continue;
    const float v = std::clamp(nearest / raster.depth[i], 0.0f, 1.0f);
    const auto g = static_cast<uint8_t>(std::lround(255.0f * v));
    rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = g;
  }
  return rgb;
}

}  // namespace tessera::mesh
