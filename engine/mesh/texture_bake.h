// Back-projection of view images into a mesh's UV atlas: the painter's "bake" step
// (docs/texture-painting.md). For every texel a triangle covers, its surface point is found
// (map_texels), projected into each view, kept where the view sees that point (its depth matches
// the view's nearest surface) and where the surface is not seen edge-on, and the view's colour
// there is accumulated with the weight cos^2 of the angle between the surface normal (either side:
// inward-wound faces are surface too) and the direction to the camera (squarely seen views
// dominate grazing ones). Texels no view saw, and the gutters, get the colour of a seen texel
// nearby (a breadth-first flood over the texture, 4-neighbour steps), so bilinear
// sampling and mip-maps never reach the background.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"
#include "engine/mesh/view_raster.h"

namespace tessera::mesh {

// Which triangle covers each texel centre of a size x size texture (u right, v up; texel row 0 at
// v = 1), and where in it.
struct TexelMap {
  int size = 0;
  std::vector<int32_t> face;  // per texel, -1 = no triangle
  std::vector<float> bary;    // per texel, barycentrics of corners 1 and 2
  int64_t covered = 0;        // texels with a triangle
  // The surface: each vertex's welded representative (the first vertex at exactly its position)
  // and, per representative, its neighbours (neighbours[neighbour_start[v] .. [v + 1]]).
  std::vector<uint32_t> vertex_rep;
  std::vector<uint32_t> neighbour_start, neighbours;
};
// kInvalidArgument for a mesh without uvs or a size outside 1..8192.
Expected<TexelMap> map_texels(const Mesh& mesh, int size);

// Colour sums and weights per texel, accumulated over views, and how squarely the best view so far
// saw each texel (the painter's "already painted well" test).
struct BakeAccumulator {
  explicit BakeAccumulator(int size = 0)
      : size(size),
        rgb(static_cast<size_t>(size) * size * 3, 0.0f),
        weight(static_cast<size_t>(size) * size, 0.0f),
        best_facing(static_cast<size_t>(size) * size, 0.0f) {}
  int size = 0;
  std::vector<float> rgb;          // weighted sums, 0..255
  std::vector<float> weight;       // sum of weights
  std::vector<float> best_facing;  // the largest cosine a contributing view had, 0 = unseen
};

struct BakeViewStats {
  int64_t texels = 0;  // texels this view contributed to
};

// Adds one view: `image` (RGB8, raster.width x raster.height, what the camera saw) seen through
// `camera` with `raster` (rasterize_view of the same mesh and camera). Pixels within
// `silhouette_margin` pixels of the background are not used (a generated view's edge pixels blend
// into its background). kInvalidArgument when the image, raster or accumulator sizes do not match.
Expected<BakeViewStats> bake_view(const Mesh& mesh, const TexelMap& texels,
                                  const ViewCamera& camera, const ViewRaster& raster,
                                  const TextureImage& image, BakeAccumulator* acc,
                                  int silhouette_margin = 0);

struct BakeResult {
  TextureImage texture;
  double coverage = 0;  // share of the covered texels some view saw
};
// The accumulated colours; covered texels no view saw filled on the surface (the seen texels give
// the welded vertices colours, which spread ring by ring to the unseen ones; an unseen texel
// interpolates its triangle's corners: both sides of a chart border agree); then the gutters and
// the gaps between charts flooded from the nearest covered texel (all grey when no view saw
// anything). `texels` is map_texels(mesh, ...).
BakeResult finish_bake(const Mesh& mesh, const TexelMap& texels, const BakeAccumulator& acc);

// What the textured `mesh` (uvs + texture) looks like from `camera` (bilinear texture samples at
// each pixel's surface point; background black): to compare a painted asset with the view it came
// from.
TextureImage render_textured_view(const Mesh& mesh, const ViewRaster& raster);

// PSNR (dB) of `a` against `b` over the pixels where `mask` (a raster) has a surface; 99 when
// they agree exactly. Sizes must match.
double masked_psnr(const TextureImage& a, const TextureImage& b, const ViewRaster& mask);

// How well colours meet across chart borders (the painter's "no visible seams"): every edge two
// triangles share in 3D (positions welded exactly) whose two sides have different uvs is a seam
// edge; the texture is sampled (bilinear) at kSeamSamples points along it on each side, and the
// colour difference (mean over RGB of |a - b|, 0..255 levels) is weighted by the edge's length.
inline constexpr int kSeamSamples = 4;
struct SeamReport {
  int64_t seam_edges = 0;
  double mean = 0;  // levels, length-weighted over the samples (0 with no seam edge)
  double p95 = 0;   // levels, of the samples
  double max = 0;
};
// kInvalidArgument for a mesh without uvs or texture.
Expected<SeamReport> seam_error(const Mesh& mesh);

}  // namespace tessera::mesh
