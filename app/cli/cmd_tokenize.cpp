// tessera tokenize: prints the CLIP token ids of a prompt (BOS and EOS included).
#include <cstdio>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "engine/text/clip_tokenizer.h"

namespace tessera::cli {

namespace {

struct TokenizeOptions {
  std::string vocab;  // empty: the default vocabulary under assets_dir()
  int pad = 0;        // 0: unpadded
  int pad_id = -1;    // -1: the vocabulary's EOS (Stable Diffusion / Cube convention)
  std::vector<std::string> words;
};

int run_tokenize(const TokenizeOptions& options) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "tessera tokenize: %s\n", message.c_str());
    return 1;
  };
  // The default is CLIP's own vocabulary; --vocab also takes a model directory holding
  // vocab.json + merges.txt (or tokenizer/vocab.json + tokenizer/merges.txt).
  const std::string vocab =
      options.vocab.empty() ? assets_dir() + "/vocab/clip/" + text::ClipTokenizer::kDefaultVocabFile
                            : options.vocab;
  auto tokenizer = text::ClipTokenizer::load(vocab);
  if (!tokenizer.ok()) return fail(tokenizer.status().to_string());

  std::string prompt;
  for (size_t i = 0; i < options.words.size(); ++i) {
    if (i > 0) prompt += ' ';
    prompt += options.words[i];
  }
  std::vector<int32_t> ids;
  if (options.pad > 0) {
    const int32_t pad_id = options.pad_id >= 0 ? options.pad_id : tokenizer->eos_id();
    auto padded = tokenizer->encode_padded(prompt, options.pad, pad_id);
    if (!padded.ok()) return fail(padded.status().to_string());
    ids = std::move(padded->ids);
  } else {
    ids = tokenizer->encode(prompt);
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fputs(line.c_str(), stdout);
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd =
      app.add_subcommand("tokenize", "Print the CLIP token ids of TEXT (with BOS/EOS) on one line");
  cmd->add_option("--vocab", options->vocab,
                  "bpe_simple_vocab_16e6.txt.gz, or a directory with vocab.json + merges.txt "
                  "(default: the bundled CLIP vocabulary)");
  cmd->add_option("--pad", options->pad, "Truncate (keeping EOS last) and pad to N ids, e.g. 77")
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--pad-id", options->pad_id, "Id to pad with (default: EOS, as Stable Diffusion)")
      ->check(CLI::Range(0, (1 << 24) - 1));
  cmd->add_option("text", options->words, "The prompt (several words are joined by spaces)")
      ->required();
  cmd->callback([options, exit_code] { *exit_code = run_tokenize(*options); });
}

}  // namespace tessera::cli
