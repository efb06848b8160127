// WeightStore and scan_non_finite (see weight_store.h).
#include "engine/weights/weight_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/low_rank.h"

namespace tessera {

const char* weight_format_name(WeightFormat format) {
  return format == WeightFormat::kBF16 ? "bf16" : "f32";
}

WeightStore::WeightStore(SafeTensors file, WeightFormat format)
    : file_(std::move(file)), format_(format) {}

namespace {

bool shape_matches(const std::vector<int64_t>& actual, const std::vector<int64_t>& expected) {
  if (actual.size() != expected.size()) return false;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (expected[i] != -1 && expected[i] != actual[i]) return false;
  }
  return true;
}

bool is_float_storage(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

}  // namespace

Expected<const void*> WeightStore::get(const std::string& name, const std::vector<int64_t>& shape,
                                       DType want) {
  const TensorInfo* info = file_.find(name);
  if (info == nullptr) {
    return not_found(file_.path() + ": missing tensor '" + name + "' (expected shape " +
                     shape_to_string(shape) + ")");
  }
  if (!shape_matches(info->shape, shape)) {
    return invalid_argument(file_.path() + ": tensor '" + name + "' has shape " +
                            info->shape_string() + ", expected " + shape_to_string(shape));
  }
  if (!is_float_storage(info->dtype)) {
    return invalid_argument(file_.path() + ": tensor '" + name + "' has dtype " +
                            dtype_name(info->dtype) + ", expected F32, F16 or BF16");
  }
  TESSERA_ASSIGN_OR_RETURN(const TensorView view, file_.view(name));
  (want == DType::kBF16 ? asked_bf16_ : asked_f32_).insert(name);
  const auto changes = low_rank_.find(name);
  if (info->dtype == want && info->aligned && changes == low_rank_.end()) {
    return static_cast<const void*>(view.data);
  }

  const auto key = std::make_pair(name, want);
  if (auto it = converted_.find(key); it != converted_.end()) {
    return static_cast<const void*>(it->second.get());
  }
  const size_t n = static_cast<size_t>(info->numel());
  std::unique_ptr<uint8_t[]> owned(new (std::nothrow)
                                       uint8_t[std::max<size_t>(1, n * dtype_size(want))]);
  if (!owned) {
    return out_of_memory(file_.path() + ": out of memory converting tensor '" + name + "' (" +
                         std::to_string(n * dtype_size(want)) + " bytes)");
  }
  if (changes != low_rank_.end()) {
    // The merged tensor: f32 + the low-rank products (one GEMM each), then the asked form.
    std::vector<float> merged_copy;
    float* merged = reinterpret_cast<float*>(owned.get());
    if (want != DType::kF32) {
      merged_copy.resize(n);
      merged = merged_copy.data();
    }
    TESSERA_RETURN_IF_ERROR(file_.load_f32(name, merged, n));
    const int64_t rows = info->shape[0], cols = info->numel() / info->shape[0];
    for (const LowRank& f : changes->second) {
      kernels::cpu::add_low_rank_product(merged, rows, cols, f.up.data(), f.down_t.data(), f.rank);
    }
    if (want != DType::kF32) {
      convert_f32_to_bf16(merged, reinterpret_cast<uint16_t*>(owned.get()), n);
    }
  } else if (want == DType::kF32) {
    TESSERA_RETURN_IF_ERROR(file_.load_f32(name, reinterpret_cast<float*>(owned.get()), n));
  } else if (info->dtype == DType::kBF16) {
    // Same type, only misaligned: a byte copy.
    if (n != 0) std::memcpy(owned.get(), view.data, n * sizeof(uint16_t));
  } else {
    // Via f32 in row-sized chunks would save the temporary; tensors are at most a few hundred MB
    // and this runs once per load.
    std::vector<float> tmp(n);
    TESSERA_RETURN_IF_ERROR(file_.load_f32(name, tmp.data(), n));
    convert_f32_to_bf16(tmp.data(), reinterpret_cast<uint16_t*>(owned.get()), n);
  }
  const void* data = owned.get();
  // The mapped bytes are not read again (a second form of this tensor reads them back from the
  // file): keep them out of the resident set, so a converted model is not held twice.
  file_.drop_pages(name);
  converted_bytes_ += n * dtype_size(want);
  converted_.emplace(key, std::move(owned));
  return data;
}

Status WeightStore::add_low_rank(const std::string& name, std::vector<float> up,
                                 std::vector<float> down_t, int64_t rank) {
  const TensorInfo* info = file_.find(name);
  if (info == nullptr) return not_found(file_.path() + ": missing tensor '" + name + "'");
  if (!is_float_storage(info->dtype) || info->shape.empty()) {
    return invalid_argument(file_.path() + ": tensor '" + name + "' (dtype " +
                            dtype_name(info->dtype) + ", shape " + info->shape_string() +
                            ") is not a float weight");
  }
  const int64_t rows = info->shape[0];
  const int64_t cols = rows > 0 ? info->numel() / rows : 0;
  if (rank < 1 || static_cast<int64_t>(up.size()) != rows * rank ||
      static_cast<int64_t>(down_t.size()) != cols * rank) {
    return invalid_argument(file_.path() + ": tensor '" + name + "' " + info->shape_string() +
                            " cannot take a rank-" + std::to_string(rank) + " change of " +
                            std::to_string(up.size()) + " + " + std::to_string(down_t.size()) +
                            " values");
  }
  if (asked_f32_.count(name) != 0 || asked_bf16_.count(name) != 0) {
    return internal_error(file_.path() + ": tensor '" + name +
                          "' was already handed out; changes must come before the load");
  }
  low_rank_[name].push_back({std::move(up), std::move(down_t), rank});
  return Status();
}

std::vector<std::string> WeightStore::bf16_only_tensors() const {
  std::vector<std::string> names;
  for (const std::string& name : asked_bf16_) {
    if (asked_f32_.count(name) == 0) names.push_back(name);
  }
  return names;
}

Expected<kernels::Weight> WeightStore::matrix(const std::string& name, int64_t rows, int64_t cols) {
  if (format_ == WeightFormat::kF32) return matrix_f32(name, rows, cols);
  TESSERA_ASSIGN_OR_RETURN(const void* data, get(name, {rows, cols}, DType::kBF16));
  const TensorInfo* info = file_.find(name);
  return kernels::Weight{data, DType::kBF16, info->shape[0], info->shape[1]};
}

Expected<kernels::Weight> WeightStore::matrix_f32(const std::string& name, int64_t rows,
                                                  int64_t cols) {
  TESSERA_ASSIGN_OR_RETURN(const void* data, get(name, {rows, cols}, DType::kF32));
  const TensorInfo* info = file_.find(name);
  return kernels::Weight{data, DType::kF32, info->shape[0], info->shape[1]};
}

Expected<const float*> WeightStore::f32(const std::string& name,
                                        const std::vector<int64_t>& shape) {
  TESSERA_ASSIGN_OR_RETURN(const void* data, get(name, shape, DType::kF32));
  return static_cast<const float*>(data);
}

namespace {

// Index of the first non-finite element of `n` elements of `dtype` at `bytes` (any alignment), or
// -1. Bit tests: an all-ones exponent is inf (zero mantissa) or NaN.
template <typename Bits>
int64_t first_non_finite(const uint8_t* bytes, int64_t begin, int64_t end, Bits exponent_mask) {
  for (int64_t i = begin; i < end; ++i) {
    Bits v;
    std::memcpy(&v, bytes + static_cast<size_t>(i) * sizeof(Bits), sizeof(Bits));
    if ((v & exponent_mask) == exponent_mask) return i;
  }
  return -1;
}

int64_t scan_range(DType dtype, const uint8_t* bytes, int64_t begin, int64_t end) {
  switch (dtype) {
    case DType::kF32:
      return first_non_finite<uint32_t>(bytes, begin, end, 0x7f800000u);
    case DType::kBF16:
      return first_non_finite<uint16_t>(bytes, begin, end, uint16_t{0x7f80});
    case DType::kF16:
      return first_non_finite<uint16_t>(bytes, begin, end, uint16_t{0x7c00});
    case DType::kF64:
      return first_non_finite<uint64_t>(bytes, begin, end, 0x7ff0000000000000ull);
    default:
      return -1;
  }
}

bool is_nan_at(DType dtype, const uint8_t* bytes, int64_t i) {
  const size_t at = static_cast<size_t>(i);
  switch (dtype) {
    case DType::kF32: {
      uint32_t v;
      std::memcpy(&v, bytes + at * 4, 4);
      return (v & 0x007fffffu) != 0;
    }
    case DType::kBF16:
    case DType::kF16: {
      uint16_t v;
      std::memcpy(&v, bytes + at * 2, 2);
      return (v & (dtype == DType::kBF16 ? 0x007f : 0x03ff)) != 0;
    }
    case DType::kF64: {
      uint64_t v;
      std::memcpy(&v, bytes + at * 8, 8);
      return (v & 0x000fffffffffffffull) != 0;
    }
    default:
      return false;
  }
}

bool is_negative_at(DType dtype, const uint8_t* bytes, int64_t i) {
  const size_t size = dtype_size(dtype);
  // Little-endian: the sign bit is the top bit of the last byte.
  return (bytes[static_cast<size_t>(i) * size + size - 1] & 0x80) != 0;
}

}  // namespace

Status scan_non_finite(const SafeTensors& file) {
  for (const TensorInfo& info : file.tensors()) {
    if (!is_float_storage(info.dtype) && info.dtype != DType::kF64) continue;
    const int64_t n = info.numel();
    if (n == 0) continue;
    TESSERA_ASSIGN_OR_RETURN(const TensorView view, file.view(info.name));
    const auto* bytes = static_cast<const uint8_t*>(view.data);
    std::atomic<int64_t> first{std::numeric_limits<int64_t>::max()};
    // 1M elements per task: a few hundred microseconds of memory-bound work each.
    default_thread_pool().parallel_for(n, int64_t{1} << 20, [&](int64_t begin, int64_t end) {
      if (first.load(std::memory_order_relaxed) < begin) return;  // an earlier hit exists
      const int64_t hit = scan_range(info.dtype, bytes, begin, end);
      if (hit < 0) return;
      int64_t seen = first.load(std::memory_order_relaxed);
      while (hit < seen && !first.compare_exchange_weak(seen, hit)) {
      }
    });
    const int64_t hit = first.load();
    if (hit != std::numeric_limits<int64_t>::max()) {
      const char* kind = is_nan_at(info.dtype, bytes, hit)
                             ? "NaN"
                             : (is_negative_at(info.dtype, bytes, hit) ? "-inf" : "+inf");
      return corrupt_data(file.path() + ": tensor '" + info.name + "' element " +
                          std::to_string(hit) + " is " + kind);
    }
    file.drop_pages(info.name);  // scanned: not resident on its account (the loader maps it again)
  }
  return Status();
}

}  // namespace tessera
