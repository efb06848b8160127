// Random checkpoints for the benchmarks (see random_checkpoint.h).
#include "bench/random_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"

namespace tessera::bench {

// Tensor names and shapes of a published checkpoint, from a tests/fixtures/cube3d/*-tensors.txt
// list ("name (d0, d1)" per line; the trailing summary lines, which have no parenthesised shape,
// are skipped).
Expected<shape::TensorShapes> read_tensor_list(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("bench shape: cannot open the tensor list " + path);
  shape::TensorShapes shapes;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const size_t open = line.find(" (");
    const size_t close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open ||
        close + 1 != line.find_last_not_of(" \r") + 1) {
      continue;
    }
    std::vector<int64_t> dims;
    std::istringstream ds(line.substr(open + 2, close - open - 2));
    std::string dim;
    while (std::getline(ds, dim, ',')) {
      if (dim.find_first_not_of(' ') == std::string::npos) continue;
      char* end = nullptr;
      const long long v = std::strtoll(dim.c_str(), &end, 10);
      if (v < 1 || v > (int64_t{1} << 32)) {
        return corrupt_data(path + ":" + std::to_string(line_no) + ": bad dimension '" + dim + "'");
      }
      dims.push_back(v);
    }
    shapes[line.substr(0, open)] = dims;
  }
  if (shapes.empty()) return corrupt_data("bench shape: the tensor list " + path + " is empty");
  return shapes;
}

Expected<RandomCheckpoint> make_random_checkpoint(const shape::TensorShapes& shapes, DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kF32)
    return invalid_argument("make_random_checkpoint: BF16 or F32 only");
  const uint64_t elem = dtype_size(dtype);
  nlohmann::json header;
  uint64_t offset = 0;
  std::vector<std::pair<uint64_t, uint64_t>> norm_ranges;  // element ranges set to 1
  for (const auto& [name, shape] : shapes) {
    uint64_t count = 1;
    for (int64_t d : shape) count *= static_cast<uint64_t>(d);
    header[name] = {{"dtype", dtype_name(dtype)},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + elem * count}}};
    if (name.find("norm") != std::string::npos) norm_ranges.push_back({offset / elem, count});
    offset += elem * count;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 64) text += ' ';  // data section 64-byte aligned in the buffer
  const size_t total = 8 + text.size() + offset;
  RandomCheckpoint ck;
  ck.data_bytes = offset;
  TESSERA_ASSIGN_OR_RETURN(ck.bytes, allocate(total, "the random checkpoint"));
  const uint64_t header_len = text.size();
  std::memcpy(ck.bytes.get(), &header_len, 8);
  std::memcpy(ck.bytes.get() + 8, text.data(), text.size());
  uint8_t* data = ck.bytes.get() + 8 + text.size();
  auto* values = reinterpret_cast<uint16_t*>(data);
  auto* values32 = reinterpret_cast<float*>(data);
  const int64_t n = static_cast<int64_t>(offset / elem);
  default_thread_pool().parallel_for(n, 1 << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ 0x9e3779b9u;
      h ^= h >> 15;
      h *= 2246822519u;
      h ^= h >> 13;
      // The top 16 bits of an f32 in [-0.02, 0.02): truncation is a valid bf16 value.
      const float v = (static_cast<float>(h >> 8) * (1.0f / 16777216.0f) - 0.5f) * 0.04f;
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (elem == 2) {
        values[i] = static_cast<uint16_t>(bits >> 16);
      } else {
        values32[i] = f32_from_bits(bits & 0xffff0000u);  // the same values as the bf16 image
      }
    }
  });
  for (const auto& [begin, count] : norm_ranges) {
    if (elem == 2) {
      std::fill(values + begin, values + begin + count, f32_to_bf16(1.0f));
    } else {
      std::fill(values32 + begin, values32 + begin + count, 1.0f);
    }
  }
  ck.total_bytes = total;
  TESSERA_ASSIGN_OR_RETURN(ck.file, SafeTensors::parse(ck.bytes.get(), total, "random-v05"));
  return ck;
}

// A safetensors image in memory (BF16 tensors), for SafeTensors::parse.
Expected<std::vector<uint8_t>> random_checkpoint(
    const std::map<std::string, std::vector<int64_t>>& shapes) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, shape] : shapes) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const uint64_t bytes = static_cast<uint64_t>(numel) * 2;
    header[name] = {
        {"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // data section 8-byte aligned
  std::vector<uint8_t> image;
  try {
    image.resize(8 + text.size() + offset);
  } catch (const std::bad_alloc&) {
    return Status(
        ErrorCode::kOutOfMemory,
        "bench: cannot allocate " + std::to_string(offset >> 20) + " MiB for the random weights");
  }
  const uint64_t header_len = text.size();
  for (int i = 0; i < 8; ++i) image[i] = static_cast<uint8_t>(header_len >> (8 * i));
  std::memcpy(image.data() + 8, text.data(), text.size());
  uint8_t* data = image.data() + 8 + text.size();
  std::vector<float> values;
  uint32_t seed = 1;
  for (const auto& [name, shape] : shapes) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    values.resize(static_cast<size_t>(numel));
    if (shape.size() >= 2) {
      const int64_t fan_in = numel / shape[0];
      fill_floats(values.data(), values.size(), 0x9e3779b9u * seed++);
      const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
      for (float& v : values) v *= bound;
    } else {
      // Norm scales (".weight" of a 1-D tensor) 1, biases 0.
      const bool scale = name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
      std::fill(values.begin(), values.end(), scale ? 1.0f : 0.0f);
    }
    convert_f32_to_bf16(values.data(), reinterpret_cast<uint16_t*>(data), values.size());
    data += values.size() * 2;
  }
  return image;
}

}  // namespace tessera::bench
