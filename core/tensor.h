// TensorView: a non-owning view (pointer, dtype, shape, strides, device) over memory owned
// elsewhere (an Arena, a memory-mapped checkpoint, a CUDA allocation).
//
// Shapes and strides are in elements, row-major by default, at most kMaxDims dimensions. A view
// never frees its memory; the owner must outlive it. Views over device memory must not be
// dereferenced on the host.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tessera {

enum class Device : uint8_t { kCpu, kCuda };

constexpr int kMaxDims = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements

  TensorView() = default;
  // Contiguous row-major view. Asserts ndim <= kMaxDims and non-negative sizes (programmer errors).
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> dims,
             Device device = Device::kCpu);
  TensorView(void* data, DType dtype, const std::vector<int64_t>& dims,
             Device device = Device::kCpu);

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i < 0 ? i + ndim : i]; }
  bool is_contiguous() const;
  std::vector<int64_t> shape_vector() const { return {shape.begin(), shape.begin() + ndim}; }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }

  // Sub-view of rows [begin, end) along dimension 0.
  TensorView slice0(int64_t begin, int64_t end) const;
  // Same data, new contiguous shape with the same element count; error otherwise.
  Expected<TensorView> reshape(const std::vector<int64_t>& dims) const;

  // "[16387, 1536]"
  std::string shape_string() const;
};

std::string shape_to_string(const std::vector<int64_t>& dims);

}  // namespace tessera
