// Helpers for the CUDA op tests (tests/kernels/*_gpu_test.cpp, binary tessera_gpu_tests, ctest
// label "gpu").
//
// Every test that needs a device derives its fixture from GpuTest, whose SetUp() calls
// probe_device() and GTEST_SKIP()s with the reason when there is no usable device (no driver, no
// GPU, architecture not compiled in), so the suite passes, skipped, on machines without a GPU. A
// build without the CUDA backend (TESSERA_HAVE_CUDA == 0) has no cuda:: ops to link against: each
// test file then compiles to a single test that skips with probe_device()'s message
// (TESSERA_GPU_TESTS_NEED_CUDA_BUILD).
//
// Tests of the CUDA *Backend* (kernels/backend.h: model code, engine parity) need no CUDA headers
// and build either way: shared_cuda_backend() gives them one process-wide CUDA backend, and
// TESSERA_SKIP_WITHOUT_CUDA_BACKEND() skips with make_cuda_backend()'s reason when there is none
// (no device, or a build without CUDA).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "kernels/cuda/device.h"

#if TESSERA_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"
#endif

// Status checks with the status's own message on failure.
#define TESSERA_EXPECT_OK(expr)                                             \
  do {                                                                      \
    const ::tessera::Status tessera_expect_st_ = (expr);                    \
    EXPECT_TRUE(tessera_expect_st_.ok()) << tessera_expect_st_.to_string(); \
  } while (0)
#define TESSERA_ASSERT_OK(expr)                                             \
  do {                                                                      \
    const ::tessera::Status tessera_assert_st_ = (expr);                    \
    ASSERT_TRUE(tessera_assert_st_.ok()) << tessera_assert_st_.to_string(); \
  } while (0)

// The one test of a *_gpu_test.cpp file in a build without the CUDA backend.
#define TESSERA_GPU_TESTS_NEED_CUDA_BUILD(suite)                                 \
  TEST(suite, SkippedInBuildWithoutCuda) {                                       \
    GTEST_SKIP() << ::tessera::kernels::cuda::probe_device().status().message(); \
  }

namespace tessera::test {

// The CUDA backend all Backend-level GPU tests share, created on first use and deliberately never
// destroyed (models loaded on it by static fixtures outlive every test; destroying CUDA objects
// after the runtime has shut down at exit is not allowed). Null when make_cuda_backend() fails;
// `why` (may be null) then gets its message.
inline kernels::Backend* shared_cuda_backend(std::string* why = nullptr) {
  static std::string reason;
  static kernels::Backend* const backend = []() -> kernels::Backend* {
    Expected<std::unique_ptr<kernels::Backend>> made = kernels::make_cuda_backend();
    if (!made.ok()) {
      reason = made.status().message();
      return nullptr;
    }
    return std::move(made).value().release();
  }();
  if (backend == nullptr && why != nullptr) *why = reason;
  return backend;
}

}  // namespace tessera::test

// In a test body or SetUp(): GTEST_SKIP()s with the reason when there is no CUDA backend.
#define TESSERA_SKIP_WITHOUT_CUDA_BACKEND()                                       \
  do {                                                                            \
    std::string tessera_no_cuda_why_;                                             \
    if (::tessera::test::shared_cuda_backend(&tessera_no_cuda_why_) == nullptr) { \
      GTEST_SKIP() << tessera_no_cuda_why_;                                       \
    }                                                                             \
  } while (0)

#if TESSERA_HAVE_CUDA
namespace tessera::test {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Expected<kernels::cuda::DeviceInfo> device = kernels::cuda::probe_device();
    if (!device.ok()) GTEST_SKIP() << device.status().message();
    const cudaError_t err = cudaStreamCreate(&stream_);
    ASSERT_EQ(err, cudaSuccess) << "cudaStreamCreate: " << cudaGetErrorString(err);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  // A device copy of `host`. On failure the test is marked failed and the buffer is empty (its null
  // pointer then makes the op under test return an error instead of crashing).
  template <typename T>
  kernels::cuda::DeviceBuffer upload(const std::vector<T>& host) {
    return upload(host.data(), host.size());
  }
  template <typename T>
  kernels::cuda::DeviceBuffer upload(const T* host, size_t count) {
    Expected<kernels::cuda::DeviceBuffer> buffer =
        kernels::cuda::DeviceBuffer::allocate(count * sizeof(T), "test input");
    if (!buffer.ok()) {
      ADD_FAILURE() << buffer.status().to_string();
      return {};
    }
    const Status st = buffer->upload(host, count * sizeof(T));
    if (!st.ok()) ADD_FAILURE() << st.to_string();
    return std::move(buffer).value();
  }
  // An uninitialised device buffer of `count` elements of T (filled with NaN bytes so a kernel that
  // forgets to write an element is caught).
  template <typename T>
  kernels::cuda::DeviceBuffer alloc(size_t count) {
    Expected<kernels::cuda::DeviceBuffer> buffer =
        kernels::cuda::DeviceBuffer::allocate(count * sizeof(T), "test output");
    if (!buffer.ok()) {
      ADD_FAILURE() << buffer.status().to_string();
      return {};
    }
    if (count > 0) {
      const cudaError_t err = cudaMemset(buffer->data(), 0xff, count * sizeof(T));
      if (err != cudaSuccess) ADD_FAILURE() << "cudaMemset: " << cudaGetErrorString(err);
    }
    return std::move(buffer).value();
  }
  // A device buffer of `count` elements of T set to zero bytes (a decode attention workspace, whose
  // arrival counters must start at zero: cuda::attention_decode_workspace_bytes).
  template <typename T>
  kernels::cuda::DeviceBuffer alloc_zeroed(size_t count) {
    kernels::cuda::DeviceBuffer buffer = alloc<T>(count);
    if (count > 0 && buffer.data() != nullptr) {
      const cudaError_t err = cudaMemset(buffer.data(), 0, count * sizeof(T));
      if (err != cudaSuccess) ADD_FAILURE() << "cudaMemset: " << cudaGetErrorString(err);
    }
    return buffer;
  }
  // Waits for the test's stream; asynchronous kernel errors surface here with their CUDA name.
  ::testing::AssertionResult sync() {
    const cudaError_t err = cudaStreamSynchronize(stream_);
    if (err == cudaSuccess) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "cudaStreamSynchronize: " << cudaGetErrorName(err)
                                         << " (" << cudaGetErrorString(err) << ")";
  }
  // The first `count` elements of `buffer` (after sync()).
  template <typename T>
  std::vector<T> download(const kernels::cuda::DeviceBuffer& buffer, size_t count) {
    std::vector<T> host(count);
    const Status st = buffer.download(host.data(), count * sizeof(T));
    if (!st.ok()) ADD_FAILURE() << st.to_string();
    return host;
  }

  cudaStream_t stream_ = nullptr;
};

}  // namespace tessera::test
#endif  // TESSERA_HAVE_CUDA
