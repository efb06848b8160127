// The painter's loop without a diffusion model (engine/mesh/paint_views.h): the view set, and a
// whole paint of a sphere where each view's "generated" image is the known colouring inside its
// mask and the view's init image outside it. The masks must shrink as the paint fills in, the
// texture must end up seen everywhere, and every view must agree with the painted result.
#include "engine/mesh/paint_views.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/mesh/texture_bake.h"
#include "engine/mesh/uv_atlas.h"
#include "tests/support/test_meshes.h"

namespace tessera::mesh {
namespace {

// An ellipsoid off the origin (the views frame its bounds, not the origin).
Mesh sphere(int stacks, int slices) {
  return test::ellipsoid(stacks, slices, {1.0, 0.6, 1.0}, {0.5, 0.0, 0.0});
}

std::array<double, 3> paint(double x, double y, double z) {
  return {127.5 * (1 + std::sin(2 * x)), 127.5 * (1 + y / 0.6), 127.5 * (1 + std::cos(3 * z))};
}

// The "generator": the known colouring where the mask is white, the init image elsewhere.
TextureImage generate(const Mesh& m, const ViewInputs& in) {
  TextureImage img = in.init;
  const ViewRaster& r = in.raster;
  for (size_t i = 0; i < r.face.size(); ++i) {
    if (r.face[i] < 0 || in.mask.rgb[3 * i] == 0) continue;
    const float b[3] = {1.0f - r.bary[2 * i] - r.bary[2 * i + 1], r.bary[2 * i], r.bary[2 * i + 1]};
    double p[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      const uint32_t v = m.triangles[3 * static_cast<size_t>(r.face[i]) + static_cast<size_t>(k)];
      for (int a = 0; a < 3; ++a) p[a] += b[k] * m.positions[3 * v + static_cast<size_t>(a)];
    }
    const auto c = paint(p[0], p[1], p[2]);
    for (int k = 0; k < 3; ++k) {
      img.rgb[3 * i + static_cast<size_t>(k)] =
          static_cast<uint8_t>(std::lround(c[static_cast<size_t>(k)]));
    }
  }
  return img;
}

TEST(PaintViews, TheDefaultSetGoesFrontBackSidesTopBottomAndFramesTheObject) {
  const Mesh m = sphere(16, 32);
  auto views = plan_views(m, ViewSetOptions{});
  ASSERT_TRUE(views.ok());
  ASSERT_EQ(views->size(), 6u);
  const char* names[] = {"front", "back", "right", "left", "top", "bottom"};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ((*views)[i].name, names[i]);
  EXPECT_EQ((*views)[0].prompt_suffix, ", front view");
  EXPECT_EQ((*views)[4].prompt_suffix, ", overhead view");
  for (const PaintView& v : *views) {
    auto r = rasterize_view(m, v.camera, 128, 128);
    ASSERT_TRUE(r.ok()) << v.name;
    int64_t object = 0, border = 0;
    for (int y = 0; y < 128; ++y) {
      for (int x = 0; x < 128; ++x) {
        if (r->face[static_cast<size_t>(y) * 128 + x] < 0) continue;
        ++object;
        if (x == 0 || y == 0 || x == 127 || y == 127) ++border;
      }
    }
    EXPECT_GT(object, 128 * 128 / 8) << v.name << ": the object is too small in the view";
    EXPECT_EQ(border, 0) << v.name << ": the object leaves the view";
  }
  ViewSetOptions eight;
  eight.ring = 8;
  eight.top = eight.bottom = false;
  auto ring = plan_views(m, eight);
  ASSERT_TRUE(ring.ok());
  ASSERT_EQ(ring->size(), 8u);
  EXPECT_EQ((*ring)[1].name, "back");
  EXPECT_EQ((*ring)[2].name, "azimuth 45");
  EXPECT_EQ((*ring)[3].name, "azimuth 315");
}

TEST(PaintViews, AWholePaintSeesEverythingAndEveryViewAgreesWithTheResult) {
  AtlasOptions ao;
  ao.size = 1024;
  Mesh m = *make_uv_atlas(sphere(32, 64), ao);
  constexpr int kTexture = 512, kView = 256;
  auto texels = map_texels(m, kTexture);
  ASSERT_TRUE(texels.ok());
  BakeAccumulator state(kTexture);
  auto views = plan_views(m, ViewSetOptions{});
  ASSERT_TRUE(views.ok());
  std::vector<double> share;  // generated share of each view's object pixels
  std::vector<TextureImage> images;
  std::vector<ViewRaster> rasters;
  for (const PaintView& v : *views) {
    auto in = prepare_view(m, *texels, state, v, kView);
    ASSERT_TRUE(in.ok()) << in.status().message();
    ASSERT_GT(in->object_pixels, 0);
    share.push_back(static_cast<double>(in->generate_pixels) / in->object_pixels);
    const TextureImage img = generate(m, *in);
    ASSERT_TRUE(bake_view(m, *texels, v.camera, in->raster, img, &state).ok());
    images.push_back(img);
    rasters.push_back(in->raster);
  }
  EXPECT_DOUBLE_EQ(share[0], 1.0);  // nothing is painted before the front view
  EXPECT_GT(share[1], 0.8);         // the back: nearly all new
  EXPECT_LT(share[2], 0.9);         // the sides: their front and back halves are painted
  EXPECT_LT(share[4], 0.9);         // top and bottom: most of it too
  const BakeResult baked = finish_bake(m, *texels, state);
  EXPECT_GT(baked.coverage, 0.995);
  m.texture = baked.texture;
  for (size_t i = 0; i < views->size(); ++i) {
    const double psnr = masked_psnr(render_textured_view(m, rasters[i]), images[i], rasters[i]);
    std::printf("%-7s generated %.2f of its pixels; agreement %.1f dB\n", (*views)[i].name.c_str(),
                share[i], psnr);
    EXPECT_GT(psnr, 30.0) << (*views)[i].name;
  }
}

TEST(PaintViews, BadOptionsAreRefusedByName) {
  const Mesh m = sphere(8, 16);
  ViewSetOptions o;
  o.ring = 0;
  auto bad = plan_views(m, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ring"), std::string::npos);
  o = {};
  o.ring_elevation_deg = 75;
  EXPECT_FALSE(plan_views(m, o).ok());
  o = {};
  o.fov_y_deg = 5;
  EXPECT_FALSE(plan_views(m, o).ok());
  EXPECT_FALSE(plan_views(Mesh{}, ViewSetOptions{}).ok());
  AtlasOptions ao;
  ao.size = 1024;
  Mesh uv = *make_uv_atlas(m, ao);
  auto texels = map_texels(uv, 64);
  ASSERT_TRUE(texels.ok());
  BakeAccumulator state(64);
  const PaintView front = (*plan_views(uv, ViewSetOptions{}))[0];
  EXPECT_FALSE(prepare_view(uv, *texels, state, front, 32).ok());
  BakeAccumulator other(32);
  EXPECT_FALSE(prepare_view(uv, *texels, other, front, 128).ok());
}

}  // namespace
}  // namespace tessera::mesh
