// GPU polygonizer: kernels::cpu::polygonize_cells' three passes as kernels (kernels/marching_tets.h
// has the per-cell code both run): count + cub exclusive scan, emit, then weld with a cub radix
// sort of the corner slots by edge key (stable), run starts flagged and scanned into vertex ids.
#include <cub/cub.cuh>

#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/marching_tets.h"

namespace tessera::kernels::cuda {
namespace {

__constant__ TetTable kDeviceTetTable = kTetTable;

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

__global__ void count_slots_kernel(const float* corners, int64_t n, float iso, uint32_t* slots) {
  const int64_t a = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (a < n)
    slots[a] =
        3u * static_cast<uint32_t>(cell_triangle_count(kDeviceTetTable, corners + 8 * a, iso));
}

__global__ void emit_kernel(CellGrid grid, const int64_t* cells, const float* corners,
                            const uint32_t* first, int64_t n, uint64_t* keys, float* xyz) {
  const int64_t a = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (a >= n) return;
  const uint32_t s = first[a];
  cell_emit(kDeviceTetTable, grid, cells[a], corners + 8 * a, keys + s,
            xyz + 3 * static_cast<size_t>(s));
}

__global__ void iota_kernel(uint32_t* v, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) v[i] = static_cast<uint32_t>(i);
}

__global__ void run_start_kernel(const uint64_t* sorted_keys, int64_t m, uint32_t* starts) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < m) starts[r] = (r == 0 || sorted_keys[r] != sorted_keys[r - 1]) ? 1u : 0u;
}

// ids = inclusive scan of the run starts: the vertex of sorted position r is ids[r] - 1.
__global__ void scatter_kernel(const uint32_t* sorted_slots, const uint32_t* starts,
                               const uint32_t* ids, const float* xyz, int64_t m, float* positions,
                               uint32_t* triangles) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= m) return;
  const uint32_t s = sorted_slots[r];
  const uint32_t v = ids[r] - 1u;
  triangles[s] = v;
  if (starts[r] != 0u) {
    for (int d = 0; d < 3; ++d)
      positions[3 * static_cast<size_t>(v) + d] = xyz[3 * static_cast<size_t>(s) + d];
  }
}

int key_bits(const CellGrid& g) {
  const uint64_t max_key = static_cast<uint64_t>(g.n[0] * g.n[1] * g.n[2]) * 8u;
  int bits = 1;
  while (bits < 64 && (max_key >> bits) != 0) ++bits;
  return bits;
}

}  // namespace

Status polygonize_cells(const CellGrid& grid, const int64_t* cells, const float* corners, int64_t n,
                        std::vector<float>* positions, std::vector<uint32_t>* triangles,
                        cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(cpu::check_cells(grid, cells, corners, n, "cuda::polygonize_cells"));
  positions->clear();
  triangles->clear();
  if (n == 0) return Status();
  // Slots (3 per triangle, at most 36 per cell) are counted and scanned in uint32 and indexed as
  // int by cub: keep every possible total below 2^31 (the host version's limit is 2^32 - 1).
  constexpr int64_t kMaxCells = ((int64_t{1} << 31) - 2) / 36;
  if (n > kMaxCells) {
    return out_of_memory("cuda::polygonize_cells: " + std::to_string(n) + " cells, more than the " +
                         std::to_string(kMaxCells) + " this polygonizer indexes");
  }
  const int count = static_cast<int>(n);
  const size_t nn = static_cast<size_t>(n);
  TESSERA_ASSIGN_OR_RETURN(DeviceBuffer d_cells,
                           DeviceBuffer::allocate(nn * 8, "polygonize_cells cells"));
  TESSERA_ASSIGN_OR_RETURN(
      DeviceBuffer d_corners,
      DeviceBuffer::allocate(nn * 8 * sizeof(float), "polygonize_cells corners"));
  TESSERA_ASSIGN_OR_RETURN(DeviceBuffer d_slots, DeviceBuffer::allocate((nn + 1) * sizeof(uint32_t),
                                                                        "polygonize_cells counts"));
  TESSERA_ASSIGN_OR_RETURN(
      DeviceBuffer d_first,
      DeviceBuffer::allocate((nn + 1) * sizeof(uint32_t), "polygonize_cells offsets"));
  TESSERA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d_cells.data(), cells, nn * 8, cudaMemcpyHostToDevice, stream),
      "polygonize_cells upload");
  TESSERA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_corners.data(), corners, nn * 8 * sizeof(float),
                                               cudaMemcpyHostToDevice, stream),
                               "polygonize_cells upload");
  // 1. slots per cell (the extra last entry is 0, so the exclusive scan's last entry is the total)
  TESSERA_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(d_slots.as<uint32_t>() + n, 0, sizeof(uint32_t), stream),
      "polygonize_cells memset");
  count_slots_kernel<<<blocks_for(n), kThreads, 0, stream>>>(d_corners.as<float>(), n, grid.iso,
                                                             d_slots.as<uint32_t>());
  TESSERA_CUDA_CHECK_LAUNCH("polygonize_cells count");
  size_t temp_bytes = 0;
  TESSERA_CUDA_RETURN_IF_ERROR(
      cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, d_slots.as<uint32_t>(),
                                    d_first.as<uint32_t>(), count + 1, stream),
      "polygonize_cells scan");
  TESSERA_ASSIGN_OR_RETURN(DeviceBuffer d_temp,
                           DeviceBuffer::allocate(temp_bytes, "polygonize_cells scan"));
  TESSERA_CUDA_RETURN_IF_ERROR(
      cub::DeviceScan::ExclusiveSum(d_temp.data(), temp_bytes, d_slots.as<uint32_t>(),
                                    d_first.as<uint32_t>(), count + 1, stream),
      "polygonize_cells scan");
  uint32_t total = 0;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&total, d_first.as<uint32_t>() + n, sizeof(uint32_t),
                                               cudaMemcpyDeviceToHost, stream),
                               "polygonize_cells download");
  TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "polygonize_cells count");
  if (total == 0) return Status();
  const int m = static_cast<int>(total);
  const size_t mm = total;
  // 2. emit
  TESSERA_ASSIGN_OR_RETURN(DeviceBuffer d_keys,
                           DeviceBuffer::allocate(mm * 8, "polygonize_cells keys"));
  TESSERA_ASSIGN_OR_RETURN(DeviceBuffer d_keys_sorted,
                           DeviceBuffer::allocate(mm * 8, "polygonize_cells keys"));
  TESSERA_ASSIGN_OR_RETURN(DeviceBuffer d_xyz, DeviceBuffer::allocate(mm * 3 * sizeof(float),
                                                                      "polygonize_cells corners"));
  TESSERA_ASSIGN_OR_RETURN(DeviceBuffer d_ids,
                           DeviceBuffer::allocate(mm * sizeof(uint32_t), "polygonize_cells slots"));
  TESSERA_ASSIGN_OR_RETURN(DeviceBuffer d_ids_sorted,
                           DeviceBuffer::allocate(mm * sizeof(uint32_t), "polygonize_cells slots"));
  emit_kernel<<<blocks_for(n), kThreads, 0, stream>>>(grid, d_cells.as<int64_t>(),
                                                      d_corners.as<float>(), d_first.as<uint32_t>(),
                                                      n, d_keys.as<uint64_t>(), d_xyz.as<float>());
  TESSERA_CUDA_CHECK_LAUNCH("polygonize_cells emit");
  iota_kernel<<<blocks_for(m), kThreads, 0, stream>>>(d_ids.as<uint32_t>(), m);
  TESSERA_CUDA_CHECK_LAUNCH("polygonize_cells iota");
  // 3. weld: stable sort of the slots by key, run starts, their inclusive scan = vertex ids + 1
  const int bits = key_bits(grid);
  temp_bytes = 0;
  TESSERA_CUDA_RETURN_IF_ERROR(
      cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, d_keys.as<uint64_t>(),
                                      d_keys_sorted.as<uint64_t>(), d_ids.as<uint32_t>(),
                                      d_ids_sorted.as<uint32_t>(), m, 0, bits, stream),
      "polygonize_cells sort");
  TESSERA_ASSIGN_OR_RETURN(DeviceBuffer d_sort_temp,
                           DeviceBuffer::allocate(temp_bytes, "polygonize_cells sort"));
  TESSERA_CUDA_RETURN_IF_ERROR(
      cub::DeviceRadixSort::SortPairs(d_sort_temp.data(), temp_bytes, d_keys.as<uint64_t>(),
                                      d_keys_sorted.as<uint64_t>(), d_ids.as<uint32_t>(),
                                      d_ids_sorted.as<uint32_t>(), m, 0, bits, stream),
      "polygonize_cells sort");
  // d_keys and d_ids are free now: reuse them as the run starts and their scan.
  uint32_t* starts = d_ids.as<uint32_t>();
  uint32_t* vertex_ids = reinterpret_cast<uint32_t*>(d_keys.data());
  run_start_kernel<<<blocks_for(m), kThreads, 0, stream>>>(d_keys_sorted.as<uint64_t>(), m, starts);
  TESSERA_CUDA_CHECK_LAUNCH("polygonize_cells runs");
  temp_bytes = 0;
  TESSERA_CUDA_RETURN_IF_ERROR(
      cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, starts, vertex_ids, m, stream),
      "polygonize_cells scan");
  TESSERA_ASSIGN_OR_RETURN(DeviceBuffer d_temp2,
                           DeviceBuffer::allocate(temp_bytes, "polygonize_cells scan"));
  TESSERA_CUDA_RETURN_IF_ERROR(
      cub::DeviceScan::InclusiveSum(d_temp2.data(), temp_bytes, starts, vertex_ids, m, stream),
      "polygonize_cells scan");
  uint32_t vertices = 0;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&vertices, vertex_ids + (m - 1), sizeof(uint32_t),
                                               cudaMemcpyDeviceToHost, stream),
                               "polygonize_cells download");
  TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "polygonize_cells weld");
  TESSERA_ASSIGN_OR_RETURN(
      DeviceBuffer d_positions,
      DeviceBuffer::allocate(size_t{vertices} * 3 * sizeof(float), "polygonize_cells vertices"));
  TESSERA_ASSIGN_OR_RETURN(
      DeviceBuffer d_triangles,
      DeviceBuffer::allocate(mm * sizeof(uint32_t), "polygonize_cells triangles"));
  scatter_kernel<<<blocks_for(m), kThreads, 0, stream>>>(
      d_ids_sorted.as<uint32_t>(), starts, vertex_ids, d_xyz.as<float>(), m,
      d_positions.as<float>(), d_triangles.as<uint32_t>());
  TESSERA_CUDA_CHECK_LAUNCH("polygonize_cells scatter");
  positions->resize(size_t{vertices} * 3);
  triangles->resize(mm);
  TESSERA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(positions->data(), d_positions.data(), positions->size() * sizeof(float),
                      cudaMemcpyDeviceToHost, stream),
      "polygonize_cells download");
  TESSERA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(triangles->data(), d_triangles.data(), mm * sizeof(uint32_t),
                      cudaMemcpyDeviceToHost, stream),
      "polygonize_cells download");
  TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "polygonize_cells");
  return Status();
}

}  // namespace tessera::kernels::cuda
