// The shipped tiny diffusion model (assets/models/tessera-tiny/diffusion, loaded the way `tessera
// image` loads it: UNet heads from its model card, text encoder from ../text_encoder) against
// PyTorch on the same weights (tests/fixtures/diffusion/tessera_tiny/, written by
// tools/make_tiny_diffusion_fixture.py): text context, the latents after each of 3 guided Euler
// steps and the decoded image.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/safetensors.h"
#include "engine/diffusion/pipeline.h"
#include "engine/diffusion/scheduler.h"
#include "tests/engine/diffusion/diffusion_test_util.h"

namespace tessera::diffusion {
namespace {

using test_util::close_rel;
using test_util::to_nhwc;

std::string source_dir() {
  return TESSERA_SOURCE_DIR;
}

uint64_t fnv1a64(const uint8_t* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  return h;
}

TEST(TinyDiffusionModel, MatchesPyTorchOnTheShippedWeights) {
  const std::string model_dir = source_dir() + "/assets/models/tessera-tiny/diffusion";
  auto expected_file = SafeTensors::open(
      source_dir() + "/tests/fixtures/diffusion/tessera_tiny/expected.safetensors");
  ASSERT_TRUE(expected_file.ok()) << expected_file.status().message();
  const auto& meta = expected_file->metadata();
  ASSERT_TRUE(meta.count("model_fnv1a64") && meta.count("prompt") && meta.count("seed"));

  // The fixture belongs to one version of the weights: a retrained model needs a new fixture.
  auto mapped = MappedFile::open(model_dir + "/model.safetensors");
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(fnv1a64(mapped->data(), mapped->size())));
  ASSERT_EQ(meta.at("model_fnv1a64"), hex)
      << "assets/models/tessera-tiny/diffusion was retrained: run /usr/bin/python3 "
         "tools/make_tiny_diffusion_fixture.py";

  auto model = DiffusionModel::load(model_dir, {});
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->unet_config().num_heads, 4);  // from the card, not the SD default of 8

  auto want = [&](const std::string& name) {
    auto v = expected_file->to_f32(name);
    EXPECT_TRUE(v.ok()) << v.status().message();
    return v.ok() ? *v : std::vector<float>();
  };
  std::vector<float> context;
  ASSERT_TRUE((*model)->encode_prompts(meta.at("prompt"), "", &context).ok());
  EXPECT_TRUE(close_rel(context, want("text.context"), 1e-5));

  GenerateRequest r;
  r.prompt = meta.at("prompt");
  r.width = r.height = std::stoi(meta.at("size"));
  r.steps = std::stoi(meta.at("steps"));
  r.guidance_scale = std::stof(meta.at("guidance"));
  r.sampler = SamplerKind::kEuler;
  r.seed = static_cast<uint64_t>(std::stoll(meta.at("seed")));
  const int64_t lat = r.width / 4;  // the tiny VAE upsamples 4x
  std::vector<std::vector<float>> latents;
  GenerateCallbacks cb;
  cb.on_step = [&](const StepProgress& p) {
    latents.emplace_back(p.latents, p.latents + p.latent_height * p.latent_width * 4);
  };
  auto image = (*model)->generate(r, cb);
  ASSERT_TRUE(image.ok()) << image.status().message();
  ASSERT_EQ(static_cast<int>(latents.size()), r.steps);
  for (int i = 0; i < r.steps; ++i) {
    EXPECT_TRUE(
        close_rel(latents[i], to_nhwc(want("latents." + std::to_string(i)), 1, 4, lat, lat), 1e-4))
        << "step " << i;
  }
  EXPECT_TRUE(close_rel(image->decoded, to_nhwc(want("image"), 1, 3, r.height, r.width), 1e-4));
}

}  // namespace
}  // namespace tessera::diffusion
