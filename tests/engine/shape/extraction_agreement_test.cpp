// The coarse-to-fine search against the dense lattice on real occupancy networks, not only analytic
// fields (tests/engine/mesh/mesh_test.cpp has those). What a user gets must not change: the mesh
// after the clean-up agrees with the dense lattice's within one voxel (symmetric Hausdorff
// distance, measured from the vertices of each to the triangles of the other) and has the same
// topology (components, Euler characteristic, watertightness). The raw surfaces may differ by
// floaters: a closed component smaller than a coarse cell that no refined cell reaches; the
// clean-up drops components under 15 % of the object's size (the reference's rule), and on
// tessera-tiny's 91 first prompts every such difference was one it drops (the tests print the raw
// difference too).
//  - tessera-tiny, the embedded model, on first prompts at its default resolution with its card's
//    search (17^3 first, refined where the logits come within 1.0 of the surface);
//  - a random decoder with Cube 3D v0.5's full-size shape (width 768, 12 heads, 1024 latents, 24
//    layers, the 771 -> 768 -> 768 query MLP, the 768 -> 3072 -> 768 MLP; bf16, as the full-size
//    model runs): the noise surface the benchmarks time on.
#include <gtest/gtest.h>

#include <cstdint>
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/random_checkpoint.h"
#include "core/assets.h"
#include "engine/mesh/distance.h"
#include "engine/mesh/extraction.h"
#include "engine/shape/pipeline.h"
#include "engine/shape/shape_decoder.h"
#include "kernels/backend.h"

namespace tessera::shape {
namespace {

// One voxel of a 2^k + 1 lattice over [-bound, bound]^3.
double voxel(int resolution_base, float bound = 1.05f) {
  return 2.0 * bound / static_cast<double>(int64_t{1} << resolution_base);
}

// Compares the raw surfaces (printed) and the cleaned meshes (asserted).
void expect_same_mesh(mesh::Mesh dense, mesh::Mesh search, double voxel_size,
                      const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_FALSE(dense.empty());
  ASSERT_FALSE(search.empty());
  auto raw = mesh::surface_distance(dense, search);
  ASSERT_TRUE(raw.ok()) << raw.status().to_string();
  const mesh::Topology raw_a = mesh::compute_topology(dense),
                       raw_b = mesh::compute_topology(search);
  ASSERT_TRUE(mesh::cleanup(dense, mesh::CleanupOptions{}).ok());
  ASSERT_TRUE(mesh::cleanup(search, mesh::CleanupOptions{}).ok());
  auto d = mesh::surface_distance(dense, search);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_LT(d->hausdorff(), voxel_size) << "dense -> search " << d->a_to_b << ", search -> dense "
                                        << d->b_to_a << ", voxel " << voxel_size;
  const mesh::Topology a = mesh::compute_topology(dense), b = mesh::compute_topology(search);
  EXPECT_EQ(b.components, a.components);
  EXPECT_EQ(b.euler_characteristic, a.euler_characteristic);
  EXPECT_EQ(b.watertight(), a.watertight());
  std::printf(
      "%s: raw %lld / %lld components, %lld / %lld vertices (dense / search), Hausdorff %.2e; "
      "cleaned %lld / %lld triangles, Hausdorff %.2e (voxel %.2e)\n",
      what.c_str(), static_cast<long long>(raw_a.components),
      static_cast<long long>(raw_b.components), static_cast<long long>(raw_a.vertices_used),
      static_cast<long long>(raw_b.vertices_used), raw->hausdorff(),
      static_cast<long long>(dense.triangle_count()),
      static_cast<long long>(search.triangle_count()), d->hausdorff(), voxel_size);
}

TEST(ExtractionAgreement, TinyModelFirstPromptsMatchTheDenseLattice) {
  auto p = ShapePipeline::load(default_shape_model_dir());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ShapePipeline& pipeline = **p;
  const int resolution = pipeline.default_resolution();
  auto k = resolution_base(resolution);
  ASSERT_TRUE(k.ok());
  for (const char* prompt : {"a chair", "a ball", "a mug", "a torus", "a lamp"}) {
    auto encoded = pipeline.encode_prompt(prompt);
    ASSERT_TRUE(encoded.ok()) << encoded.status().to_string();
    auto ids = pipeline.generate(*encoded, GenerationOptions{});
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    ASSERT_TRUE(pipeline.decode_latents(*ids).ok());
    MeshOptions search;  // the model card's coarse-to-fine search
    search.resolution = resolution;
    MeshOptions dense = search;
    dense.coarse_base = *k;  // one lattice: every point queried
    mesh::ExtractionStats search_stats, dense_stats;
    auto a = pipeline.extract_surface(dense, nullptr, nullptr, &dense_stats);
    auto b = pipeline.extract_surface(search, nullptr, nullptr, &search_stats);
    ASSERT_TRUE(a.ok() && b.ok()) << prompt;
    EXPECT_EQ(dense_stats.levels, 1);
    EXPECT_GT(search_stats.levels, 1);
    EXPECT_LT(search_stats.queries * 4, dense_stats.queries) << prompt;
    expect_same_mesh(std::move(*a), std::move(*b), voxel(*k),
                     std::string("tessera-tiny \"") + prompt + "\"");
  }
}

TEST(ExtractionAgreement, FullSizeDecoderOnRandomWeightsMatchesTheDenseLattice) {
  const std::string list =
      std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/cube3d/cube3d-shape_v05-tensors.txt";
  auto all = bench::read_tensor_list(list);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  TensorShapes shapes;
  for (const auto& [name, dims] : *all) {
    if (name.rfind("encoder.", 0) != 0) shapes[name] = dims;  // the decoder's tensors
  }
  auto ck = bench::make_random_checkpoint(shapes, DType::kBF16);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  WeightStore store(std::move(ck->file), WeightFormat::kBF16);
  auto backend = kernels::make_cpu_backend();
  auto d = ShapeDecoder::load(store, *backend);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  ShapeDecoder& decoder = **d;
  ASSERT_EQ(decoder.config().width, 768);
  ASSERT_EQ(decoder.config().num_latents, 1024);
  ASSERT_EQ(decoder.config().layers, 24);

  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> code(0,
                                              static_cast<int32_t>(decoder.config().num_codes) - 1);
  std::vector<int32_t> ids(1024);
  for (int32_t& id : ids) id = code(rng);
  std::vector<float> latents(static_cast<size_t>(1024 * decoder.config().width));
  ASSERT_TRUE(decoder.decode_tokens(ids.data(), 1024, latents.data()).ok());
  ASSERT_TRUE(decoder.set_latents(latents.data(), 1024).ok());
  const mesh::OccupancyFn field = [&](const float* points, int64_t n, float* logits) {
    return decoder.query(points, n, logits);
  };
  // Random weights give a field of small logits around the head's random bias (here all of one
  // sign): the surface is taken at the field's median, a noise surface.
  std::uniform_real_distribution<float> coord(-1.05f, 1.05f);
  std::vector<float> points(3 * 4096), logits(4096);
  for (float& x : points) x = coord(rng);
  ASSERT_TRUE(decoder.query(points.data(), 4096, logits.data()).ok());
  std::nth_element(logits.begin(), logits.begin() + 2048, logits.end());
  // 33^3 from 17^3 (one refinement, as each of the full-size search's levels; the whole 257^3
  // dense lattice would take 17 M queries).
  mesh::ExtractionOptions o;
  o.resolution_base = 5;
  o.coarse_base = 4;
  o.iso = logits[2048];
  mesh::ExtractionStats dense_stats, search_stats;
  auto a = mesh::extract_dense(field, o, &dense_stats);
  auto b = mesh::extract_coarse_to_fine(field, o, &search_stats);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_LT(search_stats.queries, dense_stats.queries);
  expect_same_mesh(std::move(*a), std::move(*b), voxel(5),
                   "full-size decoder, random weights, 33^3");
}

}  // namespace
}  // namespace tessera::shape
