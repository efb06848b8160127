// libFuzzer target for the CLIP tokenizer. Each input is used twice:
//  1. as a prompt (arbitrary bytes, invalid UTF-8 included) for the real CLIP vocabulary: encode
//     must give BOS ... EOS with ids inside the vocabulary, encode_padded must keep EOS last, and
//     decode must accept every id encode produced;
//  2. as a Hugging Face vocab.json + merges.txt pair (split at the first NUL byte) and as an
//     uncompressed original-format file, through the in-memory parsers: they must return a
//     tokenizer or a Status, and a tokenizer they return must encode the input text too.
// The vocabulary is found via $TESSERA_CLIP_VOCAB, else relative to this source file (fuzzers
// are built without TESSERA_SOURCE_DIR).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/text/clip_tokenizer.h"

namespace {

using tessera::text::ClipTokenizer;

std::string vocab_path() {
  if (const char* env = std::getenv("TESSERA_CLIP_VOCAB")) return env;
  std::string here = __FILE__;  // <repo>/tests/fuzz/clip_tokenizer_fuzz.cpp
  const size_t pos = here.rfind("/tests/fuzz/");
  const std::string root = pos == std::string::npos ? "." : here.substr(0, pos);
  return root + "/assets/vocab/clip/bpe_simple_vocab_16e6.txt.gz";
}

const ClipTokenizer& real_tokenizer() {
  static const ClipTokenizer* tok = [] {
    auto loaded = ClipTokenizer::load(vocab_path());
    if (!loaded.ok()) {
      std::fprintf(stderr, "clip_tokenizer_fuzz: %s (set TESSERA_CLIP_VOCAB)\n",
                   loaded.status().to_string().c_str());
      std::abort();  // harness setup, not a finding
    }
    return new ClipTokenizer(std::move(loaded).value());
  }();
  return *tok;
}

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "clip_tokenizer_fuzz: check failed: %s\n", what);
    std::abort();
  }
}

void exercise(const ClipTokenizer& tok, std::string_view text) {
  const auto ids = tok.encode(text);
  check(ids.size() >= 2, "encode gives at least BOS and EOS");
  check(ids.front() == tok.bos_id() && ids.back() == tok.eos_id(), "BOS first, EOS last");
  for (int32_t id : ids) check(!tok.id_to_token(id).empty(), "ids are in the vocabulary");
  check(tok.decode(ids).ok(), "decode accepts encode's ids");
  auto padded = tok.encode_padded(text, 16, 0);
  check(padded.ok() && padded->ids.size() == 16, "padded to the context length");
  check(padded->ids[static_cast<size_t>(padded->length) - 1] == tok.eos_id(), "EOS kept last");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  exercise(real_tokenizer(), input);

  const size_t nul = input.find('\0');
  const std::string_view vocab_json = input.substr(0, nul);
  const std::string_view merges_txt =
      nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  auto hf = ClipTokenizer::from_hf_text(vocab_json, merges_txt, "vocab.json", "merges.txt");
  if (hf.ok()) exercise(*hf, input);
  auto bpe = ClipTokenizer::from_bpe_text(input, "vocab.txt");
  if (bpe.ok()) exercise(*bpe, input);
  auto gz = ClipTokenizer::from_bpe_gz_bytes(std::span<const uint8_t>(data, size), "vocab.txt.gz");
  if (gz.ok()) exercise(*gz, input);
  return 0;
}
