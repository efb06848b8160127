// WeightStore: the host weights of one checkpoint in the precision a model runs at, each tensor
// converted at most once.
//
// A model loader asks the store for every tensor it uses, with the shape it expects; the store
// checks name, dtype and shape (errors name the tensor, the file and expected vs actual) and hands
// out host pointers that stay valid while the store lives (moving the store keeps them valid: the
// mapped file and the converted buffers do not move).
//
// Formats (WeightFormat):
//   kF32  matrices and vectors are f32. An aligned F32 tensor is a zero-copy view into the
//         memory-mapped file; F16 / BF16 (or unaligned F32) tensors are converted into owned f32
//         buffers.
//   kBF16 matrices (linear weights, embedding tables) are bf16: a BF16 tensor of the file is used
//         zero-copy, anything else is converted once (round to nearest even) into an owned
//         buffer. Vectors (biases, norm scales) stay f32 in both formats.
// Asking twice for the same tensor in the same form returns the same pointer (no second
// conversion).
//
// Thread safety: not thread-safe; load models from one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace tessera {

enum class WeightFormat {
  kF32,   // memory-mapped f32 (zero-copy for F32 checkpoints)
  kBF16,  // matrices converted once to bf16 (half the bytes read per token)
};

// "f32" / "bf16".
const char* weight_format_name(WeightFormat format);

class WeightStore {
 public:
  WeightStore() = default;
  // Takes ownership of an opened checkpoint.
  WeightStore(SafeTensors file, WeightFormat format);
  WeightStore(WeightStore&&) noexcept = default;
  WeightStore& operator=(WeightStore&&) noexcept = default;
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  const SafeTensors& file() const { return file_; }
  WeightFormat format() const { return format_; }

  // A 2-D tensor [rows, cols] as a kernels::Weight in the store's format (see above). Errors:
  // kNotFound (no such tensor), kInvalidArgument (not 2-D of that shape, or a dtype other than
  // F32/F16/BF16), all naming the tensor and the file. rows/cols of -1 accept any size.
  Expected<kernels::Weight> matrix(const std::string& name, int64_t rows, int64_t cols);
  // The same, always f32 (e.g. a table the model post-processes on the host).
  Expected<kernels::Weight> matrix_f32(const std::string& name, int64_t rows, int64_t cols);
  // Any tensor as f32 with the expected shape (-1 = any size in that dimension); the element
  // count is numel of the actual shape. For biases and norm scales pass {n}.
  Expected<const float*> f32(const std::string& name, const std::vector<int64_t>& shape);

  // Adds up x down^T (f32: up [rows, rank], down_t [cols, rank], the tensor being [rows, cols] in
  // its own layout, i.e. rows = its first dimension) to tensor `name` as every later request sees
  // it: a merged LoRA module (its scale folded into up). Several add up. Only the factors are kept
  // (for every form the tensor is asked in); the product is added while converting (the merged
  // tensor is never zero-copy). Must come before the tensor is first handed out (kInternal after:
  // a loader bug); kNotFound / kInvalidArgument for a missing tensor, a non-float dtype or sizes
  // that do not fit, naming the tensor and the file.
  Status add_low_rank(const std::string& name, std::vector<float> up, std::vector<float> down_t,
                      int64_t rank);
  // Drops the factors once every model reading this store has loaded (what was handed out keeps
  // the change; a tensor asked for later, in another form, would not have it).
  void release_low_rank() { low_rank_.clear(); }
  // Bytes held in converted buffers (0 when everything is zero-copy).
  size_t converted_bytes() const { return converted_bytes_; }
  // Names of the tensors asked for in bf16 (matrix() in kBF16) and never in f32, in name order:
  // those a file could store as BF16 without changing what a bf16 model computes (tessera quantize
  // writes the CLIP encoder and the shape tokenizer so, to be used in place).
  std::vector<std::string> bf16_only_tensors() const;

 private:
  Expected<const void*> get(const std::string& name, const std::vector<int64_t>& shape, DType want);

  SafeTensors file_;
  WeightFormat format_ = WeightFormat::kF32;
  // (name, dtype) -> owned converted copy. unique_ptr keeps addresses stable across moves.
  std::map<std::pair<std::string, DType>, std::unique_ptr<uint8_t[]>> converted_;
  size_t converted_bytes_ = 0;
  std::set<std::string> asked_bf16_, asked_f32_;  // names asked for in each form
  struct LowRank {
    std::vector<float> up, down_t;
    int64_t rank = 0;
  };
  std::map<std::string, std::vector<LowRank>> low_rank_;  // add_low_rank, by tensor
};

// Checks every floating-point tensor (F64/F32/F16/BF16) of `file` for NaN and +-inf. Returns ok, or
// kCorruptData naming the first offending tensor (in file order), the element index and the value
// kind, e.g. "gpt.safetensors: tensor 'lm_head.weight' element 17 is NaN". Reads every byte of the
// float tensors (about 1 s per 4 GB on 2 cores; multithreaded over default_thread_pool()); each
// tensor's mapped pages are dropped once scanned (SafeTensors::drop_pages), so that the scan does
// not hold the whole file resident.
Status scan_non_finite(const SafeTensors& file);

}  // namespace tessera
