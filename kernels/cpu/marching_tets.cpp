#include "kernels/marching_tets.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace tessera::kernels::cpu {

Status polygonize_cells(const CellGrid& grid, const int64_t* cells, const float* corners, int64_t n,
                        std::vector<float>* positions, std::vector<uint32_t>* triangles) {
  TESSERA_RETURN_IF_ERROR(check_cells(grid, cells, corners, n, "polygonize_cells"));
  // 1. count + exclusive scan
  std::vector<int64_t> first(static_cast<size_t>(n) + 1, 0);
  for (int64_t a = 0; a < n; ++a) {
    first[static_cast<size_t>(a) + 1] =
        first[static_cast<size_t>(a)] +
        3 * cell_triangle_count(kTetTable, corners + 8 * a, grid.iso);
  }
  const int64_t slots = first.back();
  if (slots >= int64_t{0xffffffff}) {
    return out_of_memory("polygonize_cells: " + std::to_string(slots / 3) +
                         " triangles, more than " + "this polygonizer indexes");
  }
  // 2. emit
  std::vector<uint64_t> keys(static_cast<size_t>(slots));
  std::vector<float> xyz(static_cast<size_t>(slots) * 3);
  for (int64_t a = 0; a < n; ++a) {
    const size_t s = static_cast<size_t>(first[static_cast<size_t>(a)]);
    cell_emit(kTetTable, grid, cells[a], corners + 8 * a, keys.data() + s, xyz.data() + 3 * s);
  }
  // 3. weld
  std::vector<uint32_t> order(static_cast<size_t>(slots));
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t x, uint32_t y) { return keys[x] < keys[y]; });
  positions->clear();
  triangles->assign(static_cast<size_t>(slots), 0);
  uint64_t vertices = 0;
  for (size_t r = 0; r < order.size(); ++r) {
    const uint32_t s = order[r];
    if (r == 0 || keys[s] != keys[order[r - 1]]) {
      if (vertices >= 0xffffffffull) {
        return out_of_memory("polygonize_cells: more than 2^32 - 1 vertices");
      }
      ++vertices;
      positions->insert(positions->end(), xyz.begin() + 3 * s, xyz.begin() + 3 * s + 3);
    }
    (*triangles)[s] = static_cast<uint32_t>(vertices - 1);
  }
  return Status();
}

}  // namespace tessera::kernels::cpu
