// The shape engine end to end on the CUDA backend: the shape decoder against the parity fixture
// (latents per block, occupancy logits), and ShapePipeline with --device cuda on the fixture model
// directory (tests/support/fixture_model_dir.h): the reference's greedy tokens from text with and
// without the KV cache, the same tokens as the CPU pipeline, and a mesh whose bounds agree with
// the CPU pipeline's to a lattice cell. Skips without a usable CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/weights/weight_store.h"
#include "engine/shape/pipeline.h"
#include "engine/shape/shape_decoder.h"
#include "kernels/backend.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/fixture_model_dir.h"

namespace tessera::shape {
namespace {

const std::string kParity = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/parity/";

// max |got - want| <= 1e-4 * max|want| (shape_decoder_test.cpp's tolerance).
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
    max_err = std::max(max_err, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_LE(max_err, 1e-4 * std::max(max_ref, 1e-3))
      << what << ": max error " << max_err << " (max |ref| " << max_ref << ")";
}

// The occupancy queries' Fourier features on the device (Backend::fourier_embed) against the plain
// reference (libm on the fp32 arguments), at the tiny and the Cube 3D frequency counts, points
// inside and well outside the unit box.
TEST(ShapeDecoderCuda, DeviceFourierFeaturesMatchTheReference) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
  kernels::Backend& cuda = *test::shared_cuda_backend();
  for (int64_t num_freqs : {8, 128}) {
    SCOPED_TRACE("num_freqs " + std::to_string(num_freqs));
    const int64_t n = 1000, dim = 3 + 6 * num_freqs;
    std::vector<float> points(static_cast<size_t>(3 * n)),
        freqs(static_cast<size_t>(3 * num_freqs));
    for (size_t i = 0; i < points.size(); ++i)
      points[i] = std::sin(0.37f * i) * (i % 7 == 0 ? 3 : 1);
    for (size_t i = 0; i < freqs.size(); ++i) freqs[i] = 4.0f * std::cos(1.3f * i);
    std::vector<float> want(static_cast<size_t>(n * dim));
    fourier_embed_reference(points.data(), n, freqs.data(), num_freqs, want.data());
    const std::vector<float> carrier = fourier_carrier(num_freqs);
    std::vector<float> carrier_cs(static_cast<size_t>(2 * num_freqs));
    for (int64_t j = 0; j < num_freqs; ++j) {
      carrier_cs[static_cast<size_t>(j)] = static_cast<float>(std::cos(double{carrier[j]}));
      carrier_cs[static_cast<size_t>(num_freqs + j)] =
          static_cast<float>(std::sin(double{carrier[j]}));
    }
    auto up = [&](const std::vector<float>& host) {
      auto b = cuda.allocate(host.size() * sizeof(float));
      EXPECT_TRUE(b.ok());
      EXPECT_TRUE(cuda.upload(b->data(), host.data(), host.size() * sizeof(float)).ok());
      return std::move(b).value();
    };
    kernels::DeviceBuffer d_points = up(points), d_freqs = up(freqs), d_cs = up(carrier_cs);
    auto d_out = cuda.allocate(want.size() * sizeof(float));
    ASSERT_TRUE(d_out.ok());
    ASSERT_TRUE(cuda.extraction()
                    ->fourier_embed(d_points.as<float>(), n, d_freqs.as<float>(), d_cs.as<float>(),
                                    num_freqs, d_out->as<float>())
                    .ok());
    std::vector<float> got(want.size());
    ASSERT_TRUE(cuda.download(got.data(), d_out->data(), got.size() * sizeof(float)).ok());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    }
    // cos/sin of |arguments| up to ~50 rad: a few 1e-6 between any two correct fp32 evaluations.
    EXPECT_LE(worst, 2e-5);
  }
}

TEST(ShapeDecoderCuda, LatentsAndOccupancyMatchTheReference) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
  kernels::Backend& cuda = *test::shared_cuda_backend();
  auto file = SafeTensors::open(kParity + "shape_tokenizer.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  WeightStore store(std::move(*file), WeightFormat::kF32);
  const SafeTensors expected = SafeTensors::open(kParity + "expected.safetensors").value();
  auto decoder = ShapeDecoder::load(store, cuda, 100);  // a chunk that does not divide 256
  ASSERT_TRUE(decoder.ok()) << decoder.status().to_string();
  const TensorView ids_view = expected.view("shape.ids").value();
  std::vector<int32_t> ids(16);
  std::memcpy(ids.data(), ids_view.data, 16 * 4);
  std::vector<float> latents(16 * 64);
  std::vector<std::vector<float>> layers;
  TESSERA_ASSERT_OK((*decoder)->decode_tokens(ids.data(), 16, latents.data(), &layers));
  ASSERT_EQ(layers.size(), 3u);
  expect_close(layers[0], expected.to_f32("shape.decoder.input").value(), "decoder.input");
  expect_close(layers[1], expected.to_f32("shape.decoder.blocks.0").value(), "blocks.0");
  expect_close(layers[2], expected.to_f32("shape.decoder.blocks.1").value(), "blocks.1");
  expect_close(latents, expected.to_f32("shape.latents").value(), "latents");
  const std::vector<float> points = expected.to_f32("shape.points").value();
  std::vector<float> logits(256);
  TESSERA_ASSERT_OK((*decoder)->occupancy(latents.data(), 16, points.data(), 256, logits.data()));
  expect_close(logits, expected.to_f32("shape.occupancy_logits").value(), "occupancy");
}

TEST(ShapePipelineCuda, GreedyTokensAndMeshMatchTheCpuPipeline) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
  testing::FixtureModelDir dir("pipeline-cuda");
  PipelineOptions cuda_options;
  cuda_options.device = kernels::DeviceChoice::kCuda;
  auto gpu = ShapePipeline::load(dir.path(), cuda_options);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  EXPECT_EQ((*gpu)->backend().device(), Device::kCuda);
  EXPECT_TRUE((*gpu)->backend_note().empty());
  auto cpu = ShapePipeline::load(dir.path());
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();

  auto gpu_prompt = (*gpu)->encode_prompt(testing::kParityPrompt);
  auto cpu_prompt = (*cpu)->encode_prompt(testing::kParityPrompt);
  ASSERT_TRUE(gpu_prompt.ok()) << gpu_prompt.status().to_string();
  ASSERT_TRUE(cpu_prompt.ok()) << cpu_prompt.status().to_string();
  const SafeTensors expected = SafeTensors::open(kParity + "expected.safetensors").value();
  const TensorView greedy = expected.view("gpt.greedy_tokens").value();
  const std::vector<int32_t> want(greedy.as<const int32_t>(), greedy.as<const int32_t>() + 16);
  GenerationOptions options;
  options.bbox = std::array<float, 3>{0.5f, 1.0f, 0.25f};  // gpt.bbox row 0
  std::vector<int32_t> tokens;
  for (bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "kv cache" : "no kv cache");
    options.use_kv_cache = cache;
    auto t = (*gpu)->generate(*gpu_prompt, options);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(*t, want);
    auto c = (*cpu)->generate(*cpu_prompt, options);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(*t, *c);
    tokens = *t;
  }

  MeshOptions mesh_options;
  mesh_options.resolution = 33;
  auto gpu_mesh = (*gpu)->tokens_to_mesh(tokens, mesh_options);
  auto cpu_mesh = (*cpu)->tokens_to_mesh(tokens, mesh_options);
  ASSERT_EQ(gpu_mesh.ok(), cpu_mesh.ok())
      << gpu_mesh.status().to_string() << " / " << cpu_mesh.status().to_string();
  if (!cpu_mesh.ok()) {
    // Random fixture weights may decode to an empty field: then both must say so.
    EXPECT_EQ(gpu_mesh.status().code(), cpu_mesh.status().code());
    return;
  }
  ASSERT_GT(gpu_mesh->vertex_count(), 0);
  // Bounds within one lattice cell of the CPU mesh's (the field differs by f32 rounding only, which
  // can move a vertex along its edge but not by a whole cell).
  auto bounds = [](const mesh::Mesh& m) {
    std::array<float, 6> b = {1e30f, 1e30f, 1e30f, -1e30f, -1e30f, -1e30f};
    for (int64_t v = 0; v < m.vertex_count(); ++v) {
      for (int a = 0; a < 3; ++a) {
        b[a] = std::min(b[a], m.positions[3 * v + a]);
        b[3 + a] = std::max(b[3 + a], m.positions[3 * v + a]);
      }
    }
    return b;
  };
  const std::array<float, 6> g = bounds(*gpu_mesh), c = bounds(*cpu_mesh);
  const float cell = 2.1f / 32.f;
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(g[i], c[i], cell) << "bound " << i;
}

}  // namespace
}  // namespace tessera::shape
