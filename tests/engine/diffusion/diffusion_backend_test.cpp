// The diffusion models on a kernels::Backend other than the plain CPU one: every weight and
// activation goes through the backend, as the CUDA backend needs (tests/engine/diffusion/
// diffusion_gpu_test.cpp runs the same on a GPU). Here a CPU backend that behaves like a device
// for memory: it copies every weight at load time instead of using the store in place, so after
// the first forward (which packs the convolution weights) the checkpoint bytes can be destroyed
// and the model must still give the same result, bit for bit. Plus the failure paths: a backend
// without diffusion ops, allocation failures mid-forward, and device choices in the pipeline.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/safetensors.h"
#include "engine/weights/weight_store.h"
#include "engine/diffusion/pipeline.h"
#include "engine/diffusion/sd_config.h"
#include "engine/diffusion/unet.h"
#include "engine/diffusion/vae_decoder.h"
#include "kernels/forwarding_backend.h"
#include "tests/engine/diffusion/diffusion_test_util.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::diffusion {
namespace {

constexpr int64_t kBatch = 2, kHw = 16, kCtxLen = 77, kHeads = 2;

// Host memory, but weights are copied like a device's (upload_weight / upload_f32 fill storage),
// compute ops are counted, and allocations can be made to fail.
class CopyingBackend final : public kernels::ForwardingBackend {
 public:
  CopyingBackend() : ForwardingBackend(kernels::make_cpu_backend()) {}

  Expected<kernels::Weight> upload_weight(const kernels::Weight& host,
                                          kernels::DeviceBuffer* storage) override {
    const size_t bytes = static_cast<size_t>(host.rows * host.cols) * dtype_size(host.dtype);
    TESSERA_ASSIGN_OR_RETURN(*storage, allocate(bytes));
    std::memcpy(storage->data(), host.data, bytes);
    ++uploaded;
    kernels::Weight w = host;
    w.data = storage->data();
    return w;
  }
  Expected<const float*> upload_f32(const float* host, int64_t n,
                                    kernels::DeviceBuffer* storage) override {
    TESSERA_ASSIGN_OR_RETURN(*storage, allocate(static_cast<size_t>(n) * sizeof(float)));
    std::memcpy(storage->data(), host, static_cast<size_t>(n) * sizeof(float));
    ++uploaded;
    return static_cast<const float*>(storage->as<float>());
  }
  kernels::DiffusionOps* diffusion_facet() override {
    return diffuse ? ForwardingBackend::diffusion_facet() : nullptr;
  }
  // As a GPU: no host bf16 kernels, TF32 products instead (recorded, the math stays f32 here).
  bool bf16_compute() const override { return !tf32; }
  bool tf32_products_available() const override { return tf32; }
  void set_tf32_products(bool on) override {
    tf32_calls.push_back(on);
    tf32_on = on;
  }
  bool tf32_products() const override { return tf32_on; }
  // As a GPU with bf16 weight products: the convolution's bf16 weights widened back to f32 and
  // run by the CPU's im2col convolution (bf16 weights, f32 products: the rounding of the weights
  // shows, x is not rounded here), counted.
  bool bf16_products_available() const override { return bf16_products; }
  Status conv2d_weight(const float* x, const kernels::Weight& w, const float* bias, float* y,
                       const kernels::Conv2dShape& s) override {
    ++conv2d_weight_calls;
    if (w.dtype != DType::kBF16) return invalid_argument("conv2d_weight: not bf16");
    std::vector<float> packed(static_cast<size_t>(w.rows * w.cols));
    tessera::convert_bf16_to_f32(static_cast<const uint16_t*>(w.data), packed.data(),
                                 packed.size());
    return conv2d(x, packed.data(), bias, y, s, kernels::ConvAlgo::kGemm);
  }
  Status linear(const float* x, int64_t rows, const kernels::Weight& w, const float* bias,
                float* y) override {
    if (w.dtype == DType::kBF16) {
      ++bf16_linear_calls;
    } else if (rows >= kMinBf16Rows) {
      ++wide_f32_linear_calls;
    }
    return ForwardingBackend::linear(x, rows, w, bias, y);
  }
  Status linear_multi(const float* x, int64_t rows, const kernels::LinearPart* parts,
                      int64_t n_parts) override {
    ++linear_multi_calls;
    return ForwardingBackend::linear_multi(x, rows, parts, n_parts);
  }

  int64_t conv2d_weight_calls = 0;
  int64_t bf16_linear_calls = 0;
  int64_t wide_f32_linear_calls = 0;  // f32 weights, at least kMinBf16Rows rows
  int64_t linear_multi_calls = 0;
  bool bf16_products = false;
  int64_t uploaded = 0;
  int64_t compute_ops = 0;
  int64_t allocations = 0;
  int64_t fail_allocations_after = -1;  // >= 0: that many more succeed, then kOutOfMemory
  bool diffuse = true;
  bool tf32 = false;
  std::vector<bool> tf32_calls;
  bool tf32_on = false;

 protected:
  Status run_op(const kernels::OpLabel& label, std::function<Status()> run) override {
    if (label.kind == kernels::OpLabel::Kind::kCompute) ++compute_ops;
    if (std::strcmp(label.op, "allocate") == 0) {
      if (fail_allocations_after == 0) return out_of_memory("copying backend: allocation refused");
      if (fail_allocations_after > 0) --fail_allocations_after;
      ++allocations;
    }
    return run();
  }
};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

struct Inputs {
  SafeTensors expected =
      SafeTensors::open(test_util::fixture_dir() + "expected.safetensors").value();
  std::vector<float> f32(const std::string& name) const { return expected.to_f32(name).value(); }
};

std::vector<float> unet_eps(UNet& unet, const Inputs& in) {
  const std::vector<float> x = test_util::to_nhwc(in.f32("unet.x"), kBatch, 4, kHw, kHw);
  const std::vector<float> t = in.f32("unet.t"), ctx = in.f32("unet.context");
  std::vector<float> eps(static_cast<size_t>(kBatch * kHw * kHw * 4));
  const Status st =
      unet.forward(x.data(), t.data(), ctx.data(), kBatch, kHw, kHw, kCtxLen, eps.data());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return eps;
}

TEST(DiffusionOnBackend, UNetReadsOnlyItsOwnCopiesAfterTheFirstForward) {
  const Inputs in;
  // The plain CPU model over the mapped fixture: the reference result.
  WeightStore mapped(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                     WeightFormat::kF32);
  const UNetConfig cfg = infer_unet_config(mapped.file(), kHeads).value();
  auto plain = UNet::load(mapped, cfg).value();
  const std::vector<float> want = unet_eps(*plain, in);

  // The same weights from bytes this test owns, on the copying backend.
  std::vector<uint8_t> bytes = read_bytes(test_util::fixture_dir() + "sd_tiny.safetensors");
  ASSERT_FALSE(bytes.empty());
  WeightStore store(SafeTensors::parse(bytes.data(), bytes.size(), "sd_tiny copy").value(),
                    WeightFormat::kF32);
  CopyingBackend backend;
  auto unet = UNet::load(store, cfg, kUNetPrefix, &backend);
  ASSERT_TRUE(unet.ok()) << unet.status().to_string();
  EXPECT_GT(backend.uploaded, 100);  // every norm, bias and linear weight
  EXPECT_EQ(&(*unet)->backend(), &backend);
  const std::vector<float> first = unet_eps(**unet, in);
  EXPECT_TRUE(test::all_equal(first.data(), want.data(), want.size()));
  EXPECT_GT(backend.compute_ops, 100);  // 154: norms, convolutions, linears, attention, adds

  // Destroy the checkpoint bytes (header included): a model that still read the store would
  // now see NaNs.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i + sizeof(float) <= bytes.size(); i += sizeof(float)) {
    std::memcpy(bytes.data() + i, &nan, sizeof(float));
  }
  const int64_t allocations = backend.allocations;
  const std::vector<float> second = unet_eps(**unet, in);
  EXPECT_TRUE(test::all_equal(second.data(), want.data(), want.size()));
  EXPECT_EQ(backend.allocations, allocations) << "a forward at the same size allocated";
}

TEST(DiffusionOnBackend, VaeDecoderReadsOnlyItsOwnCopiesAfterTheFirstDecode) {
  const Inputs in;
  WeightStore mapped(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                     WeightFormat::kF32);
  const VaeDecoderConfig cfg = infer_vae_decoder_config(mapped.file()).value();
  auto plain = VaeDecoder::load(mapped, cfg).value();
  const std::vector<float> z = test_util::to_nhwc(in.f32("vae.z"), 1, 4, kHw, kHw);
  const size_t out = static_cast<size_t>(4 * kHw * kHw * 3);  // the tiny VAE upscales x2
  std::vector<float> want(out), got(out);
  ASSERT_TRUE(plain->decode(z.data(), 1, kHw, kHw, want.data()).ok());

  std::vector<uint8_t> bytes = read_bytes(test_util::fixture_dir() + "sd_tiny.safetensors");
  WeightStore store(SafeTensors::parse(bytes.data(), bytes.size(), "sd_tiny copy").value(),
                    WeightFormat::kF32);
  CopyingBackend backend;
  auto vae = VaeDecoder::load(store, cfg, kVaePrefix, &backend);
  ASSERT_TRUE(vae.ok()) << vae.status().to_string();
  ASSERT_TRUE((*vae)->decode(z.data(), 1, kHw, kHw, got.data()).ok());
  EXPECT_TRUE(test::all_equal(got.data(), want.data(), out));
  std::fill(bytes.begin(), bytes.end(), uint8_t{0xff});  // all-ones floats are NaNs
  std::fill(got.begin(), got.end(), 0.0f);
  ASSERT_TRUE((*vae)->decode(z.data(), 1, kHw, kHw, got.data()).ok());
  EXPECT_TRUE(test::all_equal(got.data(), want.data(), out));
}

TEST(DiffusionOnBackend, ABackendWithoutDiffusionOpsIsRefusedAtLoad) {
  WeightStore store(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kF32);
  CopyingBackend backend;
  backend.diffuse = false;
  auto unet =
      UNet::load(store, infer_unet_config(store.file(), kHeads).value(), kUNetPrefix, &backend);
  ASSERT_FALSE(unet.ok());
  EXPECT_EQ(unet.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(unet.status().message().find("no diffusion ops"), std::string::npos);
  auto vae =
      VaeDecoder::load(store, infer_vae_decoder_config(store.file()).value(), kVaePrefix, &backend);
  ASSERT_FALSE(vae.ok());
  EXPECT_EQ(vae.status().code(), ErrorCode::kUnsupported);
}

// Out of device memory in the middle of a forward is an error Status (never a crash), and the
// model works again once memory is there.
TEST(DiffusionOnBackend, AllocationFailureMidForwardIsAnErrorAndTheModelRecovers) {
  const Inputs in;
  WeightStore store(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kF32);
  const UNetConfig cfg = infer_unet_config(store.file(), kHeads).value();
  auto reference = UNet::load(store, cfg).value();
  const std::vector<float> want = unet_eps(*reference, in);

  const std::vector<float> x = test_util::to_nhwc(in.f32("unet.x"), kBatch, 4, kHw, kHw);
  const std::vector<float> t = in.f32("unet.t"), ctx = in.f32("unet.context");
  std::vector<float> eps(want.size());
  for (int64_t allowed : {0, 3, 12, 25}) {
    SCOPED_TRACE(allowed);
    CopyingBackend backend;
    auto unet = UNet::load(store, cfg, kUNetPrefix, &backend).value();
    backend.fail_allocations_after = allowed;
    const Status st =
        unet->forward(x.data(), t.data(), ctx.data(), kBatch, kHw, kHw, kCtxLen, eps.data());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), ErrorCode::kOutOfMemory) << st.to_string();
    backend.fail_allocations_after = -1;
    ASSERT_TRUE(
        unet->forward(x.data(), t.data(), ctx.data(), kBatch, kHw, kHw, kCtxLen, eps.data()).ok());
    EXPECT_TRUE(test::all_equal(eps.data(), want.data(), want.size()));
  }
}

// Precision::kBf16 on a backend with TF32 products (a GPU) switches them on for exactly one forward
// (and never on for f32), and the bf16 host kernels are not used there.
TEST(DiffusionOnBackend, Bf16PrecisionOnADeviceIsTf32ForOneForward) {
  const Inputs in;
  WeightStore store(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kF32);
  const UNetConfig cfg = infer_unet_config(store.file(), kHeads).value();
  CopyingBackend backend;
  backend.tf32 = true;
  auto unet = UNet::load(store, cfg, kUNetPrefix, &backend).value();
  const std::vector<float> f32 = unet_eps(*unet, in);
  EXPECT_TRUE(backend.tf32_calls.empty());
  KernelOptions o;
  o.precision = kernels::Precision::kBf16;
  unet->set_options(o);
  EXPECT_TRUE(use_tf32(o, backend));
  EXPECT_FALSE(use_bf16(o, backend));
  const std::vector<float> reduced = unet_eps(*unet, in);
  EXPECT_EQ(backend.tf32_calls, (std::vector<bool>{true, false}));
  // The CPU kernels under this fake device have no TF32: the same f32 result.
  EXPECT_TRUE(test::all_equal(reduced.data(), f32.data(), f32.size()));
  auto vae =
      VaeDecoder::load(store, infer_vae_decoder_config(store.file()).value(), kVaePrefix, &backend)
          .value();
  vae->set_options(o);
  const std::vector<float> z = test_util::to_nhwc(in.f32("vae.z"), 1, 4, kHw, kHw);
  std::vector<float> image(static_cast<size_t>(4 * kHw * kHw * 3));
  ASSERT_TRUE(vae->decode(z.data(), 1, kHw, kHw, image.data()).ok());
  EXPECT_EQ(backend.tf32_calls, (std::vector<bool>{true, false, true, false}));
  // A caller's own state survives a forward.
  backend.set_tf32_products(true);
  unet_eps(*unet, in);
  EXPECT_TRUE(backend.tf32_products());
}

// Precision::kBf16 on a device with bf16 weight products: every convolution runs as im2col with a
// bf16 copy of its weights in the kGemm packing (made once, on the first forward), the linear
// layers with enough rows take bf16 copies too, attention keeps TF32 for the forward, and the
// result stays within bf16 rounding of the f32 one.
TEST(DiffusionOnBackend, Bf16PrecisionOnADeviceWithBf16ProductsUsesBf16WeightCopies) {
  const Inputs in;
  WeightStore store(SafeTensors::open(test_util::fixture_dir() + "sd_tiny.safetensors").value(),
                    WeightFormat::kF32);
  const UNetConfig cfg = infer_unet_config(store.file(), kHeads).value();
  CopyingBackend backend;
  backend.tf32 = true;
  backend.bf16_products = true;
  auto unet = UNet::load(store, cfg, kUNetPrefix, &backend).value();
  const std::vector<float> f32 = unet_eps(*unet, in);
  EXPECT_EQ(backend.conv2d_weight_calls, 0);
  EXPECT_EQ(backend.bf16_linear_calls, 0);
  KernelOptions o;
  o.precision = kernels::Precision::kBf16;
  unet->set_options(o);
  EXPECT_TRUE(use_device_bf16(o, backend));
  EXPECT_GT(backend.linear_multi_calls, 0);  // f32: the fused q/k/v projections
  backend.wide_f32_linear_calls = backend.linear_multi_calls = 0;
  const std::vector<float> reduced = unet_eps(*unet, in);
  EXPECT_EQ(backend.tf32_calls, (std::vector<bool>{true, false}));
  const int64_t convs = backend.conv2d_weight_calls;
  EXPECT_GT(convs, 10);
  // Every product with a weight and enough rows ran on bf16 weights: none in f32, no fused f32
  // q/k/v.
  EXPECT_GT(backend.bf16_linear_calls, 0);
  EXPECT_EQ(backend.wide_f32_linear_calls, 0);
  EXPECT_EQ(backend.linear_multi_calls, 0);
  // Close to f32, but not it: the weights were rounded.
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(reduced[i] - f32[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(f32[i])));
  }
  EXPECT_GT(max_diff, 0.0);
  EXPECT_LT(max_diff, 0.03 * max_ref) << "max |bf16 - f32| " << max_diff << " of " << max_ref;
  // The second forward reuses the copies: no new upload, the same bits.
  const int64_t uploads = backend.uploaded;
  const std::vector<float> again = unet_eps(*unet, in);
  EXPECT_EQ(backend.uploaded, uploads);
  EXPECT_EQ(backend.conv2d_weight_calls, 2 * convs);
  EXPECT_TRUE(test::all_equal(again.data(), reduced.data(), reduced.size()));
  // f32 again: the f32 weights, the f32 result.
  unet->set_options(KernelOptions());
  const std::vector<float> back = unet_eps(*unet, in);
  EXPECT_EQ(backend.conv2d_weight_calls, 2 * convs);
  EXPECT_TRUE(test::all_equal(back.data(), f32.data(), f32.size()));
}

TEST(DiffusionOnBackend, PipelineDeviceChoice) {
  const std::string model =
      std::string(TESSERA_SOURCE_DIR) + "/assets/models/tessera-tiny/diffusion";
  DiffusionLoadOptions o;
  o.device = kernels::DeviceChoice::kCuda;
  auto cuda = DiffusionModel::load(model, o);
  if (cuda.ok()) {
    EXPECT_NE((*cuda)->backend().device(), Device::kCpu);  // a GPU machine: it really is CUDA
  } else {
    // Built without CUDA or no usable GPU: an error that says so and names the model.
    EXPECT_EQ(cuda.status().code(), ErrorCode::kUnsupported) << cuda.status().to_string();
    EXPECT_NE(cuda.status().message().find(model), std::string::npos);
    o.device = kernels::DeviceChoice::kAuto;
    auto fallback = DiffusionModel::load(model, o);
    ASSERT_TRUE(fallback.ok()) << fallback.status().to_string();
    EXPECT_EQ((*fallback)->backend().device(), Device::kCpu);
    EXPECT_FALSE((*fallback)->device_note().empty());  // why auto did not pick CUDA
  }
}

}  // namespace
}  // namespace tessera::diffusion
