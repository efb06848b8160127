#include "engine/mesh/paint_views.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tessera::mesh {

namespace {

using V3 = std::array<double, 3>;

std::string ring_name(double azimuth) {
  const int a = static_cast<int>(std::lround(azimuth)) % 360;
  if (a == 0) return "front";
  if (a == 180) return "back";
  if (a == 90) return "right";
  if (a == 270) return "left";
  return "azimuth " + std::to_string(a);
}

std::string ring_words(double azimuth) {
  const double a = std::fmod(azimuth + 360.0, 360.0);
  if (a <= 45 || a >= 315) return ", front view";
  if (a >= 135 && a <= 225) return ", back view";
  return ", side view";
}

}  // namespace

Status validate_view_set(const ViewSetOptions& o) {
  if (o.ring < kMinPaintRing || o.ring > kMaxPaintRing) {
    return invalid_argument("paint views: ring of " + std::to_string(o.ring) +
                            " views is outside " + std::to_string(kMinPaintRing) + ".." +
                            std::to_string(kMaxPaintRing));
  }
  if (!(o.ring_elevation_deg >= -60 && o.ring_elevation_deg <= 60)) {
    return invalid_argument("paint views: ring elevation " + std::to_string(o.ring_elevation_deg) +
                            " degrees is outside -60..60");
  }
  if (!(o.fov_y_deg >= 10 && o.fov_y_deg <= 90)) {
    return invalid_argument("paint views: field of view " + std::to_string(o.fov_y_deg) +
                            " degrees is outside 10..90");
  }
  return Status();
}

Expected<std::vector<PaintView>> plan_views(const Mesh& mesh, const ViewSetOptions& o) {
  if (mesh.triangles.empty()) return invalid_argument("paint views: the mesh has no triangles");
  TESSERA_RETURN_IF_ERROR(validate_view_set(o));
  const Bounds b = compute_bounds(mesh);
  const V3 centre{(b.min[0] + b.max[0]) * 0.5, (b.min[1] + b.max[1]) * 0.5,
                  (b.min[2] + b.max[2]) * 0.5};
  const double radius = std::max(0.5 * b.diagonal(), 1e-6);
  // The bounding sphere fits the vertical field of view with 10 % to spare.
  const double distance = 1.1 * radius / std::sin(o.fov_y_deg * M_PI / 360.0);
  // Order: front, back, then the rest of the ring alternating sides outward from the front.
  std::vector<double> azimuths;
  const double step = 360.0 / o.ring;
  azimuths.push_back(0);
  if (o.ring % 2 == 0) azimuths.push_back(180);
  for (int k = 1; static_cast<int>(azimuths.size()) < o.ring; ++k) {
    for (double a : {k * step, 360.0 - k * step}) {
      const double norm = std::fmod(a + 360.0, 360.0);
      bool have = false;
      for (double x : azimuths) have = have || std::fabs(x - norm) < 1e-6;
      if (!have && static_cast<int>(azimuths.size()) < o.ring) azimuths.push_back(norm);
    }
  }
  std::vector<PaintView> views;
  auto add = [&](const std::string& name, const std::string& words, double az, double el) {
    PaintView v;
    v.name = name;
    v.prompt_suffix = words;
    v.azimuth_deg = az;
    v.elevation_deg = el;
    const double a = az * M_PI / 180.0, e = el * M_PI / 180.0;
    // Azimuth 0 looks from +Z (the front), 90 from +X (the right), Y up.
    v.camera.eye = {centre[0] + distance * std::cos(e) * std::sin(a),
                    centre[1] + distance * std::sin(e),
                    centre[2] + distance * std::cos(e) * std::cos(a)};
    v.camera.target = centre;
    v.camera.up = {0, 1, 0};
    v.camera.fov_y_deg = o.fov_y_deg;
    v.camera.near = 1e-3 * distance;
    views.push_back(v);
  };
  for (double az : azimuths) add(ring_name(az), ring_words(az), az, o.ring_elevation_deg);
  if (o.top) add("top", ", overhead view", 0, 80);
  if (o.bottom) add("bottom", ", bottom view", 180, -80);
  return views;
}

Expected<ViewInputs> prepare_view(const Mesh& mesh, const TexelMap& texels,
                                  const BakeAccumulator& state, const PaintView& view, int size,
                                  const PaintMaskOptions& options, const TextureImage* painted) {
  if (size < kMinPaintViewSize || size > kMaxPaintViewSize) {
    return invalid_argument("paint view: size " + std::to_string(size) + " is outside " +
                            std::to_string(kMinPaintViewSize) + ".." +
                            std::to_string(kMaxPaintViewSize));
  }
  if (state.size != texels.size || mesh.uvs.empty()) {
    return invalid_argument("paint view: the paint state does not match the mesh's texel map");
  }
  ViewInputs in;
  TESSERA_ASSIGN_OR_RETURN(in.raster, rasterize_view(mesh, view.camera, size, size));
  const ViewRaster& r = in.raster;
  in.depth.width = in.depth.height = size;
  in.depth.rgb = inverse_depth_rgb(r);
  // The paint so far, as a texture, seen from here.
  {
    Mesh so_far = mesh;
    so_far.texture = painted != nullptr ? *painted : finish_bake(mesh, texels, state).texture;
    in.init = render_textured_view(so_far, r);
  }
  const ViewProjection proj(view.camera, size, size);
  const size_t pixels = static_cast<size_t>(size) * size;
  std::vector<char> generate(pixels, 0);
  const int ts = texels.size;
  for (size_t i = 0; i < pixels; ++i) {
    const int32_t f = r.face[i];
    if (f < 0) continue;
    ++in.object_pixels;
    const float b1 = r.bary[2 * i], b2 = r.bary[2 * i + 1], b0 = 1.0f - b1 - b2;
    double u = 0, v = 0;
    V3 p{0, 0, 0}, corner[3];
    for (int k = 0; k < 3; ++k) {
      const uint32_t vi = mesh.triangles[3 * static_cast<size_t>(f) + static_cast<size_t>(k)];
      const double w = k == 0 ? b0 : k == 1 ? b1 : b2;
      u += w * mesh.uvs[2 * vi];
      v += w * mesh.uvs[2 * vi + 1];
      corner[k] = {mesh.positions[3 * vi], mesh.positions[3 * vi + 1], mesh.positions[3 * vi + 2]};
      for (int a = 0; a < 3; ++a)
        p[static_cast<size_t>(a)] += w * corner[k][static_cast<size_t>(a)];
    }
    const int tx = std::clamp(static_cast<int>(u * ts), 0, ts - 1);
    const int ty = std::clamp(static_cast<int>((1.0 - v) * ts), 0, ts - 1);
    const float before = state.best_facing[static_cast<size_t>(ty) * ts + tx];
    // How squarely this view sees the point.
    const V3 e1{corner[1][0] - corner[0][0], corner[1][1] - corner[0][1],
                corner[1][2] - corner[0][2]};
    const V3 e2{corner[2][0] - corner[0][0], corner[2][1] - corner[0][1],
                corner[2][2] - corner[0][2]};
    const V3 n{e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
               e1[0] * e2[1] - e1[1] * e2[0]};
    const V3 to_eye{proj.eye()[0] - p[0], proj.eye()[1] - p[1], proj.eye()[2] - p[2]};
    const double nl = std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
    const double el =
        std::sqrt(to_eye[0] * to_eye[0] + to_eye[1] * to_eye[1] + to_eye[2] * to_eye[2]);
    // Either side: the rasteriser's depth test decided visibility, and faces wound inwards are
    // surface all the same.
    const double facing =
        nl > 0 && el > 0
            ? std::fabs(n[0] * to_eye[0] + n[1] * to_eye[1] + n[2] * to_eye[2]) / (nl * el)
            : 0;
    if (before < options.seen_facing || facing - before > options.refine_gain) generate[i] = 1;
  }
  // The band: widen by `band` pixels (a square), inside the object only.
  std::vector<char> wide = generate;
  const int band = options.band;
  if (band > 0) {
    for (int y = 0; y < size; ++y) {
      for (int x = 0; x < size; ++x) {
        if (!generate[static_cast<size_t>(y) * size + x]) continue;
        for (int dy = -band; dy <= band; ++dy) {
          for (int dx = -band; dx <= band; ++dx) {
            const int yy = y + dy, xx = x + dx;
            if (yy < 0 || xx < 0 || yy >= size || xx >= size) continue;
            const size_t j = static_cast<size_t>(yy) * size + xx;
            if (r.face[j] >= 0) wide[j] = 1;
          }
        }
      }
    }
  }
  in.mask.width = in.mask.height = size;
  in.mask.rgb.assign(3 * pixels, 0);
  for (size_t i = 0; i < pixels; ++i) {
    if (!wide[i]) continue;
    ++in.generate_pixels;
    in.mask.rgb[3 * i] = in.mask.rgb[3 * i + 1] = in.mask.rgb[3 * i + 2] = 255;
  }
  return in;
}

}  // namespace tessera::mesh
