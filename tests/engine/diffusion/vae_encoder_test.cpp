// SD VAE encoder parity against the PyTorch reference fixtures (tests/fixtures/diffusion/, the
// encoder of tools/tessera_ref/sd_vae.py), with every kernel fusion / algorithm switch, the
// posterior (mode and sample), its config inferred from shapes, and bad input.
#include "engine/diffusion/vae_encoder.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/weights/weight_store.h"
#include "engine/diffusion/sd_config.h"
#include "tests/engine/diffusion/diffusion_test_util.h"

namespace tessera::diffusion {
namespace {

using test_util::close_rel;

constexpr int64_t kHw = 16, kImage = 32;

struct EncoderFixture {
  SafeTensors expected =
      SafeTensors::open(test_util::fixture_dir() + "expected.safetensors").value();
  WeightStore store{SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kF32};
  std::unique_ptr<VaeEncoder> encoder;
  std::vector<float> image;

  EncoderFixture() {
    encoder = VaeEncoder::load(store, infer_vae_encoder_config(store.file()).value()).value();
    image = test_util::to_nhwc(f32("enc.image"), 1, 3, kImage, kImage);
  }
  std::vector<float> f32(const std::string& name) const { return expected.to_f32(name).value(); }
  // The moments NHWC [16, 16, 8].
  std::vector<float> moments() {
    std::vector<float> m(static_cast<size_t>(kHw * kHw * 8));
    EXPECT_TRUE(encoder->encode(image.data(), 1, kImage, kImage, m.data()).ok());
    return m;
  }
};

EncoderFixture& fixture() {
  static EncoderFixture* f = new EncoderFixture();
  return *f;
}

TEST(SdVaeEncoder, ConfigInferredFromShapes) {
  const VaeEncoderConfig& c = fixture().encoder->config();
  EXPECT_EQ(c.in_channels, 3);
  EXPECT_EQ(c.base_channels, 32);
  EXPECT_EQ(c.level_channels, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(c.blocks_per_level, 1);
  EXPECT_EQ(c.z_channels, 4);
  EXPECT_EQ(c.downscale(), 2);
  // SD 1.5's encoder + quant_conv (tools/make_diffusion_fixtures.py checks the same count on the
  // PyTorch reference).
  EXPECT_EQ(vae_encoder_parameter_count(sd15_vae_encoder_config()), 34'163'664);
}

TEST(SdVaeEncoder, ParityWithEveryKernelVariant) {
  EncoderFixture& f = fixture();
  const std::vector<float> want = f.f32("enc.moments");
  for (const auto& [name, options] : test_util::kernel_variants()) {
    SCOPED_TRACE(name);
    f.encoder->set_options(options);
    const std::vector<float> got = f.moments();
    EXPECT_TRUE(close_rel(test_util::to_nchw(got.data(), {1, kHw, kHw, 8}), want));
  }
  f.encoder->set_options(KernelOptions{});
}

TEST(SdVaeEncoder, Bf16ComputeCloseToF32Reference) {
  if (!kernels::cpu::bf16_compute_available()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  EncoderFixture& f = fixture();
  KernelOptions o;
  o.precision = kernels::Precision::kBf16;
  f.encoder->set_options(o);
  const std::vector<float> got = f.moments();
  f.encoder->set_options(KernelOptions{});
  const std::vector<float> want = f.f32("enc.moments");
  const std::vector<float> nchw = test_util::to_nchw(got.data(), {1, kHw, kHw, 8});
  EXPECT_TRUE(close_rel(nchw, want, 3e-2));
  EXPECT_FALSE(close_rel(nchw, want, 1e-5)) << "bf16 compute gave the f32 result";
}

TEST(SdVaeEncoder, TapsMatchTheReference) {
  EncoderFixture& f = fixture();
  std::map<std::string, std::vector<float>> got;
  f.encoder->set_tap([&](const std::string& name, const float* data, const kernels::ImageShape& s) {
    got[name] = test_util::to_nchw(data, s);
  });
  f.moments();
  f.encoder->set_tap(nullptr);
  ASSERT_TRUE(got.count("down.0"));
  ASSERT_TRUE(got.count("mid"));
  EXPECT_TRUE(close_rel(got["down.0"], f.f32("enc.down.0")));
  EXPECT_TRUE(close_rel(got["mid"], f.f32("enc.mid")));
  EXPECT_TRUE(got.count("down.1"));
}

TEST(SdVaeEncoder, PosteriorModeAndSample) {
  EncoderFixture& f = fixture();
  const std::vector<float> m = f.moments();
  const int64_t pixels = kHw * kHw;
  std::vector<float> mode(static_cast<size_t>(pixels * 4)), sample(mode.size());
  posterior_latents(m.data(), pixels, 4, nullptr, kSdLatentScale, mode.data());
  const std::vector<float> noise = test_util::to_nhwc(f.f32("enc.noise"), 1, 4, kHw, kHw);
  posterior_latents(m.data(), pixels, 4, noise.data(), kSdLatentScale, sample.data());
  EXPECT_TRUE(close_rel(test_util::to_nchw(mode.data(), {1, kHw, kHw, 4}), f.f32("enc.mode")));
  EXPECT_TRUE(close_rel(test_util::to_nchw(sample.data(), {1, kHw, kHw, 4}), f.f32("enc.latents")));
}

TEST(SdVaeEncoder, Rgb8ToImageRange) {
  const uint8_t rgb[6] = {0, 255, 128, 127, 1, 254};
  float image[6];
  rgb8_to_image(rgb, 2, image);
  EXPECT_FLOAT_EQ(image[0], -1.0f);
  EXPECT_FLOAT_EQ(image[1], 1.0f);
  EXPECT_NEAR(image[2], 128 / 127.5 - 1, 1e-7);
  EXPECT_NEAR(image[3], 127 / 127.5 - 1, 1e-7);
}

TEST(SdVaeEncoder, RejectsBadInput) {
  EncoderFixture& f = fixture();
  std::vector<float> m(static_cast<size_t>(kHw * kHw * 8));
  EXPECT_EQ(f.encoder->encode(f.image.data(), 1, 31, kImage, m.data()).code(),
            ErrorCode::kInvalidArgument);  // not a multiple of the downscale
  EXPECT_EQ(f.encoder->encode(f.image.data(), 0, kImage, kImage, m.data()).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(f.encoder->encode(nullptr, 1, kImage, kImage, m.data()).code(),
            ErrorCode::kInvalidArgument);
}

Status load_edited(const test_util::EditedCheckpoint& ckpt) {
  TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(ckpt.path()));
  WeightStore store(std::move(file), WeightFormat::kF32);
  TESSERA_ASSIGN_OR_RETURN(VaeEncoderConfig cfg, infer_vae_encoder_config(store.file()));
  TESSERA_ASSIGN_OR_RETURN(auto encoder, VaeEncoder::load(store, cfg));
  return Status();
}

TEST(SdVaeEncoder, MissingTensorIsNamed) {
  const std::string name = "first_stage_model.encoder.down.0.downsample.conv.bias";
  test_util::EditedCheckpoint ckpt(test_util::fixture_dir() + "sd_tiny.safetensors", "enc-missing",
                                   [&](auto& t) { t.erase(name); });
  Status st = load_edited(ckpt);
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
}

TEST(SdVaeEncoder, WrongShapeIsNamed) {
  const std::string name = "first_stage_model.encoder.down.1.block.0.nin_shortcut.weight";
  test_util::EditedCheckpoint ckpt(test_util::fixture_dir() + "sd_tiny.safetensors", "enc-shape",
                                   [&](auto& t) {
                                     t[name].shape = {64, 16, 1, 1};
                                     t[name].values.resize(64 * 16);
                                   });
  Status st = load_edited(ckpt);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
}

TEST(SdVaeEncoder, OddQuantConvIsRefused) {
  const std::string name = "first_stage_model.quant_conv.weight";
  test_util::EditedCheckpoint ckpt(test_util::fixture_dir() + "sd_tiny.safetensors", "enc-quant",
                                   [&](auto& t) {
                                     t[name].shape = {7, 7, 1, 1};
                                     t[name].values.resize(49);
                                   });
  Status st = load_edited(ckpt);
  EXPECT_EQ(st.code(), ErrorCode::kCorruptData);
  EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
}

TEST(SdVaeEncoder, DecoderOnlyFileSaysSo) {
  test_util::EditedCheckpoint ckpt(
      test_util::fixture_dir() + "sd_tiny.safetensors", "enc-none", [](auto& t) {
        for (auto it = t.begin(); it != t.end();) {
          const bool encoder = it->first.rfind("first_stage_model.encoder.", 0) == 0 ||
                               it->first.rfind("first_stage_model.quant_conv.", 0) == 0;
          it = encoder ? t.erase(it) : std::next(it);
        }
      });
  Status st = load_edited(ckpt);
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find("only the decoder"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera::diffusion
