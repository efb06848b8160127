// MeshRenderer: draws a tessera::mesh::Mesh with OpenGL 3.3 core (lit / normals / matcap shading,
// optional wireframe overlay, ground grid and axes). One implementation shared by the Qt studio
// viewport (QOpenGLWidget), the GLFW viewer and headless EGL renders.
//
// Threading and context: every method must be called on the thread whose GL 3.3+ core context is
// current, and that must be the context the renderer was created in (GL objects are per context).
// Destroy the renderer while that context is still current (e.g. in QOpenGLWidget's destructor
// after makeCurrent()); otherwise its GL names leak with the context, harmlessly.
//
// Frame contract: draw() renders into the framebuffer currently bound to GL_DRAW_FRAMEBUFFER (the
// widget's FBO in Qt, 0 in GLFW, the offscreen FBO in EGL) and restores every piece of GL state it
// changes (program, VAO, buffers, texture unit 0's 2D binding and the active unit, unpack
// alignment, viewport, depth/blend/cull/polygon-offset enables and funcs, depth mask, clear
// colour), so ImGui or Qt painting before/after it is unaffected.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "engine/mesh/mesh.h"
#include "ui/render/camera.h"

namespace tessera::render {

enum class ShadingMode {
  kLit,       // two-light Blinn-Phong on `base_color`, headlight-ish so shapes read from any angle
  kNormals,   // world-space normal as colour: rgb = normal * 0.5 + 0.5 (+X red, +Y green, +Z blue)
  kMatcap,    // procedural clay matcap indexed by the view-space normal (looks the same from
              // anywhere)
  kTextured,  // kLit with the mesh's texture (sampled at its uvs) as the surface colour; a mesh
              // without uvs or texture is drawn as kLit
  kDepth,     // inverse depth packed for read-back (no wireframe): ui/render/depth.h turns a
              // frame of it into a ControlNet depth map
};
// "lit", "normals", "matcap", "textured", "depth" (for CLIs and settings files).
const char* shading_mode_name(ShadingMode mode);
// Parses the names above; kInvalidArgument naming the bad value otherwise.
Expected<ShadingMode> parse_shading_mode(const char* name);

struct RenderOptions {
  ShadingMode shading = ShadingMode::kLit;
  // Edges drawn over the shaded surface (single pass, geometry shader); edges of triangles only a
  // few pixels high fade out so dense meshes stay readable.
  bool wireframe = false;
  bool grid = true;   // ground grid in the plane y = the mesh's min y (y = 0 without a mesh)
  bool axes = true;   // X (red), Y (green), Z (blue) lines from the world origin
  bool clear = true;  // clear colour and depth first; false draws over what is there
  std::array<float, 4> background{0.17f, 0.18f, 0.20f, 1.0f};  // RGBA in [0, 1]
  std::array<float, 3> base_color{0.80f, 0.78f, 0.74f};        // kLit surface colour
  std::array<float, 3> wire_color{0.05f, 0.05f, 0.06f};
  float wire_width_pixels = 0.8f;  // edge half-width in pixels (anti-aliased)
};

class MeshRenderer {
 public:
  // Compiles and links the shaders and makes the grid/axes buffers. Needs a current GL 3.3+ core
  // context (kUnsupported when the context is older or lacks geometry shaders); a shader that does
  // not compile or link comes back as kInternal with the GL info log.
  static Expected<std::unique_ptr<MeshRenderer>> create();
  ~MeshRenderer();
  MeshRenderer(const MeshRenderer&) = delete;
  MeshRenderer& operator=(const MeshRenderer&) = delete;

  // Uploads `mesh` (copied to GL buffers; the caller keeps ownership and may drop it afterwards).
  // Cheap enough to call every frame a new partial mesh arrives: buffers are reused when they are
  // big enough. Missing normals are computed (area-weighted vertex normals). uvs and the texture
  // are uploaded when the mesh has both (ShadingMode::kTextured samples them; the texture is
  // mip-mapped, texture unit 0 is used and restored). An empty mesh is fine
  // and draws nothing. A mesh that fails mesh::validate() (index out of range, non-finite position,
  // size mismatch) returns kInvalidArgument and keeps the previous mesh.
  Status set_mesh(const mesh::Mesh& mesh);
  // Drops the mesh (draw() then shows only background, grid and axes).
  void clear_mesh();

  // Draws one frame of `width` x `height` pixels (the framebuffer size, device pixels; values < 1
  // are treated as 1). Sets the viewport to (0, 0, width, height) and restores it afterwards.
  void draw(const OrbitCamera& camera, const RenderOptions& options, int width, int height);

  bool has_mesh() const { return index_count_ > 0; }
  bool has_texture() const { return has_texture_; }  // the current mesh came with uvs + texture
  int64_t vertex_count() const { return vertex_count_; }
  int64_t triangle_count() const { return index_count_ / 3; }
  // Bounds of the last uploaded mesh (zeros when there is none): feed to OrbitCamera::frame_to_fit.
  const Bounds& bounds() const { return bounds_; }

 private:
  MeshRenderer() = default;
  Status init();
  void upload_texture(const mesh::TextureImage& image, bool has_uvs);

  uint32_t surface_program_ = 0;  // GLuint
  uint32_t line_program_ = 0;
  uint32_t mesh_vao_ = 0, mesh_vbo_ = 0, mesh_ebo_ = 0;
  int64_t mesh_vbo_bytes_ = 0, mesh_ebo_bytes_ = 0;
  uint32_t line_vao_ = 0, line_vbo_ = 0;
  int64_t line_vbo_bytes_ = 0;
  int64_t vertex_count_ = 0;
  int64_t index_count_ = 0;
  uint32_t texture_ = 0;  // GLuint of the mesh's texture (kept and reused across meshes)
  bool has_texture_ = false;
  Bounds bounds_{};
};

}  // namespace tessera::render
