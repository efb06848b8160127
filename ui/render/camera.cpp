#include "ui/render/camera.h"

#include <algorithm>
#include <cmath>

namespace tessera::render {

namespace {
constexpr float kPi = 3.14159265358979323846f;
constexpr float kMaxPitch = kPi / 2 - 0.01f;
}  // namespace

Vec3 normalize(const Vec3& v) {
  const float len = length(v);
  return len > 0 ? v * (1.0f / len) : v;
}

Mat4 Mat4::identity() {
  Mat4 r;
  for (int i = 0; i < 4; ++i) r.at(i, i) = 1.0f;
  return r;
}

Mat4 Mat4::operator*(const Mat4& o) const {
  Mat4 r;
  for (int row = 0; row < 4; ++row) {
    for (int col = 0; col < 4; ++col) {
      float s = 0;
      for (int k = 0; k < 4; ++k) s += at(row, k) * o.at(k, col);
      r.at(row, col) = s;
    }
  }
  return r;
}

Vec3 Mat4::transform_point(const Vec3& p) const {
  const float x = at(0, 0) * p.x + at(0, 1) * p.y + at(0, 2) * p.z + at(0, 3);
  const float y = at(1, 0) * p.x + at(1, 1) * p.y + at(1, 2) * p.z + at(1, 3);
  const float z = at(2, 0) * p.x + at(2, 1) * p.y + at(2, 2) * p.z + at(2, 3);
  const float w = at(3, 0) * p.x + at(3, 1) * p.y + at(3, 2) * p.z + at(3, 3);
  const float inv = w != 0 ? 1.0f / w : 1.0f;
  return {x * inv, y * inv, z * inv};
}

Vec3 Mat4::transform_direction(const Vec3& d) const {
  return {at(0, 0) * d.x + at(0, 1) * d.y + at(0, 2) * d.z,
          at(1, 0) * d.x + at(1, 1) * d.y + at(1, 2) * d.z,
          at(2, 0) * d.x + at(2, 1) * d.y + at(2, 2) * d.z};
}

Mat4 look_at(const Vec3& eye, const Vec3& target, const Vec3& up) {
  const Vec3 f = normalize(target - eye);
  const Vec3 s = normalize(cross(f, up));
  const Vec3 u = cross(s, f);
  Mat4 r = Mat4::identity();
  r.at(0, 0) = s.x;
  r.at(0, 1) = s.y;
  r.at(0, 2) = s.z;
  r.at(1, 0) = u.x;
  r.at(1, 1) = u.y;
  r.at(1, 2) = u.z;
  r.at(2, 0) = -f.x;
  r.at(2, 1) = -f.y;
  r.at(2, 2) = -f.z;
  r.at(0, 3) = -dot(s, eye);
  r.at(1, 3) = -dot(u, eye);
  r.at(2, 3) = dot(f, eye);
  return r;
}

Mat4 perspective(float fov_y_radians, float aspect, float z_near, float z_far) {
  const float f = 1.0f / std::tan(0.5f * fov_y_radians);
  Mat4 r;
  r.at(0, 0) = f / aspect;
  r.at(1, 1) = f;
  r.at(2, 2) = (z_far + z_near) / (z_near - z_far);
  r.at(2, 3) = 2.0f * z_far * z_near / (z_near - z_far);
  r.at(3, 2) = -1.0f;
  return r;
}

void OrbitCamera::orbit(float dx_pixels, float dy_pixels) {
  yaw -= dx_pixels * orbit_speed;
  // Keep yaw in (-pi, pi] so long sessions do not lose float precision.
  yaw = std::remainder(yaw, 2 * kPi);
  pitch = std::clamp(pitch + dy_pixels * orbit_speed, -kMaxPitch, kMaxPitch);
}

void OrbitCamera::pan(float dx_pixels, float dy_pixels) {
  const float height = static_cast<float>(std::max(viewport_height, 1));
  const float units_per_pixel =
      2.0f * distance * std::tan(0.5f * fov_y_degrees * kPi / 180.0f) / height;
  const Vec3 forward = normalize(target - eye());
  const Vec3 right = normalize(cross(forward, Vec3{0, 1, 0}));
  const Vec3 up = cross(right, forward);
  // Grab-the-scene: the cursor moving right drags the scene right, so the target moves left.
  target = target - right * (dx_pixels * units_per_pixel) + up * (dy_pixels * units_per_pixel);
}

void OrbitCamera::zoom(float steps) {
  distance = std::clamp(distance * std::pow(0.85f, steps), min_distance, max_distance);
}

void OrbitCamera::turntable(float angle_radians) {
  yaw = std::remainder(yaw + angle_radians, 2 * kPi);
}

void OrbitCamera::frame_to_fit(const Bounds& bounds, float aspect) {
  target = bounds_center(bounds);
  float radius = bounds_radius(bounds);
  if (!(radius > 0) || !std::isfinite(radius)) radius = 1.0f;
  if (!(aspect > 0) || !std::isfinite(aspect)) aspect = 1.0f;
  const float half_v = 0.5f * fov_y_degrees * kPi / 180.0f;
  const float half_h = std::atan(std::tan(half_v) * aspect);
  const float half = std::min(half_v, half_h);
  // A sphere of radius r is tangent to the view cone at distance r / sin(half angle); 8% margin.
  distance = std::clamp(1.08f * radius / std::sin(half), min_distance, max_distance);
}

Vec3 OrbitCamera::eye() const {
  const float cp = std::cos(pitch);
  return target + Vec3{cp * std::sin(yaw), std::sin(pitch), cp * std::cos(yaw)} * distance;
}

Mat4 OrbitCamera::view() const {
  return look_at(eye(), target, Vec3{0, 1, 0});
}

Mat4 OrbitCamera::projection(float aspect) const {
  if (!(aspect > 0) || !std::isfinite(aspect)) aspect = 1.0f;
  return perspective(fov_y_degrees * kPi / 180.0f, aspect, distance / 100.0f, distance * 100.0f);
}

}  // namespace tessera::render
