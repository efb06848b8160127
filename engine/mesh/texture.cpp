#include "engine/mesh/texture.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "core/png.h"

namespace tessera::mesh {
namespace {

// The four atlas regions (texture.h): 0 front, 1 front side, 2 back side, 3 back; region r sits at
// column r % 2, row r / 2 of the atlas (row 0 on top). kRegionBackWeight[r] is how far the region
// goes from the image towards the back image.
constexpr int kRegions = 4;
constexpr float kRegionBackWeight[kRegions] = {0.0f, 1.0f / 3.0f, 2.0f / 3.0f, 1.0f};
// |cos| between the face normal and the view direction below which a face counts as "side".
constexpr double kSideCos = 0.35;

int region_of(double facing) {
  if (facing >= kSideCos) return 0;
  if (facing >= 0.0) return 1;
  if (facing >= -kSideCos) return 2;
  return 3;
}

// The front view's frame for a mesh of the given up axis: which coordinate runs right (`right`),
// up (`up`), and the coordinate and sign pointing from the object towards the camera.
struct ViewFrame {
  int right = 0, up = 1, towards = 2;
  double towards_sign = 1.0;
};
ViewFrame front_frame(UpAxis axis) {
  if (axis == UpAxis::kZ) return {0, 2, 1, -1.0};  // camera on -Y looking at +Y, Z up
  return {0, 1, 2, 1.0};                           // camera on +Z looking down -Z, Y up
}

// Separable box blur with edge clamping, applied `passes` times (three passes approximate a
// Gaussian). Float RGB, row-major.
void box_blur(std::vector<float>& img, int64_t w, int64_t h, int64_t radius, int passes) {
  std::vector<float> tmp(img.size());
  const float inv = 1.0f / static_cast<float>(2 * radius + 1);
  for (int p = 0; p < passes; ++p) {
    for (int horizontal = 1; horizontal >= 0; --horizontal) {
      const int64_t len = horizontal ? w : h, lines = horizontal ? h : w;
      const int64_t step = horizontal ? 3 : 3 * w;
      for (int64_t line = 0; line < lines; ++line) {
        const int64_t base = horizontal ? line * w * 3 : line * 3;
        for (int c = 0; c < 3; ++c) {
          auto at = [&](int64_t i) {
            return img[static_cast<size_t>(base + std::clamp<int64_t>(i, 0, len - 1) * step + c)];
          };
          float sum = 0;
          for (int64_t i = -radius; i <= radius; ++i) sum += at(i);
          for (int64_t i = 0; i < len; ++i) {
            tmp[static_cast<size_t>(base + i * step + c)] = sum * inv;
            sum += at(i + radius + 1) - at(i - radius);
          }
        }
      }
      img.swap(tmp);
    }
  }
}

// The atlas: four regions of (w + 2g) x (h + 2g) texels, each the image blended towards `back`
// by its weight, the gutter replicating the region's edge texels.
TextureImage build_atlas(const TextureImage& image, float back_blend) {
  const int64_t w = image.width, h = image.height, g = kTextureGutter;
  const int64_t rw = w + 2 * g, rh = h + 2 * g;
  std::vector<float> front(image.rgb.begin(), image.rgb.end());
  std::array<double, 3> mean{0, 0, 0};
  for (size_t i = 0; i < front.size(); ++i) mean[i % 3] += front[i];
  for (double& m : mean) m /= static_cast<double>(w * h);
  std::vector<float> back = front;
  box_blur(back, w, h, std::max<int64_t>(1, std::min(w, h) / 24), 3);
  for (size_t i = 0; i < back.size(); ++i) {
    back[i] += back_blend * (static_cast<float>(mean[i % 3]) - back[i]);
  }
  TextureImage atlas;
  atlas.width = 2 * rw;
  atlas.height = 2 * rh;
  atlas.rgb.resize(static_cast<size_t>(atlas.width * atlas.height * 3));
  for (int r = 0; r < kRegions; ++r) {
    const float t = kRegionBackWeight[r];
    const int64_t x0 = (r % 2) * rw, y0 = (r / 2) * rh;
    for (int64_t y = 0; y < rh; ++y) {
      const int64_t sy = std::clamp<int64_t>(y - g, 0, h - 1);
      for (int64_t x = 0; x < rw; ++x) {
        const int64_t sx = std::clamp<int64_t>(x - g, 0, w - 1);
        const size_t s = static_cast<size_t>((sy * w + sx) * 3);
        const size_t d = static_cast<size_t>(((y0 + y) * atlas.width + x0 + x) * 3);
        for (int c = 0; c < 3; ++c) {
          const float v = front[s + c] + t * (back[s + c] - front[s + c]);
          atlas.rgb[d + c] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0f, 255.0f)));
        }
      }
    }
  }
  return atlas;
}

// The q-quantile (q in [0, 1]) of a histogram of integer positions 0..n-1 holding `total` counts.
int64_t histogram_quantile(const std::vector<int64_t>& hist, int64_t total, double q) {
  const auto rank = static_cast<int64_t>(std::floor(q * static_cast<double>(total - 1)));
  int64_t seen = 0;
  for (size_t i = 0; i < hist.size(); ++i) {
    seen += hist[i];
    if (seen > rank) return static_cast<int64_t>(i);
  }
  return static_cast<int64_t>(hist.size()) - 1;
}

}  // namespace

std::optional<ImageRect> find_object_bounds(const TextureImage& image) {
  if (!validate_texture_image(image).ok()) return std::nullopt;
  const int64_t w = image.width, h = image.height;
  const int64_t b = std::min<int64_t>(kObjectBorder, w / 4);
  if (b < 1 || h < 4) return std::nullopt;
  std::vector<int64_t> cols(static_cast<size_t>(w), 0), rows(static_cast<size_t>(h), 0);
  int64_t count = 0, border_hits = 0, border_total = 0;
  std::vector<int> band;
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* row = image.rgb.data() + static_cast<size_t>(y * w * 3);
    int bg[3];
    for (int c = 0; c < 3; ++c) {
      band.clear();
      for (int64_t x = 0; x < b; ++x) {
        band.push_back(row[3 * x + c]);
        band.push_back(row[3 * (w - 1 - x) + c]);
      }
      std::nth_element(band.begin(), band.begin() + static_cast<std::ptrdiff_t>(band.size() / 2),
                       band.end());
      bg[c] = band[band.size() / 2];
    }
    for (int64_t x = 0; x < w; ++x) {
      int diff = 0;
      for (int c = 0; c < 3; ++c) diff = std::max(diff, std::abs(row[3 * x + c] - bg[c]));
      const bool object = diff > kObjectThreshold;
      const bool border = x < b || x >= w - b || y < b || y >= h - b;
      border_total += border;
      border_hits += border && object;
      if (object) {
        ++cols[static_cast<size_t>(x)];
        ++rows[static_cast<size_t>(y)];
        ++count;
      }
    }
  }
  if (static_cast<double>(count) < kObjectMinFraction * static_cast<double>(w * h) ||
      2 * border_hits > border_total) {
    return std::nullopt;
  }
  ImageRect r;
  r.x0 = histogram_quantile(cols, count, 0.01);
  r.x1 = histogram_quantile(cols, count, 0.99) + 1;
  r.y0 = histogram_quantile(rows, count, 0.01);
  r.y1 = histogram_quantile(rows, count, 0.99) + 1;
  return r;
}

Status validate_projection_options(const ProjectionOptions& options) {
  if (!std::isfinite(options.margin) || options.margin < 0.0f || options.margin > 0.45f) {
    return invalid_argument("texture projection: margin " + std::to_string(options.margin) +
                            " is outside [0, 0.45]");
  }
  if (!std::isfinite(options.back_blend) || options.back_blend < 0.0f ||
      options.back_blend > 1.0f) {
    return invalid_argument("texture projection: back_blend " + std::to_string(options.back_blend) +
                            " is outside [0, 1]");
  }
  return Status();
}

Status validate_texture_image(const TextureImage& image, const std::string& what) {
  if (image.width < 1 || image.height < 1 || image.width > kMaxTextureSide ||
      image.height > kMaxTextureSide) {
    return invalid_argument(what + ": size " + std::to_string(image.width) + "x" +
                            std::to_string(image.height) + " is outside [1, " +
                            std::to_string(kMaxTextureSide) + "] per side");
  }
  const auto expected = static_cast<size_t>(image.width * image.height * 3);
  if (image.rgb.size() != expected) {
    return invalid_argument(what + ": holds " + std::to_string(image.rgb.size()) +
                            " bytes of RGB, expected 3 * " + std::to_string(image.width) + " * " +
                            std::to_string(image.height) + " = " + std::to_string(expected));
  }
  return Status();
}

Status project_texture_front(const TextureImage& image, const ProjectionOptions& options,
                             Mesh* mesh, std::optional<ImageRect>* fitted_object) {
  if (mesh == nullptr) return invalid_argument("texture projection: no mesh");
  TESSERA_RETURN_IF_ERROR(validate_texture_image(image, "texture projection: image"));
  TESSERA_RETURN_IF_ERROR(validate_projection_options(options));
  TESSERA_RETURN_IF_ERROR(validate(*mesh));
  if (mesh->empty()) return invalid_argument("texture projection: the mesh has no triangles");

  const ViewFrame f = front_frame(options.up_axis);
  const int64_t n = mesh->vertex_count(), nt = mesh->triangle_count();
  const std::vector<float>& p = mesh->positions;

  double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
  for (uint32_t v : mesh->triangles) {
    const double c[2] = {p[3 * v + f.right], p[3 * v + f.up]};
    for (int a = 0; a < 2; ++a) {
      lo[a] = std::min(lo[a], c[a]);
      hi[a] = std::max(hi[a], c[a]);
    }
  }
  if (!(hi[0] > lo[0]) && !(hi[1] > lo[1])) {
    return invalid_argument("texture projection: the mesh has no extent in the front view");
  }
  const double w = static_cast<double>(image.width), h = static_cast<double>(image.height);
  // Image coordinates (u right, t up, both in [0, 1]) of a vertex: u = u0 + (x - lo0) * su,
  // t = t0 + (y - lo1) * st.
  double u0 = 0, su = 0, t0 = 0, st = 0;
  const std::optional<ImageRect> object =
      options.fit == ImageFit::kObject ? find_object_bounds(image) : std::nullopt;
  if (object) {
    // The object's rectangle, each axis stretched onto the mesh's bounds (a flat axis: its middle).
    const double x0 = static_cast<double>(object->x0) / w, x1 = static_cast<double>(object->x1) / w;
    const double tb = 1.0 - static_cast<double>(object->y1) / h;
    const double tt = 1.0 - static_cast<double>(object->y0) / h;
    if (hi[0] > lo[0]) {
      su = (x1 - x0) / (hi[0] - lo[0]);
      u0 = x0;
    } else {
      u0 = 0.5 * (x0 + x1);
    }
    if (hi[1] > lo[1]) {
      st = (tt - tb) / (hi[1] - lo[1]);
      t0 = tb;
    } else {
      t0 = 0.5 * (tb + tt);
    }
  } else {
    // Fit the mesh's projected bounds into the image less the margin, keeping the aspect ratio:
    // k pixels per unit, centred.
    const double usable = 1.0 - 2.0 * options.margin;
    double k = INFINITY;
    if (hi[0] > lo[0]) k = std::min(k, w * usable / (hi[0] - lo[0]));
    if (hi[1] > lo[1]) k = std::min(k, h * usable / (hi[1] - lo[1]));
    su = k / w;
    st = k / h;
    u0 = 0.5 - 0.5 * (hi[0] - lo[0]) * su;
    t0 = 0.5 - 0.5 * (hi[1] - lo[1]) * st;
  }
  auto image_uv = [&](int64_t v) {
    const double u = u0 + (p[3 * v + f.right] - lo[0]) * su;
    const double t = t0 + (p[3 * v + f.up] - lo[1]) * st;
    return std::array<double, 2>{std::clamp(u, 0.0, 1.0), std::clamp(t, 0.0, 1.0)};
  };

  // Region per triangle from its face normal (zero-area faces: the mean vertex normal if there is
  // one, else the front).
  std::vector<uint8_t> region(static_cast<size_t>(nt));
  for (int64_t t = 0; t < nt; ++t) {
    const uint32_t a = mesh->triangles[3 * t], b = mesh->triangles[3 * t + 1],
                   c = mesh->triangles[3 * t + 2];
    double e1[3], e2[3];
    for (int d = 0; d < 3; ++d) {
      e1[d] = static_cast<double>(p[3 * b + d]) - p[3 * a + d];
      e2[d] = static_cast<double>(p[3 * c + d]) - p[3 * a + d];
    }
    double nrm[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                     e1[0] * e2[1] - e1[1] * e2[0]};
    double len = std::sqrt(nrm[0] * nrm[0] + nrm[1] * nrm[1] + nrm[2] * nrm[2]);
    if (!(len > 0) && !mesh->normals.empty()) {
      for (int d = 0; d < 3; ++d) {
        nrm[d] = static_cast<double>(mesh->normals[3 * a + d]) + mesh->normals[3 * b + d] +
                 mesh->normals[3 * c + d];
      }
      len = std::sqrt(nrm[0] * nrm[0] + nrm[1] * nrm[1] + nrm[2] * nrm[2]);
    }
    const double facing = len > 0 ? f.towards_sign * nrm[f.towards] / len : 1.0;
    region[static_cast<size_t>(t)] = static_cast<uint8_t>(region_of(facing));
  }

  // Split seam vertices: a vertex keeps its index for the first region that uses it and gets one
  // copy per further region. copy[v * kRegions + r] is the index serving region r.
  std::vector<int64_t> copy(static_cast<size_t>(n * kRegions), -1);
  std::vector<int8_t> own(static_cast<size_t>(n), -1);  // the region the original index serves
  std::vector<uint32_t> source;                         // original vertex of each appended copy
  std::vector<uint8_t> copy_region;
  std::vector<uint32_t> triangles = mesh->triangles;
  for (int64_t t = 0; t < nt; ++t) {
    const int r = region[static_cast<size_t>(t)];
    for (int corner = 0; corner < 3; ++corner) {
      uint32_t& v = triangles[static_cast<size_t>(3 * t + corner)];
      int64_t& slot = copy[static_cast<size_t>(v) * kRegions + static_cast<size_t>(r)];
      if (slot < 0) {
        if (own[v] < 0) {
          own[v] = static_cast<int8_t>(r);
          slot = v;
        } else {
          slot = n + static_cast<int64_t>(source.size());
          source.push_back(v);
          copy_region.push_back(static_cast<uint8_t>(r));
        }
      }
      v = static_cast<uint32_t>(slot);
    }
  }
  const int64_t total = n + static_cast<int64_t>(source.size());
  if (total > static_cast<int64_t>(UINT32_MAX)) {
    return invalid_argument("texture projection: splitting seams would need " +
                            std::to_string(total) + " vertices (uint32 indices)");
  }

  TextureImage atlas = build_atlas(image, options.back_blend);
  const double rw = w + 2 * kTextureGutter, rh = h + 2 * kTextureGutter;
  const double aw = static_cast<double>(atlas.width), ah = static_cast<double>(atlas.height);
  auto atlas_uv = [&](int64_t v, int r) {
    const std::array<double, 2> iuv = image_uv(v);
    const double x = (r % 2) * rw + kTextureGutter + iuv[0] * w;
    const double y_down = (r / 2) * rh + kTextureGutter + (1.0 - iuv[1]) * h;
    return std::array<float, 2>{static_cast<float>(x / aw), static_cast<float>(1.0 - y_down / ah)};
  };

  Mesh out;
  out.positions = mesh->positions;
  out.positions.reserve(static_cast<size_t>(total) * 3);
  const bool has_normals = !mesh->normals.empty();
  if (has_normals) out.normals = mesh->normals;
  out.uvs.resize(static_cast<size_t>(total) * 2);
  for (int64_t v = 0; v < n; ++v) {
    const auto uv = atlas_uv(v, std::max<int>(own[static_cast<size_t>(v)], 0));
    out.uvs[static_cast<size_t>(2 * v)] = uv[0];
    out.uvs[static_cast<size_t>(2 * v + 1)] = uv[1];
  }
  for (size_t i = 0; i < source.size(); ++i) {
    const uint32_t v = source[i];
    for (int d = 0; d < 3; ++d) out.positions.push_back(mesh->positions[3 * v + d]);
    if (has_normals) {
      for (int d = 0; d < 3; ++d) out.normals.push_back(mesh->normals[3 * v + d]);
    }
    const auto uv = atlas_uv(v, copy_region[i]);
    out.uvs[2 * (static_cast<size_t>(n) + i)] = uv[0];
    out.uvs[2 * (static_cast<size_t>(n) + i) + 1] = uv[1];
  }
  out.triangles = std::move(triangles);
  out.texture = std::move(atlas);
  *mesh = std::move(out);
  if (fitted_object != nullptr) *fitted_object = object;
  return Status();
}

Expected<TextureImage> decode_texture_png(const std::string& bytes, const std::string& what) {
  TESSERA_ASSIGN_OR_RETURN(PngPixels png, decode_png(bytes.data(), bytes.size(), 3, what));
  TextureImage image;
  image.width = png.width;
  image.height = png.height;
  image.rgb = std::move(png.pixels);
  TESSERA_RETURN_IF_ERROR(validate_texture_image(image, what));
  return image;
}

Expected<TextureImage> read_texture_png(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  return decode_texture_png(bytes, path);
}

namespace {

// Source sample positions and weights of one output coordinate along an axis of `in` samples
// scaled to `out`: an area average when shrinking, a linear blend when enlarging.
struct Taps {
  std::vector<int64_t> index;
  std::vector<float> weight;
};

std::vector<Taps> axis_taps(int64_t in, int64_t out, bool nearest) {
  std::vector<Taps> taps(static_cast<size_t>(out));
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    Taps& t = taps[static_cast<size_t>(o)];
    if (nearest) {
      t.index.push_back(std::min<int64_t>(in - 1, static_cast<int64_t>((o + 0.5) * scale)));
      t.weight.push_back(1.0f);
    } else if (scale > 1.0) {
      const double lo = o * scale, hi = (o + 1) * scale;
      for (int64_t i = static_cast<int64_t>(lo); i < in && i < hi; ++i) {
        const double cover = std::min<double>(hi, i + 1) - std::max<double>(lo, i);
        if (cover <= 0) continue;
        t.index.push_back(i);
        t.weight.push_back(static_cast<float>(cover / scale));
      }
    } else {
      const double c = std::clamp((o + 0.5) * scale - 0.5, 0.0, static_cast<double>(in - 1));
      const int64_t i0 = static_cast<int64_t>(c), i1 = std::min(in - 1, i0 + 1);
      const float f = static_cast<float>(c - i0);
      t.index = {i0, i1};
      t.weight = {1.0f - f, f};
    }
  }
  return taps;
}

}  // namespace

TextureImage resize_texture(const TextureImage& image, int64_t w, int64_t h, bool nearest) {
  TextureImage out;
  out.width = w;
  out.height = h;
  out.rgb.resize(static_cast<size_t>(w * h * 3));
  const std::vector<Taps> xs = axis_taps(image.width, w, nearest);
  const std::vector<Taps> ys = axis_taps(image.height, h, nearest);
  for (int64_t y = 0; y < h; ++y) {
    const Taps& ty = ys[static_cast<size_t>(y)];
    for (int64_t x = 0; x < w; ++x) {
      const Taps& tx = xs[static_cast<size_t>(x)];
      float acc[3] = {0, 0, 0};
      for (size_t a = 0; a < ty.index.size(); ++a) {
        const uint8_t* row = image.rgb.data() + ty.index[a] * image.width * 3;
        for (size_t b = 0; b < tx.index.size(); ++b) {
          const float wgt = ty.weight[a] * tx.weight[b];
          const uint8_t* p = row + tx.index[b] * 3;
          for (int c = 0; c < 3; ++c) acc[c] += wgt * p[c];
        }
      }
      uint8_t* o = out.rgb.data() + (y * w + x) * 3;
      for (int c = 0; c < 3; ++c) {
        o[c] = static_cast<uint8_t>(std::clamp(std::lround(acc[c]), 0L, 255L));
      }
    }
  }
  return out;
}

Expected<std::string> encode_texture_png(const TextureImage& image) {
  if (image.width < 1 || image.height < 1 ||
      image.rgb.size() != static_cast<size_t>(image.width * image.height * 3)) {
    return invalid_argument("texture: " + std::to_string(image.width) + "x" +
                            std::to_string(image.height) + " with " +
                            std::to_string(image.rgb.size()) + " bytes is not a valid RGB image");
  }
  return encode_png(image.rgb.data(), image.width, image.height, 3);
}

}  // namespace tessera::mesh
