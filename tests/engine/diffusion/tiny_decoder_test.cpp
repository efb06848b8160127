// The tiny latent decoder (TAESD) against the PyTorch reference (tools/make_taesd_fixtures.py,
// tools/tessera_ref/sd_taesd.py): both published layouts, every kernel variant and bf16 compute,
// and what a file that is no tiny decoder gets.
#include "engine/diffusion/tiny_decoder.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/diffusion/pipeline.h"
#include "engine/diffusion/sd_config.h"
#include "engine/weights/weight_store.h"
#include "kernels/diffusion_ops.h"
#include "tests/engine/diffusion/diffusion_test_util.h"
#include "tests/engine/diffusion/pipeline_test_util.h"

namespace tessera::diffusion {
namespace {

using test_util::close_rel;

std::string dir() {
  return test_util::fixture_dir() + "taesd/";
}

struct Decoded {
  TinyDecoderConfig config;
  std::vector<float> image;
};

Decoded decode_with(const std::string& file, const KernelOptions& options = {}) {
  const SafeTensors expected = SafeTensors::open(dir() + "expected.safetensors").value();
  WeightStore store(SafeTensors::open(file).value(), WeightFormat::kF32);
  auto config = infer_tiny_decoder_config(store.file());
  EXPECT_TRUE(config.ok()) << config.status().message();
  auto decoder = TinyDecoder::load(store, config.value());
  EXPECT_TRUE(decoder.ok()) << decoder.status().message();
  (*decoder)->set_options(options);
  const std::vector<float> z = expected.to_f32("z").value();
  Decoded out{config.value(), std::vector<float>(static_cast<size_t>(2 * 40 * 48 * 3))};
  const Status st = (*decoder)->decode(z.data(), 2, 5, 6, out.image.data());
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

std::vector<float> want() {
  return SafeTensors::open(dir() + "expected.safetensors").value().to_f32("image").value();
}

TEST(TinyDecoder, TheReleaseLayoutMatchesPyTorch) {
  const Decoded d = decode_with(dir() + "taesd_decoder.safetensors");
  EXPECT_EQ(d.config.prefix, "");
  EXPECT_EQ(d.config.width, 8);
  EXPECT_EQ(d.config.latent_channels, 4);
  EXPECT_TRUE(close_rel(d.image, want()));
}

TEST(TinyDecoder, TheDiffusersLayoutMatchesPyTorch) {
  const Decoded d = decode_with(dir() + "diffusers/diffusion_pytorch_model.safetensors");
  EXPECT_EQ(d.config.prefix, "decoder.layers.");
  EXPECT_EQ(d.config.offset, -1);
  EXPECT_TRUE(close_rel(d.image, want()));
}

TEST(TinyDecoder, EveryKernelVariantMatches) {
  for (const auto& [name, options] : test_util::kernel_variants()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(close_rel(decode_with(dir() + "taesd_decoder.safetensors", options).image, want()));
  }
}

TEST(TinyDecoder, Bf16ComputeStaysClose) {
  if (!kernels::cpu::bf16_compute_available()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  KernelOptions o;
  o.precision = kernels::Precision::kBf16;
  const std::vector<float> got = decode_with(dir() + "taesd_decoder.safetensors", o).image;
  EXPECT_TRUE(close_rel(got, want(), 3e-2));
}

TEST(TinyDecoder, OtherFilesAreRefusedByName) {
  // A full VAE (the tiny pipeline model) is not a tiny decoder.
  const std::string sd = test_util::fixture_dir() + "sd_tiny.safetensors";
  const auto not_tiny = infer_tiny_decoder_config(SafeTensors::open(sd).value());
  ASSERT_FALSE(not_tiny.ok());
  EXPECT_NE(not_tiny.status().message().find("sd_tiny.safetensors"), std::string::npos);
  EXPECT_NE(not_tiny.status().message().find("not a tiny decoder"), std::string::npos);

  // A release file missing one block tensor: the loader names it.
  const SafeTensors full = SafeTensors::open(dir() + "taesd_decoder.safetensors").value();
  std::vector<std::vector<float>> data;
  data.reserve(full.size());
  std::vector<TensorToWrite> keep;
  for (const std::string& name : full.names()) {
    if (name == "9.conv.2.weight") continue;
    data.push_back(full.to_f32(name).value());
    keep.push_back(
        TensorToWrite::from_f32(name, DType::kF32, full.find(name)->shape, data.back().data()));
  }
  const std::string cut = ::testing::TempDir() + "tiny_decoder_cut.safetensors";
  ASSERT_TRUE(write_safetensors(cut, keep).ok());
  WeightStore store(SafeTensors::open(cut).value(), WeightFormat::kF32);
  const auto config = infer_tiny_decoder_config(store.file());
  ASSERT_TRUE(config.ok());
  const auto decoder = TinyDecoder::load(store, config.value());
  ASSERT_FALSE(decoder.ok());
  EXPECT_NE(decoder.status().message().find("9.conv.2.weight"), std::string::npos)
      << decoder.status().message();

  // Every tensor the layout implies is in the release file, and nothing else.
  EXPECT_EQ(tiny_decoder_tensor_shapes(config.value()).size(), full.size());
}

TEST(TinyDecoder, BadSizesAreRefused) {
  WeightStore store(SafeTensors::open(dir() + "taesd_decoder.safetensors").value(),
                    WeightFormat::kF32);
  auto decoder = TinyDecoder::load(store, infer_tiny_decoder_config(store.file()).value()).value();
  std::vector<float> z(16), image(16 * 64 * 3);
  EXPECT_FALSE(decoder->decode(z.data(), 1, 0, 4, image.data()).ok());
  EXPECT_FALSE(decoder->decode(nullptr, 1, 1, 1, image.data()).ok());
}

// Through the pipeline: the fixture model with its VAE swapped for an x8 one (random weights, the
// tiny decoder's scale) decodes with the tiny decoder when asked, exactly as the decoder alone
// decodes its final latents, and with its VAE otherwise.
TEST(TinyDecoder, ThePipelineDecodesWithItWhenAsked) {
  namespace pt = pipeline_test;
  pt::Tensors tensors;
  ASSERT_TRUE(pt::compvis_tensors(&tensors));
  for (auto it = tensors.begin(); it != tensors.end();) {
    it = it->first.rfind(kVaePrefix, 0) == 0 ? tensors.erase(it) : std::next(it);
  }
  VaeDecoderConfig x8;
  x8.level_channels = {32, 32, 32, 32};
  x8.blocks_per_level = 1;
  uint32_t seed = 1;
  for (const auto& [name, shape] : vae_decoder_tensor_shapes(x8)) {
    pt::Tensor t;
    t.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const bool norm_scale = name.find("norm") != std::string::npos && name.size() > 7 &&
                            name.compare(name.size() - 7, 7, ".weight") == 0;
    for (int64_t i = 0; i < n; ++i) {
      seed = seed * 1664525u + 1013904223u;
      const float r = static_cast<float>(seed >> 8) / 16777216.0f - 0.5f;
      t.values.push_back(norm_scale ? 1.0f : 0.1f * r);
    }
    tensors[name] = std::move(t);
  }
  pt::TempDir tmp("tiny-decoder-x8");
  ASSERT_TRUE(pt::write_compvis_model(tmp.path() / "x8", tensors));
  DiffusionLoadOptions options;
  options.unet_heads = pt::kUNetHeads;
  options.text_heads = pt::kTextHeads;
  auto model = DiffusionModel::load((tmp.path() / "x8" / "model.safetensors").string(), options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_EQ((*model)->vae_config().upscale(), 8);
  ASSERT_TRUE((*model)->load_tiny_decoder(dir() + "taesd_decoder.safetensors").ok());
  EXPECT_TRUE((*model)->has_tiny_decoder());
  GenerateRequest r;
  r.prompt = "a red torus";
  r.width = r.height = 32;
  r.steps = 2;
  r.guidance_scale = 2.0f;
  r.seed = 7;
  r.tiny_decode = true;
  auto tiny = (*model)->generate(r);
  ASSERT_TRUE(tiny.ok()) << tiny.status().message();
  ASSERT_EQ(tiny->width, 32);
  // The decoder alone on the same latents.
  WeightStore store(SafeTensors::open(dir() + "taesd_decoder.safetensors").value(),
                    WeightFormat::kF32);
  auto alone = TinyDecoder::load(store, infer_tiny_decoder_config(store.file()).value()).value();
  std::vector<float> image(32 * 32 * 3);
  ASSERT_TRUE(alone->decode(tiny->latents.data(), 1, 4, 4, image.data()).ok());
  EXPECT_TRUE(close_rel(tiny->decoded, image, 1e-6));
  r.tiny_decode = false;
  auto full = (*model)->generate(r);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->latents, tiny->latents);
  EXPECT_FALSE(close_rel(full->decoded, tiny->decoded, 1e-2));
  (*model)->unload_tiny_decoder();
  EXPECT_FALSE((*model)->has_tiny_decoder());
}

}  // namespace
}  // namespace tessera::diffusion
