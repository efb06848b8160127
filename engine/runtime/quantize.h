// `tessera quantize`: a copy of a shape model directory with its GPT's matrices stored in int8
// (per-group scales), its CLIP encoder and shape tokenizer in bf16; the other files copied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/status.h"

namespace tessera::runtime {

struct QuantizeReport {
  int64_t int8_matrices = 0;   // matrices written as I8 (+ scales)
  int64_t unchanged = 0;       // tensors written as they were
  int64_t int8_group = 0;      // the largest group used
  uint64_t gpt_bytes_in = 0;   // data bytes of the input GPT file
  uint64_t gpt_bytes_out = 0;  // of the output (int8 + scales + the unchanged tensors)
  // Largest |w - dequantized w| / max |w| of its group over all matrices: the rounding (at most
  // 1/254 by construction; reported as a check).
  double max_group_rel_error = 0;
  std::vector<std::string> copied;  // other files of the directory, relative to it
  // The CLIP encoder and the shape tokenizer: matrices written as BF16, and the two files' data
  // bytes before and after.
  int64_t bf16_matrices = 0;
  uint64_t companion_bytes_in = 0, companion_bytes_out = 0;
};

// Writes the quantized copy of model directory `src` to `dst` (created; an existing model there
// is an error), with the bundled CLIP vocabulary for checkpoints that ship none. Errors name the
// file and the fault; nothing half-written is left at `dst`.
Status quantize_model_dir(const std::string& src, const std::string& dst, QuantizeReport* report);

}  // namespace tessera::runtime
