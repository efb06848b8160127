// Front-view texture projection (engine/mesh/texture.h), the uv/texture invariants of Mesh, how
// clean-up keeps uvs, and the textured OBJ / GLB / FBX exports (files, references, atomicity).
#include "engine/mesh/texture.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/png.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/export.h"
#include "engine/mesh/export_fbx.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {
namespace {

using Rgb = std::array<int, 3>;

// The [-1, 1]^3 cube, 8 shared vertices, outward counter-clockwise triangles.
Mesh cube() {
  Mesh m;
  for (int i = 0; i < 8; ++i) {
    m.positions.push_back(i & 1 ? 1.0f : -1.0f);
    m.positions.push_back(i & 2 ? 1.0f : -1.0f);
    m.positions.push_back(i & 4 ? 1.0f : -1.0f);
  }
  // Quads as (a, b, c, d) counter-clockwise from outside.
  const uint32_t quads[6][4] = {{4, 5, 7, 6},   // +Z front
                                {1, 0, 2, 3},   // -Z back
                                {0, 4, 6, 2},   // -X left
                                {5, 1, 3, 7},   // +X right
                                {6, 7, 3, 2},   // +Y top
                                {0, 1, 5, 4}};  // -Y bottom
  for (const auto& q : quads) {
    m.triangles.insert(m.triangles.end(), {q[0], q[1], q[2], q[0], q[2], q[3]});
  }
  return m;
}

// A size x size image in four solid quadrants: top-left red, top-right green, bottom-left blue,
// bottom-right white.
constexpr Rgb kTopLeft{255, 0, 0}, kTopRight{0, 255, 0}, kBottomLeft{0, 0, 255},
    kBottomRight{255, 255, 255};
TextureImage quadrants(int64_t size = 32) {
  TextureImage t;
  t.width = t.height = size;
  for (int64_t y = 0; y < size; ++y) {
    for (int64_t x = 0; x < size; ++x) {
      const bool left = x < size / 2, top = y < size / 2;
      const Rgb& c = top ? (left ? kTopLeft : kTopRight) : (left ? kBottomLeft : kBottomRight);
      for (int k = 0; k < 3; ++k) t.rgb.push_back(static_cast<uint8_t>(c[k]));
    }
  }
  return t;
}

// The texture colour at a point of the mesh surface: finds the triangle containing `p` (within
// 1e-5 of its plane) and interpolates its vertices' uvs; nearest texel.
Rgb colour_at(const Mesh& m, std::array<float, 3> p) {
  for (int64_t t = 0; t < m.triangle_count(); ++t) {
    std::array<std::array<double, 3>, 3> v;
    for (int c = 0; c < 3; ++c) {
      for (int d = 0; d < 3; ++d) v[c][d] = m.positions[3 * m.triangles[3 * t + c] + d];
    }
    double e1[3], e2[3], q[3];
    for (int d = 0; d < 3; ++d) {
      e1[d] = v[1][d] - v[0][d];
      e2[d] = v[2][d] - v[0][d];
      q[d] = p[d] - v[0][d];
    }
    const double n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                         e1[0] * e2[1] - e1[1] * e2[0]};
    const double nn = n[0] * n[0] + n[1] * n[1] + n[2] * n[2];
    if (std::abs(n[0] * q[0] + n[1] * q[1] + n[2] * q[2]) > 1e-5 * std::sqrt(nn)) continue;
    auto cross_dot = [&](const double* a, const double* b) {
      const double c[3] = {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                           a[0] * b[1] - a[1] * b[0]};
      return (c[0] * n[0] + c[1] * n[1] + c[2] * n[2]) / nn;
    };
    const double b1 = cross_dot(q, e2), b2 = cross_dot(e1, q), b0 = 1 - b1 - b2;
    if (b0 < -1e-6 || b1 < -1e-6 || b2 < -1e-6) continue;
    const double w[3] = {b0, b1, b2};
    double uv[2] = {0, 0};
    for (int c = 0; c < 3; ++c) {
      for (int d = 0; d < 2; ++d) uv[d] += w[c] * m.uvs[2 * m.triangles[3 * t + c] + d];
    }
    const auto x =
        std::min<int64_t>(static_cast<int64_t>(uv[0] * m.texture.width), m.texture.width - 1);
    const auto y = std::min<int64_t>(static_cast<int64_t>((1.0 - uv[1]) * m.texture.height),
                                     m.texture.height - 1);
    const size_t at = static_cast<size_t>((y * m.texture.width + x) * 3);
    return {m.texture.rgb[at], m.texture.rgb[at + 1], m.texture.rgb[at + 2]};
  }
  ADD_FAILURE() << "no triangle contains (" << p[0] << ", " << p[1] << ", " << p[2] << ")";
  return {-1, -1, -1};
}

Mesh textured_cube(const ProjectionOptions& options = {}) {
  Mesh m = cube();
  EXPECT_TRUE(project_texture_front(quadrants(), options, &m).ok());
  return m;
}

TEST(TextureProjection, FrontShowsTheImageTheRightWayRound) {
  ProjectionOptions o;
  o.back_blend = 0.0f;  // back = the softened image, so its quadrant colours stay testable
  const Mesh m = textured_cube(o);
  ASSERT_TRUE(validate(m).ok()) << validate(m).message();
  ASSERT_EQ(m.uvs.size(), 2 * static_cast<size_t>(m.vertex_count()));
  // Front (+Z, facing the default camera): image left = -X, image top = +Y.
  EXPECT_EQ(colour_at(m, {-0.5f, 0.5f, 1.0f}), kTopLeft);
  EXPECT_EQ(colour_at(m, {0.5f, 0.5f, 1.0f}), kTopRight);
  EXPECT_EQ(colour_at(m, {-0.5f, -0.5f, 1.0f}), kBottomLeft);
  EXPECT_EQ(colour_at(m, {0.5f, -0.5f, 1.0f}), kBottomRight);
  // Sides sample the image's matching edge: left face the left column, top face the top row.
  EXPECT_EQ(colour_at(m, {-1.0f, 0.5f, 0.2f}), kTopLeft);
  EXPECT_EQ(colour_at(m, {1.0f, -0.5f, -0.2f}), kBottomRight);
  EXPECT_EQ(colour_at(m, {0.5f, 1.0f, 0.3f}), kTopRight);
  EXPECT_EQ(colour_at(m, {-0.5f, -1.0f, -0.3f}), kBottomLeft);
  // Back: projected straight through (the -X half of the back shows the image's left).
  EXPECT_EQ(colour_at(m, {-0.5f, 0.5f, -1.0f}), kTopLeft);
  EXPECT_EQ(colour_at(m, {0.5f, -0.5f, -1.0f}), kBottomRight);
}

TEST(TextureProjection, BackBlendsTowardsTheMeanColour) {
  ProjectionOptions o;
  o.back_blend = 1.0f;
  const Mesh m = textured_cube(o);
  // Mean of the four quadrants: (510, 510, 510) / 4 = 127.5 per channel.
  for (const auto& p : {std::array<float, 3>{-0.5f, 0.5f, -1.0f}, {0.5f, -0.5f, -1.0f}}) {
    const Rgb c = colour_at(m, p);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(c[k], 127.5, 1.0);
  }
  EXPECT_EQ(colour_at(m, {-0.5f, 0.5f, 1.0f}), kTopLeft);  // the front is untouched
  // The front side band is a third of the way to the back image.
  const Rgb side = colour_at(m, {-1.0f, 0.5f, 0.2f});
  EXPECT_NEAR(side[0], 255 + (127.5 - 255) / 3, 1.5);
  EXPECT_NEAR(side[1], 127.5 / 3, 1.5);
}

TEST(TextureProjection, ZUpMeshGetsTheSameTexture) {
  ProjectionOptions o;
  const Mesh y_up = textured_cube(o);
  ExportOptions rotate;
  rotate.up_axis = UpAxis::kZ;
  Mesh z_up = transform_for_export(cube(), rotate);
  o.up_axis = UpAxis::kZ;
  ASSERT_TRUE(project_texture_front(quadrants(), o, &z_up).ok());
  ASSERT_EQ(z_up.vertex_count(), y_up.vertex_count());
  for (size_t i = 0; i < y_up.uvs.size(); ++i) EXPECT_FLOAT_EQ(z_up.uvs[i], y_up.uvs[i]) << i;
  EXPECT_EQ(colour_at(z_up, {-0.5f, -1.0f, 0.5f}), kTopLeft);  // front is -Y, up is +Z
}

TEST(TextureProjection, MarginAndAspectFitTheBoundsIntoTheImage) {
  Mesh m = cube();
  for (size_t i = 0; i < m.positions.size(); i += 3) m.positions[i] *= 0.5f;  // 1 wide, 2 tall
  ProjectionOptions o;
  o.margin = 0.25f;
  TextureImage image = quadrants(40);
  ASSERT_TRUE(project_texture_front(image, o, &m).ok());
  // Front-region uvs span the middle half of the image vertically and a quarter horizontally
  // (aspect kept), centred. Atlas geometry: region 0 is the top-left (w + 2g) x (h + 2g) block.
  const double aw = static_cast<double>(m.texture.width),
               ah = static_cast<double>(m.texture.height);
  ASSERT_EQ(m.texture.width, 2 * (40 + 2 * kTextureGutter));
  double lo[2] = {1, 1}, hi[2] = {0, 0};
  for (uint32_t v : {4u, 5u, 6u, 7u}) {  // the front corners keep their indices (front region)
    for (int d = 0; d < 2; ++d) {
      lo[d] = std::min<double>(lo[d], m.uvs[2 * v + d]);
      hi[d] = std::max<double>(hi[d], m.uvs[2 * v + d]);
    }
  }
  const double g = static_cast<double>(kTextureGutter);
  EXPECT_NEAR(lo[0] * aw, g + 15, 1e-3);
  EXPECT_NEAR(hi[0] * aw, g + 25, 1e-3);
  EXPECT_NEAR((1 - hi[1]) * ah, g + 10, 1e-3);
  EXPECT_NEAR((1 - lo[1]) * ah, g + 30, 1e-3);
}

// A concept-render-like image: a vertical grey gradient background and, in the pixel rectangle
// [x0, x1) x [y0, y1), an object whose left half is red and right half green, plus `speckles`
// isolated object-coloured pixels scattered over the background.
TextureImage render_like(int64_t w, int64_t h, ImageRect obj, int speckles = 0) {
  TextureImage img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w * h * 3));
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      const size_t at = static_cast<size_t>((y * w + x) * 3);
      const auto grey = static_cast<uint8_t>(90 + 60 * y / h);  // gradient: 90 at the top
      Rgb c{grey, grey, grey};
      if (x >= obj.x0 && x < obj.x1 && y >= obj.y0 && y < obj.y1) {
        c = 2 * (x - obj.x0) < obj.width() ? Rgb{220, 20, 20} : Rgb{20, 200, 40};
      }
      for (int k = 0; k < 3; ++k) img.rgb[at + k] = static_cast<uint8_t>(c[k]);
    }
  }
  for (int i = 0; i < speckles; ++i) {  // deterministic scatter, away from the object
    const int64_t x = (7 + 13 * i) % w, y = (3 + 29 * i) % h;
    if (x >= obj.x0 - 2 && x < obj.x1 + 2 && y >= obj.y0 - 2 && y < obj.y1 + 2) continue;
    const size_t at = static_cast<size_t>((y * w + x) * 3);
    img.rgb[at] = 250;
    img.rgb[at + 1] = img.rgb[at + 2] = 0;
  }
  return img;
}

TEST(TextureObjectBounds, FindsTheObjectOnAGradientAndIgnoresSpeckles) {
  const ImageRect want{20, 26, 44, 50};
  for (int speckles : {0, 12}) {
    const std::optional<ImageRect> got = find_object_bounds(render_like(64, 64, want, speckles));
    ASSERT_TRUE(got.has_value()) << speckles;
    EXPECT_NEAR(got->x0, want.x0, 1) << speckles;
    EXPECT_NEAR(got->x1, want.x1, 1) << speckles;
    EXPECT_NEAR(got->y0, want.y0, 1) << speckles;
    EXPECT_NEAR(got->y1, want.y1, 1) << speckles;
  }
  // Non-square images and an object off centre.
  const std::optional<ImageRect> wide = find_object_bounds(render_like(96, 40, {60, 5, 90, 30}));
  ASSERT_TRUE(wide.has_value());
  EXPECT_EQ(wide->x0, 60);
  EXPECT_EQ(wide->x1, 90);
  EXPECT_EQ(wide->y0, 5);
  EXPECT_EQ(wide->y1, 30);
}

TEST(TextureObjectBounds, NoObjectOrNoBackgroundGivesNothing) {
  EXPECT_FALSE(find_object_bounds(render_like(64, 64, {0, 0, 0, 0})).has_value());  // background
  EXPECT_FALSE(find_object_bounds(render_like(64, 64, {30, 30, 32, 32})).has_value());  // 4 px
  EXPECT_FALSE(find_object_bounds(quadrants(32)).has_value());  // full-frame texture
  EXPECT_FALSE(find_object_bounds(render_like(64, 64, {0, 0, 64, 64})).has_value());
  TextureImage bad;  // invalid images are not an object
  EXPECT_FALSE(find_object_bounds(bad).has_value());
  TextureImage tiny;
  tiny.width = tiny.height = 2;
  tiny.rgb.assign(12, 0);
  EXPECT_FALSE(find_object_bounds(tiny).has_value());
}

TEST(TextureProjection, ObjectFitStretchesTheRendersObjectOntoTheMesh) {
  // A small object left of centre in a 64x64 render: its red half must land on the mesh's -X half
  // and its green half on the +X half, however small it is in the frame.
  const ImageRect obj{10, 30, 30, 46};
  const TextureImage image = render_like(64, 64, obj);
  ProjectionOptions o;
  o.fit = ImageFit::kObject;
  Mesh m = cube();
  std::optional<ImageRect> fitted;
  ASSERT_TRUE(project_texture_front(image, o, &m, &fitted).ok());
  ASSERT_TRUE(fitted.has_value());
  EXPECT_EQ(fitted->x0, obj.x0);
  EXPECT_EQ(fitted->x1, obj.x1);
  EXPECT_EQ(fitted->y0, obj.y0);
  EXPECT_EQ(fitted->y1, obj.y1);
  EXPECT_EQ(colour_at(m, {-0.5f, 0.0f, 1.0f}), (Rgb{220, 20, 20}));
  EXPECT_EQ(colour_at(m, {0.5f, 0.0f, 1.0f}), (Rgb{20, 200, 40}));
  EXPECT_EQ(colour_at(m, {-0.9f, 0.9f, 1.0f}), (Rgb{220, 20, 20}));  // corners stay on the object
  EXPECT_EQ(colour_at(m, {0.9f, -0.9f, 1.0f}), (Rgb{20, 200, 40}));
  // The front corners' uvs are the rectangle's corners (per axis, no aspect kept).
  const double aw = static_cast<double>(m.texture.width),
               ah = static_cast<double>(m.texture.height);
  const double g = static_cast<double>(kTextureGutter);
  double lo[2] = {1, 1}, hi[2] = {0, 0};
  for (uint32_t v : {4u, 5u, 6u, 7u}) {
    for (int d = 0; d < 2; ++d) {
      lo[d] = std::min<double>(lo[d], m.uvs[2 * v + d]);
      hi[d] = std::max<double>(hi[d], m.uvs[2 * v + d]);
    }
  }
  EXPECT_NEAR(lo[0] * aw, g + obj.x0, 1.01);
  EXPECT_NEAR(hi[0] * aw, g + obj.x1, 1.01);
  EXPECT_NEAR((1 - hi[1]) * ah, g + obj.y0, 1.01);
  EXPECT_NEAR((1 - lo[1]) * ah, g + obj.y1, 1.01);

  // The frame fit of the same image puts the mesh's -X half mostly on background.
  Mesh framed = cube();
  ASSERT_TRUE(project_texture_front(image, ProjectionOptions{}, &framed).ok());
  EXPECT_NE(colour_at(framed, {0.9f, 0.0f, 1.0f}), (Rgb{20, 200, 40}));

  // No object in the image: the object fit is the frame fit.
  Mesh a = cube(), b = cube();
  ProjectionOptions frame;
  frame.margin = 0.1f;
  ProjectionOptions object = frame;
  object.fit = ImageFit::kObject;
  ASSERT_TRUE(project_texture_front(quadrants(), frame, &a).ok());
  std::optional<ImageRect> none = ImageRect{1, 1, 2, 2};
  ASSERT_TRUE(project_texture_front(quadrants(), object, &b, &none).ok());
  EXPECT_EQ(a.uvs, b.uvs);
  EXPECT_FALSE(none.has_value());  // the frame fit was used
}

TEST(TextureProjection, SeamsSplitOnlyWhereRegionsMeet) {
  // Cube: each corner joins a front or back face (regions 0 / 3) and side faces (region 1).
  const Mesh m = textured_cube();
  EXPECT_EQ(m.vertex_count(), 16);
  EXPECT_EQ(m.triangle_count(), 12);
  // Every split copy keeps the position (and geometry is unchanged).
  const Mesh original = cube();
  for (int64_t v = 8; v < 16; ++v) {
    bool found = false;
    for (int64_t u = 0; u < 8 && !found; ++u) {
      found = std::memcmp(&m.positions[3 * v], &original.positions[3 * u], 12) == 0;
    }
    EXPECT_TRUE(found) << v;
  }
  EXPECT_DOUBLE_EQ(signed_volume(m), signed_volume(original));

  // A front-facing grid needs no split at all.
  Mesh grid;
  const int n = 4;
  for (int y = 0; y <= n; ++y) {
    for (int x = 0; x <= n; ++x)
      grid.positions.insert(grid.positions.end(), {float(x), float(y), 0.0f});
  }
  for (uint32_t y = 0; y < n; ++y) {
    for (uint32_t x = 0; x < n; ++x) {
      const uint32_t a = y * (n + 1) + x;
      grid.triangles.insert(grid.triangles.end(), {a, a + 1, a + n + 2, a, a + n + 2, a + n + 1});
    }
  }
  ASSERT_TRUE(project_texture_front(quadrants(), {}, &grid).ok());
  EXPECT_EQ(grid.vertex_count(), (n + 1) * (n + 1));
}

TEST(TextureProjection, BadInputIsRejectedAndLeavesTheMeshAlone) {
  const Mesh original = cube();
  Mesh m = original;
  TextureImage wrong = quadrants();
  wrong.rgb.pop_back();
  Status st = project_texture_front(wrong, {}, &m);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bytes"), std::string::npos) << st.message();
  TextureImage zero;
  EXPECT_FALSE(project_texture_front(zero, {}, &m).ok());
  ProjectionOptions bad;
  bad.margin = 0.5f;
  EXPECT_NE(project_texture_front(quadrants(), bad, &m).message().find("margin"),
            std::string::npos);
  bad = {};
  bad.back_blend = NAN;
  EXPECT_NE(project_texture_front(quadrants(), bad, &m).message().find("back_blend"),
            std::string::npos);
  EXPECT_FALSE(project_texture_front(quadrants(), {}, nullptr).ok());
  Mesh empty;
  EXPECT_FALSE(project_texture_front(quadrants(), {}, &empty).ok());
  Mesh flat;  // a line seen from the front: no extent
  flat.positions = {0, 0, 0, 0, 0, 1, 0, 0, 2};
  flat.triangles = {0, 1, 2};
  EXPECT_FALSE(project_texture_front(quadrants(), {}, &flat).ok());
  EXPECT_EQ(m.positions, original.positions);
  EXPECT_EQ(m.triangles, original.triangles);
  EXPECT_TRUE(m.uvs.empty());
  EXPECT_TRUE(m.texture.empty());
}

TEST(MeshTexture, ValidateCatchesBadUvsAndTextures) {
  const Mesh good = textured_cube();
  ASSERT_TRUE(validate(good).ok());
  Mesh m = good;
  m.uvs.pop_back();
  EXPECT_NE(validate(m).message().find("uvs size"), std::string::npos);
  m = good;
  m.uvs[5] = NAN;
  EXPECT_NE(validate(m).message().find("vertex 2"), std::string::npos) << validate(m).message();
  m = good;
  m.uvs[0] = 1.5f;
  EXPECT_FALSE(validate(m).ok());
  m = good;
  m.texture.rgb.resize(m.texture.rgb.size() - 3);
  EXPECT_NE(validate(m).message().find("texture"), std::string::npos);
  m = good;
  m.texture.height = -1;
  EXPECT_FALSE(validate(m).ok());
  m = good;
  m.uvs.clear();
  EXPECT_NE(validate(m).message().find("no uvs"), std::string::npos);
  m = cube();
  m.texture.rgb = {1, 2, 3};  // pixels without a size
  EXPECT_FALSE(validate(m).ok());
  m = cube();
  m.uvs.assign(16, 0.5f);  // uvs without a texture: a layout only, valid
  EXPECT_TRUE(validate(m).ok());
}

TEST(MeshTexture, CleanupKeepsUvsAndSeams) {
  Mesh m = textured_cube();
  const Mesh before = m;
  EXPECT_EQ(weld_vertices(m, 1e-4f), 0);  // seam copies differ in uv: not merged
  EXPECT_EQ(m.uvs, before.uvs);
  // Components joined only across seams still count as one: nothing is dropped.
  EXPECT_EQ(remove_small_components(m, 0.9), 0);
  // Compaction carries uvs along with positions.
  m.positions.insert(m.positions.begin(), {9, 9, 9});
  m.uvs.insert(m.uvs.begin(), {0.25f, 0.75f});
  for (uint32_t& t : m.triangles) ++t;
  compact_vertices(m);
  EXPECT_EQ(m.vertex_count(), 16);
  ASSERT_TRUE(validate(m).ok());
  EXPECT_EQ(colour_at(m, {-0.5f, 0.5f, 1.0f}), kTopLeft);
  ASSERT_TRUE(cleanup(m, CleanupOptions()).ok());
  ASSERT_TRUE(validate(m).ok()) << validate(m).message();
  EXPECT_EQ(m.vertex_count(), 16);
  EXPECT_EQ(colour_at(m, {0.5f, -0.5f, 1.0f}), kBottomRight);
}

TEST(MeshTexture, PngRoundTrip) {
  const TextureImage t = quadrants(20);
  auto png = encode_texture_png(t);
  ASSERT_TRUE(png.ok());
  auto back = decode_texture_png(*png, "mem");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->width, 20);
  EXPECT_EQ(back->rgb, t.rgb);
  auto bad = decode_texture_png("not a png at all", "x.png");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x.png"), std::string::npos);
  std::string truncated = png->substr(0, png->size() / 2);
  EXPECT_FALSE(decode_texture_png(truncated, "half.png").ok());
  EXPECT_EQ(read_texture_png("/nonexistent/t.png").status().code(), ErrorCode::kNotFound)
      << read_texture_png("/nonexistent/t.png").status().message();
}

// ---- Exports -------------------------------------------------------------------------------

class TexturedExport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera_texture_test_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    mesh_ = textured_cube();
    compute_vertex_normals(mesh_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  void expect_png_is_texture(const std::string& path) const {
    auto bytes = read_file(path);
    ASSERT_TRUE(bytes.ok()) << path;
    auto t = decode_texture_png(*bytes, path);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->width, mesh_.texture.width);
    EXPECT_EQ(t->height, mesh_.texture.height);
    EXPECT_TRUE(t->rgb == mesh_.texture.rgb);
  }
  std::filesystem::path dir_;
  Mesh mesh_;
};

TEST_F(TexturedExport, ObjWritesUvsMaterialMapAndPng) {
  const std::string obj = (dir_ / "cube.obj").string();
  ASSERT_TRUE(write_mesh(mesh_, obj).ok());
  EXPECT_EQ(files(), (std::vector<std::string>{"cube.mtl", "cube.obj", "cube_texture.png"}));
  auto text = read_file(obj);
  ASSERT_TRUE(text.ok());
  std::istringstream in(*text);
  std::string line;
  int vt = 0, f = 0;
  while (std::getline(in, line)) {
    if (line.rfind("vt ", 0) == 0) {
      float u = -1, v = -1;
      ASSERT_EQ(std::sscanf(line.c_str(), "vt %f %f", &u, &v), 2);
      EXPECT_FLOAT_EQ(u, mesh_.uvs[2 * static_cast<size_t>(vt)]);
      EXPECT_FLOAT_EQ(v, mesh_.uvs[2 * static_cast<size_t>(vt) + 1]);
      ++vt;
    } else if (line.rfind("f ", 0) == 0) {
      unsigned a[9];
      ASSERT_EQ(std::sscanf(line.c_str(), "f %u/%u/%u %u/%u/%u %u/%u/%u", &a[0], &a[1], &a[2],
                            &a[3], &a[4], &a[5], &a[6], &a[7], &a[8]),
                9)
          << line;
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(a[3 * c], mesh_.triangles[3 * static_cast<size_t>(f) + c] + 1);
        EXPECT_EQ(a[3 * c + 1], a[3 * c]);
        EXPECT_EQ(a[3 * c + 2], a[3 * c]);
      }
      ++f;
    }
  }
  EXPECT_EQ(vt, mesh_.vertex_count());
  EXPECT_EQ(f, mesh_.triangle_count());
  auto mtl = read_file((dir_ / "cube.mtl").string());
  ASSERT_TRUE(mtl.ok());
  EXPECT_NE(mtl->find("\nmap_Kd cube_texture.png\n"), std::string::npos) << *mtl;
  expect_png_is_texture((dir_ / "cube_texture.png").string());
}

TEST_F(TexturedExport, GlbEmbedsThePngAndFlipsV) {
  auto glb = to_glb(mesh_);
  ASSERT_TRUE(glb.ok()) << glb.status().message();
  uint32_t json_len = 0;
  std::memcpy(&json_len, glb->data() + 12, 4);
  const auto doc = nlohmann::json::parse(glb->substr(20, json_len));
  const std::string bin = glb->substr(20 + json_len + 8);
  const auto& prim = doc["meshes"][0]["primitives"][0];
  ASSERT_TRUE(prim["attributes"].contains("TEXCOORD_0"));
  const auto& acc = doc["accessors"][prim["attributes"]["TEXCOORD_0"].get<int>()];
  EXPECT_EQ(acc["type"], "VEC2");
  EXPECT_EQ(acc["count"].get<int64_t>(), mesh_.vertex_count());
  const auto& uv_view = doc["bufferViews"][acc["bufferView"].get<int>()];
  std::vector<float> uvs(mesh_.uvs.size());
  std::memcpy(uvs.data(), bin.data() + uv_view["byteOffset"].get<size_t>(), uvs.size() * 4);
  for (size_t i = 0; i < uvs.size(); ++i) {
    EXPECT_FLOAT_EQ(uvs[i], i % 2 == 0 ? mesh_.uvs[i] : 1.0f - mesh_.uvs[i]) << i;
  }
  // material -> baseColorTexture -> texture -> image -> bufferView holding the PNG.
  const auto& material = doc["materials"][prim["material"].get<int>()];
  const int tex = material["pbrMetallicRoughness"]["baseColorTexture"]["index"];
  const auto& texture = doc["textures"][tex];
  EXPECT_TRUE(doc["samplers"][texture["sampler"].get<int>()].is_object());
  const auto& image = doc["images"][texture["source"].get<int>()];
  EXPECT_EQ(image["mimeType"], "image/png");
  const auto& view = doc["bufferViews"][image["bufferView"].get<int>()];
  EXPECT_FALSE(view.contains("target"));
  const std::string png =
      bin.substr(view["byteOffset"].get<size_t>(), view["byteLength"].get<size_t>());
  auto t = decode_texture_png(png, "embedded");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->rgb == mesh_.texture.rgb);
  EXPECT_EQ(doc["buffers"][0]["byteLength"].get<size_t>(), bin.size());
  // Only one file: the texture is inside.
  ASSERT_TRUE(write_mesh(mesh_, (dir_ / "cube.glb").string()).ok());
  EXPECT_EQ(files(), (std::vector<std::string>{"cube.glb"}));
}

// The PNG beside the FBX and the copy embedded as the Video's Content are the same file.
TEST_F(TexturedExport, FbxReferencesThePngWrittenBesideItAndEmbedsIt) {
  const std::string fbx = (dir_ / "cube.fbx").string();
  ASSERT_TRUE(write_mesh(mesh_, fbx).ok());
  EXPECT_EQ(files(), (std::vector<std::string>{"cube.fbx", "cube_texture.png"}));
  expect_png_is_texture((dir_ / "cube_texture.png").string());
  auto bytes = read_file(fbx);
  ASSERT_TRUE(bytes.ok());
  for (const char* s : {"LayerElementUV", "UVIndex", "IndexToDirect", "TextureVideoClip",
                        "RelativeFilename", "cube_texture.png", "DiffuseColor"}) {
    EXPECT_NE(bytes->find(s), std::string::npos) << s;
  }
  const std::string absolute = std::filesystem::absolute(dir_ / "cube_texture.png").string();
  EXPECT_NE(bytes->find(absolute), std::string::npos);
  auto png = read_file((dir_ / "cube_texture.png").string());
  ASSERT_TRUE(png.ok());
  const size_t content = bytes->find("Content");
  ASSERT_NE(content, std::string::npos);
  // "Content" then the raw property: 'R', u32 length, the bytes.
  const size_t at = content + 7;
  ASSERT_EQ((*bytes)[at], 'R');
  uint32_t length = 0;
  std::memcpy(&length, bytes->data() + at + 1, 4);
  ASSERT_EQ(length, png->size());
  EXPECT_EQ(bytes->compare(at + 5, length, *png), 0);
  // Without a texture file name the FBX still carries the uvs but no texture objects.
  auto plain = to_fbx(mesh_);
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(plain->find("LayerElementUV"), std::string::npos);
  EXPECT_EQ(plain->find("TextureVideoClip"), std::string::npos);
}

TEST_F(TexturedExport, FailuresLeaveNothingBehind) {
  // The PNG cannot be written (a directory is in its place): no MTL, no OBJ, no FBX.
  std::filesystem::create_directories(dir_ / "a_texture.png");
  for (const char* name : {"a.obj", "a.fbx"}) {
    Status st = write_mesh(mesh_, (dir_ / name).string());
    EXPECT_FALSE(st.ok()) << name;
    EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
  }
  EXPECT_EQ(files(), (std::vector<std::string>{"a_texture.png"}));
  // The mesh file itself cannot be written: the PNG (and MTL) written before it are removed.
  std::filesystem::create_directories(dir_ / "b.obj");
  std::filesystem::create_directories(dir_ / "b.fbx");
  EXPECT_FALSE(write_mesh(mesh_, (dir_ / "b.obj").string()).ok());
  EXPECT_FALSE(write_mesh(mesh_, (dir_ / "b.fbx").string()).ok());
  EXPECT_EQ(files(), (std::vector<std::string>{"a_texture.png", "b.fbx", "b.obj"}));
  // A texture of the wrong size is refused before anything is written.
  Mesh bad = mesh_;
  bad.texture.rgb.resize(bad.texture.rgb.size() / 2);
  for (const char* name : {"c.obj", "c.glb", "c.fbx"}) {
    Status st = write_mesh(bad, (dir_ / name).string());
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << name;
    EXPECT_NE(st.message().find("texture"), std::string::npos) << st.message();
  }
  EXPECT_EQ(files(), (std::vector<std::string>{"a_texture.png", "b.fbx", "b.obj"}));
}

}  // namespace
}  // namespace tessera::mesh
