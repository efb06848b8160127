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
// Up to 512 charts a bitmap placement is tried too: each chart's texels (and gutter) as rows of
// bits, set at the first free place in reading order in whichever quarter turn ends highest, so
// a chart can sit in another's hollow or a hole left earlier (rows whose longest free run is
// shorter than the chart's are passed over whole). The density is searched (bisection on log s,
// from the area-based estimate) for the largest that fits the texture, for every placement and
// chart order, and the densest wins.
#include <algorithm>
#include <bit>
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

}  // namespace

namespace uv_detail {

Box smallest_box(const std::vector<double>& uv) {
  const size_t n = uv.size() / 2;
  std::vector<std::array<double, 2>> sorted(n);
  for (size_t i = 0; i < n; ++i) sorted[i] = {uv[2 * i], uv[2 * i + 1]};
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
  Box best;
  double best_area = 1e300;
  bool any = false;
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
    if (!any || area < best_area) {
      any = true;
      best_area = area;
      best = {co, si, hi[0] - lo[0], hi[1] - lo[1]};
    }
  }
  return best;
}

}  // namespace uv_detail

namespace {

Shape orient(const FlatChart& c) {
  const size_t n = c.uv.size() / 2;
  const std::vector<double> uv(c.uv.begin(), c.uv.end());
  const uv_detail::Box box = uv_detail::smallest_box(uv);
  const double best_cos = box.co, best_sin = box.si;
  std::vector<std::array<double, 2>> pts(n);
  for (size_t i = 0; i < n; ++i) pts[i] = {uv[2 * i], uv[2 * i + 1]};
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
// Without `profile`, only the texels and the size are made.
Raster rasterise(const FlatChart& c, const Shape& s, double density, int gutter, int turn,
                 std::vector<double>* texels, bool profile = true) {
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
  if (!profile) return r;
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
// Up to this many charts the bitmap placement is tried too.
constexpr size_t kBitmapCharts = 512;
// The bitmap placement's row tests over a whole density search, at most (about 1.7 s on one Zen
// 4 core) and per triangle (a mesh of a few hundred sliver triangles, each its own chart, could
// ask for far more than its packing is worth): past that, the skyline's packing stands.
constexpr int64_t kBitmapTests = 200'000'000;
constexpr int64_t kBitmapTestsPerTriangle = 50'000;

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

// ---- bitmap placement (few charts): charts nest into each other's holes and hollows ----------

// A chart at one density and turn as texel rows of bits (bit i of word k = column 64 k + i),
// covering every texel a triangle touches, widened by the gutter.
struct Bitmap {
  int w = 0, h = 0, words = 0;
  int first = 0, last = -1;    // rows with any bit
  std::vector<uint64_t> bits;  // h rows of `words`
  std::vector<int> probe;      // rows in the order a fit test checks them
  std::vector<int> run;        // per row, its longest run of set bits
  std::vector<int> lo, hi;     // per row, its first and last set column
  std::vector<char> solid;     // per row, set from lo to hi without a gap
};

// The longest run of set bits in a row of `words` (bits past `width` are ignored).
int longest_run(const uint64_t* line, int words, int width, bool set) {
  int best = 0, cur = 0;
  for (int k = 0; k < words; ++k) {
    const int bits = std::min(64, width - 64 * k);
    if (bits <= 0) break;
    const uint64_t word = set ? line[k] : ~line[k];
    const uint64_t full = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    if ((word & full) == full) {
      cur += bits;
      continue;
    }
    for (int i = 0; i < bits; ++i) {
      if ((word >> i) & 1) {
        best = std::max(best, ++cur);
      } else {
        cur = 0;
      }
    }
  }
  return std::max(best, cur);
}

void finish_bitmap(Bitmap* b);

Bitmap to_bitmap(const FlatChart& c, const std::vector<double>& tex, const Raster& r, int gutter) {
  Bitmap b;
  b.w = r.w;
  b.h = r.h;
  b.words = (r.w + 63) / 64;
  b.bits.assign(static_cast<size_t>(b.h) * static_cast<size_t>(b.words), 0);
  const auto set_span = [&](int row, double x0, double x1) {
    if (row < 0 || row >= b.h) return;
    const int c0 = std::max(0, static_cast<int>(std::floor(x0)));
    const int c1 = std::min(b.w - 1, static_cast<int>(std::floor(x1)));
    uint64_t* line = &b.bits[static_cast<size_t>(row) * static_cast<size_t>(b.words)];
    for (int col = c0; col <= c1; ++col) line[col >> 6] |= uint64_t{1} << (col & 63);
  };
  for (size_t t = 0; t < c.triangles.size() / 3; ++t) {
    const double* p[3];
    for (int k = 0; k < 3; ++k) p[k] = &tex[2 * c.triangles[3 * t + static_cast<size_t>(k)]];
    const double y_lo = std::min({p[0][1], p[1][1], p[2][1]});
    const double y_hi = std::max({p[0][1], p[1][1], p[2][1]});
    if (std::floor(y_lo) == std::floor(y_hi)) {  // within one row (most, on a dense mesh)
      set_span(static_cast<int>(std::floor(y_lo)), std::min({p[0][0], p[1][0], p[2][0]}),
               std::max({p[0][0], p[1][0], p[2][0]}));
      continue;
    }
    for (int row = static_cast<int>(std::floor(y_lo)); row <= static_cast<int>(std::floor(y_hi));
         ++row) {
      // The triangle's x extent inside the band [row, row + 1]: its corners in the band and its
      // edges' crossings of the band's two lines.
      const double b0 = row, b1 = row + 1.0;
      double x0 = 1e300, x1 = -1e300;
      for (int k = 0; k < 3; ++k) {
        const double* a = p[k];
        const double* e = p[(k + 1) % 3];
        if (a[1] >= b0 && a[1] <= b1) {
          x0 = std::min(x0, a[0]);
          x1 = std::max(x1, a[0]);
        }
        for (double line : {b0, b1}) {
          if ((a[1] - line) * (e[1] - line) < 0) {
            const double x = a[0] + (e[0] - a[0]) * (line - a[1]) / (e[1] - a[1]);
            x0 = std::min(x0, x);
            x1 = std::max(x1, x);
          }
        }
      }
      if (x0 <= x1) set_span(row, x0, x1);
    }
  }
  // Widen by the gutter: along each row one column at a time, then across rows.
  const size_t words = static_cast<size_t>(b.words);
  const uint64_t last_mask = (b.w & 63) == 0 ? ~uint64_t{0} : (uint64_t{1} << (b.w & 63)) - 1;
  std::vector<uint64_t> line(words);
  for (int row = 0; row < b.h; ++row) {
    uint64_t* out = &b.bits[static_cast<size_t>(row) * words];
    for (int g = 0; g < gutter; ++g) {
      for (size_t k = 0; k < words; ++k) {
        const uint64_t up = (out[k] << 1) | (k > 0 ? out[k - 1] >> 63 : 0);
        const uint64_t down = (out[k] >> 1) | (k + 1 < words ? out[k + 1] << 63 : 0);
        line[k] = out[k] | up | down;
      }
      line[words - 1] &= last_mask;
      std::copy(line.begin(), line.end(), out);
    }
  }
  if (gutter > 0) {
    const std::vector<uint64_t> rows = b.bits;
    for (int row = 0; row < b.h; ++row) {
      uint64_t* out = &b.bits[static_cast<size_t>(row) * words];
      for (int d = std::max(0, row - gutter); d <= std::min(b.h - 1, row + gutter); ++d) {
        const uint64_t* in = &rows[static_cast<size_t>(d) * words];
        for (size_t k = 0; k < words; ++k) out[k] |= in[k];
      }
    }
  }
  finish_bitmap(&b);
  return b;
}

// A chart bitmap's bits turned a quarter counter-clockwise (y down): texel (i, j) -> (j, w-1-i),
// as the texel coordinates turn with (x, y) -> (y, w - x) (turn_texels).
Bitmap turn_bitmap(const Bitmap& in) {
  Bitmap b;
  b.w = in.h;
  b.h = in.w;
  b.words = (b.w + 63) / 64;
  b.bits.assign(static_cast<size_t>(b.h) * static_cast<size_t>(b.words), 0);
  for (int j = in.first; j <= in.last; ++j) {
    const uint64_t* line = &in.bits[static_cast<size_t>(j) * static_cast<size_t>(in.words)];
    for (int k = 0; k < in.words; ++k) {
      for (uint64_t w = line[k]; w != 0; w &= w - 1) {
        const int i = 64 * k + std::countr_zero(w);
        const size_t row = static_cast<size_t>(in.w - 1 - i);
        b.bits[row * static_cast<size_t>(b.words) + static_cast<size_t>(j >> 6)] |= uint64_t{1}
                                                                                    << (j & 63);
      }
    }
  }
  finish_bitmap(&b);
  return b;
}

// Texel coordinates (2 per vertex) in a w-wide frame turned as turn_bitmap turns its bits.
void turn_texels(std::vector<double>* tex, double w) {
  for (size_t k = 0; k < tex->size() / 2; ++k) {
    const double x = (*tex)[2 * k], y = (*tex)[2 * k + 1];
    (*tex)[2 * k] = y;
    (*tex)[2 * k + 1] = w - x;
  }
}

void finish_bitmap(Bitmap* out) {
  Bitmap& b = *out;
  const size_t words = static_cast<size_t>(b.words);
  b.first = b.h;
  b.last = -1;
  for (int row = 0; row < b.h; ++row) {
    const uint64_t* in = &b.bits[static_cast<size_t>(row) * words];
    if (std::any_of(in, in + words, [](uint64_t v) { return v != 0; })) {
      b.first = std::min(b.first, row);
      b.last = row;
    }
  }
  b.run.assign(static_cast<size_t>(b.h), 0);
  b.lo.assign(static_cast<size_t>(b.h), 0);
  b.hi.assign(static_cast<size_t>(b.h), -1);
  b.solid.assign(static_cast<size_t>(b.h), 0);
  for (int row = b.first; row <= b.last; ++row) {
    const uint64_t* in = &b.bits[static_cast<size_t>(row) * words];
    const size_t at = static_cast<size_t>(row);
    b.run[at] = longest_run(in, b.words, b.w, true);
    for (int k = 0; k < b.words; ++k) {
      if (in[k] == 0) continue;
      if (b.hi[at] < 0) b.lo[at] = 64 * k + std::countr_zero(in[k]);
      b.hi[at] = 64 * k + 63 - std::countl_zero(in[k]);
    }
    b.solid[at] = b.hi[at] - b.lo[at] + 1 == b.run[at];
  }
  // Probe the middle first, then by halving: a blocked place is usually found in a row or two.
  if (b.last >= b.first) {
    std::vector<char> seen(static_cast<size_t>(b.h), 0);
    for (int parts = 1; parts <= b.last - b.first + 1; parts *= 2) {
      for (int i = 0; i < parts; ++i) {
        const int row = b.first + (2 * i + 1) * (b.last - b.first) / (2 * parts);
        if (!seen[static_cast<size_t>(row)]) {
          seen[static_cast<size_t>(row)] = 1;
          b.probe.push_back(row);
        }
      }
    }
    for (int row = b.first; row <= b.last; ++row) {
      if (!seen[static_cast<size_t>(row)]) b.probe.push_back(row);
    }
  }
}

// The texture's occupied texels, rows of `words`, and each row's longest free run.
struct Occupancy {
  int size = 0, words = 0;
  std::vector<uint64_t> bits;
  std::vector<int> free_run;

  // A row of the chart cannot go where the texture's row has no free run as long as its own
  // longest: whole rows of positions are passed over with that test alone.
  bool may_fit_row(const Bitmap& b, int y) const {
    tests += static_cast<int64_t>(b.probe.size()) / 8 + 1;  // a cheap test: an eighth each
    for (int row : b.probe) {
      if (free_run[static_cast<size_t>(y + row)] < b.run[static_cast<size_t>(row)]) return false;
    }
    return true;
  }

  // Row tests made so far (fits, blocked_until): the search's cost.
  mutable int64_t tests = 0;

  bool fits(const Bitmap& b, int x, int y) const { return blocked_until(b, x, y) < 0; }

  // -1 when the chart fits at (x, y); else an x before which it cannot fit in this row of
  // positions (x + 1, or past the texels that block a gapless row of the chart).
  int blocked_until(const Bitmap& b, int x, int y) const {
    const int xw = x >> 6, xs = x & 63;
    const size_t bw = static_cast<size_t>(b.words);
    for (int row : b.probe) {
      ++tests;
      const uint64_t* m = &b.bits[static_cast<size_t>(row) * bw];
      const uint64_t* a = &bits[static_cast<size_t>(y + row) * static_cast<size_t>(words)];
      for (int j = 0; j <= b.words; ++j) {
        uint64_t v = j < b.words ? m[j] << xs : 0;
        if (xs != 0 && j > 0) v |= m[j - 1] >> (64 - xs);
        if (v == 0 || (a[xw + j] & v) == 0) continue;
        if (!b.solid[static_cast<size_t>(row)]) return x + 1;
        // The last taken texel under the row's span: the chart must start past it.
        const int c0 = x + b.lo[static_cast<size_t>(row)], c1 = x + b.hi[static_cast<size_t>(row)];
        for (int k = c1 >> 6; k >= c0 >> 6; --k) {
          uint64_t w = a[k];
          if (k == c1 >> 6 && (c1 & 63) != 63) w &= (uint64_t{2} << (c1 & 63)) - 1;
          if (k == c0 >> 6) w &= ~uint64_t{0} << (c0 & 63);
          if (w != 0) return 64 * k + 63 - std::countl_zero(w) - b.lo[static_cast<size_t>(row)] + 1;
        }
        return x + 1;
      }
    }
    return -1;
  }

  void put(const Bitmap& b, int x, int y) {
    const int xw = x >> 6, xs = x & 63;
    const size_t bw = static_cast<size_t>(b.words);
    for (int row = b.first; row <= b.last; ++row) {
      const uint64_t* m = &b.bits[static_cast<size_t>(row) * bw];
      uint64_t* a = &bits[static_cast<size_t>(y + row) * static_cast<size_t>(words)];
      for (int j = 0; j <= b.words; ++j) {
        uint64_t v = j < b.words ? m[j] << xs : 0;
        if (xs != 0 && j > 0) v |= m[j - 1] >> (64 - xs);
        if (v != 0) a[xw + j] |= v;
      }
      free_run[static_cast<size_t>(y + row)] = longest_run(a, words, size, false);
    }
  }
};

// The first column at or after `from` (below `size`) whose bit in `line` is `set`; `size` if
// none.
int next_bit(const uint64_t* line, int from, int size, bool set) {
  for (int c = from; c < size;) {
    const int k = c >> 6;
    uint64_t w = set ? line[k] : ~line[k];
    w &= ~uint64_t{0} << (c & 63);
    if (w != 0) return std::min(size, 64 * k + std::countr_zero(w));
    c = 64 * (k + 1);
  }
  return size;
}

// Places every chart at the first free place in reading order (top row first) on a grid of a
// 16th of its smaller side, in whichever quarter turn ends highest, then slides it up and left
// while it fits: a chart can sit in another's hollow or in a hole left earlier, which a skyline
// cannot give it. False when one does not fit, or when the search has made more than `*budget`
// row tests (then *budget <= 0 on return, and the bitmap is not worth its cost for these charts).
bool place_all_bitmap(const std::vector<FlatChart>& charts, const std::vector<Shape>& shapes,
                      const std::vector<size_t>& order, double density, int size, int gutter,
                      int64_t* budget, std::vector<Placement>* placed) {
  Occupancy occ;
  occ.size = size;
  occ.words = (size + 63) / 64 + 1;  // one spare word: a shifted row may spill into it
  occ.bits.assign(static_cast<size_t>(size) * static_cast<size_t>(occ.words), 0);
  occ.free_run.assign(static_cast<size_t>(size), size);
  placed->assign(charts.size(), {});
  std::vector<double> scratch;
  Bitmap maps[4];
  for (size_t i : order) {
    int best_score = 1 << 30, best_x = -1, best_y = 0, best_turn = -1;
    const Raster r = rasterise(charts[i], shapes[i], density, gutter, 0, &scratch, false);
    for (int turn = 0; turn < 4; ++turn) {
      // Turns 1-3 are turn 0's bits turned (the chart's texels turn with them when it is
      // written out): one rasterisation per chart.
      maps[turn] =
          turn == 0 ? to_bitmap(charts[i], scratch, r, gutter) : turn_bitmap(maps[turn - 1]);
      const Bitmap& b = maps[turn];
      if (b.w > size || b.h > size) continue;
      if (b.last < b.first) {  // nothing to place (a chart below a texel with no gutter)
        best_score = 0;
        best_x = 0;
        best_y = 0;
        best_turn = turn;
        break;
      }
      const int step = std::max(1, std::min(b.w, b.h) / 16);
      bool found = false;
      for (int y = -b.first; y + b.last < size && !found; y += step) {
        if (y + b.last >= best_score) break;
        if (occ.tests > *budget) {
          *budget -= occ.tests;
          return false;
        }
        if (!occ.may_fit_row(b, y)) continue;
        // Where the first probed row is gapless, only the texture row's free runs long enough
        // for it are searched (in a packed region, the holes); else every x on the grid.
        const int r0 = b.probe.front();
        const bool by_runs = b.solid[static_cast<size_t>(r0)] != 0;
        const int lo0 = b.lo[static_cast<size_t>(r0)], hi0 = b.hi[static_cast<size_t>(r0)];
        const uint64_t* line =
            &occ.bits[static_cast<size_t>(y + r0) * static_cast<size_t>(occ.words)];
        int x = 0, run_end = size + 1;  // x's run of candidates ends where x + hi0 reaches it
        const auto next_run = [&](int from) {
          for (int c = from; c < size;) {
            const int start = next_bit(line, c, size, false);
            const int end = next_bit(line, start, size, true);
            if (start >= size) break;
            if (end - start >= hi0 - lo0 + 1) {
              run_end = end;
              return start - lo0;
            }
            c = end;
          }
          return size;  // none: past every x
        };
        if (by_runs) x = next_run(lo0);
        for (int next = 0; x + b.w <= size;) {
          if (by_runs && x + hi0 >= run_end) {  // past its run (or jumped past it)
            x = next_run(x + lo0);
            continue;
          }
          next = occ.blocked_until(b, x, y);
          if (next >= 0) {
            x = std::max(x + step, next);
            continue;
          }
          int fx = x, fy = y;
          for (bool moved = true; moved;) {
            moved = false;
            while (fy + b.first > 0 && occ.fits(b, fx, fy - 1)) {
              --fy;
              moved = true;
            }
            while (fx > 0 && occ.fits(b, fx - 1, fy)) {
              --fx;
              moved = true;
            }
          }
          const int score = fy + b.last;
          if (score < best_score || (score == best_score && fx < best_x)) {
            best_score = score;
            best_x = fx;
            best_y = fy;
            best_turn = turn;
          }
          found = true;
          break;
        }
      }
    }
    if (best_turn < 0) {
      *budget -= occ.tests;
      return false;
    }
    occ.put(maps[best_turn], best_x, best_y);
    (*placed)[i] = {best_x, best_y, best_turn};
  }
  *budget -= occ.tests;
  return true;
}
}  // namespace

namespace uv_detail {

double box_fill(const std::vector<double>& uv, double area) {
  const Box b = smallest_box(uv);
  const double box = b.along * b.across;
  return box > 0 ? area / box : 1.0;
}

std::array<double, 2> box_long_axis(const std::vector<double>& uv) {
  const Box b = smallest_box(uv);
  if (b.along >= b.across) return {b.co, b.si};
  return {-b.si, b.co};
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
  bool best_bitmap = false;  // the best came from the bitmap placement (texels turned, not re-cut)
  const bool many = charts->size() > kManyCharts;
  // Placements: the skyline, by its lowest bottom or its least waste, and for few charts the
  // bitmap, whose search costs more per chart.
  enum class Placer { kSkyline, kLeastWaste, kBitmap };
  const bool few = charts->size() <= kBitmapCharts;
  int64_t triangles = 0;
  for (const FlatChart& c : *charts) triangles += static_cast<int64_t>(c.faces.size());
  int64_t bitmap_budget = std::min(kBitmapTests, kBitmapTestsPerTriangle * triangles);
  for (const std::vector<size_t>* order : {&by_height, &by_area}) {
    for (Placer placer : {Placer::kSkyline, Placer::kLeastWaste, Placer::kBitmap}) {
      if (many && (order != &by_height || placer != Placer::kSkyline)) continue;
      if (placer == Placer::kBitmap && (!few || bitmap_budget <= 0)) continue;
      // After the first variant only a denser packing matters: a variant that does not fit at
      // 1 % above the best so far is not searched further.
      double lo = 0, hi = 0, s = good > 0 ? good * 1.01 : start;
      for (int it = 0; it < 32; ++it) {
        if (cancel && cancel->load()) return cancelled("UV atlas: cancelled while packing");
        const bool fits = placer == Placer::kBitmap
                              ? place_all_bitmap(*charts, shapes, *order, s, work, margin,
                                                 &bitmap_budget, &placed)
                              : place_all(*charts, shapes, *order, s, work, margin,
                                          placer == Placer::kLeastWaste, &placed);
        if (placer == Placer::kBitmap && bitmap_budget <= 0 && !fits) break;  // given up
        if (!fits && good > 0 && lo == 0 && s <= good * 1.01) break;
        if (fits) {
          lo = s;
          if (s > good) {
            good = s;
            best = placed;
            best_bitmap = placer == Placer::kBitmap;
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
    if (best_bitmap) {
      Raster r = rasterise(c, shapes[i], good, margin, 0, &tex, false);
      for (int t = 0; t < best[i].turn; ++t) {
        turn_texels(&tex, r.w);
        std::swap(r.w, r.h);
      }
    } else {
      rasterise(c, shapes[i], good, margin, best[i].turn, &tex);
    }
    for (size_t k = 0; k < c.uv.size() / 2; ++k) {
      c.uv[2 * k] = static_cast<float>((tex[2 * k] + best[i].x) * scale);
      c.uv[2 * k + 1] = static_cast<float>((tex[2 * k + 1] + best[i].y) * scale);
    }
  }
  return good * scale;
}

}  // namespace tessera::mesh
