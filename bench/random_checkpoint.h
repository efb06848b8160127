// Random checkpoints of the published Cube 3D shapes, for the benchmarks: the full-size model
// without a download (bench shape builds them in memory; bench make-model writes them to disk in
// the release layout).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/common.h"
#include "core/dtype.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "engine/shape/gpt_config.h"

namespace tessera::bench {

// Tensor names and shapes of a published checkpoint, from a tests/fixtures/cube3d/*-tensors.txt
// list ("name (d0, d1)" per line; the trailing summary lines, which have no parenthesised shape,
// are skipped).
Expected<shape::TensorShapes> read_tensor_list(const std::string& path);

// A checkpoint with the given tensors, random values (uniform in [-0.02, 0.02), the same values in
// both dtypes; tensors whose name holds "norm" are 1), built in memory as a safetensors image
// (`bytes` is the whole file; `file` parses it).
struct RandomCheckpoint {
  Buffer bytes;
  uint64_t data_bytes = 0;
  uint64_t total_bytes = 0;  // of the image (header included)
  SafeTensors file;
};
Expected<RandomCheckpoint> make_random_checkpoint(const shape::TensorShapes& shapes,
                                                  DType dtype = DType::kBF16);

// A safetensors file image in memory with the given tensors, BF16, random values scaled by
// 1/sqrt(fan-in) for tensors of rank >= 2, 1-D ".weight"s 1 (norm scales) and other 1-D tensors 0
// (biases): the SD networks' shapes (diffusion::TensorShapes) for SafeTensors::parse or a file.
Expected<std::vector<uint8_t>> random_checkpoint(
    const std::map<std::string, std::vector<int64_t>>& shapes);

}  // namespace tessera::bench
