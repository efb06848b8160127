// ClipTokenizer: the byte-level BPE tokenizer of CLIP (openai/CLIP simple_tokenizer.py), used by
// the CLIP text encoders of Stable Diffusion and Cube 3D.
//
// Vocabulary formats (load() picks by path):
//   * the original bpe_simple_vocab_16e6.txt.gz: gzip of a text file whose lines 1..48894 are
//     merges "a b" (line 0 is a header). The vocabulary is the 256 byte symbols of
//     bytes_to_unicode(), the same with "</w>", one token per merge, then <|startoftext|> and
//     <|endoftext|> (49408 tokens). A file with fewer merge lines gives a smaller vocabulary.
//   * Hugging Face: vocab.json (token -> id) + merges.txt (optional "#version" first line).
// Special-token ids are looked up in the vocabulary ("<|startoftext|>", "<|endoftext|>"), so a
// small custom vocabulary in either format works. Loading checks that every byte symbol (with
// and without "</w>") and both special tokens exist, that every merge's result is a token and
// that every token is spelled in the byte alphabet; errors name the file and the line or token.
//
// Text normalisation, exactly as CLIP's encode() but without ftfy:
//   html.unescape twice, strip, whitespace runs -> ' ', strip, str.lower(), then the regex
//   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
//   (IGNORECASE), each piece's UTF-8 bytes mapped by bytes_to_unicode, "</w>" on the last symbol,
//   BPE by merge rank. Digits come out one per token.
//   ftfy.fix_text is NOT applied (it is not available in C++). Text that ftfy would change is
//   therefore tokenized as is: mojibake is not repaired, curly quotes (’ “ ”) are not
//   straightened, full-width forms and ligatures are not folded, and no NFC normalisation is
//   done. For plain prompts this makes no difference.
//
// Invalid UTF-8 input is not an error: each maximal ill-formed subsequence is replaced by U+FFFD,
// as Python's bytes.decode("utf-8", errors="replace") would do before calling encode().
//
// Thread safety: a loaded tokenizer is immutable except for an internal BPE cache guarded by a
// mutex; encode()/decode() may be called from any number of threads. Move-only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace tessera::text {

// Ids padded to a fixed context length, plus how many of them are real tokens (the attention
// mask is ids[0 .. length) ).
struct PaddedTokens {
  std::vector<int32_t> ids;  // size == context_length
  int length = 0;            // BOS + content + EOS, <= context_length
};

class ClipTokenizer {
 public:
  static constexpr int kDefaultContextLength = 77;
  static constexpr const char* kDefaultVocabFile = "bpe_simple_vocab_16e6.txt.gz";

  // Loads from `path`: a gzip vocabulary file, or a directory holding vocab.json + merges.txt
  // (also under tokenizer/), or bpe_simple_vocab_16e6.txt.gz.
  static Expected<ClipTokenizer> load(const std::string& path);
  // The original gzip format.
  static Expected<ClipTokenizer> load_bpe_gz(const std::string& path);
  // The Hugging Face format.
  static Expected<ClipTokenizer> load_hf(const std::string& vocab_json_path,
                                         const std::string& merges_txt_path);

  // In-memory parsers behind the loaders; `name` (e.g. a file path) prefixes error messages.
  // `gz` is the compressed file; `text` its decompressed contents.
  static Expected<ClipTokenizer> from_bpe_gz_bytes(std::span<const uint8_t> gz,
                                                   const std::string& name);
  static Expected<ClipTokenizer> from_bpe_text(std::string_view text, const std::string& name);
  static Expected<ClipTokenizer> from_hf_text(std::string_view vocab_json,
                                              std::string_view merges_txt,
                                              const std::string& vocab_name,
                                              const std::string& merges_name);

  ClipTokenizer(ClipTokenizer&&) noexcept;
  ClipTokenizer& operator=(ClipTokenizer&&) noexcept;
  ClipTokenizer(const ClipTokenizer&) = delete;
  ClipTokenizer& operator=(const ClipTokenizer&) = delete;
  ~ClipTokenizer();

  // [BOS, tokens of `text`..., EOS], unbounded length. `text` is UTF-8 (see above for invalid
  // input). Never fails. An empty or all-whitespace prompt gives [BOS, EOS].
  std::vector<int32_t> encode(std::string_view text) const;

  // encode(), cut to `context_length` keeping EOS last (BOS + the first context_length-2 tokens +
  // EOS, as Hugging Face and open_clip truncate), then padded with `pad_id` (Stable Diffusion and
  // Cube pad with EOS 49407, open_clip with 0). context_length must be >= 2 (InvalidArgument).
  Expected<PaddedTokens> encode_padded(std::string_view text,
                                       int context_length = kDefaultContextLength,
                                       int32_t pad_id = 49407) const;

  // CLIP's decode(): token strings joined, byte symbols mapped back to bytes, decoded as UTF-8
  // with replacement, every "</w>" turned into a space. Special tokens appear as their text.
  // An id that is not in the vocabulary is InvalidArgument.
  Expected<std::string> decode(std::span<const int32_t> ids) const;

  // CLIP's text clean-up (html.unescape x2, whitespace, lower()) and pre-tokenising regex, for
  // tests and tools: the pieces BPE runs on, as UTF-8.
  static std::string normalize(std::string_view text);
  static std::vector<std::string> pre_tokenize(std::string_view text);

  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  // Number of tokens in the vocabulary.
  size_t vocab_size() const { return id_to_token_.size() - num_id_gaps_; }
  size_t num_merges() const { return num_merges_; }
  // The id of a token spelled in the byte alphabet (e.g. "cat</w>"), or -1.
  int32_t token_to_id(std::string_view token) const;
  // The token with id `id`, or "" if no token has it.
  std::string_view id_to_token(int32_t id) const;
  // The merges that can apply, in rank order (for exporting to the Hugging Face format); a merge
  // whose sides are not both tokens can never apply and is left out.
  std::vector<std::pair<std::string, std::string>> merges_in_rank_order() const;

 private:
  struct Cache;
  struct MergeInfo {
    int32_t rank;
    int32_t result;
  };
  ClipTokenizer();
  static Expected<ClipTokenizer> build(
      std::vector<std::pair<std::string, int32_t>> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges,
      const std::vector<size_t>& merge_lines, const std::string& vocab_name,
      const std::string& merges_name);
  void bpe(std::string_view piece_utf8, std::vector<int32_t>* out) const;
  void bpe_uncached(std::string_view piece_utf8, std::vector<int32_t>* out) const;

  std::unordered_map<std::string, int32_t> token_to_id_;  // keyed by UTF-8 token text
  std::vector<std::string> id_to_token_;                  // "" for ids no token has
  size_t num_id_gaps_ = 0;
  // (left id << 32 | right id) -> rank and result id.
  std::unordered_map<uint64_t, MergeInfo> merges_;
  size_t num_merges_ = 0;
  int32_t byte_id_[256] = {};      // id of bytes_to_unicode(b)
  int32_t byte_end_id_[256] = {};  // id of bytes_to_unicode(b) + "</w>"
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  std::unique_ptr<Cache> cache_;
};

// bytes_to_unicode() of CLIP/GPT-2: the code point standing for byte b in token spellings.
char32_t byte_to_unicode(uint8_t b);

}  // namespace tessera::text
