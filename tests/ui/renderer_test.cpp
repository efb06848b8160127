// MeshRenderer and OrbitCamera, checked on real pixels from an EGL surfaceless context (llvmpipe
// here, any GL 3.3 core driver elsewhere). Tests skip when no EGL context can be made.
#include "ui/render/renderer.h"

#include <GL/gl.h>
#include <GL/glext.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "ui/render/camera.h"
#include "ui/render/image.h"
#include "ui/render/offscreen.h"

namespace tessera::render {
namespace {

constexpr float kPi = 3.14159265358979323846f;

// A UV sphere (outward counter-clockwise triangles), `slices` around Y and `stacks` from pole to
// pole. Normals left empty: the renderer computes them, which the normals test then checks.
mesh::Mesh uv_sphere(float radius, Vec3 center, int stacks = 48, int slices = 96) {
  mesh::Mesh m;
  for (int i = 0; i <= stacks; ++i) {
    const float theta = kPi * static_cast<float>(i) / static_cast<float>(stacks);
    for (int j = 0; j <= slices; ++j) {
      const float phi = 2 * kPi * static_cast<float>(j) / static_cast<float>(slices);
      m.positions.push_back(center.x + radius * std::sin(theta) * std::sin(phi));
      m.positions.push_back(center.y + radius * std::cos(theta));
      m.positions.push_back(center.z + radius * std::sin(theta) * std::cos(phi));
    }
  }
  const auto row = static_cast<uint32_t>(slices + 1);
  for (uint32_t i = 0; i < static_cast<uint32_t>(stacks); ++i) {
    for (uint32_t j = 0; j < static_cast<uint32_t>(slices); ++j) {
      const uint32_t a = i * row + j, b = a + row, c = b + 1, d = a + 1;
      m.triangles.insert(m.triangles.end(), {a, b, c, a, c, d});
    }
  }
  return m;
}

bool same_rgb(const uint8_t* p, const std::array<float, 4>& color, int tolerance = 2) {
  for (int c = 0; c < 3; ++c) {
    const int expected = static_cast<int>(std::lround(color[static_cast<size_t>(c)] * 255.0f));
    if (std::abs(p[c] - expected) > tolerance) return false;
  }
  return true;
}

int count_non_background(const Image& image, const std::array<float, 4>& background) {
  int n = 0;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) n += same_rgb(image.pixel(x, y), background) ? 0 : 1;
  }
  return n;
}

class RendererTest : public ::testing::Test {
 protected:
  static constexpr int kWidth = 160, kHeight = 120;

  // One EGL context for the suite (creating one costs ~0.1 s on llvmpipe); each test gets a fresh
  // renderer and the original framebuffer size.
  static void SetUpTestSuite() {
    auto context = OffscreenContext::create(kWidth, kHeight);
    if (context.ok()) {
      shared_context_ = std::move(context).value().release();
    } else {
      skip_reason_ = context.status().to_string();
    }
  }
  static void TearDownTestSuite() {
    delete shared_context_;
    shared_context_ = nullptr;
  }

  void SetUp() override {
    if (shared_context_ == nullptr) GTEST_SKIP() << "no EGL surfaceless context: " << skip_reason_;
    context_ = shared_context_;
    ASSERT_TRUE(context_->make_current().ok());
    ASSERT_TRUE(context_->resize(kWidth, kHeight).ok());
    auto renderer = MeshRenderer::create();
    ASSERT_TRUE(renderer.ok()) << renderer.status().to_string();
    renderer_ = std::move(renderer).value();
    options_.grid = false;
    options_.axes = false;
    camera_.yaw = 0;
    camera_.pitch = 0;
    camera_.viewport_height = kHeight;
  }
  void TearDown() override {
    renderer_.reset();  // while the context is still current
  }

  Image render() {
    renderer_->draw(camera_, options_, context_->width(), context_->height());
    auto image = context_->read_pixels();
    EXPECT_TRUE(image.ok()) << image.status().to_string();
    return image.ok() ? std::move(image).value() : Image{};
  }

  // Saves a render for a person to look at when TESSERA_RENDER_TEST_OUT names a directory.
  static void maybe_save(const Image& image, const std::string& name) {
    if (const char* dir = std::getenv("TESSERA_RENDER_TEST_OUT")) {
      EXPECT_TRUE(write_png(std::string(dir) + "/" + name + ".png", image).ok());
    }
  }

  static inline OffscreenContext* shared_context_ = nullptr;
  static inline std::string skip_reason_;
  OffscreenContext* context_ = nullptr;
  std::unique_ptr<MeshRenderer> renderer_;
  RenderOptions options_;
  OrbitCamera camera_;
};

TEST_F(RendererTest, CentrePixelShowsTheMesh) {
  ASSERT_TRUE(renderer_->set_mesh(uv_sphere(1.0f, {0, 0, 0})).ok());
  EXPECT_TRUE(renderer_->has_mesh());
  camera_.frame_to_fit(renderer_->bounds(), static_cast<float>(kWidth) / kHeight);
  const Image image = render();
  ASSERT_TRUE(image.valid());
  maybe_save(image, "lit");
  EXPECT_FALSE(same_rgb(image.pixel(kWidth / 2, kHeight / 2), options_.background, 10));
  EXPECT_TRUE(same_rgb(image.pixel(1, 1), options_.background));
}

TEST_F(RendererTest, SilhouetteAreaMatchesTheProjectedSphere) {
  const float radius = 0.8f;
  ASSERT_TRUE(renderer_->set_mesh(uv_sphere(radius, {0, 0, 0})).ok());
  camera_.distance = 3.0f;
  const Image image = render();
  // A sphere seen from distance d projects to a disc of angular radius asin(r/d).
  const float half_fov = 0.5f * camera_.fov_y_degrees * kPi / 180.0f;
  const float disc_radius_pixels =
      std::tan(std::asin(radius / camera_.distance)) / std::tan(half_fov) * 0.5f * kHeight;
  const float expected = kPi * disc_radius_pixels * disc_radius_pixels;
  const int covered = count_non_background(image, options_.background);
  EXPECT_NEAR(static_cast<float>(covered), expected, 0.04f * expected)
      << "disc radius " << disc_radius_pixels << " px";
}

TEST_F(RendererTest, NormalsModeColoursByWorldNormal) {
  ASSERT_TRUE(renderer_->set_mesh(uv_sphere(1.0f, {0, 0, 0})).ok());
  camera_.distance = 3.5f;
  options_.shading = ShadingMode::kNormals;
  const Image image = render();
  maybe_save(image, "normals");
  // The centre faces the camera (+Z): (0.5, 0.5, 1.0).
  const uint8_t* centre = image.pixel(kWidth / 2, kHeight / 2);
  EXPECT_NEAR(centre[0], 128, 12);
  EXPECT_NEAR(centre[1], 128, 12);
  EXPECT_NEAR(centre[2], 255, 6);
  // Towards the right limb the normal turns to +X (red up), towards the top to +Y (green up).
  const float half_fov = 0.5f * camera_.fov_y_degrees * kPi / 180.0f;
  const int disc =
      static_cast<int>(std::tan(std::asin(1.0f / 3.5f)) / std::tan(half_fov) * 0.5f * kHeight);
  const uint8_t* right = image.pixel(kWidth / 2 + disc * 9 / 10, kHeight / 2);
  EXPECT_GT(right[0], 200);
  EXPECT_NEAR(right[1], 128, 16);
  const uint8_t* top = image.pixel(kWidth / 2, kHeight / 2 - disc * 9 / 10);
  EXPECT_GT(top[1], 200);
  EXPECT_NEAR(top[0], 128, 16);
}

TEST_F(RendererTest, MatcapAndLitDiffer) {
  ASSERT_TRUE(renderer_->set_mesh(uv_sphere(1.0f, {0, 0, 0})).ok());
  camera_.distance = 3.5f;
  const Image lit = render();
  options_.shading = ShadingMode::kMatcap;
  const Image matcap = render();
  maybe_save(matcap, "matcap");
  int differing = 0;
  for (size_t i = 0; i < lit.rgba.size(); i += 4) {
    differing +=
        std::abs(lit.rgba[i] - matcap.rgba[i]) + std::abs(lit.rgba[i + 2] - matcap.rgba[i + 2]) >
        20;
  }
  EXPECT_GT(differing, 1000);
}

TEST_F(RendererTest, WireframeAddsEdgePixels) {
  ASSERT_TRUE(renderer_->set_mesh(uv_sphere(1.0f, {0, 0, 0}, 12, 24)).ok());
  camera_.distance = 3.0f;
  const Image plain = render();
  options_.wireframe = true;
  const Image wire = render();
  maybe_save(wire, "wireframe");
  // Edge pixels: much darker than the same pixel without the overlay. 12 x 24 quads seen from the
  // side give many hundreds; the rest of the image is unchanged.
  int darker = 0, changed = 0;
  for (size_t i = 0; i < plain.rgba.size(); i += 4) {
    const int before = plain.rgba[i] + plain.rgba[i + 1] + plain.rgba[i + 2];
    const int after = wire.rgba[i] + wire.rgba[i + 1] + wire.rgba[i + 2];
    darker += before - after > 3 * 80;
    changed += before != after;
  }
  EXPECT_GT(darker, 800);
  EXPECT_LT(changed, kWidth * kHeight / 3);  // the background and most of the surface stay
}

TEST_F(RendererTest, EmptyMeshDrawsOnlyBackgroundAndGrid) {
  ASSERT_TRUE(renderer_->set_mesh(uv_sphere(1.0f, {0, 0, 0})).ok());
  ASSERT_TRUE(renderer_->set_mesh(mesh::Mesh{}).ok());
  EXPECT_FALSE(renderer_->has_mesh());
  EXPECT_EQ(renderer_->triangle_count(), 0);
  camera_.pitch = 0.5f;
  const Image empty = render();
  EXPECT_EQ(count_non_background(empty, options_.background), 0);
  options_.grid = true;
  options_.axes = true;
  const Image grid = render();
  maybe_save(grid, "grid_only");
  const int grid_pixels = count_non_background(grid, options_.background);
  EXPECT_GT(grid_pixels, 200);
  // Lines only: far from a filled surface.
  EXPECT_LT(grid_pixels, kWidth * kHeight / 3);
}

TEST_F(RendererTest, InvalidMeshIsRejectedAndThePreviousOneKept) {
  ASSERT_TRUE(renderer_->set_mesh(uv_sphere(1.0f, {0, 0, 0}, 4, 8)).ok());
  const int64_t triangles = renderer_->triangle_count();
  mesh::Mesh bad;
  bad.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  bad.triangles = {0, 1, 7};
  const Status st = renderer_->set_mesh(bad);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("vertex 7"), std::string::npos) << st.message();
  EXPECT_EQ(renderer_->triangle_count(), triangles);
}

TEST_F(RendererTest, FrameToFitPutsTheWholeMeshInView) {
  // Off-centre and small, seen from several directions through a wide and a tall viewport.
  ASSERT_TRUE(renderer_->set_mesh(uv_sphere(0.35f, {3.0f, 1.0f, -2.0f})).ok());
  for (const auto& [width, height] : {std::pair{160, 120}, std::pair{90, 150}}) {
    ASSERT_TRUE(context_->resize(width, height).ok());
    for (float yaw : {0.0f, 1.3f, -2.4f}) {
      camera_ = OrbitCamera{};
      camera_.yaw = yaw;
      camera_.pitch = 0.6f;
      camera_.frame_to_fit(renderer_->bounds(), static_cast<float>(width) / height);
      const Image image = render();
      int border = 0;
      for (int x = 0; x < width; ++x) {
        border += !same_rgb(image.pixel(x, 0), options_.background);
        border += !same_rgb(image.pixel(x, height - 1), options_.background);
      }
      for (int y = 0; y < height; ++y) {
        border += !same_rgb(image.pixel(0, y), options_.background);
        border += !same_rgb(image.pixel(width - 1, y), options_.background);
      }
      EXPECT_EQ(border, 0) << width << "x" << height << " yaw " << yaw;
      // ...and fills a fair part of it rather than a speck (the fit is to the bounding box's
      // sphere, so a ball covers (1/sqrt 3)^2 of the framed disc).
      const float fraction = static_cast<float>(count_non_background(image, options_.background)) /
                             static_cast<float>(width * height);
      EXPECT_GT(fraction, 0.1f) << width << "x" << height << " yaw " << yaw;
    }
  }
}

TEST_F(RendererTest, RestoresTheGlStateItChanges) {
  ASSERT_TRUE(renderer_->set_mesh(uv_sphere(1.0f, {0, 0, 0}, 6, 12)).ok());
  // A caller's state, deliberately unlike what the renderer uses.
  GLuint vao = 0, buffer = 0;
  glGenVertexArrays(1, &vao);
  glGenBuffers(1, &buffer);
  glBindVertexArray(vao);
  glBindBuffer(GL_ARRAY_BUFFER, buffer);
  const char* vs = "#version 330 core\nvoid main() { gl_Position = vec4(0.0); }\n";
  const GLuint shader = glCreateShader(GL_VERTEX_SHADER);
  glShaderSource(shader, 1, &vs, nullptr);
  glCompileShader(shader);
  const GLuint program = glCreateProgram();
  glAttachShader(program, shader);
  glLinkProgram(program);
  glUseProgram(program);
  glDisable(GL_DEPTH_TEST);
  glDepthFunc(GL_GREATER);
  glDepthMask(GL_FALSE);
  glEnable(GL_BLEND);
  glBlendFunc(GL_ONE, GL_ONE);
  glEnable(GL_CULL_FACE);
  glEnable(GL_SCISSOR_TEST);
  glScissor(3, 4, 5, 6);
  glViewport(7, 8, 9, 10);
  glClearColor(0.1f, 0.2f, 0.3f, 0.4f);

  options_.wireframe = true;
  options_.grid = true;
  options_.axes = true;
  renderer_->draw(camera_, options_, kWidth, kHeight);

  GLint value = 0;
  glGetIntegerv(GL_CURRENT_PROGRAM, &value);
  EXPECT_EQ(static_cast<GLuint>(value), program);
  glGetIntegerv(GL_VERTEX_ARRAY_BINDING, &value);
  EXPECT_EQ(static_cast<GLuint>(value), vao);
  glGetIntegerv(GL_ARRAY_BUFFER_BINDING, &value);
  EXPECT_EQ(static_cast<GLuint>(value), buffer);
  EXPECT_FALSE(glIsEnabled(GL_DEPTH_TEST));
  EXPECT_TRUE(glIsEnabled(GL_BLEND));
  EXPECT_TRUE(glIsEnabled(GL_CULL_FACE));
  EXPECT_TRUE(glIsEnabled(GL_SCISSOR_TEST));
  glGetIntegerv(GL_DEPTH_FUNC, &value);
  EXPECT_EQ(value, GL_GREATER);
  GLboolean mask = GL_TRUE;
  glGetBooleanv(GL_DEPTH_WRITEMASK, &mask);
  EXPECT_EQ(mask, GL_FALSE);
  glGetIntegerv(GL_BLEND_SRC_RGB, &value);
  EXPECT_EQ(value, GL_ONE);
  glGetIntegerv(GL_BLEND_DST_RGB, &value);
  EXPECT_EQ(value, GL_ONE);
  GLint viewport[4] = {0, 0, 0, 0};
  glGetIntegerv(GL_VIEWPORT, viewport);
  EXPECT_EQ(viewport[0], 7);
  EXPECT_EQ(viewport[3], 10);
  GLfloat clear[4] = {0, 0, 0, 0};
  glGetFloatv(GL_COLOR_CLEAR_VALUE, clear);
  EXPECT_FLOAT_EQ(clear[2], 0.3f);
  EXPECT_EQ(glGetError(), static_cast<GLenum>(GL_NO_ERROR));

  // The draw happened despite the caller's odd state (scissor, no depth test, blending).
  glUseProgram(0);
  glDisable(GL_SCISSOR_TEST);
  const Image image = context_->read_pixels().value();
  EXPECT_FALSE(same_rgb(image.pixel(kWidth / 2, kHeight / 2), options_.background, 10));
  glDeleteProgram(program);
  glDeleteShader(shader);
  glDeleteBuffers(1, &buffer);
  glDeleteVertexArrays(1, &vao);
}

TEST_F(RendererTest, PartialMeshStreamReusesBuffers) {
  // Growing and shrinking meshes, as partial meshes arrive: each frame shows the latest one.
  int previous = 0;
  camera_.distance = 4.0f;
  for (float r : {0.3f, 0.6f, 0.9f, 0.45f}) {
    ASSERT_TRUE(
        renderer_->set_mesh(uv_sphere(r, {0, 0, 0}, 8 + static_cast<int>(r * 20), 32)).ok());
    const int covered = count_non_background(render(), options_.background);
    if (r != 0.45f) {
      EXPECT_GT(covered, previous);
    } else {
      EXPECT_LT(covered, previous);
    }
    previous = covered;
  }
}

// A unit quad in the z = 0 plane facing the camera (+Z), uvs at its corners (v up), carrying a
// 2 x 2 texture: top row red | green, bottom row blue | white (image rows top first).
mesh::Mesh textured_quad() {
  mesh::Mesh m;
  m.positions = {-1, -1, 0, 1, -1, 0, 1, 1, 0, -1, 1, 0};
  m.triangles = {0, 1, 2, 0, 2, 3};
  m.uvs = {0, 0, 1, 0, 1, 1, 0, 1};
  m.texture.width = 2;
  m.texture.height = 2;
  m.texture.rgb = {255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255};
  return m;
}

// The dominant channel of a pixel (0 red, 1 green, 2 blue), or 3 when all are bright (white).
int dominant(const uint8_t* p) {
  if (p[0] > 150 && p[1] > 150 && p[2] > 150) return 3;
  return p[0] > p[1] && p[0] > p[2] ? 0 : (p[1] > p[2] ? 1 : 2);
}

TEST_F(RendererTest, TexturedModeSamplesTheMeshTextureAtItsUvs) {
  ASSERT_TRUE(renderer_->set_mesh(textured_quad()).ok());
  EXPECT_TRUE(renderer_->has_texture());
  camera_.distance = 3.5f;
  options_.shading = ShadingMode::kTextured;
  const Image image = render();
  maybe_save(image, "textured");
  // Quarter points of the quad: +X right, +Y up (image y grows downwards), v up on the mesh.
  const float half_fov = 0.5f * camera_.fov_y_degrees * kPi / 180.0f;
  const int q = static_cast<int>(0.5f / (camera_.distance * std::tan(half_fov)) * 0.5f * kHeight);
  const int cx = kWidth / 2, cy = kHeight / 2;
  EXPECT_EQ(dominant(image.pixel(cx - q, cy - q)), 0);  // top left: red
  EXPECT_EQ(dominant(image.pixel(cx + q, cy - q)), 1);  // top right: green
  EXPECT_EQ(dominant(image.pixel(cx - q, cy + q)), 2);  // bottom left: blue
  EXPECT_EQ(dominant(image.pixel(cx + q, cy + q)), 3);  // bottom right: white

  // Lit ignores the texture; a mesh without uvs in textured mode is drawn as lit.
  options_.shading = ShadingMode::kLit;
  const Image lit = render();
  EXPECT_NE(dominant(lit.pixel(cx - q, cy - q)), 0);
  mesh::Mesh plain = textured_quad();
  plain.uvs.clear();
  plain.texture = {};
  ASSERT_TRUE(renderer_->set_mesh(plain).ok());
  EXPECT_FALSE(renderer_->has_texture());
  options_.shading = ShadingMode::kTextured;
  const Image fallback = render();
  for (int dy : {-q, q}) {
    for (int dx : {-q, q}) {
      const uint8_t* a = fallback.pixel(cx + dx, cy + dy);
      const uint8_t* b = lit.pixel(cx + dx, cy + dy);
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(a[c], b[c], 2);
    }
  }
}

TEST(ShadingModeTest, NamesRoundTrip) {
  for (ShadingMode m :
       {ShadingMode::kLit, ShadingMode::kNormals, ShadingMode::kMatcap, ShadingMode::kTextured}) {
    auto parsed = parse_shading_mode(shading_mode_name(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  const auto bad = parse_shading_mode("phong");
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("phong"), std::string::npos);
}

// ---- camera math (no GL)
// -------------------------------------------------------------------------

TEST(OrbitCameraTest, LooksAtTheTargetFromTheDocumentedDirection) {
  OrbitCamera camera;
  camera.target = {1, 2, 3};
  camera.distance = 5;
  camera.yaw = 0;
  camera.pitch = 0;
  const Vec3 eye = camera.eye();
  EXPECT_NEAR(eye.x, 1, 1e-5);
  EXPECT_NEAR(eye.y, 2, 1e-5);
  EXPECT_NEAR(eye.z, 8, 1e-5);
  // The target lands at the centre of the view, 5 units down -Z in view space.
  const Vec3 t = camera.view().transform_point(camera.target);
  EXPECT_NEAR(t.x, 0, 1e-5);
  EXPECT_NEAR(t.y, 0, 1e-5);
  EXPECT_NEAR(t.z, -5, 1e-4);
  const Vec3 ndc = (camera.projection(1.5f) * camera.view()).transform_point(camera.target);
  EXPECT_NEAR(ndc.x, 0, 1e-5);
  EXPECT_NEAR(ndc.y, 0, 1e-5);
  EXPECT_GT(ndc.z, -1);
  EXPECT_LT(ndc.z, 1);
}

TEST(OrbitCameraTest, OrbitClampsPitchAndZoomScalesDistance) {
  OrbitCamera camera;
  camera.orbit(0, 1e6f);
  EXPECT_LT(camera.pitch, kPi / 2);
  camera.orbit(0, -1e6f);
  EXPECT_GT(camera.pitch, -kPi / 2);
  const float yaw = camera.yaw;
  camera.orbit(100, 0);
  EXPECT_NEAR(camera.yaw, yaw - 100 * camera.orbit_speed, 1e-5);
  camera.distance = 2;
  camera.zoom(1);
  EXPECT_NEAR(camera.distance, 1.7f, 1e-5);
  camera.zoom(-2);
  EXPECT_NEAR(camera.distance, 2.0f / 0.85f, 1e-4);
  camera.zoom(1e9f);
  EXPECT_GE(camera.distance, camera.min_distance);
}

TEST(OrbitCameraTest, PanMakesTheTargetFollowTheCursor) {
  OrbitCamera camera;
  camera.viewport_height = 400;
  const float aspect = 1.25f;
  const Vec3 point = camera.target;
  camera.pan(30, -20);  // cursor 30 px right, 20 px up
  const Vec3 ndc = (camera.projection(aspect) * camera.view()).transform_point(point);
  // NDC to pixels: x * width / 2, y * height / 2 (y up).
  EXPECT_NEAR(ndc.x * 0.5f * 400 * aspect, 30, 0.05);
  EXPECT_NEAR(ndc.y * 0.5f * 400, 20, 0.05);
}

TEST(OrbitCameraTest, FrameToFitKeepsEveryCornerInsideTheView) {
  Bounds b;
  b.min = {-4, 0.5f, 10};
  b.max = {-1, 2.5f, 10.2f};
  for (float aspect : {0.4f, 1.0f, 2.5f}) {
    OrbitCamera camera;
    camera.yaw = 2.0f;
    camera.frame_to_fit(b, aspect);
    const Mat4 vp = camera.projection(aspect) * camera.view();
    for (int corner = 0; corner < 8; ++corner) {
      const Vec3 p{b.min[0] + (corner & 1 ? b.max[0] - b.min[0] : 0),
                   b.min[1] + (corner & 2 ? b.max[1] - b.min[1] : 0),
                   b.min[2] + (corner & 4 ? b.max[2] - b.min[2] : 0)};
      const Vec3 ndc = vp.transform_point(p);
      EXPECT_LT(std::abs(ndc.x), 1.0f) << "aspect " << aspect;
      EXPECT_LT(std::abs(ndc.y), 1.0f) << "aspect " << aspect;
      EXPECT_LT(std::abs(ndc.z), 1.0f) << "aspect " << aspect;
    }
  }
  // Degenerate bounds (a point) still give a usable camera.
  OrbitCamera camera;
  camera.frame_to_fit(Bounds{}, 1.0f);
  EXPECT_TRUE(std::isfinite(camera.distance));
  EXPECT_GT(camera.distance, 0);
}

}  // namespace
}  // namespace tessera::render
