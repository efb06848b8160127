// Backend selection (kernels/backend.h: make_cuda_backend, make_backend, parse_device_choice) and
// ShapePipeline's --device option, on whatever machine runs the tests: without a usable GPU (no
// driver, no device, or a build without CUDA) make_cuda_backend returns an error Status saying why
// (never a crash), auto quietly falls back to the CPU with the reason in its note, and an explicit
// cuda request fails with that reason; with a GPU, cuda and auto both give the CUDA backend.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/shape/pipeline.h"
#include "kernels/backend.h"
#include "kernels/cuda/device.h"
#include "tests/support/fixture_model_dir.h"

namespace tessera::kernels {
namespace {

bool gpu_usable() {
  return make_cuda_backend().ok();
}

TEST(BackendSelect, ParsesAndNamesDeviceChoices) {
  for (DeviceChoice c : {DeviceChoice::kAuto, DeviceChoice::kCpu, DeviceChoice::kCuda}) {
    const Expected<DeviceChoice> parsed = parse_device_choice(device_choice_name(c));
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    EXPECT_EQ(*parsed, c);
  }
  for (const char* bad : {"", "gpu", "CUDA", "cuda:0"}) {
    const Expected<DeviceChoice> parsed = parse_device_choice(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << parsed.status().message();
  }
}

TEST(BackendSelect, CudaBackendIsAnErrorOrAWorkingBackend) {
  const Expected<std::unique_ptr<Backend>> cuda = make_cuda_backend();
  const Expected<cuda::DeviceInfo> probe = cuda::probe_device();
  if (!probe.ok()) {
    // This machine (no GPU, or built without CUDA): an error saying why, not a crash.
    ASSERT_FALSE(cuda.ok());
    EXPECT_EQ(cuda.status().code(), ErrorCode::kUnsupported) << cuda.status().to_string();
    EXPECT_FALSE(cuda.status().message().empty());
    if (!cuda::built_with_cuda()) {
      EXPECT_NE(cuda.status().message().find("no CUDA backend"), std::string::npos)
          << cuda.status().message();
    }
  } else if (cuda.ok()) {
    EXPECT_EQ((*cuda)->device(), Device::kCuda);
    EXPECT_EQ((*cuda)->name().rfind("cuda (", 0), 0u) << (*cuda)->name();
  } else {
    // A device too small for the backend's free-memory floor: said so.
    EXPECT_NE(cuda.status().message().find("free"), std::string::npos) << cuda.status().message();
  }
  // A device index that does not exist, and a free-memory floor no device meets.
  const auto missing = make_cuda_backend(4096);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kUnsupported);
  const auto greedy = make_cuda_backend(0, ~uint64_t{0});
  ASSERT_FALSE(greedy.ok());
  EXPECT_EQ(greedy.status().code(), ErrorCode::kUnsupported);
}

TEST(BackendSelect, AutoFallsBackToTheCpuQuietly) {
  const Expected<BackendSelection> cpu = make_backend(DeviceChoice::kCpu);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->backend->device(), Device::kCpu);
  EXPECT_TRUE(cpu->note.empty());

  const Expected<BackendSelection> automatic = make_backend(DeviceChoice::kAuto);
  ASSERT_TRUE(automatic.ok()) << automatic.status().to_string();  // never an error
  ASSERT_NE(automatic->backend, nullptr);
  const Expected<BackendSelection> cuda = make_backend(DeviceChoice::kCuda);
  if (gpu_usable()) {
    EXPECT_EQ(automatic->backend->device(), Device::kCuda);
    EXPECT_TRUE(automatic->note.empty());
    ASSERT_TRUE(cuda.ok()) << cuda.status().to_string();
    EXPECT_EQ(cuda->backend->device(), Device::kCuda);
  } else {
    EXPECT_EQ(automatic->backend->device(), Device::kCpu);
    EXPECT_EQ(automatic->note.rfind("using the CPU backend: ", 0), 0u) << automatic->note;
    ASSERT_FALSE(cuda.ok());
    EXPECT_EQ(cuda.status().code(), ErrorCode::kUnsupported);
    // The explicit request's error is the reason auto's note gives.
    EXPECT_NE(automatic->note.find(cuda.status().message()), std::string::npos) << automatic->note;
  }
  // Works for auto on an index without a device too.
  const Expected<BackendSelection> missing = make_backend(DeviceChoice::kAuto, 4096);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->backend->device(), Device::kCpu);
  EXPECT_FALSE(missing->note.empty());
}

TEST(BackendSelect, PipelineDeviceOption) {
  tessera::testing::FixtureModelDir dir("backend-select");
  shape::PipelineOptions options;
  options.device = DeviceChoice::kAuto;
  auto automatic = shape::ShapePipeline::load(dir.path(), options);
  ASSERT_TRUE(automatic.ok()) << automatic.status().to_string();
  options.device = DeviceChoice::kCuda;
  auto cuda = shape::ShapePipeline::load(dir.path(), options);
  if (gpu_usable()) {
    EXPECT_EQ((*automatic)->backend().device(), Device::kCuda);
    ASSERT_TRUE(cuda.ok()) << cuda.status().to_string();
    EXPECT_EQ((*cuda)->backend().device(), Device::kCuda);
  } else {
    EXPECT_EQ((*automatic)->backend().device(), Device::kCpu);
    EXPECT_FALSE((*automatic)->backend_note().empty());
    ASSERT_FALSE(cuda.ok());
    EXPECT_EQ(cuda.status().code(), ErrorCode::kUnsupported) << cuda.status().to_string();
  }
  // The default stays the CPU, without a note.
  auto plain = shape::ShapePipeline::load(dir.path());
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ((*plain)->backend().device(), Device::kCpu);
  EXPECT_TRUE((*plain)->backend_note().empty());
}

}  // namespace
}  // namespace tessera::kernels
