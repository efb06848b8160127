// The CUDA polygonizer (kernels/cuda/marching.cu through Backend::polygonize_cells) against its
// host reference kernels::cpu::polygonize_cells: the same vertices in the same (edge-key) order,
// positions within 1e-6 relative (FMA contraction), identical triangles; on a noisy field (every
// case of the table), on the surface cells of a torus extraction at 2^7 + 1 (through
// ExtractionOptions::polygonize, as the pipeline does on a GPU), and with no surface at all. The
// argument checks run without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/mesh/extraction.h"
#include "engine/mesh/mesh.h"
#include "kernels/marching_tets.h"
#include "tests/kernels/gpu_test_util.h"

#if TESSERA_HAVE_CUDA
namespace tessera::kernels {
namespace {

void expect_same(const std::vector<float>& pos, const std::vector<uint32_t>& tri,
                 const std::vector<float>& ref_pos, const std::vector<uint32_t>& ref_tri) {
  ASSERT_EQ(pos.size(), ref_pos.size());
  ASSERT_EQ(tri, ref_tri);
  // FMA contraction moves a position by an ulp or so: relative to the coordinate's size.
  double worst = 0;
  for (size_t i = 0; i < pos.size(); ++i) {
    const double scale = std::max(1.0, double(std::fabs(ref_pos[i])));
    worst = std::max(worst, double(std::fabs(pos[i] - ref_pos[i])) / scale);
  }
  EXPECT_LE(worst, 1e-6);
}

TEST(CudaPolygonize, NoisyFieldMatchesTheHostReference) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
  Backend* gpu = test::shared_cuda_backend();
  ASSERT_NE(gpu->extraction(), nullptr);
  CellGrid g;
  g.n[0] = 33;
  g.n[1] = 21;
  g.n[2] = 17;
  g.origin[0] = -1.0f;
  g.origin[1] = -0.5f;
  g.spacing = 1.0f / 16;
  g.iso = 0.1f;
  std::vector<int64_t> cells;
  std::vector<float> corners;
  uint32_t s = 99;
  std::vector<float> v(static_cast<size_t>(g.n[0] * g.n[1] * g.n[2]));
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / 16777216.0f - 0.4f;
  }
  // Every second cell, in reverse order.
  for (int64_t k = g.n[2] - 2; k >= 0; --k) {
    for (int64_t j = g.n[1] - 2; j >= 0; --j) {
      for (int64_t i = g.n[0] - 2; i >= 0; i -= 2) {
        cells.push_back(i + g.n[0] * (j + g.n[1] * k));
        for (int q = 0; q < 8; ++q) {
          corners.push_back(v[static_cast<size_t>(
              (i + (q & 1)) + g.n[0] * ((j + ((q >> 1) & 1)) + g.n[1] * (k + (q >> 2))))]);
        }
      }
    }
  }
  std::vector<float> pos, ref_pos;
  std::vector<uint32_t> tri, ref_tri;
  const auto n = static_cast<int64_t>(cells.size());
  TESSERA_ASSERT_OK(cpu::polygonize_cells(g, cells.data(), corners.data(), n, &ref_pos, &ref_tri));
  ASSERT_GT(ref_tri.size(), 3000u);
  TESSERA_ASSERT_OK(
      gpu->extraction()->polygonize_cells(g, cells.data(), corners.data(), n, &pos, &tri));
  expect_same(pos, tri, ref_pos, ref_tri);
  // All outside: an empty mesh.
  std::vector<float> low(corners.size(), -1.0f);
  TESSERA_ASSERT_OK(
      gpu->extraction()->polygonize_cells(g, cells.data(), low.data(), n, &pos, &tri));
  EXPECT_TRUE(pos.empty() && tri.empty());
}

TEST(CudaPolygonize, TorusExtractionThroughTheHookMatchesTheHost) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
  Backend* gpu = test::shared_cuda_backend();
  mesh::OccupancyFn torus = [](const float* p, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      const float q = std::sqrt(p[3 * i] * p[3 * i] + p[3 * i + 1] * p[3 * i + 1]) - 0.6f;
      out[i] = 10.0f * (0.25f - std::sqrt(q * q + p[3 * i + 2] * p[3 * i + 2]));
    }
    return Status();
  };
  mesh::ExtractionOptions o;
  o.resolution_base = 7;
  o.polygonize = cpu::polygonize_cells;
  auto host = mesh::extract_coarse_to_fine(torus, o);
  o.polygonize = [gpu](const CellGrid& g, const int64_t* c, const float* v, int64_t n,
                       std::vector<float>* p, std::vector<uint32_t>* t) {
    return gpu->extraction()->polygonize_cells(g, c, v, n, p, t);
  };
  auto device = mesh::extract_coarse_to_fine(torus, o);
  ASSERT_TRUE(host.ok() && device.ok());
  expect_same(device->positions, device->triangles, host->positions, host->triangles);
  EXPECT_TRUE(mesh::compute_topology(*device).watertight());
}

TEST(CudaPolygonizeArgs, RejectedBeforeAnyDeviceCall) {
  CellGrid g;
  g.n[0] = g.n[1] = g.n[2] = 4;
  std::vector<float> pos;
  std::vector<uint32_t> tri;
  const int64_t bad = 3;  // i + 1 == n[0]
  float corners[8] = {};
  Status st = cuda::polygonize_cells(g, &bad, corners, 1, &pos, &tri, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cell 0"), std::string::npos) << st.message();
  st = cuda::polygonize_cells(g, nullptr, nullptr, 2, &pos, &tri, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaPolygonize)
#endif
