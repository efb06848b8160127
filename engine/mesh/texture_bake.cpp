#include "engine/mesh/texture_bake.h"

#include <algorithm>
#include <cassert>
#include <array>
#include <cmath>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tessera::mesh {

namespace {

using V3 = std::array<double, 3>;

V3 vertex(const Mesh& m, uint32_t v) {
  return {m.positions[3 * v], m.positions[3 * v + 1], m.positions[3 * v + 2]};
}

// The surface point of face f at barycentrics (b1, b2).
V3 surface_point(const Mesh& m, int32_t f, float b1, float b2) {
  const V3 a = vertex(m, m.triangles[3 * static_cast<size_t>(f)]);
  const V3 b = vertex(m, m.triangles[3 * static_cast<size_t>(f) + 1]);
  const V3 c = vertex(m, m.triangles[3 * static_cast<size_t>(f) + 2]);
  const double b0 = 1.0 - b1 - b2;
  return {b0 * a[0] + b1 * b[0] + b2 * c[0], b0 * a[1] + b1 * b[1] + b2 * c[1],
          b0 * a[2] + b1 * b[2] + b2 * c[2]};
}

V3 face_normal(const Mesh& m, int32_t f) {
  const V3 a = vertex(m, m.triangles[3 * static_cast<size_t>(f)]);
  const V3 b = vertex(m, m.triangles[3 * static_cast<size_t>(f) + 1]);
  const V3 c = vertex(m, m.triangles[3 * static_cast<size_t>(f) + 2]);
  const V3 e1{b[0] - a[0], b[1] - a[1], b[2] - a[2]}, e2{c[0] - a[0], c[1] - a[1], c[2] - a[2]};
  V3 n{e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2], e1[0] * e2[1] - e1[1] * e2[0]};
  const double len = std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
  if (len > 0) n = {n[0] / len, n[1] / len, n[2] / len};
  return n;
}

// Bilinear sample of an RGB8 image at pixel coordinates (x, y) (centres at +0.5), clamped.
void sample(const TextureImage& img, double x, double y, float out[3]) {
  const int w = static_cast<int>(img.width), h = static_cast<int>(img.height);
  const double fx = std::clamp(x - 0.5, 0.0, w - 1.0);
  const double fy = std::clamp(y - 0.5, 0.0, h - 1.0);
  const int x0 = static_cast<int>(fx), row0 = static_cast<int>(fy);
  const int x1 = std::min(x0 + 1, w - 1), row1 = std::min(row0 + 1, h - 1);
  const double tx = fx - x0, ty = fy - row0;
  for (int c = 0; c < 3; ++c) {
    const auto at = [&](int xx, int yy) {
      return static_cast<double>(img.rgb[(static_cast<size_t>(yy) * w + xx) * 3 + c]);
    };
    out[c] = static_cast<float>((at(x0, row0) * (1 - tx) + at(x1, row0) * tx) * (1 - ty) +
                                (at(x0, row1) * (1 - tx) + at(x1, row1) * tx) * ty);
  }
}

double scene_diagonal(const Mesh& m) {
  const Bounds b = compute_bounds(m);
  return b.diagonal();
}

}  // namespace

namespace {

// Vertices at exactly the same position are one (texture seams split them): each vertex's first.
std::vector<uint32_t> weld_representatives(const Mesh& mesh) {
  std::vector<uint32_t> rep(static_cast<size_t>(mesh.vertex_count()));
  std::map<std::array<float, 3>, uint32_t> first;
  for (size_t v = 0; v < rep.size(); ++v) {
    const std::array<float, 3> p{mesh.positions[3 * v], mesh.positions[3 * v + 1],
                                 mesh.positions[3 * v + 2]};
    rep[v] = first.emplace(p, static_cast<uint32_t>(v)).first->second;
  }
  return rep;
}

}  // namespace

Expected<TexelMap> map_texels(const Mesh& mesh, int size) {
  if (mesh.uvs.size() != mesh.positions.size() / 3 * 2 || mesh.uvs.empty()) {
    return invalid_argument("texture bake: the mesh has no uvs (make an atlas first)");
  }
  if (size < 1 || size > 8192) {
    return invalid_argument("texture bake: texture size " + std::to_string(size) +
                            " is outside 1..8192");
  }
  TexelMap t;
  t.size = size;
  const size_t texels = static_cast<size_t>(size) * size;
  t.face.assign(texels, -1);
  t.bary.assign(2 * texels, 0.0f);
  const int64_t faces = mesh.triangle_count();
  for (int64_t f = 0; f < faces; ++f) {
    double px[3], py[3];
    for (int k = 0; k < 3; ++k) {
      const uint32_t v = mesh.triangles[static_cast<size_t>(3 * f + k)];
      px[k] = mesh.uvs[2 * v] * size;
      py[k] = (1.0 - mesh.uvs[2 * v + 1]) * size;
    }
    const double area = (px[1] - px[0]) * (py[2] - py[0]) - (py[1] - py[0]) * (px[2] - px[0]);
    if (area == 0) continue;
    const int x0 = std::max(0, static_cast<int>(std::floor(std::min({px[0], px[1], px[2]}))));
    const int x1 =
        std::min(size - 1, static_cast<int>(std::floor(std::max({px[0], px[1], px[2]}))));
    const int y0 = std::max(0, static_cast<int>(std::floor(std::min({py[0], py[1], py[2]}))));
    const int y1 =
        std::min(size - 1, static_cast<int>(std::floor(std::max({py[0], py[1], py[2]}))));
    for (int y = y0; y <= y1; ++y) {
      for (int x = x0; x <= x1; ++x) {
        const double sx = x + 0.5, sy = y + 0.5;
        const double w1 = ((px[2] - px[0]) * (sy - py[0]) - (py[2] - py[0]) * (sx - px[0])) / -area;
        const double w2 = ((px[1] - px[0]) * (sy - py[0]) - (py[1] - py[0]) * (sx - px[0])) / area;
        const double w0 = 1.0 - w1 - w2;
        if (w0 < 0 || w1 < 0 || w2 < 0) continue;
        const size_t i = static_cast<size_t>(y) * size + x;
        if (t.face[i] < 0) ++t.covered;
        t.face[i] = static_cast<int32_t>(f);
        t.bary[2 * i] = static_cast<float>(w1);
        t.bary[2 * i + 1] = static_cast<float>(w2);
      }
    }
  }
  // The surface's welded vertices and their neighbours (finish_bake's fill on the surface).
  t.vertex_rep = weld_representatives(mesh);
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  pairs.reserve(mesh.triangles.size() * 2);
  for (size_t k = 0; k + 2 < mesh.triangles.size(); k += 3) {
    for (int e = 0; e < 3; ++e) {
      const uint32_t a = t.vertex_rep[mesh.triangles[k + static_cast<size_t>(e)]];
      const uint32_t b = t.vertex_rep[mesh.triangles[k + static_cast<size_t>((e + 1) % 3)]];
      if (a == b) continue;
      pairs.emplace_back(a, b);
      pairs.emplace_back(b, a);
    }
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  t.neighbour_start.assign(t.vertex_rep.size() + 1, 0);
  for (const auto& [a, b] : pairs) ++t.neighbour_start[size_t{a} + 1];
  for (size_t v = 0; v < t.vertex_rep.size(); ++v) t.neighbour_start[v + 1] += t.neighbour_start[v];
  t.neighbours.reserve(pairs.size());
  for (const auto& [a, b] : pairs) t.neighbours.push_back(b);
  return t;
}

Expected<BakeViewStats> bake_view(const Mesh& mesh, const TexelMap& texels,
                                  const ViewCamera& camera, const ViewRaster& raster,
                                  const TextureImage& image, BakeAccumulator* acc,
                                  int silhouette_margin) {
  if (image.width != raster.width || image.height != raster.height ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return invalid_argument("texture bake: a " + std::to_string(image.width) + "x" +
                            std::to_string(image.height) + " view image for a " +
                            std::to_string(raster.width) + "x" + std::to_string(raster.height) +
                            " view");
  }
  if (acc->size != texels.size) {
    return invalid_argument("texture bake: accumulator and texel map sizes differ");
  }
  // Pixels too close to the background to trust (a square of the margin around each).
  std::vector<char> usable(raster.face.size(), 1);
  if (silhouette_margin > 0) {
    const int w = raster.width, h = raster.height, m = silhouette_margin;
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        if (raster.face[static_cast<size_t>(y) * w + x] >= 0) continue;
        for (int dy = -m; dy <= m; ++dy) {
          for (int dx = -m; dx <= m; ++dx) {
            const int yy = y + dy, xx = x + dx;
            if (yy >= 0 && xx >= 0 && yy < h && xx < w)
              usable[static_cast<size_t>(yy) * w + xx] = 0;
          }
        }
      }
    }
  }
  const ViewProjection proj(camera, raster.width, raster.height);
  // Depth slack: a few pixels' footprint at the point's depth, plus a little of the object.
  const double diag = scene_diagonal(mesh);
  BakeViewStats stats;
  const size_t n = texels.face.size();
  for (size_t i = 0; i < n; ++i) {
    const int32_t f = texels.face[i];
    if (f < 0) continue;
    const V3 p = surface_point(mesh, f, texels.bary[2 * i], texels.bary[2 * i + 1]);
    const ViewPoint v = proj.project(p);
    if (!(v.z > camera.near) || v.px < 0 || v.py < 0 || v.px >= raster.width ||
        v.py >= raster.height) {
      continue;
    }
    const size_t pix = static_cast<size_t>(v.py) * raster.width + static_cast<size_t>(v.px);
    if (raster.face[pix] < 0 || !usable[pix]) continue;
    const double slack = 3.0 * v.z * proj.pixel_angle() + 2e-3 * diag;
    if (v.z > raster.depth[pix] + slack) continue;  // something nearer hides it
    const V3 nrm = face_normal(mesh, f);
    const V3 to_eye{proj.eye()[0] - p[0], proj.eye()[1] - p[1], proj.eye()[2] - p[2]};
    const double len =
        std::sqrt(to_eye[0] * to_eye[0] + to_eye[1] * to_eye[1] + to_eye[2] * to_eye[2]);
    // Either side of the face: the depth test above decided that this point is the one seen, and
    // meshes wound inwards (common in imported files) are surfaces all the same.
    const double c = std::fabs(nrm[0] * to_eye[0] + nrm[1] * to_eye[1] + nrm[2] * to_eye[2]) / len;
    if (!(c > 0.05)) continue;  // grazing
    float rgb[3];
    sample(image, v.px, v.py, rgb);
    const float w = static_cast<float>(c * c);
    for (int k = 0; k < 3; ++k) acc->rgb[3 * i + static_cast<size_t>(k)] += w * rgb[k];
    acc->weight[i] += w;
    acc->best_facing[i] = std::max(acc->best_facing[i], static_cast<float>(c));
    ++stats.texels;
  }
  return stats;
}

namespace {

// Colours for the covered texels no view saw, from the surface around them rather than from the
// texture: the seen texels give each (welded) vertex a colour (their barycentric weights), the
// vertices without one take the mean of their coloured neighbours, ring by ring outwards, and an
// unseen texel interpolates its triangle's corners. Both sides of a chart border share the welded
// vertices, so an unseen region that a seam crosses gets the same colours on both sides.
void fill_unseen_on_surface(const Mesh& mesh, const TexelMap& texels, const std::vector<char>& seen,
                            TextureImage* texture, std::vector<char>* filled) {
  const size_t nv = texels.vertex_rep.size();
  const std::vector<uint32_t>& rep = texels.vertex_rep;
  std::vector<double> sum(3 * nv, 0.0), weight(nv, 0.0);
  const size_t n = texels.face.size();
  for (size_t i = 0; i < n; ++i) {
    if (!seen[i] || texels.face[i] < 0) continue;
    const size_t f = static_cast<size_t>(texels.face[i]);
    const float b[3] = {1.0f - texels.bary[2 * i] - texels.bary[2 * i + 1], texels.bary[2 * i],
                        texels.bary[2 * i + 1]};
    for (int k = 0; k < 3; ++k) {
      const uint32_t r = rep[mesh.triangles[3 * f + static_cast<size_t>(k)]];
      const double w = std::max(0.0f, b[k]);
      for (int c = 0; c < 3; ++c) {
        sum[3 * size_t{r} + static_cast<size_t>(c)] +=
            w * texture->rgb[3 * i + static_cast<size_t>(c)];
      }
      weight[r] += w;
    }
  }
  std::vector<float> colour(3 * nv, 128.0f);
  std::vector<char> known(nv, 0), queued(nv, 0);
  std::vector<uint32_t> ring;
  for (size_t v = 0; v < nv; ++v) {
    if (rep[v] != v || !(weight[v] > 0)) continue;
    for (size_t c = 0; c < 3; ++c)
      colour[3 * v + c] = static_cast<float>(sum[3 * v + c] / weight[v]);
    known[v] = queued[v] = 1;
    ring.push_back(static_cast<uint32_t>(v));
  }
  // Ring by ring: a vertex next to the known ones takes their mean, then counts as known.
  while (!ring.empty()) {
    std::vector<uint32_t> next;
    for (uint32_t v : ring) {
      for (uint32_t k = texels.neighbour_start[v]; k < texels.neighbour_start[v + 1]; ++k) {
        const uint32_t w = texels.neighbours[k];
        if (queued[w]) continue;
        queued[w] = 1;
        next.push_back(w);
      }
    }
    for (uint32_t w : next) {
      double acc[3] = {0, 0, 0};
      int count = 0;
      for (uint32_t k = texels.neighbour_start[w]; k < texels.neighbour_start[w + 1]; ++k) {
        const uint32_t u = texels.neighbours[k];
        if (!known[u]) continue;
        for (size_t c = 0; c < 3; ++c) acc[c] += colour[3 * size_t{u} + c];
        ++count;
      }
      for (size_t c = 0; c < 3; ++c) {
        colour[3 * size_t{w} + c] = static_cast<float>(acc[c] / std::max(count, 1));
      }
    }
    for (uint32_t w : next) known[w] = 1;
    ring = std::move(next);
  }
  // A texel whose corners all got a colour interpolates them; one on a part of the mesh no view
  // saw at all (no coloured vertex to spread from) is left to the flood.
  for (size_t i = 0; i < n; ++i) {
    if (seen[i] || texels.face[i] < 0) continue;
    const size_t f = static_cast<size_t>(texels.face[i]);
    const uint32_t corner[3] = {rep[mesh.triangles[3 * f]], rep[mesh.triangles[3 * f + 1]],
                                rep[mesh.triangles[3 * f + 2]]};
    if (!known[corner[0]] || !known[corner[1]] || !known[corner[2]]) continue;
    const float b[3] = {1.0f - texels.bary[2 * i] - texels.bary[2 * i + 1], texels.bary[2 * i],
                        texels.bary[2 * i + 1]};
    for (size_t c = 0; c < 3; ++c) {
      double v = 0;
      for (size_t k = 0; k < 3; ++k) v += b[k] * colour[3 * size_t{corner[k]} + c];
      texture->rgb[3 * i + c] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 255.0)));
    }
    (*filled)[i] = 1;
  }
}

}  // namespace

BakeResult finish_bake(const Mesh& mesh, const TexelMap& texels, const BakeAccumulator& acc) {
  assert(texels.vertex_rep.size() == static_cast<size_t>(mesh.vertex_count()));
  BakeResult r;
  const int size = texels.size;
  const size_t n = static_cast<size_t>(size) * size;
  r.texture.width = r.texture.height = size;
  r.texture.rgb.assign(3 * n, 128);
  std::vector<char> seen(n, 0);
  int64_t seen_covered = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!(acc.weight[i] > 0)) continue;
    for (int k = 0; k < 3; ++k) {
      r.texture.rgb[3 * i + static_cast<size_t>(k)] = static_cast<uint8_t>(std::lround(
          std::clamp(acc.rgb[3 * i + static_cast<size_t>(k)] / acc.weight[i], 0.0f, 255.0f)));
    }
    seen[i] = 1;
    if (texels.face[i] >= 0) ++seen_covered;
  }
  r.coverage = texels.covered > 0 ? static_cast<double>(seen_covered) / texels.covered : 0.0;
  // Inside the charts first, on the surface (when any texel was seen), then the gutters and what
  // the surface could not reach (parts no view saw at all) from the nearest known texel.
  std::vector<char> known = seen;
  if (seen_covered > 0) fill_unseen_on_surface(mesh, texels, seen, &r.texture, &known);
  std::deque<size_t> queue;
  for (size_t i = 0; i < n; ++i) {
    if (known[i]) queue.push_back(i);
  }
  // Breadth-first flood: every unknown texel takes its first-reached known neighbour's colour.
  while (!queue.empty()) {
    const size_t i = queue.front();
    queue.pop_front();
    const int x = static_cast<int>(i % size), y = static_cast<int>(i / size);
    const int nx[4] = {x - 1, x + 1, x, x}, ny[4] = {y, y, y - 1, y + 1};
    for (int k = 0; k < 4; ++k) {
      if (nx[k] < 0 || ny[k] < 0 || nx[k] >= size || ny[k] >= size) continue;
      const size_t j = static_cast<size_t>(ny[k]) * size + nx[k];
      if (known[j]) continue;
      known[j] = 1;
      std::copy_n(&r.texture.rgb[3 * i], 3, &r.texture.rgb[3 * j]);
      queue.push_back(j);
    }
  }
  return r;
}

TextureImage render_textured_view(const Mesh& mesh, const ViewRaster& raster) {
  TextureImage out;
  out.width = raster.width;
  out.height = raster.height;
  out.rgb.assign(static_cast<size_t>(raster.width) * raster.height * 3, 0);
  if (mesh.uvs.empty() || mesh.texture.width == 0) return out;
  const TextureImage& tex = mesh.texture;
  for (size_t i = 0; i < raster.face.size(); ++i) {
    const int32_t f = raster.face[i];
    if (f < 0) continue;
    const float b1 = raster.bary[2 * i], b2 = raster.bary[2 * i + 1], b0 = 1.0f - b1 - b2;
    double u = 0, v = 0;
    for (int k = 0; k < 3; ++k) {
      const uint32_t vi = mesh.triangles[3 * static_cast<size_t>(f) + static_cast<size_t>(k)];
      const double w = k == 0 ? b0 : k == 1 ? b1 : b2;
      u += w * mesh.uvs[2 * vi];
      v += w * mesh.uvs[2 * vi + 1];
    }
    float rgb[3];
    sample(tex, u * tex.width, (1.0 - v) * tex.height, rgb);
    for (int k = 0; k < 3; ++k) {
      out.rgb[3 * i + static_cast<size_t>(k)] = static_cast<uint8_t>(std::lround(rgb[k]));
    }
  }
  return out;
}

double masked_psnr(const TextureImage& a, const TextureImage& b, const ViewRaster& mask) {
  double se = 0;
  int64_t count = 0;
  for (size_t i = 0; i < mask.face.size(); ++i) {
    if (mask.face[i] < 0) continue;
    for (int k = 0; k < 3; ++k) {
      const double d = static_cast<double>(a.rgb[3 * i + static_cast<size_t>(k)]) -
                       b.rgb[3 * i + static_cast<size_t>(k)];
      se += d * d;
      ++count;
    }
  }
  if (count == 0 || se == 0) return 99.0;
  return 10.0 * std::log10(255.0 * 255.0 / (se / static_cast<double>(count)));
}

Expected<SeamReport> seam_error(const Mesh& mesh) {
  if (mesh.uvs.size() != 2 * static_cast<size_t>(mesh.vertex_count()) || mesh.texture.empty()) {
    return invalid_argument("seam error: the mesh has no uvs or no texture");
  }
  const std::vector<uint32_t> rep = weld_representatives(mesh);
  // Each welded edge's sides: the two corner vertices, ordered by their representatives.
  struct Side {
    uint32_t a, b;
  };
  std::map<std::pair<uint32_t, uint32_t>, std::vector<Side>> edges;
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    for (int k = 0; k < 3; ++k) {
      uint32_t a = mesh.triangles[t + static_cast<size_t>(k)];
      uint32_t b = mesh.triangles[t + static_cast<size_t>((k + 1) % 3)];
      if (rep[a] == rep[b]) continue;
      if (rep[a] > rep[b]) std::swap(a, b);
      edges[{rep[a], rep[b]}].push_back({a, b});
    }
  }
  const TextureImage& tex = mesh.texture;
  auto at = [&](uint32_t v, double t, uint32_t w, float out[3]) {
    const double u = (1 - t) * mesh.uvs[2 * v] + t * mesh.uvs[2 * w];
    const double vv = (1 - t) * mesh.uvs[2 * v + 1] + t * mesh.uvs[2 * w + 1];
    sample(tex, u * tex.width, (1.0 - vv) * tex.height, out);
  };
  SeamReport report;
  std::vector<double> samples;
  double weighted = 0, total_length = 0;
  for (const auto& [key, sides] : edges) {
    if (sides.size() != 2) continue;  // a border or a non-manifold edge: no two sides to compare
    const Side& s0 = sides[0];
    const Side& s1 = sides[1];
    const bool same = mesh.uvs[2 * s0.a] == mesh.uvs[2 * s1.a] &&
                      mesh.uvs[2 * s0.a + 1] == mesh.uvs[2 * s1.a + 1] &&
                      mesh.uvs[2 * s0.b] == mesh.uvs[2 * s1.b] &&
                      mesh.uvs[2 * s0.b + 1] == mesh.uvs[2 * s1.b + 1];
    if (same) continue;
    ++report.seam_edges;
    double length = 0;
    for (int d = 0; d < 3; ++d) {
      const double e = mesh.positions[3 * size_t{key.first} + static_cast<size_t>(d)] -
                       mesh.positions[3 * size_t{key.second} + static_cast<size_t>(d)];
      length += e * e;
    }
    length = std::sqrt(length);
    for (int i = 0; i < kSeamSamples; ++i) {
      const double t = (i + 0.5) / kSeamSamples;
      float c0[3], c1[3];
      at(s0.a, t, s0.b, c0);
      at(s1.a, t, s1.b, c1);
      const double diff =
          (std::fabs(c0[0] - c1[0]) + std::fabs(c0[1] - c1[1]) + std::fabs(c0[2] - c1[2])) / 3.0;
      samples.push_back(diff);
      weighted += diff * length / kSeamSamples;
    }
    total_length += length;
  }
  if (!samples.empty()) {
    report.mean = total_length > 0 ? weighted / total_length : 0;
    std::sort(samples.begin(), samples.end());
    report.p95 = samples[samples.size() * 95 / 100];
    report.max = samples.back();
  }
  return report;
}

}  // namespace tessera::mesh
