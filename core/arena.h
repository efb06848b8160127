// Arena: one aligned block allocated up front, handed out by bumping a pointer.
//
// Models size their arena when they load (or a session when it starts) so the decode loop allocates
// nothing and pointers stay stable (what CUDA graph capture needs). Memory is released only when
// the arena is destroyed or reset to a mark. Move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace tessera {

class Arena {
 public:
  static constexpr size_t kAlignment = 64;  // cache line; enough for AVX-512 loads

  Arena() = default;
  ~Arena();
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Reserves `capacity` bytes. Error (kOutOfMemory) if the system refuses.
  static Expected<Arena> create(size_t capacity);

  // `bytes` from the arena, aligned to kAlignment; nullptr when it would not fit (callers size
  // arenas with the *_bound() queries of the code that uses them, so this is a sizing bug, reported
  // by Status in allocate_tensor).
  void* allocate(size_t bytes);
  // A contiguous tensor of the given shape; kOutOfMemory naming the request when it does not fit.
  Expected<TensorView> allocate_tensor(DType dtype, const std::vector<int64_t>& dims);

  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  size_t mark() const { return used_; }
  // Frees everything allocated after `mark` (views into that memory become dangling).
  void reset(size_t mark = 0);

  // Bytes an allocation of `bytes` consumes, alignment included: for sizing arenas.
  static size_t aligned_size(size_t bytes) { return (bytes + kAlignment - 1) & ~(kAlignment - 1); }

 private:
  uint8_t* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

}  // namespace tessera
