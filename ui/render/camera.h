// Small linear algebra (Vec3, Mat4) and the orbit camera shared by the studio viewport, the GLFW
// viewer and headless renders. No GL and no Qt here: pure math, usable from any thread.
//
// Conventions: right-handed world, +Y up (the engine's meshes are Y-up); Mat4 is column-major
// (element (row r, col c) at m[c * 4 + r]), so Mat4::data() goes to glUniformMatrix4fv with
// transpose = GL_FALSE. Angles are radians unless a name says degrees.
#pragma once

#include <array>
#include <cmath>

#include "engine/mesh/mesh.h"

namespace tessera::render {

struct Vec3 {
  float x = 0, y = 0, z = 0;

  Vec3 operator+(const Vec3& o) const { return {x + o.x, y + o.y, z + o.z}; }
  Vec3 operator-(const Vec3& o) const { return {x - o.x, y - o.y, z - o.z}; }
  Vec3 operator*(float s) const { return {x * s, y * s, z * s}; }
  Vec3 operator-() const { return {-x, -y, -z}; }
};
inline float dot(const Vec3& a, const Vec3& b) {
  return a.x * b.x + a.y * b.y + a.z * b.z;
}
inline Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
inline float length(const Vec3& v) {
  return std::sqrt(dot(v, v));
}
// Unit vector along v; v itself when its length is zero (no NaNs).
Vec3 normalize(const Vec3& v);

struct Mat4 {
  std::array<float, 16> m{};  // column-major

  static Mat4 identity();
  float& at(int row, int col) { return m[col * 4 + row]; }
  float at(int row, int col) const { return m[col * 4 + row]; }
  const float* data() const { return m.data(); }
  Mat4 operator*(const Mat4& o) const;
  // Transforms a point (w = 1) and divides by the resulting w (projective transforms welcome).
  Vec3 transform_point(const Vec3& p) const;
  // Transforms a direction (w = 0), no division.
  Vec3 transform_direction(const Vec3& d) const;
};

// The classic gluLookAt / gluPerspective matrices (OpenGL clip space, z in [-1, 1]).
Mat4 look_at(const Vec3& eye, const Vec3& target, const Vec3& up);
Mat4 perspective(float fov_y_radians, float aspect, float z_near, float z_far);

// Bounds of a mesh: mesh::Bounds (engine/mesh/mesh.h) plus the helpers the camera needs.
using Bounds = mesh::Bounds;
inline Vec3 bounds_center(const Bounds& b) {
  return {0.5f * (b.min[0] + b.max[0]), 0.5f * (b.min[1] + b.max[1]), 0.5f * (b.min[2] + b.max[2])};
}
// Radius of the sphere around bounds_center() that holds the box (half the diagonal).
inline float bounds_radius(const Bounds& b) {
  return 0.5f * length(Vec3{b.max[0] - b.min[0], b.max[1] - b.min[1], b.max[2] - b.min[2]});
}

// A camera that orbits `target` at `distance`: the eye sits at
//   target + distance * (cos(pitch) sin(yaw), sin(pitch), cos(pitch) cos(yaw)),
// so yaw = pitch = 0 looks down -Z from +Z, positive pitch looks down from above. A plain value
// type: copy it freely (e.g. a snapshot per frame). Mouse-driven methods take pixel deltas; the pan
// speed is scaled so a point on the target plane follows the cursor given `viewport_height`.
class OrbitCamera {
 public:
  Vec3 target{0, 0, 0};
  float distance = 3.0f;        // > 0, clamped to [min_distance, max_distance]
  float yaw = 0.6f;             // radians around +Y
  float pitch = 0.45f;          // radians, clamped to +-(pi/2 - 0.01) so "up" never flips
  float fov_y_degrees = 40.0f;  // vertical field of view
  float orbit_speed = 0.008f;   // radians per pixel of mouse motion
  int viewport_height = 600;    // pixels; the caller updates it on resize (pan scale only)
  float min_distance = 1e-3f;
  float max_distance = 1e5f;

  // Mouse drag by (dx, dy) pixels: dx > 0 turns the view to the right around the target (yaw
  // decreases), dy > 0 (cursor moving down) tilts the camera up over the object (pitch increases).
  void orbit(float dx_pixels, float dy_pixels);
  // Moves target (and eye) in the view plane so the scene follows the cursor by (dx, dy) pixels
  // (dy > 0 = cursor moved down, screen convention).
  void pan(float dx_pixels, float dy_pixels);
  // Wheel steps: positive zooms in (distance *= 0.85^steps); fractional steps are fine.
  void zoom(float steps);
  // Spins the camera around the vertical axis through the target by `angle_radians` (turntables).
  void turntable(float angle_radians);
  // Centres the target on the bounds and sets the distance so the bounding sphere fits the
  // vertical and horizontal field of view at `aspect` (width / height) with a small margin. Keeps
  // yaw/pitch. Empty or degenerate bounds (zero size) frame a unit-radius sphere at its centre.
  void frame_to_fit(const Bounds& bounds, float aspect = 1.0f);

  Vec3 eye() const;
  Mat4 view() const;
  // Near/far planes follow the distance (near = distance / 100, far = distance * 100) so depth
  // precision tracks zoom.
  Mat4 projection(float aspect) const;
};

}  // namespace tessera::render
