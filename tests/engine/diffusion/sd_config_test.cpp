// SD config inference from tensor shapes, the full SD 1.5 parameter counts, and rejected layouts.
#include "engine/diffusion/sd_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/engine/diffusion/diffusion_test_util.h"

namespace tessera::diffusion {
namespace {

const std::string kTiny = test_util::fixture_dir() + "sd_tiny.safetensors";

TEST(SdConfig, Sd15ParameterCounts) {
  // The published sizes of SD 1.5 (also checked by tools/make_diffusion_fixtures.py on the
  // PyTorch reference): the C++ tensor list describes the same network.
  EXPECT_EQ(unet_parameter_count(sd15_unet_config()), 859'520'964);
  EXPECT_EQ(vae_decoder_parameter_count(sd15_vae_decoder_config()), 49'490'199);
}

TEST(SdConfig, InfersTinyUNetAndVae) {
  SafeTensors file = SafeTensors::open(kTiny).value();
  UNetConfig u = infer_unet_config(file, 2).value();
  EXPECT_EQ(u.in_channels, 4);
  EXPECT_EQ(u.out_channels, 4);
  EXPECT_EQ(u.model_channels, 32);
  EXPECT_EQ(u.level_channels, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(u.level_attention, (std::vector<bool>{true, false}));
  EXPECT_EQ(u.num_res_blocks, 1);
  EXPECT_EQ(u.context_dim, 32);
  EXPECT_EQ(u.size_multiple(), 2);
  VaeDecoderConfig v = infer_vae_decoder_config(file).value();
  EXPECT_EQ(v.z_channels, 4);
  EXPECT_EQ(v.out_channels, 3);
  EXPECT_EQ(v.level_channels, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(v.blocks_per_level, 1);
  EXPECT_EQ(v.upscale(), 2);
  VaeEncoderConfig e = infer_vae_encoder_config(file).value();
  EXPECT_EQ(e.base_channels, 32);
  EXPECT_EQ(e.level_channels, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(e.downscale(), v.upscale());
  // The tensor lists implied by the inferred configs are exactly the file's tensors.
  TensorShapes implied = unet_tensor_shapes(u);
  const TensorShapes vae = vae_decoder_tensor_shapes(v);
  implied.insert(vae.begin(), vae.end());
  const TensorShapes encoder = vae_encoder_tensor_shapes(e);
  implied.insert(encoder.begin(), encoder.end());
  TensorShapes actual;
  for (const TensorInfo& info : file.tensors()) actual[info.name] = info.shape;
  EXPECT_EQ(implied, actual);
}

TEST(SdConfig, RejectsSd2LinearProjIn) {
  const std::string name = "model.diffusion_model.input_blocks.1.1.proj_in.weight";
  test_util::EditedCheckpoint ckpt(kTiny, "sd2", [&](auto& t) { t[name].shape = {32, 32}; });
  SafeTensors file = SafeTensors::open(ckpt.path()).value();
  auto cfg = infer_unet_config(file, 2);
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(cfg.status().message().find(name), std::string::npos) << cfg.status().message();
}

TEST(SdConfig, MissingConvInAndBadHeadsAreReported) {
  const std::string name = "model.diffusion_model.input_blocks.0.0.weight";
  test_util::EditedCheckpoint ckpt(kTiny, "noconv", [&](auto& t) { t.erase(name); });
  SafeTensors file = SafeTensors::open(ckpt.path()).value();
  auto cfg = infer_unet_config(file, 2);
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(cfg.status().message().find(name), std::string::npos) << cfg.status().message();

  SafeTensors tiny = SafeTensors::open(kTiny).value();
  auto heads = infer_unet_config(tiny, 3);  // 32 channels do not split into 3 heads
  ASSERT_FALSE(heads.ok());
  EXPECT_EQ(heads.status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::diffusion
