// Quantizing a shape model's GPT to int8 weights once, on disk (`tessera quantize`; the one header
// for it, front ends and tests alike), so a model directory loads in half the memory without the
// f32/bf16 file ever being read again.
//
// File format (kernels/int8.h): every linear matrix of the GPT (attention q/k/v/c_proj, MLP,
// text_proj, shape_proj, lm_head) whose rows are a multiple of 32 long is stored as NAME.weight,
// dtype I8, the signed q in [-127, 127], shape [rows, cols] as before, with NAME.weight_scale, F32
// [rows, cols / group] beside it (group 128, else 64, else 32 along the input: int8_group_for).
// Everything else (the token table, norms, biases, narrow matrices) is written unchanged.
// __metadata__ keeps the input's entries and adds
//   "tessera.weights": "int8", "tessera.int8_group": "128" (the largest group used),
//   "tessera.quantized_from": the input's dtypes (e.g. "BF16").
// CubeGpt::load recognises the format by the I8 dtype and checks it (missing or mis-shaped scales,
// groups that do not divide a row, NaN/Inf/zero scales, -128 weights: errors naming the tensor).
// The int8 values are exactly those of quantizing at load (GptLoadOptions::int8), so a quantized
// directory generates the same tokens as `--weights int8` on the original.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"

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
  // The CLIP encoder and the shape tokenizer (quantize_model_dir): matrices written as BF16
  // (those the bf16 models ask for in bf16 only), and the two files' data bytes before and after.
  int64_t bf16_matrices = 0;
  uint64_t companion_bytes_in = 0, companion_bytes_out = 0;
};

// Writes the int8 version of GPT checkpoint `in` to `out_path` (atomically: a temporary file,
// then a rename). Errors: kInvalidArgument when `in` already holds I8 tensors or is not a Cube 3D
// GPT, kCorruptData for non-finite weights (naming the tensor), kIoError naming out_path.
Status quantize_gpt_file(const SafeTensors& in, const std::string& out_path,
                         QuantizeReport* report);

// A whole model directory: opens and checks `src` (open_model_dir), then builds `dst` beside it
// under a temporary name (`dst`.partial-PID): every file of src copied as it is (subdirectories
// too) except shape_gpt.safetensors, which is quantize_gpt_file'd, and the CLIP encoder and
// shape tokenizer files, whose matrices an int8 model runs in bf16: those stored in f32/f16 are
// written as BF16 (rounded to nearest even, exactly the conversion the bf16 loader does, found by
// building both models from bf16 stores; everything they read in f32 stays as it was), so they are
// used in place from the mapped file and leave resident memory between phases
// (PipelineOptions::release_idle_pages) instead of being converted into memory of the process's
// own (0.8 GB for Cube 3D v0.5). Metadata "tessera.matrices": "bf16". The model card (model.json),
// when there is one, gains "weights": "int8". The temporary directory is renamed to `dst` only
// when everything is written, so a failure or an interruption never leaves a half-written model
// at `dst`. Errors: dst exists (kAlreadyExists: nothing is overwritten), dst inside src, src not a
// model directory (its open_model_dir error).
// clip_vocab_fallback: ModelDirOptions::clip_vocab_fallback (real CLIP checkpoints ship no
// vocabulary); empty: the bundled one (core/assets.h's default_clip_vocab_file).
Status quantize_model_dir(const std::string& src, const std::string& dst, QuantizeReport* report,
                          const std::string& clip_vocab_fallback = "");

}  // namespace tessera::runtime
