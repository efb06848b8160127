#include "engine/mesh/extraction.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/mesh/marching_cubes.h"

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
  BatchEvaluator(const OccupancyFn& fn, int64_t batch, ExtractionStats* stats)
      : fn_(fn), batch_(batch), stats_(stats) {}

  // Writes the logits of `indices` (lattice indices) to out[0..indices.size()).
  Status evaluate(const Lattice& l, const std::vector<int64_t>& indices, float* out) {
    const auto total = static_cast<int64_t>(indices.size());
    if (points_.empty() && total > 0) points_.resize(static_cast<size_t>(std::min(batch_, total)) * 3);
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
          return invalid_argument("extraction: occupancy logit at (" +
                                  std::to_string(points_[3 * p]) + ", " +
                                  std::to_string(points_[3 * p + 1]) + ", " +
                                  std::to_string(points_[3 * p + 2]) +
                                  ") is not finite (NaN/Inf in the model or its weights?)");
        }
      }
    }
    if (stats_ != nullptr) stats_->queries += total;
    return Status();
  }

 private:
  const OccupancyFn& fn_;
  int64_t batch_;
  ExtractionStats* stats_;
  std::vector<float> points_;
};

Status no_surface(float lo, float hi, float iso) {
  return invalid_argument("extraction: no surface: the occupancy field does not cross level " +
                          std::to_string(iso) + " anywhere in the cube (logits range " +
                          std::to_string(lo) + " .. " + std::to_string(hi) + ")");
}

}  // namespace

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
  BatchEvaluator eval(occupancy, options.batch_points, st);
  TESSERA_RETURN_IF_ERROR(eval.evaluate(l, indices, values.data()));
  st->levels = 1;
  TESSERA_ASSIGN_OR_RETURN(Mesh mesh, marching_cubes(values.data(), l, options.iso));
  if (mesh.empty()) {
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    return no_surface(*lo, *hi, options.iso);
  }
  return mesh;
}

Expected<Mesh> extract_coarse_to_fine(const OccupancyFn& occupancy,
                                      const ExtractionOptions& options, ExtractionStats* stats) {
  TESSERA_RETURN_IF_ERROR(check_options(options, true));
  ExtractionStats local;
  ExtractionStats* st = stats != nullptr ? stats : &local;
  *st = ExtractionStats();
  BatchEvaluator eval(occupancy, options.batch_points, st);
  const float iso = options.iso;

  // Coarse level: every point.
  Lattice l = make_lattice(options.coarse_base, options.bound);
  std::unordered_map<int64_t, float> values;  // lattice index at the current level -> logit
  {
    std::vector<int64_t> all(static_cast<size_t>(l.num_points()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    std::vector<float> v(all.size());
    TESSERA_RETURN_IF_ERROR(eval.evaluate(l, all, v.data()));
    values.reserve(all.size() * 2);
    for (size_t i = 0; i < all.size(); ++i) values.emplace(all[i], v[i]);
  }
  st->levels = 1;
  float lo = values.begin()->second, hi = lo;
  for (const auto& [idx, v] : values) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // Cells of the current level to examine, by their (i, j, k) corner-0 lattice index.
  std::vector<int64_t> cells;
  for (int64_t k = 0; k + 1 < l.n[2]; ++k) {
    for (int64_t j = 0; j + 1 < l.n[1]; ++j) {
      for (int64_t i = 0; i + 1 < l.n[0]; ++i) cells.push_back(l.index(i, j, k));
    }
  }
  auto corners_of = [](const Lattice& lat, int64_t cell, const std::unordered_map<int64_t, float>& vals,
                       float out[8]) {
    const int64_t i = cell % lat.n[0], j = (cell / lat.n[0]) % lat.n[1], k = cell / (lat.n[0] * lat.n[1]);
    for (int c = 0; c < 8; ++c) {
      out[c] = vals.at(lat.index(i + (c & 1), j + ((c >> 1) & 1), k + ((c >> 2) & 1)));
    }
  };
  for (int level = options.coarse_base;; ++level) {
    const bool finest = level == options.resolution_base;
    // Select the cells that hold (or may hold) surface.
    std::vector<int64_t> active;
    float corner[8];
    for (int64_t cell : cells) {
      corners_of(l, cell, values, corner);
      bool inside = false, outside = false;
      float nearest = INFINITY;
      for (float v : corner) {
        (v > iso ? inside : outside) = true;
        nearest = std::min(nearest, std::fabs(v - iso));
      }
      if ((inside && outside) || (!finest && nearest < options.near_surface_logit)) {
        active.push_back(cell);
      }
    }
    if (finest) {
      if (active.empty()) return no_surface(lo, hi, iso);
      CellPolygonizer poly(l, iso);
      for (int64_t cell : active) {
        corners_of(l, cell, values, corner);
        poly.add_cell(cell % l.n[0], (cell / l.n[0]) % l.n[1], cell / (l.n[0] * l.n[1]), corner);
      }
      st->surface_cells = static_cast<int64_t>(active.size());
      return poly.take_mesh();
    }
    if (active.empty()) return no_surface(lo, hi, iso);
    // Next level: lattice index (i, j, k) -> (2i, 2j, 2k). Carry known values, query new points.
    const Lattice next = make_lattice(level + 1, options.bound);
    std::unordered_map<int64_t, float> next_values;
    next_values.reserve(active.size() * 16);
    std::vector<int64_t> missing;
    std::vector<int64_t> next_cells;
    next_cells.reserve(active.size() * 8);
    for (int64_t cell : active) {
      const int64_t i = cell % l.n[0], j = (cell / l.n[0]) % l.n[1], k = cell / (l.n[0] * l.n[1]);
      for (int64_t dk = 0; dk <= 2; ++dk) {
        for (int64_t dj = 0; dj <= 2; ++dj) {
          for (int64_t di = 0; di <= 2; ++di) {
            const int64_t idx = next.index(2 * i + di, 2 * j + dj, 2 * k + dk);
            if (next_values.count(idx) != 0) continue;
            if (di % 2 == 0 && dj % 2 == 0 && dk % 2 == 0) {
              next_values.emplace(idx, values.at(l.index(i + di / 2, j + dj / 2, k + dk / 2)));
            } else {
              next_values.emplace(idx, 0.0f);  // placeholder, filled below
              missing.push_back(idx);
            }
          }
        }
      }
      for (int c = 0; c < 8; ++c) {
        next_cells.push_back(next.index(2 * i + (c & 1), 2 * j + ((c >> 1) & 1), 2 * k + ((c >> 2) & 1)));
      }
    }
    std::vector<float> v(missing.size());
    TESSERA_RETURN_IF_ERROR(eval.evaluate(next, missing, v.data()));
    for (size_t m = 0; m < missing.size(); ++m) {
      next_values[missing[m]] = v[m];
      lo = std::min(lo, v[m]);
      hi = std::max(hi, v[m]);
    }
    values = std::move(next_values);
    cells = std::move(next_cells);
    l = next;
    ++st->levels;
  }
}

}  // namespace tessera::mesh
