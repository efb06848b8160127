// Model directory: finds and opens the files of a Cube 3D-compatible text-to-shape model (the real
// Cube 3D v0.1 / v0.5 checkpoints with CLIP-L from Hugging Face, or tessera-tiny).
//
// Layout of a model directory DIR (files a user brings, unmodified):
//   DIR/shape_gpt.safetensors           Cube GPT (DualStreamRoformer)             required
//   DIR/shape_tokenizer.safetensors     Cube shape tokenizer (OneDAutoEncoder)    required
//   CLIP text encoder, the first of:                                              required
//     DIR/text_encoder/model.safetensors   (+ DIR/text_encoder/config.json)
//     DIR/model.safetensors                 with text_model.* keys (+ DIR/config.json); a full
//                                           CLIPModel file (vision tower too) is fine: only the
//                                           text_model.* tensors are read
//   CLIP vocabulary, the first of:
//     DIR/vocab.json + DIR/merges.txt, DIR/text_encoder/{vocab.json,merges.txt},
//     DIR/tokenizer/{vocab.json,merges.txt}, DIR/bpe_simple_vocab_16e6.txt.gz;
//     else, when the text encoder's vocabulary has 49408 rows (real CLIP), the bundled
//     assets/vocab/clip/bpe_simple_vocab_16e6.txt.gz (see ModelDirOptions::clip_vocab_fallback).
// Each checkpoint's kind is checked (core/checkpoint_kind.h), so a file of another
// architecture in one of these places is reported as such; mismatches between the files are
// reported too: GPT vocabulary vs codebook size + 3, GPT code width vs codebook width, GPT
// generation length vs latent count (when the GPT's is known), GPT text width vs CLIP width.
//
// Every error is a Status whose message names the directory and what is missing or wrong, e.g.
// "model directory '/m': missing shape_gpt.safetensors" (kNotFound) or
// "model directory '/m': shape_gpt.safetensors is a clip-text checkpoint, expected cube3d-gpt"
// (kInvalidArgument).
#pragma once

#include <cstdint>
#include <string>

#include "core/checkpoint_kind.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "engine/weights/weight_store.h"

namespace tessera::shape {

// Where the files of a model directory are (absolute or as given, joined with '/').
struct ModelPaths {
  std::string dir;
  std::string shape_gpt;        // DIR/shape_gpt.safetensors
  std::string shape_tokenizer;  // DIR/shape_tokenizer.safetensors
  std::string text_encoder;     // the CLIP .safetensors file
  std::string text_config;      // config.json beside it, "" when there is none
  // What ClipTokenizer::load() accepts: a directory holding vocab.json + merges.txt, or a
  // bpe_simple_vocab_16e6.txt.gz path. "" when none was found in DIR (open_model_dir then applies
  // the fallback or fails).
  std::string vocab;
};

// Finds the files (no file is opened or parsed). kNotFound names DIR and the first missing file
// (for the CLIP encoder and vocabulary: every place looked at); kInvalidArgument when DIR is not
// a directory.
Expected<ModelPaths> locate_model_dir(const std::string& dir);

struct ModelDirOptions {
  WeightFormat weights = WeightFormat::kF32;
  // Check every float tensor for NaN / inf at load (scan_non_finite; reads all the weights once).
  bool check_finite = false;
  // Vocabulary used when DIR has none and the CLIP vocabulary has 49408 entries (real CLIP):
  // a bpe_simple_vocab_16e6.txt.gz path or a directory with vocab.json + merges.txt. The engine
  // does not know where the application's assets are: the CLI / studio pass
  // assets_dir() + "/vocab/clip/bpe_simple_vocab_16e6.txt.gz". Empty: $TESSERA_ASSETS/vocab/clip/
  // bpe_simple_vocab_16e6.txt.gz when that variable is set, else no fallback (kNotFound).
  std::string clip_vocab_fallback;
};

// An opened model directory. Move-only; the weight stores own the memory-mapped files.
struct ModelDir {
  ModelPaths paths;
  WeightStore shape_gpt;
  WeightStore shape_tokenizer;
  WeightStore text_encoder;
  CheckpointKindInfo gpt_info;        // kind cube3d-gpt, version "v0.1" / "v0.5", sizes
  CheckpointKindInfo tokenizer_info;  // kind cube3d-shape-tokenizer
  CheckpointKindInfo text_info;       // kind clip-text; prefix of its tensor names
  int64_t text_heads = 0;             // from config.json, else width / 64
  int64_t text_vocab_size = 0;        // rows of token_embedding
};

// locate_model_dir(), then opens and validates the three checkpoints (kinds and cross-file sizes,
// see above), resolves the vocabulary (fallback included) and reads the CLIP head count.
Expected<ModelDir> open_model_dir(const std::string& dir, const ModelDirOptions& options = {});

}  // namespace tessera::shape
