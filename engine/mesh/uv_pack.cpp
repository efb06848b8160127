// Packing flattened charts into one texture for the UV atlas (uv_atlas.h).
//
// Every chart is turned to the smallest bounding box over its convex hull's edge directions
// (rotating calipers, checked edge by edge) and laid landscape. At a density s (texels per mesh
// unit) a chart is rasterised to a column profile: for each texel column, the first and last
// texel rows a triangle touches (exact strip clipping, so coverage is conservative), widened by
// the gutter in both directions. Charts go tallest first onto a skyline (per column, the first row
// not yet claimed): at each x the chart drops until one of its columns meets the skyline, and the
// x and the quarter turn that leave its bottom highest win. The
// profile lets charts interlock where a bounding-box packer would leave their corners empty.
// The density is searched (bisection on log s, from the area-based estimate) for the largest that
// fits the texture.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/mesh/uv_atlas.h"
#include "engine/mesh/uv_internal.h"

namespace tessera::mesh {

namespace {

struct Shape {
  std::vector<double> uv;  // rotated, min corner at 0, y up
  double width = 0, height = 0;
};

double cross2(const double* o, const double* a, const double* b) {
  return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]);
}

Shape orient(const FlatChart& c) {
  const size_t n = c.uv.size() / 2;
  std::vector<std::array<double, 2>> pts(n);
  for (size_t i = 0; i < n; ++i) pts[i] = {c.uv[2 * i], c.uv[2 * i + 1]};
  std::vector<std::array<double, 2>> sorted = pts;
  std::sort(sorted.begin(), sorted.end());
  // Andrew's monotone chain.
  std::vector<std::array<double, 2>> hull(2 * sorted.size() + 1);
  size_t k = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    while (k >= 2 && cross2(hull[k - 2].data(), hull[k - 1].data(), sorted[i].data()) <= 0) --k;
    hull[k++] = sorted[i];
  }
  for (size_t i = sorted.size() - 1, t = k + 1; i-- > 0;) {
    while (k >= t && cross2(hull[k - 2].data(), hull[k - 1].data(), sorted[i].data()) <= 0) --k;
    hull[k++] = sorted[i];
  }
  hull.resize(k > 1 ? k - 1 : k);
  double best_area = 1e300, best_cos = 1, best_sin = 0;
  for (size_t i = 0; i < hull.size(); ++i) {
    const auto& a = hull[i];
    const auto& b = hull[(i + 1) % hull.size()];
    const double dx = b[0] - a[0], dy = b[1] - a[1], len = std::hypot(dx, dy);
    if (len <= 0) continue;
    const double co = dx / len, si = dy / len;
    double lo[2] = {1e300, 1e300}, hi[2] = {-1e300, -1e300};
    for (const auto& p : hull) {
      const double u = p[0] * co + p[1] * si, v = -p[0] * si + p[1] * co;
      lo[0] = std::min(lo[0], u);
      hi[0] = std::max(hi[0], u);
      lo[1] = std::min(lo[1], v);
      hi[1] = std::max(hi[1], v);
    }
    const double area = (hi[0] - lo[0]) * (hi[1] - lo[1]);
    if (area < best_area) {
      best_area = area;
      best_cos = co;
      best_sin = si;
    }
  }
  Shape s;
  s.uv.resize(2 * n);
  double lo[2] = {1e300, 1e300}, hi[2] = {-1e300, -1e300};
  for (size_t i = 0; i < n; ++i) {
    const double u = pts[i][0] * best_cos + pts[i][1] * best_sin;
    const double v = -pts[i][0] * best_sin + pts[i][1] * best_cos;
    s.uv[2 * i] = u;
    s.uv[2 * i + 1] = v;
    lo[0] = std::min(lo[0], u);
    hi[0] = std::max(hi[0], u);
    lo[1] = std::min(lo[1], v);
    hi[1] = std::max(hi[1], v);
  }
  const bool turn = hi[1] - lo[1] > hi[0] - lo[0];  // landscape: (u, v) -> (v, -u)
  for (size_t i = 0; i < n; ++i) {
    double u = s.uv[2 * i] - lo[0], v = s.uv[2 * i + 1] - lo[1];
    if (turn) {
      const double w = hi[0] - lo[0];
      std::swap(u, v);
      v = w - v;
    }
    s.uv[2 * i] = u;
    s.uv[2 * i + 1] = v;
  }
  s.width = turn ? hi[1] - lo[1] : hi[0] - lo[0];
  s.height = turn ? hi[0] - lo[0] : hi[1] - lo[1];
  return s;
}

// A chart at one density: its texel coordinates (x right, y down, gutter included) and its
// column profile.
struct Raster {
  int w = 0, h = 0;
  std::vector<int> top, bottom;  // per column, -1 = empty
};

// `turn` quarter turns (counter-clockwise in UV; rotations keep the winding).
Raster rasterise(const FlatChart& c, const Shape& s, double density, int gutter, int turn,
                 std::vector<double>* texels) {
  Raster r;
  const double g = gutter;
  const bool side = turn % 2 == 1;
  const double cw = side ? s.height : s.width, ch = side ? s.width : s.height;
  r.w = static_cast<int>(std::ceil(cw * density + 2 * g)) + 1;
  r.h = static_cast<int>(std::ceil(ch * density + 2 * g)) + 1;
  const size_t n = s.uv.size() / 2;
  texels->resize(2 * n);
  for (size_t i = 0; i < n; ++i) {
    double u = s.uv[2 * i], v = s.uv[2 * i + 1];
    for (int q = 0; q < turn; ++q) {  // (u, v) -> (H - v, u) in the box [0, W] x [0, H]
      const double h = q % 2 == 0 ? s.height : s.width;
      const double nu = h - v;
      v = u;
      u = nu;
    }
    (*texels)[2 * i] = g + u * density;
    (*texels)[2 * i + 1] = g + (ch - v) * density;
  }
  std::vector<double> lo(static_cast<size_t>(r.w), 1e300), hi(static_cast<size_t>(r.w), -1e300);
  const auto span = [&](double x0, double y0, double x1, double y1) {
    if (x0 > x1) {
      std::swap(x0, x1);
      std::swap(y0, y1);
    }
    const int c0 = std::max(0, static_cast<int>(std::floor(x0)));
    const int c1 = std::min(r.w - 1, static_cast<int>(std::floor(x1)));
    for (int col = c0; col <= c1; ++col) {
      const double a = std::max(x0, static_cast<double>(col));
      const double b = std::min(x1, static_cast<double>(col + 1));
      double ya = y0, yb = y1;
      if (x1 > x0) {
        ya = y0 + (y1 - y0) * (a - x0) / (x1 - x0);
        yb = y0 + (y1 - y0) * (b - x0) / (x1 - x0);
      }
      lo[static_cast<size_t>(col)] = std::min({lo[static_cast<size_t>(col)], ya, yb});
      hi[static_cast<size_t>(col)] = std::max({hi[static_cast<size_t>(col)], ya, yb});
    }
  };
  for (size_t t = 0; t < c.triangles.size() / 3; ++t) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t a = c.triangles[3 * t + static_cast<size_t>(k)];
      const uint32_t b = c.triangles[3 * t + static_cast<size_t>((k + 1) % 3)];
      span((*texels)[2 * a], (*texels)[2 * a + 1], (*texels)[2 * b], (*texels)[2 * b + 1]);
    }
  }
  // Widen by the gutter: columns within `gutter` of a covered one, rows within `gutter`.
  r.top.assign(static_cast<size_t>(r.w), -1);
  r.bottom.assign(static_cast<size_t>(r.w), -1);
  for (int col = 0; col < r.w; ++col) {
    if (hi[static_cast<size_t>(col)] < lo[static_cast<size_t>(col)]) continue;
    const int t0 = std::max(0, static_cast<int>(std::floor(lo[static_cast<size_t>(col)])) - gutter);
    const int b0 =
        std::min(r.h - 1, static_cast<int>(std::floor(hi[static_cast<size_t>(col)])) + gutter);
    for (int d = std::max(0, col - gutter); d <= std::min(r.w - 1, col + gutter); ++d) {
      int& t = r.top[static_cast<size_t>(d)];
      int& b = r.bottom[static_cast<size_t>(d)];
      t = t < 0 ? t0 : std::min(t, t0);
      b = std::max(b, b0);
    }
  }
  return r;
}

// Textures are packed at this size at most (larger ones are scaled up from it).
constexpr int kWorkSize = 1024;
// Charts up to this many are tried at every x with four turns; more, at a stride, with two.
constexpr size_t kEveryXCharts = 64;
// Above this many charts, one packing variant is searched instead of four.
constexpr size_t kManyCharts = 2000;

struct Placement {
  int x = 0, y = 0;
  int turn = 0;
};

// Drops every chart onto the skyline at `density`, at the x and turn that leave its bottom
// highest (`least_waste`: the least empty space under it, mean per column, plus that); false when
// one ends below the texture.
bool place_all(const std::vector<FlatChart>& charts, const std::vector<Shape>& shapes,
               const std::vector<size_t>& order, double density, int size, int gutter,
               bool least_waste, std::vector<Placement>* placed) {
  std::vector<int> sky(static_cast<size_t>(size), 0);
  std::vector<double> scratch;
  std::vector<int> xs;
  // Few charts: every x is tried (large charts nest best so); many: every margin's width.
  const int stride = charts.size() <= kEveryXCharts ? 1 : std::max(1, gutter);
  // Thousands of charts (CAD parts, scans): a quarter turn only, as is or not.
  const int turns = charts.size() <= kEveryXCharts ? 4 : 2;
  placed->assign(charts.size(), {});
  Raster rasters[4];
  for (size_t i : order) {
    int best_score = 1 << 30, best_x = -1, best_y = 0, best_turn = -1;
    for (int turn = 0; turn < turns; ++turn) {
      rasters[turn] = rasterise(charts[i], shapes[i], density, gutter, turn, &scratch);
      const Raster& r = rasters[turn];
      if (r.w > size) continue;
      int lowest = 0;  // the profile's deepest row
      for (int b : r.bottom) lowest = std::max(lowest, b);
      xs.clear();
      // A wide chart steps by a 32nd of its width: as fine, relative to it, for O(32 size) work.
      const int step = std::max(stride, r.w / (charts.size() <= kEveryXCharts ? 32 : 16));
      for (int x = 0; x + r.w <= size; x += step) xs.push_back(x);
      if (xs.empty() || xs.back() != size - r.w) xs.push_back(size - r.w);
      for (int x : xs) {
        int y = 0;
        for (int col = 0; col < r.w; ++col) {
          const int t = r.top[static_cast<size_t>(col)];
          if (t >= 0) y = std::max(y, sky[static_cast<size_t>(x + col)] - t);
        }
        int score = y + lowest;
        if (least_waste) {
          int64_t waste = 0;
          for (int col = 0; col < r.w; ++col) {
            const int t = r.top[static_cast<size_t>(col)];
            if (t >= 0) waste += y + t - sky[static_cast<size_t>(x + col)];
          }
          score = static_cast<int>(waste / std::max(1, r.w)) + y + lowest;
        }
        if (score < best_score || (score == best_score && x < best_x)) {
          best_score = score;
          best_x = x;
          best_y = y;
          best_turn = turn;
        }
      }
    }
    if (best_turn < 0) return false;
    const Raster& best = rasters[best_turn];
    for (int col = 0; col < best.w; ++col) {
      const int b = best.bottom[static_cast<size_t>(col)];
      if (b < 0) continue;
      if (best_y + b >= size) return false;
      sky[static_cast<size_t>(best_x + col)] = best_y + b + 1;
    }
    (*placed)[i] = {best_x, best_y, best_turn};
  }
  return true;
}

}  // namespace

namespace uv_detail {

double box_fill(const std::vector<double>& uv, double area) {
  FlatChart c;
  c.uv.assign(uv.begin(), uv.end());
  const Shape s = orient(c);
  const double box = s.width * s.height;
  return box > 0 ? area / box : 1.0;
}

}  // namespace uv_detail

Expected<double> pack_charts(std::vector<FlatChart>* charts, int size, int gutter,
                             const std::atomic<bool>* cancel) {
  if (charts->empty()) return 0.0;
  std::vector<Shape> shapes(charts->size());
  double area = 0;
  for (size_t i = 0; i < charts->size(); ++i) {
    shapes[i] = orient((*charts)[i]);
    area += shapes[i].width * shapes[i].height;
  }
  if (!(area > 0)) return invalid_argument("UV atlas: the charts have no area");
  double largest = 0;  // the longest chart side, mesh units
  for (const Shape& s : shapes) largest = std::max({largest, s.width, s.height});
  // Two orders (tallest first, largest box first) times two scores; each variant's density is
  // bisected on log s from where the boxes would fill the texture, and the densest packing wins.
  std::vector<size_t> by_height(charts->size());
  std::iota(by_height.begin(), by_height.end(), 0);
  std::vector<size_t> by_area = by_height;
  std::stable_sort(by_height.begin(), by_height.end(),
                   [&](size_t a, size_t b) { return shapes[a].height > shapes[b].height; });
  std::stable_sort(by_area.begin(), by_area.end(), [&](size_t a, size_t b) {
    return shapes[a].width * shapes[a].height > shapes[b].width * shapes[b].height;
  });
  // Textures above kWorkSize are packed at kWorkSize and scaled up by `scale` (a power of two):
  // the conservative coverage and the margin stay conservative when scaled, and the search costs
  // what it costs at kWorkSize.
  const int work = std::min(size, kWorkSize);
  const int scale = size / work;
  const double start = std::sqrt(static_cast<double>(work) * work / area);
  // Each chart keeps half the gutter around itself, so two charts are a gutter apart.
  const int margin = ((gutter + 1) / 2 + scale - 1) / scale;
  double good = 0;
  std::vector<Placement> placed, best;
  const bool many = charts->size() > kManyCharts;
  for (const std::vector<size_t>* order : {&by_height, &by_area}) {
    for (bool least_waste : {false, true}) {
      if (many && (order != &by_height || least_waste)) continue;
      // After the first variant only a denser packing matters: a variant that does not fit at
      // 1 % above the best so far is not searched further.
      double lo = 0, hi = 0, s = good > 0 ? good * 1.01 : start;
      for (int it = 0; it < 32; ++it) {
        if (cancel && cancel->load()) return cancelled("UV atlas: cancelled while packing");
        const bool fits = place_all(*charts, shapes, *order, s, work, margin, least_waste, &placed);
        if (!fits && good > 0 && lo == 0 && s <= good * 1.01) break;
        if (fits) {
          lo = s;
          if (s > good) {
            good = s;
            best = placed;
          }
        } else {
          hi = s;
        }
        if (lo > 0 && hi > 0 && hi / lo < 1.01) break;
        // Every chart under a texel already: a lower density cannot help.
        if (lo == 0 && s * largest < 1.0) break;
        s = hi == 0 ? s * 1.25 : lo == 0 ? s / 1.25 : std::sqrt(lo * hi);
      }
    }
  }
  if (good <= 0 || best.size() != charts->size()) {
    return invalid_argument("UV atlas: " + std::to_string(charts->size()) +
                            " charts do not fit a " + std::to_string(size) +
                            " texture at any density (gutter " + std::to_string(gutter) +
                            " texels): a larger texture, or fewer separate parts");
  }
  std::vector<double> tex;
  for (size_t i = 0; i < charts->size(); ++i) {
    FlatChart& c = (*charts)[i];
    rasterise(c, shapes[i], good, margin, best[i].turn, &tex);
    for (size_t k = 0; k < c.uv.size() / 2; ++k) {
      c.uv[2 * k] = static_cast<float>((tex[2 * k] + best[i].x) * scale);
      c.uv[2 * k + 1] = static_cast<float>((tex[2 * k + 1] + best[i].y) * scale);
    }
  }
  return good * scale;
}

}  // namespace tessera::mesh
