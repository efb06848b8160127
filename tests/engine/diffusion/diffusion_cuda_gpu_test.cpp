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

#include "engine/core/safetensors.h"
#include "engine/core/weight_store.h"
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

TEST(DiffusionCuda, UNetMatchesThePyTorchReferenceWithEveryKernelVariant) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
  kernels::Backend& cuda = *test::shared_cuda_backend();
  const SafeTensors expected =
      SafeTensors::open(test_util::fixture_dir() + "expected.safetensors").value();
  WeightStore store(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kF32);
  auto unet =
      UNet::load(store, infer_unet_config(store.file(), kHeads).value(), kUNetPrefix, &cuda);
  ASSERT_TRUE(unet.ok()) << unet.status().to_string();
  const std::vector<float> t = expected.to_f32("unet.t").value();
  kernels::DeviceBuffer x =
      to_device(cuda, test_util::to_nhwc(expected.to_f32("unet.x").value(), kBatch, 4, kHw, kHw));
  kernels::DeviceBuffer ctx = to_device(cuda, expected.to_f32("unet.context").value());
  const size_t n = static_cast<size_t>(kBatch * kHw * kHw * 4);
  kernels::DeviceBuffer eps = cuda.allocate(n * sizeof(float)).value();
  const std::vector<float> want = expected.to_f32("unet.eps").value();
  for (const auto& [name, options] : test_util::kernel_variants()) {
    SCOPED_TRACE(name);
    (*unet)->set_options(options);
    TESSERA_ASSERT_OK((*unet)->forward(x.as<float>(), t.data(), ctx.as<float>(), kBatch, kHw, kHw,
                                       kCtxLen, eps.as<float>()));
    const std::vector<float> got =
        test_util::to_nchw(to_host(cuda, eps, n).data(), kernels::ImageShape{kBatch, kHw, kHw, 4});
    EXPECT_TRUE(test_util::close_rel(got, want));
  }
}

// Precision::kBf16 on CUDA = TF32 tensor-core products (cuBLAS): within the tolerance of the CPU's
// bf16 compute test (unet_test.cpp, Bf16ComputeCloseToF32Reference) of the PyTorch f32 output.
TEST(DiffusionCuda, UNetWithTf32ProductsStaysCloseToTheReference) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
  kernels::Backend& cuda = *test::shared_cuda_backend();
  const SafeTensors expected =
      SafeTensors::open(test_util::fixture_dir() + "expected.safetensors").value();
  WeightStore store(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kF32);
  auto unet =
      UNet::load(store, infer_unet_config(store.file(), kHeads).value(), kUNetPrefix, &cuda);
  ASSERT_TRUE(unet.ok()) << unet.status().to_string();
  KernelOptions o;
  o.precision = kernels::Precision::kBf16;
  (*unet)->set_options(o);
  const std::vector<float> t = expected.to_f32("unet.t").value();
  kernels::DeviceBuffer x =
      to_device(cuda, test_util::to_nhwc(expected.to_f32("unet.x").value(), kBatch, 4, kHw, kHw));
  kernels::DeviceBuffer ctx = to_device(cuda, expected.to_f32("unet.context").value());
  const size_t n = static_cast<size_t>(kBatch * kHw * kHw * 4);
  kernels::DeviceBuffer eps = cuda.allocate(n * sizeof(float)).value();
  TESSERA_ASSERT_OK((*unet)->forward(x.as<float>(), t.data(), ctx.as<float>(), kBatch, kHw, kHw,
                                     kCtxLen, eps.as<float>()));
  const std::vector<float> got =
      test_util::to_nchw(to_host(cuda, eps, n).data(), kernels::ImageShape{kBatch, kHw, kHw, 4});
  EXPECT_TRUE(test_util::close_rel(got, expected.to_f32("unet.eps").value(), 3e-2));
  EXPECT_FALSE(cuda.tf32_products()) << "the forward left TF32 products on";
#if TESSERA_HAVE_CUDA
  EXPECT_FALSE(kernels::cuda::tf32_products()) << "a convolution left cuBLAS TF32 math on";
#endif
}

TEST(DiffusionCuda, VaeDecoderMatchesThePyTorchReferenceWithEveryKernelVariant) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
  kernels::Backend& cuda = *test::shared_cuda_backend();
  const SafeTensors expected =
      SafeTensors::open(test_util::fixture_dir() + "expected.safetensors").value();
  WeightStore store(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kF32);
  auto vae =
      VaeDecoder::load(store, infer_vae_decoder_config(store.file()).value(), kVaePrefix, &cuda);
  ASSERT_TRUE(vae.ok()) << vae.status().to_string();
  kernels::DeviceBuffer z =
      to_device(cuda, test_util::to_nhwc(expected.to_f32("vae.z").value(), 1, 4, kHw, kHw));
  const int64_t out = 2 * kHw;
  const size_t n = static_cast<size_t>(out * out * 3);
  kernels::DeviceBuffer image = cuda.allocate(n * sizeof(float)).value();
  const std::vector<float> want = expected.to_f32("vae.image").value();
  for (const auto& [name, options] : test_util::kernel_variants()) {
    SCOPED_TRACE(name);
    (*vae)->set_options(options);
    TESSERA_ASSERT_OK((*vae)->decode(z.as<float>(), 1, kHw, kHw, image.as<float>()));
    const std::vector<float> got =
        test_util::to_nchw(to_host(cuda, image, n).data(), kernels::ImageShape{1, out, out, 3});
    EXPECT_TRUE(test_util::close_rel(got, want));
  }
}

TEST(DiffusionCuda, TinyModelGenerationMatchesTheCpuPipeline) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
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
