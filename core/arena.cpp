#include "core/arena.h"

#include <cstdlib>
#include <new>
#include <utility>

namespace tessera {

Arena::~Arena() {
  std::free(base_);
}

Arena::Arena(Arena&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      used_(std::exchange(other.used_, 0)) {}

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    std::free(base_);
    base_ = std::exchange(other.base_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    used_ = std::exchange(other.used_, 0);
  }
  return *this;
}

Expected<Arena> Arena::create(size_t capacity) {
  Arena arena;
  if (capacity > 0) {
    arena.base_ = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, aligned_size(capacity)));
    if (!arena.base_)
      return out_of_memory("arena of " + std::to_string(capacity) +
                           " bytes could not be allocated");
  }
  arena.capacity_ = aligned_size(capacity);
  return arena;
}

void* Arena::allocate(size_t bytes) {
  const size_t need = aligned_size(bytes);
  if (need > capacity_ - used_) return nullptr;
  void* p = base_ + used_;
  used_ += need;
  return p;
}

Expected<TensorView> Arena::allocate_tensor(DType dtype, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return invalid_argument("negative tensor size " + shape_to_string(dims));
    n *= d;
  }
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  void* p = allocate(bytes);
  if (!p && bytes > 0)
    return out_of_memory("arena exhausted: tensor " + shape_to_string(dims) + " " +
                         dtype_name(dtype) + " needs " + std::to_string(bytes) + " bytes, " +
                         std::to_string(capacity_ - used_) + " free of " +
                         std::to_string(capacity_));
  return TensorView(p, dtype, dims);
}

void Arena::reset(size_t mark) {
  used_ = mark < used_ ? mark : used_;
}

}  // namespace tessera
