// Prompt tokenization for front ends (`tessera tokenize`): the CLIP BPE tokenizer of a vocabulary,
// without a model. Stateless: each call loads the vocabulary (tens of milliseconds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::runtime {

struct TokenizeOptions {
  // bpe_simple_vocab_16e6.txt.gz, or a directory with vocab.json + merges.txt (or tokenizer/...);
  // "": the bundled CLIP vocabulary (core/assets.h).
  std::string vocab;
  int pad = 0;      // > 0: truncate (EOS kept last) and pad to this many ids; 0: unpadded
  int pad_id = -1;  // -1: the vocabulary's EOS (the Stable Diffusion / Cube 3D convention)
};

// The ids of `text` with BOS and EOS. Errors: the vocabulary's (naming the file), a bad pad.
Expected<std::vector<int32_t>> tokenize(const std::string& text, const TokenizeOptions& options);

}  // namespace tessera::runtime
