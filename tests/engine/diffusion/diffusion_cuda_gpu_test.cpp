// The diffusion engine on the CUDA backend (label "gpu"; skipped without a usable device): the UNet
// and VAE decoder against the PyTorch fixtures with every kernel switch (as unet_test.cpp /
// vae_decoder_test.cpp on the CPU), and a whole generation of the shipped tessera-tiny model
// against the CPU pipeline.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/weights/weight_store.h"
#include "engine/diffusion/pipeline.h"
#include "engine/diffusion/sd_config.h"
#include "engine/diffusion/unet.h"
#include "engine/diffusion/vae_decoder.h"
#include "kernels/cuda/cuda_ops.h"
#include "tests/engine/diffusion/diffusion_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace tessera::diffusion {
namespace {

constexpr int64_t kBatch = 2, kHw = 16, kCtxLen = 77, kHeads = 2;

// Host vector -> device buffer of the backend, and back.
kernels::DeviceBuffer to_device(kernels::Backend& b, const std::vector<float>& host) {
  kernels::DeviceBuffer d = b.allocate(host.size() * sizeof(float)).value();
  EXPECT_TRUE(b.upload(d.data(), host.data(), host.size() * sizeof(float)).ok());
  return d;
}
std::vector<float> to_host(kernels::Backend& b, const kernels::DeviceBuffer& d, size_t n) {
  std::vector<float> host(n);
  EXPECT_TRUE(b.download(host.data(), d.data(), n * sizeof(float)).ok());
  return host;
}

// The tiny fixture model (tests/fixtures/diffusion) on the shared CUDA backend: its UNet inputs
// and VAE latents on the device, and one call each that runs a model and brings the output back
// as NCHW, as the fixtures store it.
class DiffusionCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
    cuda_ = test::shared_cuda_backend();
  }
  std::vector<float> want(const std::string& name) const { return expected_.to_f32(name).value(); }
  std::unique_ptr<UNet> unet() {
    auto m =
        UNet::load(store_, infer_unet_config(store_.file(), kHeads).value(), kUNetPrefix, cuda_);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(*m) : nullptr;
  }
  std::unique_ptr<VaeDecoder> vae() {
    auto m = VaeDecoder::load(store_, infer_vae_decoder_config(store_.file()).value(), kVaePrefix,
                              cuda_);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(*m) : nullptr;
  }
  // UNet(fixture x, t, context) -> eps, NCHW.
  std::vector<float> eps(UNet& m) {
    if (x_.data() == nullptr) {
      x_ = to_device(*cuda_, test_util::to_nhwc(want("unet.x"), kBatch, 4, kHw, kHw));
      ctx_ = to_device(*cuda_, want("unet.context"));
    }
    const size_t n = static_cast<size_t>(kBatch * kHw * kHw * 4);
    kernels::DeviceBuffer out = cuda_->allocate(n * sizeof(float)).value();
    const std::vector<float> t = want("unet.t");
    const Status st = m.forward(x_.as<float>(), t.data(), ctx_.as<float>(), kBatch, kHw, kHw,
                                kCtxLen, out.as<float>());
    EXPECT_TRUE(st.ok()) << st.to_string();
    return test_util::to_nchw(to_host(*cuda_, out, n).data(),
                              kernels::ImageShape{kBatch, kHw, kHw, 4});
  }
  // VAE(fixture z) -> image, NCHW (the tiny VAE upscales x2).
  std::vector<float> image(VaeDecoder& m) {
    if (z_.data() == nullptr) {
      z_ = to_device(*cuda_, test_util::to_nhwc(want("vae.z"), 1, 4, kHw, kHw));
    }
    const int64_t side = 2 * kHw;
    const size_t n = static_cast<size_t>(side * side * 3);
    kernels::DeviceBuffer out = cuda_->allocate(n * sizeof(float)).value();
    const Status st = m.decode(z_.as<float>(), 1, kHw, kHw, out.as<float>());
    EXPECT_TRUE(st.ok()) << st.to_string();
    return test_util::to_nchw(to_host(*cuda_, out, n).data(),
                              kernels::ImageShape{1, side, side, 3});
  }

  kernels::Backend* cuda_ = nullptr;
  const SafeTensors expected_ =
      SafeTensors::open(test_util::fixture_dir() + "expected.safetensors").value();
  WeightStore store_{SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                     WeightFormat::kF32};
  kernels::DeviceBuffer x_, ctx_, z_;
};

TEST_F(DiffusionCuda, UNetMatchesThePyTorchReferenceWithEveryKernelVariant) {
  std::unique_ptr<UNet> m = unet();
  ASSERT_NE(m, nullptr);
  for (const auto& [name, options] : test_util::kernel_variants()) {
    SCOPED_TRACE(name);
    m->set_options(options);
    EXPECT_TRUE(test_util::close_rel(eps(*m), want("unet.eps")));
  }
}

// Precision::kBf16 on CUDA = bf16 tensor-core products for every weight (convolutions as im2col,
// linear layers) and TF32 for attention's products: within the tolerance of the CPU's bf16
// compute test (unet_test.cpp, Bf16ComputeCloseToF32Reference) of the PyTorch f32 output, and
// the TF32 switches are off again after the forward.
TEST_F(DiffusionCuda, UNetWithBf16TensorCoreProductsStaysCloseToTheReference) {
  std::unique_ptr<UNet> m = unet();
  ASSERT_NE(m, nullptr);
  KernelOptions o;
  o.precision = kernels::Precision::kBf16;
  m->set_options(o);
  EXPECT_TRUE(test_util::close_rel(eps(*m), want("unet.eps"), 3e-2));
  EXPECT_FALSE(cuda_->diffusion()->tf32_products()) << "the forward left TF32 products on";
#if TESSERA_HAVE_CUDA
  EXPECT_FALSE(kernels::cuda::tf32_products()) << "a convolution left cuBLAS TF32 math on";
#endif
}

TEST_F(DiffusionCuda, VaeDecoderMatchesThePyTorchReferenceWithEveryKernelVariant) {
  std::unique_ptr<VaeDecoder> m = vae();
  ASSERT_NE(m, nullptr);
  for (const auto& [name, options] : test_util::kernel_variants()) {
    SCOPED_TRACE(name);
    m->set_options(options);
    EXPECT_TRUE(test_util::close_rel(image(*m), want("vae.image")));
  }
}

TEST_F(DiffusionCuda, TinyModelGenerationMatchesTheCpuPipeline) {
  const std::string model =
      std::string(TESSERA_SOURCE_DIR) + "/assets/models/tessera-tiny/diffusion";
  DiffusionLoadOptions o;
  auto cpu = DiffusionModel::load(model, o);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  o.device = kernels::DeviceChoice::kCuda;
  auto gpu = DiffusionModel::load(model, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  EXPECT_EQ((*gpu)->backend().device(), Device::kCuda);
  GenerateRequest r;
  r.prompt = "a red torus";
  r.width = r.height = (*cpu)->default_image_size();
  r.steps = 12;
  r.guidance_scale = 5.0f;
  r.sampler = SamplerKind::kDpmpp2m;
  r.seed = 7;
  int steps_seen = 0;
  GenerateCallbacks callbacks;
  callbacks.on_step = [&](const StepProgress& p) {
    ++steps_seen;
    EXPECT_NE(p.preview_rgb, nullptr);
  };
  auto want = (*cpu)->generate(r);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  auto got = (*gpu)->generate(r, callbacks);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(steps_seen, r.steps);
  ASSERT_EQ(got->rgb.size(), want->rgb.size());
  // f32 on both sides (cuBLAS without TF32): the images agree to well under one 8-bit level on
  // average; a single pixel may differ by a few levels after 12 steps of amplification.
  double sum = 0;
  int worst = 0;
  for (size_t i = 0; i < got->rgb.size(); ++i) {
    const int d = std::abs(static_cast<int>(got->rgb[i]) - static_cast<int>(want->rgb[i]));
    sum += d;
    worst = std::max(worst, d);
  }
  EXPECT_LE(sum / static_cast<double>(got->rgb.size()), 0.5);
  EXPECT_LE(worst, 8);
}

}  // namespace
}  // namespace tessera::diffusion
