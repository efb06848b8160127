// SD UNet parity against the PyTorch reference fixtures (tests/fixtures/diffusion/README.md), with
// every kernel fusion / algorithm switch, plus bad input.
#include "engine/diffusion/unet.h"

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

constexpr int64_t kBatch = 2, kHw = 16, kCtxLen = 77, kHeads = 2;

struct UNetFixture {
  SafeTensors expected =
      SafeTensors::open(test_util::fixture_dir() + "expected.safetensors").value();
  WeightStore store{SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kF32};
  std::unique_ptr<UNet> unet;
  std::vector<float> x, t, ctx;

  UNetFixture() {
    UNetConfig cfg = infer_unet_config(store.file(), kHeads).value();
    unet = UNet::load(store, cfg).value();
    x = test_util::to_nhwc(f32("unet.x"), kBatch, 4, kHw, kHw);
    t = f32("unet.t");
    ctx = f32("unet.context");
  }
  std::vector<float> f32(const std::string& name) const { return expected.to_f32(name).value(); }
  std::vector<float> eps_nchw() {
    std::vector<float> eps(static_cast<size_t>(kBatch * kHw * kHw * 4));
    EXPECT_TRUE(
        unet->forward(x.data(), t.data(), ctx.data(), kBatch, kHw, kHw, kCtxLen, eps.data()).ok());
    return test_util::to_nchw(eps.data(), kernels::ImageShape{kBatch, kHw, kHw, 4});
  }
};

UNetFixture& fixture() {
  static UNetFixture* f = new UNetFixture();
  return *f;
}

TEST(SdUNet, TimestepEmbeddingIsCosFirst) {
  const float t[2] = {0.0f, 10.0f};
  std::vector<float> e(2 * 8);
  timestep_embedding(t, 2, 8, e.data());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(e[i], 1.0f);      // cos(0)
    EXPECT_EQ(e[4 + i], 0.0f);  // sin(0)
    const double f = std::pow(10000.0, -i / 4.0);
    EXPECT_NEAR(e[8 + i], std::cos(10.0 * f), 1e-5);
    EXPECT_NEAR(e[12 + i], std::sin(10.0 * f), 1e-5);
  }
}

TEST(SdUNet, ParityWithEveryKernelVariant) {
  UNetFixture& f = fixture();
  const std::vector<float> want = f.f32("unet.eps");
  for (const auto& [name, options] : test_util::kernel_variants()) {
    SCOPED_TRACE(name);
    f.unet->set_options(options);
    EXPECT_TRUE(close_rel(f.eps_nchw(), want));
  }
  f.unet->set_options(KernelOptions{});
}

// bf16 compute (KernelOptions::precision) against the PyTorch f32 output: the bf16 rounding of
// every product's operands through ~20 layers stays within |d| <= 3e-2 x (max |eps| + |eps|)
// (measured: worst element 0.288 vs 0.263), and the path really ran (it is not the f32 result).
TEST(SdUNet, Bf16ComputeCloseToF32Reference) {
  if (!kernels::cpu::bf16_compute_available()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  UNetFixture& f = fixture();
  const std::vector<float> want = f.f32("unet.eps");
  KernelOptions o;
  o.precision = kernels::Precision::kBf16;
  f.unet->set_options(o);
  const std::vector<float> got = f.eps_nchw();
  f.unet->set_options(KernelOptions{});
  EXPECT_TRUE(close_rel(got, want, 3e-2));
  EXPECT_FALSE(close_rel(got, want, 1e-5)) << "bf16 compute gave the f32 result";
}

TEST(SdUNet, IntermediateActivationsMatch) {
  UNetFixture& f = fixture();
  std::map<std::string, std::vector<float>> got;
  f.unet->set_tap([&](const std::string& name, const float* data, const kernels::ImageShape& s) {
    got[name] = test_util::to_nchw(data, s);
  });
  const std::vector<float> eps = f.eps_nchw();
  f.unet->set_tap(nullptr);
  for (const char* name : {"time_embed", "input_blocks.3", "middle_block"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count(name));
    EXPECT_TRUE(close_rel(got[name], f.f32(std::string("unet.") + name)));
  }
  // Every block reported, with the checkpoint's numbering (conv_in, res, down, res; 2 levels x 2
  // output blocks).
  EXPECT_TRUE(got.count("input_blocks.3"));
  EXPECT_FALSE(got.count("input_blocks.4"));
  EXPECT_TRUE(got.count("output_blocks.3"));
  EXPECT_FALSE(got.count("output_blocks.4"));
}

TEST(SdUNet, RepeatedForwardIsIdenticalAndOtherSizesWork) {
  UNetFixture& f = fixture();
  const std::vector<float> a = f.eps_nchw();
  const std::vector<float> b = f.eps_nchw();
  EXPECT_TRUE(test::all_equal(a.data(), b.data(), a.size()));
  // Batch 1, 8x24 latents, a short context: runs, finite (no fixture for this shape).
  std::vector<float> x(8 * 24 * 4, 0.5f), ctx(5 * 32, 0.25f), eps(8 * 24 * 4);
  const float t = 500.0f;
  ASSERT_TRUE(f.unet->forward(x.data(), &t, ctx.data(), 1, 8, 24, 5, eps.data()).ok());
  for (float v : eps) ASSERT_TRUE(std::isfinite(v));
  // And back to the fixture size: same result as before.
  const std::vector<float> c = f.eps_nchw();
  EXPECT_TRUE(test::all_equal(a.data(), c.data(), a.size()));
}

TEST(SdUNet, Bf16WeightsStayClose) {
  WeightStore store(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kBF16);
  auto unet = UNet::load(store, infer_unet_config(store.file(), kHeads).value()).value();
  UNetFixture& f = fixture();
  std::vector<float> eps(f.x.size());
  ASSERT_TRUE(
      unet->forward(f.x.data(), f.t.data(), f.ctx.data(), kBatch, kHw, kHw, kCtxLen, eps.data())
          .ok());
  // bf16 linear weights (8 bits of mantissa): a loose bound that still catches a wrong layer.
  EXPECT_TRUE(
      close_rel(test_util::to_nchw(eps.data(), {kBatch, kHw, kHw, 4}), f.f32("unet.eps"), 3e-2));
}

TEST(SdUNet, RejectsBadSizes) {
  UNetFixture& f = fixture();
  std::vector<float> eps(f.x.size());
  Status st =
      f.unet->forward(f.x.data(), f.t.data(), f.ctx.data(), kBatch, 15, 16, kCtxLen, eps.data());
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("15x16"), std::string::npos) << st.message();
  EXPECT_EQ(
      f.unet->forward(f.x.data(), f.t.data(), f.ctx.data(), 0, 16, 16, kCtxLen, eps.data()).code(),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      f.unet->forward(nullptr, f.t.data(), f.ctx.data(), 1, 16, 16, kCtxLen, eps.data()).code(),
      ErrorCode::kInvalidArgument);
}

Status load_edited(const test_util::EditedCheckpoint& ckpt) {
  TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(ckpt.path()));
  WeightStore store(std::move(file), WeightFormat::kF32);
  TESSERA_ASSIGN_OR_RETURN(UNetConfig cfg, infer_unet_config(store.file(), kHeads));
  TESSERA_ASSIGN_OR_RETURN(auto unet, UNet::load(store, cfg));
  return Status();
}

TEST(SdUNet, MissingTensorIsNamed) {
  const std::string name =
      "model.diffusion_model.output_blocks.3.1.transformer_blocks.0.attn2.to_k.weight";
  test_util::EditedCheckpoint ckpt(test_util::fixture_dir() + "sd_tiny.safetensors", "unet-missing",
                                   [&](auto& t) { t.erase(name); });
  Status st = load_edited(ckpt);
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
}

TEST(SdUNet, WrongShapeIsNamed) {
  const std::string name = "model.diffusion_model.output_blocks.1.1.conv.weight";
  test_util::EditedCheckpoint ckpt(test_util::fixture_dir() + "sd_tiny.safetensors", "unet-shape",
                                   [&](auto& t) {
                                     t[name].shape = {64, 64, 1, 1};
                                     t[name].values.resize(64 * 64);
                                   });
  Status st = load_edited(ckpt);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("64, 64, 1, 1"), std::string::npos) << st.message();
}

TEST(SdUNet, LoadRejectsInconsistentConfig) {
  WeightStore store(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kF32);
  UNetConfig cfg = infer_unet_config(store.file(), kHeads).value();
  cfg.num_heads = 3;  // 32 / 64 channels do not split into 3 heads
  auto unet = UNet::load(store, cfg);
  ASSERT_FALSE(unet.ok());
  EXPECT_EQ(unet.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(unet.status().message().find("3 heads"), std::string::npos) << unet.status().message();
}

}  // namespace
}  // namespace tessera::diffusion
