// tessera tokenize: prints the CLIP token ids of a prompt (BOS and EOS included).
#include <cstdio>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "engine/runtime/text.h"

namespace tessera::cli {

namespace {

struct TokenizeCliOptions {
  std::string vocab;  // empty: the bundled CLIP vocabulary
  int pad = 0;        // 0: unpadded
  int pad_id = -1;    // -1: the vocabulary's EOS (Stable Diffusion / Cube convention)
  std::vector<std::string> words;
};

int run_tokenize(const TokenizeCliOptions& options) {
  std::string prompt;
  for (size_t i = 0; i < options.words.size(); ++i) {
    if (i > 0) prompt += ' ';
    prompt += options.words[i];
  }
  runtime::TokenizeOptions o;
  o.vocab = options.vocab;
  o.pad = options.pad;
  o.pad_id = options.pad_id;
  auto ids = runtime::tokenize(prompt, o);
  if (!ids.ok()) {
    std::fprintf(stderr, "tessera tokenize: %s\n", ids.status().to_string().c_str());
    return 1;
  }
  std::string line;
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string((*ids)[i]);
  }
  line += '\n';
  std::fputs(line.c_str(), stdout);
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<TokenizeCliOptions>();
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
