#include "engine/runtime/text.h"

#include <utility>

#include "core/assets.h"
#include "engine/text/clip_tokenizer.h"

namespace tessera::runtime {

Expected<std::vector<int32_t>> tokenize(const std::string& text, const TokenizeOptions& options) {
  const std::string vocab = options.vocab.empty() ? default_clip_vocab_dir() + "/" +
                                                        text::ClipTokenizer::kDefaultVocabFile
                                                  : options.vocab;
  TESSERA_ASSIGN_OR_RETURN(auto tokenizer, text::ClipTokenizer::load(vocab));
  if (options.pad > 0) {
    const int32_t pad_id = options.pad_id >= 0 ? options.pad_id : tokenizer.eos_id();
    TESSERA_ASSIGN_OR_RETURN(auto padded, tokenizer.encode_padded(text, options.pad, pad_id));
    return std::move(padded.ids);
  }
  return tokenizer.encode(text);
}

}  // namespace tessera::runtime
