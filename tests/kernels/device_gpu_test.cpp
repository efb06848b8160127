// probe_device() and DeviceBuffer. The probe's consistency checks run everywhere: without a usable
// device the probe must fail with a reason, never crash; with one it must describe it sensibly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda/device.h"
#include "tests/kernels/gpu_test_util.h"

namespace tessera::kernels {
namespace {

TEST(CudaDevice, BuiltWithCudaMatchesBuildFlag) {
  EXPECT_EQ(cuda::built_with_cuda(), TESSERA_HAVE_CUDA != 0);
}

TEST(CudaDevice, ProbeFailsWithReasonOrDescribesDevice) {
  const Expected<cuda::DeviceInfo> device = cuda::probe_device();
  if (!device.ok()) {
    EXPECT_FALSE(device.status().message().empty());
    EXPECT_EQ(device.status().code(), ErrorCode::kUnsupported) << device.status().to_string();
    GTEST_SKIP() << device.status().message();
  }
  EXPECT_FALSE(device->name.empty());
  EXPECT_GE(device->compute_major, 8);
  EXPECT_GT(device->multiprocessors, 0);
  EXPECT_GT(device->total_memory, 0u);
  EXPECT_LE(device->free_memory, device->total_memory);
  // Asking twice gives the same device.
  const Expected<cuda::DeviceInfo> again = cuda::probe_device();
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->name, device->name);
}

#if TESSERA_HAVE_CUDA
TEST(CudaDeviceBuffer, EmptyAndMoveWithoutDevice) {
  Expected<cuda::DeviceBuffer> empty = cuda::DeviceBuffer::allocate(0, "nothing");
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(empty->bytes(), 0u);
  cuda::DeviceBuffer moved = std::move(empty).value();
  EXPECT_TRUE(moved.empty());
  const float value = 1.f;
  // Larger than the buffer: rejected before any copy.
  const Status st = moved.upload(&value, sizeof(value));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  TESSERA_EXPECT_OK(moved.upload(&value, 0));
}

class CudaDeviceBufferGpu : public test::GpuTest {};

TEST_F(CudaDeviceBufferGpu, SmallRoundTripAndMove) {
  const std::vector<float> host = {1.f, -2.f, 3.5f, 0.25f, 7.f};
  Expected<cuda::DeviceBuffer> buffer =
      cuda::DeviceBuffer::allocate(host.size() * sizeof(float), "round trip");
  ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
  TESSERA_ASSERT_OK(buffer->upload(host.data(), host.size() * sizeof(float)));
  cuda::DeviceBuffer moved = std::move(buffer).value();
  cuda::DeviceBuffer target;
  target = std::move(moved);
  EXPECT_TRUE(moved.empty());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  std::vector<float> back(host.size());
  TESSERA_ASSERT_OK(target.download(back.data(), back.size() * sizeof(float)));
  EXPECT_EQ(back, host);
}

TEST_F(CudaDeviceBufferGpu, HugeAllocationFailsWithStatus) {
  const Expected<cuda::DeviceBuffer> buffer =
      cuda::DeviceBuffer::allocate(size_t{1} << 50, "a petabyte");
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), ErrorCode::kOutOfMemory) << buffer.status().to_string();
  EXPECT_NE(buffer.status().message().find("a petabyte"), std::string::npos);
  // The failure did not poison later work.
  Expected<cuda::DeviceBuffer> small = cuda::DeviceBuffer::allocate(64, "small");
  EXPECT_TRUE(small.ok()) << small.status().to_string();
}
#endif

}  // namespace
}  // namespace tessera::kernels
