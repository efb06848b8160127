// The shipped tiny diffusion model (assets/models/tessera-tiny/diffusion, loaded the way `tessera
// image` loads it: UNet heads from its model card, text encoder from ../text_encoder) against
// PyTorch on the same weights (tests/fixtures/diffusion/tessera_tiny/, written by
// tools/make_tiny_diffusion_fixture.py): text context, the latents after each of 3 guided Euler
// steps and the decoded image.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

  // Image-to-image with the shipped encoder: that image (8-bit) repainted with another prompt.
  ASSERT_TRUE((*model)->has_encoder());
  const std::vector<float> rgb_f = want("i2i.rgb");
  const std::vector<uint8_t> rgb(rgb_f.begin(), rgb_f.end());
  const ImageView init{rgb.data(), r.width, r.height, 3};
  GenerateRequest i2i = r;
  i2i.prompt = meta.at("i2i_prompt");
  i2i.steps = std::stoi(meta.at("i2i_steps"));
  i2i.strength = std::stof(meta.at("i2i_strength"));
  i2i.init_image = &init;
  latents.clear();
  auto repainted = (*model)->generate(i2i, cb);
  ASSERT_TRUE(repainted.ok()) << repainted.status().message();
  ASSERT_FALSE(latents.empty());
  EXPECT_TRUE(close_rel(latents.back(), to_nhwc(want("i2i.latents"), 1, 4, lat, lat), 1e-4));
  EXPECT_TRUE(
      close_rel(repainted->decoded, to_nhwc(want("i2i.image"), 1, 3, r.height, r.width), 1e-4));
}

// The shipped encoder gives the decoder's latents back: image-to-image at the lowest strength (one
// step at sigma 0.03) reproduces the picture, within the VAE's own round-trip error (its card:
// 28 dB on held-out renders).
TEST(TinyDiffusionModel, EncoderRoundTripKeepsThePicture) {
  const std::string model_dir = source_dir() + "/assets/models/tessera-tiny/diffusion";
  auto model = DiffusionModel::load(model_dir, {});
  ASSERT_TRUE(model.ok()) << model.status().message();
  GenerateRequest r;
  r.prompt = "a green cube on a grey background";
  r.width = r.height = 64;
  r.steps = 20;
  r.guidance_scale = 5.0f;
  r.seed = 11;
  auto picture = (*model)->generate(r);
  ASSERT_TRUE(picture.ok()) << picture.status().message();
  const ImageView init{picture->rgb.data(), 64, 64, 3};
  r.init_image = &init;
  r.strength = 0.05f;  // the last of 20 steps
  auto again = (*model)->generate(r);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->steps_run, 1);
  double mse = 0;
  for (size_t k = 0; k < picture->rgb.size(); ++k) {
    const double d = (double(again->rgb[k]) - picture->rgb[k]) / 255.0;
    mse += d * d;
  }
  mse /= static_cast<double>(picture->rgb.size());
  const double psnr = -10.0 * std::log10(std::max(mse, 1e-12));
  std::printf("[ tessera-tiny encode -> decode round trip: %.1f dB ]\n", psnr);
  EXPECT_GT(psnr, 24.0);
}

}  // namespace
}  // namespace tessera::diffusion
