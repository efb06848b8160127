#include "ui/render/depth.h"

#include <algorithm>
#include <cmath>

#include "ui/render/offscreen.h"
#include "ui/render/renderer.h"

namespace tessera::render {

const std::vector<NamedView>& named_views() {
  static const std::vector<NamedView> views = {
      {"front", 0.0f, 20.0f},  {"back", 180.0f, 20.0f},         {"left", -90.0f, 20.0f},
      {"right", 90.0f, 20.0f}, {"three-quarter", 35.0f, 25.0f}, {"top", 0.0f, 89.0f}};
  return views;
}

Expected<NamedView> parse_view(const std::string& name) {
  std::string known;
  for (const NamedView& v : named_views()) {
    if (v.name == name) return v;
    known += (known.empty() ? "" : ", ") + v.name;
  }
  return invalid_argument("view '" + name + "' is not one of " + known);
}

mesh::TextureImage depth_map_from_frame(const Image& frame) {
  mesh::TextureImage out;
  out.width = frame.width;
  out.height = frame.height;
  const size_t pixels = static_cast<size_t>(frame.width) * static_cast<size_t>(frame.height);
  out.rgb.assign(pixels * 3, 0);
  // Inverse depth against the renderer's lower bound, then normalised by the nearest covered
  // pixel's (full coverage: blue 255), so that one is exactly white.
  std::vector<float> v(pixels, 0.0f);
  float nearest = 0.0f;
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* p = &frame.rgba[i * 4];
    v[i] = static_cast<float>(p[0] * 256 + p[1]) / 65535.0f;
    if (p[2] == 255) nearest = std::max(nearest, v[i]);
  }
  if (!(nearest > 0.0f)) return out;
  for (size_t i = 0; i < pixels; ++i) {
    const float d = std::min(v[i] / nearest, 1.0f);
    const auto b = static_cast<uint8_t>(std::lround(d * 255.0f));
    out.rgb[i * 3] = out.rgb[i * 3 + 1] = out.rgb[i * 3 + 2] = b;
  }
  return out;
}

Expected<mesh::TextureImage> render_depth_map(const mesh::Mesh& mesh, const NamedView& view,
                                              int width, int height) {
  if (mesh.triangle_count() == 0) {
    return invalid_argument("a depth map needs a mesh with triangles");
  }
  auto context = OffscreenContext::create(width, height);
  if (!context.ok()) {
    return context.status().with_context(
        "cannot create a headless GL 3.3 context for the depth map (EGL surfaceless; Mesa's "
        "libEGL provides it)");
  }
  auto renderer = MeshRenderer::create();
  if (!renderer.ok()) return renderer.status();
  TESSERA_RETURN_IF_ERROR((*renderer)->set_mesh(mesh));
  RenderOptions options;
  options.shading = ShadingMode::kDepth;
  options.grid = false;
  options.axes = false;
  options.background = {0.0f, 0.0f, 0.0f, 1.0f};
  OrbitCamera camera;
  constexpr float kDegrees = 3.14159265f / 180.0f;
  camera.yaw = view.yaw_degrees * kDegrees;
  camera.pitch = view.pitch_degrees * kDegrees;
  camera.viewport_height = height;
  camera.frame_to_fit((*renderer)->bounds(),
                      static_cast<float>(width) / static_cast<float>(height));
  (*renderer)->draw(camera, options, width, height);
  auto frame = (*context)->read_pixels();
  renderer->reset();  // GL objects go while the context is current
  if (!frame.ok()) return frame.status();
  return depth_map_from_frame(*frame);
}

}  // namespace tessera::render
