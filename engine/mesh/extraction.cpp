#include "engine/mesh/extraction.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "engine/mesh/marching_cubes.h"
#include "kernels/marching_tets.h"

namespace tessera::mesh {
namespace {

Status check_options(const ExtractionOptions& o, bool coarse_to_fine) {
  if (o.resolution_base < 1 || o.resolution_base > 10) {
    return invalid_argument("extraction: resolution_base " + std::to_string(o.resolution_base) +
                            " outside [1, 10]");
  }
  if (coarse_to_fine && (o.coarse_base < 1 || o.coarse_base > o.resolution_base)) {
    return invalid_argument("extraction: coarse_base " + std::to_string(o.coarse_base) +
                            " outside [1, resolution_base " + std::to_string(o.resolution_base) +
                            "]");
  }
  if (!(o.bound > 0.0f) || !std::isfinite(o.bound)) {
    return invalid_argument("extraction: bound must be a positive number");
  }
  if (!std::isfinite(o.iso)) return invalid_argument("extraction: iso must be finite");
  if (o.batch_points < 1) return invalid_argument("extraction: batch_points must be >= 1");
  return Status();
}

Lattice make_lattice(int base, float bound) {
  Lattice l;
  const int64_t n = (int64_t{1} << base) + 1;
  l.n = {n, n, n};
  l.origin = {-bound, -bound, -bound};
  l.spacing = 2.0f * bound / static_cast<float>(n - 1);
  return l;
}

// Evaluates the occupancy at lattice points in batches; the point buffer is reused across calls.
class BatchEvaluator {
 public:
  BatchEvaluator(const OccupancyFn& fn, int64_t batch, float iso, ExtractionStats* stats)
      : fn_(fn), batch_(batch), iso_(iso), stats_(stats) {}

  // Writes the logits of `indices` (lattice indices) to out[0..indices.size()).
  Status evaluate(const Lattice& l, const std::vector<int64_t>& indices, float* out) {
    const auto total = static_cast<int64_t>(indices.size());
    if (points_.empty() && total > 0)
      points_.resize(static_cast<size_t>(std::min(batch_, total)) * 3);
    for (int64_t begin = 0; begin < total; begin += batch_) {
      const int64_t n = std::min(batch_, total - begin);
      if (static_cast<int64_t>(points_.size()) < n * 3) points_.resize(static_cast<size_t>(n) * 3);
      for (int64_t p = 0; p < n; ++p) {
        const int64_t idx = indices[static_cast<size_t>(begin + p)];
        const int64_t i = idx % l.n[0], j = (idx / l.n[0]) % l.n[1], k = idx / (l.n[0] * l.n[1]);
        points_[3 * p] = l.origin[0] + l.spacing * static_cast<float>(i);
        points_[3 * p + 1] = l.origin[1] + l.spacing * static_cast<float>(j);
        points_[3 * p + 2] = l.origin[2] + l.spacing * static_cast<float>(k);
      }
      TESSERA_RETURN_IF_ERROR(fn_(points_.data(), n, out + begin));
      for (int64_t p = 0; p < n; ++p) {
        if (!std::isfinite(out[begin + p])) {
          return invalid_argument(
              "extraction: occupancy logit at (" + std::to_string(points_[3 * p]) + ", " +
              std::to_string(points_[3 * p + 1]) + ", " + std::to_string(points_[3 * p + 2]) +
              ") is not finite (NaN/Inf in the model or its weights?)");
        }
        raw_lo_ = std::min(raw_lo_, out[begin + p]);
        raw_hi_ = std::max(raw_hi_, out[begin + p]);
        // A solid that reaches the face of the extraction box would leave an open surface there
        // (marching tetrahedra closes the surface only where the lattice's boundary is outside):
        // points on the box's faces count as outside, so the mesh is capped at the box and closed.
        const int64_t idx = indices[static_cast<size_t>(begin + p)];
        if (on_boundary(l, idx)) out[begin + p] = std::min(out[begin + p], iso_ - kBoundaryOutside);
      }
    }
    stats_->queries += total;
    return Status();
  }
  int64_t queries() const { return stats_->queries; }

 public:
  // The logits' range as the model gave them (before the box faces were set outside).
  float raw_lo() const { return raw_lo_; }
  float raw_hi() const { return raw_hi_; }
  // True when every logit so far was on one side of iso: the model drew no surface (a field that is
  // inside everywhere is no shape either, though the box faces would close it into the box).
  bool one_sided(float iso) const { return raw_hi_ <= iso || raw_lo_ > iso; }

 private:
  // How far below iso a boundary point is set when the model says inside there: a small margin, so
  // the cap's vertices sit next to the box face (edge_param keeps them off the lattice point).
  static constexpr float kBoundaryOutside = 1e-3f;

  static bool on_boundary(const Lattice& l, int64_t idx) {
    const int64_t i = idx % l.n[0], j = (idx / l.n[0]) % l.n[1], k = idx / (l.n[0] * l.n[1]);
    return i == 0 || j == 0 || k == 0 || i == l.n[0] - 1 || j == l.n[1] - 1 || k == l.n[2] - 1;
  }

  const OccupancyFn& fn_;
  int64_t batch_;
  float iso_;
  float raw_lo_ = INFINITY, raw_hi_ = -INFINITY;
  ExtractionStats* stats_;  // never null: the callers pass theirs or a local one
  std::vector<float> points_;
};

// Open-addressing hash map from a lattice index (>= 0) to a slot number, linear probing in a
// power-of-two table sized once per level for its worst case (load <= 1/2, no rehashing), so a
// level costs two flat arrays instead of a node allocation per point (std::unordered_map).
class LatticeHash {
 public:
  // Empties the table and sizes it for up to `max_keys` keys.
  void reset(size_t max_keys) {
    size_t cap = 16;
    int bits = 4;
    while (cap < 2 * max_keys) {
      cap *= 2;
      ++bits;
    }
    keys_.assign(cap, -1);
    slots_.resize(cap);
    mask_ = cap - 1;
    shift_ = 64 - bits;
  }
  // The slot of `key`, inserting it with `slot` if absent.
  int32_t find_or_insert(int64_t key, int32_t slot) {
    // Fibonacci hashing: the top bits of key * 2^64/phi.
    size_t h = static_cast<size_t>((static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> shift_);
    while (true) {
      if (keys_[h] == key) return slots_[h];
      if (keys_[h] < 0) {
        keys_[h] = key;
        slots_[h] = slot;
        return slot;
      }
      h = (h + 1) & mask_;
    }
  }

 private:
  std::vector<int64_t> keys_;
  std::vector<int32_t> slots_;
  size_t mask_ = 0;
  int shift_ = 60;
};

Status no_surface(float lo, float hi, float iso) {
  return invalid_argument("extraction: no surface: the occupancy field does not cross level " +
                          std::to_string(iso) + " anywhere in the cube (logits range " +
                          std::to_string(lo) + " .. " + std::to_string(hi) + ")");
}

}  // namespace

std::string describe_level_queries(const ExtractionStats& stats) {
  std::string out;
  for (size_t i = 0; i < stats.level_queries.size(); ++i) {
    if (i > 0) out += " + ";
    out += std::to_string(stats.level_queries[i]);
  }
  if (!out.empty() && stats.tracking_queries > 0)
    out += " (tracking " + std::to_string(stats.tracking_queries) + ")";
  return out;
}

Expected<Mesh> extract_dense(const OccupancyFn& occupancy, const ExtractionOptions& options,
                             ExtractionStats* stats) {
  TESSERA_RETURN_IF_ERROR(check_options(options, false));
  ExtractionStats local;
  ExtractionStats* st = stats != nullptr ? stats : &local;
  *st = ExtractionStats();
  const Lattice l = make_lattice(options.resolution_base, options.bound);
  std::vector<int64_t> indices(static_cast<size_t>(l.num_points()));
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int64_t>(i);
  std::vector<float> values(indices.size());
  BatchEvaluator eval(occupancy, options.batch_points, options.iso, st);
  TESSERA_RETURN_IF_ERROR(eval.evaluate(l, indices, values.data()));
  st->levels = 1;
  st->level_queries = {st->queries};
  if (eval.one_sided(options.iso)) return no_surface(eval.raw_lo(), eval.raw_hi(), options.iso);
  TESSERA_ASSIGN_OR_RETURN(Mesh mesh, marching_cubes(values.data(), l, options.iso));
  if (mesh.empty()) {
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    return no_surface(*lo, *hi, options.iso);
  }
  return mesh;
}

namespace {

// Lattice index -> float, open addressing with linear probing, grown by doubling (the
// surface-tracking pass adds points and cells as it goes; LatticeHash is sized once per level
// instead).
class PointValues {
 public:
  explicit PointValues(size_t expected) { rehash(std::max<size_t>(64, 2 * expected)); }
  // The value of `key`, or nullptr (valid until the next insert).
  float* find(int64_t key) {
    for (size_t h = slot(key);; h = (h + 1) & mask_) {
      if (keys_[h] == key) return &values_[h];
      if (keys_[h] < 0) return nullptr;
    }
  }
  // Inserts `key` with `value` unless it is there (then nothing changes); true when inserted.
  bool insert(int64_t key, float value) {
    if (2 * (size_ + 1) > keys_.size()) rehash(2 * keys_.size());
    for (size_t h = slot(key);; h = (h + 1) & mask_) {
      if (keys_[h] == key) return false;
      if (keys_[h] < 0) {
        keys_[h] = key;
        values_[h] = value;
        ++size_;
        return true;
      }
    }
  }

 private:
  size_t slot(int64_t key) const {
    return static_cast<size_t>((static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void rehash(size_t min_capacity) {
    size_t cap = 64;
    int bits = 6;
    while (cap < min_capacity) {
      cap *= 2;
      ++bits;
    }
    std::vector<int64_t> old_keys = std::move(keys_);
    std::vector<float> old_values = std::move(values_);
    keys_.assign(cap, -1);
    values_.assign(cap, 0.0f);
    mask_ = cap - 1;
    shift_ = 64 - bits;
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] >= 0) insert(old_keys[i], old_values[i]);
    }
  }

  std::vector<int64_t> keys_;
  std::vector<float> values_;
  size_t mask_ = 0, size_ = 0;
  int shift_ = 58;
};

// The coarse levels find a surface only where a coarse cell's corners (or its near-surface test)
// show it; a feature thinner than a coarse cell can pass between them, and the finest level then
// holds part of a surface whose continuation lies in cells that were never refined: the mesh would
// end there with an open crack. Surface tracking closes it: wherever a face of a surface cell
// changes sign, the surface goes on into the neighbour across that face, which is added (its
// missing corners queried, in one batch per round) until no face leads anywhere new. Every surface
// component that was found is then complete, exactly as the dense path polygonizes it.
// `values` holds every point of `l` queried so far (at least the cells' corners): none is queried
// twice.
Status track_surface(const Lattice& l, float iso, BatchEvaluator& eval, std::vector<int64_t>& cells,
                     std::vector<std::array<float, 8>>& corners, PointValues& values) {
  auto corner_index = [&](int64_t cell, int q) {
    const int64_t i = cell % l.n[0], j = (cell / l.n[0]) % l.n[1], k = cell / (l.n[0] * l.n[1]);
    return l.index(i + (q & 1), j + ((q >> 1) & 1), k + ((q >> 2) & 1));
  };
  PointValues members(cells.size());  // the cells in the set (values unused)
  for (size_t a = 0; a < cells.size(); ++a) members.insert(cells[a], 0.0f);
  // Face f = 2 * axis + side (side 0: towards -axis): the 4 corners on that face.
  static constexpr int kFaceCorners[6][4] = {{0, 2, 4, 6}, {1, 3, 5, 7}, {0, 1, 4, 5},
                                             {2, 3, 6, 7}, {0, 1, 2, 3}, {4, 5, 6, 7}};
  size_t frontier_begin = 0;
  std::vector<int64_t> added, query;
  std::vector<float> queried;
  while (frontier_begin < cells.size()) {
    const size_t frontier_end = cells.size();
    added.clear();
    for (size_t a = frontier_begin; a < frontier_end; ++a) {
      const int64_t cell = cells[a];
      const int64_t i = cell % l.n[0], j = (cell / l.n[0]) % l.n[1], k = cell / (l.n[0] * l.n[1]);
      for (int f = 0; f < 6; ++f) {
        bool inside = false, outside = false;
        for (int c : kFaceCorners[f])
          (corners[a][static_cast<size_t>(c)] > iso ? inside : outside) = true;
        if (!(inside && outside)) continue;
        const int axis = f / 2, side = f % 2;
        int64_t ni = i, nj = j, nk = k;
        int64_t& moved = axis == 0 ? ni : (axis == 1 ? nj : nk);
        moved += side == 0 ? -1 : 1;
        if (moved < 0 || moved + 1 >= l.n[static_cast<size_t>(axis)]) continue;
        const int64_t neighbour = l.index(ni, nj, nk);
        if (members.insert(neighbour, 0.0f)) added.push_back(neighbour);
      }
    }
    frontier_begin = frontier_end;
    if (added.empty()) break;
    query.clear();
    for (int64_t cell : added) {
      for (int q = 0; q < 8; ++q) {
        const int64_t p = corner_index(cell, q);
        // A placeholder, written once queried below (each point is queried once).
        if (values.insert(p, 0.0f)) query.push_back(p);
      }
    }
    queried.resize(query.size());
    TESSERA_RETURN_IF_ERROR(eval.evaluate(l, query, queried.data()));
    for (size_t q = 0; q < query.size(); ++q) *values.find(query[q]) = queried[q];
    for (int64_t cell : added) {
      std::array<float, 8> c;
      for (int q = 0; q < 8; ++q) c[static_cast<size_t>(q)] = *values.find(corner_index(cell, q));
      cells.push_back(cell);
      corners.push_back(c);
    }
  }
  return Status();
}

// The last refinement (parent cells of lattice `l` -> cells of lattice `next`, the finest),
// query-thrifty: only the finest cells that the surface crosses are needed, and the 19 new points
// of every parent's 3x3x3 block (what the coarser levels use) are mostly corners of children it
// does not cross (a sphere at 2^8 + 1: 447 k queries for 179 k surface cells with 359 k corners).
// Instead, each edge of a parent whose ends differ in sign is split at its midpoint (one query,
// shared by the up to four parents of the edge); the half that still changes sign is a finest edge
// with a sign change, so the four finest cells around it are surface cells: the seeds. Their
// corners are queried, and track_surface then completes every surface component that has a seed:
// every component that crosses a parent edge between corners of different sign. Parents active
// only through near_surface_logit (no sign change at their corners) are refined as whole blocks,
// as the coarser levels are. What this leaves out is a component confined between parent edges
// whose parents changed sign for another surface: smaller than two finest cells across unless it
// is a tube threading between parent lattice points, and cleanup's small-component filter drops
// the former. `cells` / `corners` are replaced by the finest surface cells, tracked.
Status refine_finest_seeded(const Lattice& l, const Lattice& next, float iso, BatchEvaluator& eval,
                            std::vector<int64_t>& cells, std::vector<std::array<float, 8>>& corners,
                            float* lo, float* hi, int64_t* tracking_queries) {
  PointValues values(cells.size() * 8);
  PointValues members(cells.size() * 4);  // finest cells already in the output (values unused)
  std::vector<int64_t> query;
  std::vector<float> queried;
  auto fine_coords = [&](int64_t cell, const Lattice& lat) {
    return std::array<int64_t, 3>{cell % lat.n[0], (cell / lat.n[0]) % lat.n[1],
                                  cell / (lat.n[0] * lat.n[1])};
  };
  auto query_all = [&]() -> Status {
    queried.resize(query.size());
    TESSERA_RETURN_IF_ERROR(eval.evaluate(next, query, queried.data()));
    for (size_t q = 0; q < query.size(); ++q) {
      *values.find(query[q]) = queried[q];
      *lo = std::min(*lo, queried[q]);
      *hi = std::max(*hi, queried[q]);
    }
    query.clear();
    return Status();
  };
  // A sign-changing parent edge: its first end (finest coordinates) and axis; its midpoint is
  // queried below.
  struct SplitEdge {
    std::array<int64_t, 3> a;
    int axis;
  };
  std::vector<SplitEdge> edges;
  std::vector<size_t> whole;  // parents refined as whole blocks
  for (size_t c = 0; c < cells.size(); ++c) {
    const auto [i, j, k] = fine_coords(cells[c], l);
    const std::array<float, 8>& v = corners[c];
    bool inside = false, outside = false;
    for (float x : v) (x > iso ? inside : outside) = true;
    for (int q = 0; q < 8; ++q) {
      values.insert(next.index(2 * (i + (q & 1)), 2 * (j + ((q >> 1) & 1)), 2 * (k + (q >> 2))),
                    v[static_cast<size_t>(q)]);
    }
    if (!(inside && outside)) {
      whole.push_back(c);
      continue;
    }
    for (int q = 0; q < 8; ++q) {
      for (int axis = 0; axis < 3; ++axis) {
        const int bit = 1 << axis;
        if ((q & bit) != 0) continue;
        if ((v[static_cast<size_t>(q)] > iso) == (v[static_cast<size_t>(q | bit)] > iso)) continue;
        SplitEdge e;
        e.a = {2 * (i + (q & 1)), 2 * (j + ((q >> 1) & 1)), 2 * (k + (q >> 2))};
        e.axis = axis;
        std::array<int64_t, 3> m = e.a;
        m[static_cast<size_t>(axis)] += 1;
        if (values.insert(next.index(m[0], m[1], m[2]), 0.0f))
          query.push_back(next.index(m[0], m[1], m[2]));
        edges.push_back(e);
      }
    }
  }
  // Whole blocks: the 19 new points of each, as the coarser levels.
  for (size_t c : whole) {
    const auto [i, j, k] = fine_coords(cells[c], l);
    for (int b = 0; b < 27; ++b) {
      const int64_t idx = next.index(2 * i + b % 3, 2 * j + (b / 3) % 3, 2 * k + b / 9);
      if (values.insert(idx, 0.0f)) query.push_back(idx);
    }
  }
  TESSERA_RETURN_IF_ERROR(query_all());
  std::vector<int64_t> out_cells;
  auto add_cell = [&](int64_t fi, int64_t fj, int64_t fk) {
    if (fi < 0 || fj < 0 || fk < 0 || fi + 1 >= next.n[0] || fj + 1 >= next.n[1] ||
        fk + 1 >= next.n[2]) {
      return;
    }
    const int64_t cell = next.index(fi, fj, fk);
    if (!members.insert(cell, 0.0f)) return;
    out_cells.push_back(cell);
    for (int q = 0; q < 8; ++q) {
      const int64_t p = next.index(fi + (q & 1), fj + ((q >> 1) & 1), fk + (q >> 2));
      if (values.insert(p, 0.0f)) query.push_back(p);
    }
  };
  for (size_t c : whole) {
    const auto [i, j, k] = fine_coords(cells[c], l);
    for (int child = 0; child < 8; ++child) {
      const int64_t fi = 2 * i + (child & 1), fj = 2 * j + ((child >> 1) & 1),
                    fk = 2 * k + (child >> 2);
      bool inside = false, outside = false;
      for (int q = 0; q < 8; ++q) {
        const float x = *values.find(next.index(fi + (q & 1), fj + ((q >> 1) & 1), fk + (q >> 2)));
        (x > iso ? inside : outside) = true;
      }
      if (inside && outside) add_cell(fi, fj, fk);
    }
  }
  for (const SplitEdge& e : edges) {
    std::array<int64_t, 3> m = e.a;
    m[static_cast<size_t>(e.axis)] += 1;
    const float va = *values.find(next.index(e.a[0], e.a[1], e.a[2]));
    const float vm = *values.find(next.index(m[0], m[1], m[2]));
    // The finest edge from p along the axis changes sign: the half at a or the half at m.
    const std::array<int64_t, 3> p = (va > iso) != (vm > iso) ? e.a : m;
    const int u = (e.axis + 1) % 3, w = (e.axis + 2) % 3;
    for (int du = -1; du <= 0; ++du) {
      for (int dw = -1; dw <= 0; ++dw) {
        std::array<int64_t, 3> o = p;
        o[static_cast<size_t>(u)] += du;
        o[static_cast<size_t>(w)] += dw;
        add_cell(o[0], o[1], o[2]);
      }
    }
  }
  TESSERA_RETURN_IF_ERROR(query_all());
  cells.clear();
  corners.clear();
  for (int64_t cell : out_cells) {
    const auto [fi, fj, fk] = fine_coords(cell, next);
    std::array<float, 8> c;
    for (int q = 0; q < 8; ++q) {
      c[static_cast<size_t>(q)] =
          *values.find(next.index(fi + (q & 1), fj + ((q >> 1) & 1), fk + (q >> 2)));
    }
    cells.push_back(cell);
    corners.push_back(c);
  }
  const int64_t before = eval.queries();
  TESSERA_RETURN_IF_ERROR(track_surface(next, iso, eval, cells, corners, values));
  *tracking_queries = eval.queries() - before;
  return Status();
}

}  // namespace

Expected<Mesh> extract_coarse_to_fine(const OccupancyFn& occupancy,
                                      const ExtractionOptions& options, ExtractionStats* stats) {
  TESSERA_RETURN_IF_ERROR(check_options(options, true));
  ExtractionStats local;
  ExtractionStats* st = stats != nullptr ? stats : &local;
  *st = ExtractionStats();
  BatchEvaluator eval(occupancy, options.batch_points, options.iso, st);
  const float iso = options.iso;

  // The surface cells of the current level, each with its 8 corner values (corner c at offset
  // (c & 1, (c >> 1) & 1, c >> 2)). Carrying the corners with the cell means no level ever looks a
  // value up by position: only the points new at a level go through the hash map, once each.
  std::vector<int64_t> cells;
  std::vector<std::array<float, 8>> corners;
  auto is_active = [&](const std::array<float, 8>& v, bool finest) {
    bool inside = false, outside = false;
    float nearest = INFINITY;
    for (float x : v) {
      (x > iso ? inside : outside) = true;
      nearest = std::min(nearest, std::fabs(x - iso));
    }
    return (inside && outside) || (!finest && nearest < options.near_surface_logit);
  };

  // Coarse level: every point, in a dense array.
  Lattice l = make_lattice(options.coarse_base, options.bound);
  float lo = 0, hi = 0;
  {
    std::vector<int64_t> all(static_cast<size_t>(l.num_points()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    std::vector<float> v(all.size());
    TESSERA_RETURN_IF_ERROR(eval.evaluate(l, all, v.data()));
    const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
    lo = *mn;
    hi = *mx;
    const bool finest = options.coarse_base == options.resolution_base;
    for (int64_t k = 0; k + 1 < l.n[2]; ++k) {
      for (int64_t j = 0; j + 1 < l.n[1]; ++j) {
        for (int64_t i = 0; i + 1 < l.n[0]; ++i) {
          std::array<float, 8> c;
          for (int q = 0; q < 8; ++q) {
            c[static_cast<size_t>(q)] = v[static_cast<size_t>(
                l.index(i + (q & 1), j + ((q >> 1) & 1), k + ((q >> 2) & 1)))];
          }
          if (is_active(c, finest)) {
            cells.push_back(l.index(i, j, k));
            corners.push_back(c);
          }
        }
      }
    }
  }
  st->levels = 1;
  st->level_queries = {st->queries};
  if (eval.one_sided(iso)) return no_surface(eval.raw_lo(), eval.raw_hi(), iso);
  LatticeHash hash;
  std::vector<int64_t> missing;      // next-level lattice indices to query, each once
  std::vector<int32_t> block_slots;  // per parent cell: 27 slots into `missing` (-1: a corner)
  std::vector<float> missing_values;
  std::vector<int64_t> next_cells;
  std::vector<std::array<float, 8>> next_corners;
  for (int level = options.coarse_base; level < options.resolution_base; ++level) {
    if (cells.empty()) return no_surface(lo, hi, iso);
    // Next level: lattice index (i, j, k) -> (2i, 2j, 2k); each parent cell needs the 3x3x3 points
    // of its 8 children, of which the 8 even ones are its own corners.
    const Lattice next = make_lattice(level + 1, options.bound);
    const bool finest = level + 1 == options.resolution_base;
    const int64_t before = st->queries;
    if (finest) {
      TESSERA_RETURN_IF_ERROR(refine_finest_seeded(l, next, iso, eval, cells, corners, &lo, &hi,
                                                   &st->tracking_queries));
      l = next;
      ++st->levels;
      st->level_queries.push_back(st->queries - before);
      break;
    }
    hash.reset(cells.size() * 19);
    missing.clear();
    block_slots.resize(cells.size() * 27);
    for (size_t a = 0; a < cells.size(); ++a) {
      const int64_t cell = cells[a];
      const int64_t i = cell % l.n[0], j = (cell / l.n[0]) % l.n[1], k = cell / (l.n[0] * l.n[1]);
      int32_t* slots = block_slots.data() + 27 * a;
      for (int b = 0; b < 27; ++b) {
        const int di = b % 3, dj = (b / 3) % 3, dk = b / 9;
        if (di % 2 == 0 && dj % 2 == 0 && dk % 2 == 0) {
          slots[b] = -1;
          continue;
        }
        const int64_t idx = next.index(2 * i + di, 2 * j + dj, 2 * k + dk);
        slots[b] = hash.find_or_insert(idx, static_cast<int32_t>(missing.size()));
        if (slots[b] == static_cast<int32_t>(missing.size())) missing.push_back(idx);
      }
    }
    missing_values.resize(missing.size());
    TESSERA_RETURN_IF_ERROR(eval.evaluate(next, missing, missing_values.data()));
    if (!missing_values.empty()) {
      const auto [mn, mx] = std::minmax_element(missing_values.begin(), missing_values.end());
      lo = std::min(lo, *mn);
      hi = std::max(hi, *mx);
    }
    next_cells.clear();
    next_corners.clear();
    for (size_t a = 0; a < cells.size(); ++a) {
      const int64_t cell = cells[a];
      const int64_t i = cell % l.n[0], j = (cell / l.n[0]) % l.n[1], k = cell / (l.n[0] * l.n[1]);
      const int32_t* slots = block_slots.data() + 27 * a;
      float block[27];
      for (int b = 0; b < 27; ++b) {
        if (slots[b] >= 0) {
          block[b] = missing_values[static_cast<size_t>(slots[b])];
        } else {
          const int c = (b % 3) / 2 + ((b / 3) % 3) / 2 * 2 + (b / 9) / 2 * 4;
          block[b] = corners[a][static_cast<size_t>(c)];
        }
      }
      for (int child = 0; child < 8; ++child) {
        const int ci = child & 1, cj = (child >> 1) & 1, ck = child >> 2;
        std::array<float, 8> c;
        for (int q = 0; q < 8; ++q) {
          c[static_cast<size_t>(q)] =
              block[(ci + (q & 1)) + 3 * (cj + ((q >> 1) & 1)) + 9 * (ck + (q >> 2))];
        }
        if (is_active(c, finest)) {
          next_cells.push_back(next.index(2 * i + ci, 2 * j + cj, 2 * k + ck));
          next_corners.push_back(c);
        }
      }
    }
    std::swap(cells, next_cells);
    std::swap(corners, next_corners);
    l = next;
    ++st->levels;
    st->level_queries.push_back(st->queries - before);
  }
  // Finest level: the cells the surface crosses (refine_finest_seeded: seeded from the parents'
  // sign-changing edges and completed by surface tracking), polygonized on the dense path's
  // lattice.
  if (cells.empty()) return no_surface(lo, hi, iso);
  st->surface_cells = static_cast<int64_t>(cells.size());
  if (options.polygonize) {
    Mesh out;
    std::vector<float> flat(8 * cells.size());
    for (size_t a = 0; a < cells.size(); ++a) {
      std::copy(corners[a].begin(), corners[a].end(),
                flat.begin() + static_cast<std::ptrdiff_t>(8 * a));
    }
    kernels::CellGrid grid;
    for (int d = 0; d < 3; ++d) {
      grid.n[d] = l.n[static_cast<size_t>(d)];
      grid.origin[d] = l.origin[static_cast<size_t>(d)];
    }
    grid.spacing = l.spacing;
    grid.iso = iso;
    TESSERA_RETURN_IF_ERROR(options.polygonize(grid, cells.data(), flat.data(),
                                               static_cast<int64_t>(cells.size()), &out.positions,
                                               &out.triangles));
    return out;
  }
  CellPolygonizer poly(l, iso);
  for (size_t a = 0; a < cells.size(); ++a) {
    const int64_t cell = cells[a];
    poly.add_cell(cell % l.n[0], (cell / l.n[0]) % l.n[1], cell / (l.n[0] * l.n[1]),
                  corners[a].data());
  }
  return poly.take_mesh();
}

}  // namespace tessera::mesh
