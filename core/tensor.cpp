#include "core/tensor.h"

#include <cassert>

namespace tessera {

namespace {
void set_contiguous(TensorView& v, const int64_t* dims, size_t n) {
  assert(n <= static_cast<size_t>(kMaxDims));
  v.ndim = static_cast<int>(n);
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    assert(dims[i] >= 0);
    v.shape[i] = dims[i];
    v.strides[i] = stride;
    stride *= dims[i];
  }
}
}  // namespace

TensorView::TensorView(void* d, DType t, std::initializer_list<int64_t> dims, Device dev)
    : data(d), dtype(t), device(dev) {
  set_contiguous(*this, dims.begin(), dims.size());
}

TensorView::TensorView(void* d, DType t, const std::vector<int64_t>& dims, Device dev)
    : data(d), dtype(t), device(dev) {
  set_contiguous(*this, dims.data(), dims.size());
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

TensorView TensorView::slice0(int64_t begin, int64_t end) const {
  assert(ndim >= 1 && begin >= 0 && begin <= end && end <= shape[0]);
  TensorView v = *this;
  v.shape[0] = end - begin;
  v.data = static_cast<char*>(data) + static_cast<size_t>(begin * strides[0]) * dtype_size(dtype);
  return v;
}

Expected<TensorView> TensorView::reshape(const std::vector<int64_t>& dims) const {
  if (!is_contiguous()) return invalid_argument("reshape of a non-contiguous view");
  if (dims.size() > static_cast<size_t>(kMaxDims))
    return invalid_argument("reshape to " + std::to_string(dims.size()) + " dimensions (max 6)");
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return invalid_argument("reshape to a negative size");
    n *= d;
  }
  if (n != numel())
    return invalid_argument("reshape " + shape_string() + " -> " + shape_to_string(dims) +
                            ": element counts differ");
  return TensorView(data, dtype, dims, device);
}

std::string shape_to_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::string TensorView::shape_string() const {
  return shape_to_string(shape_vector());
}

}  // namespace tessera
