// End-to-end checks of `tessera tokenize` (the binary built next to the tests).
#include <gtest/gtest.h>

#include <string>

#include "tests/support/cli_runner.h"

namespace {

using tessera::testing::CliResult;

CliResult run_tokenize(const std::string& args, const std::string& env = "") {
  return tessera::testing::run_tessera("tokenize " + args, env);
}

const std::string kVocabDir = std::string(TESSERA_SOURCE_DIR) + "/assets/vocab/clip";

TEST(TokenizeCli, PrintsIdsOnOneLine) {
  const auto r = run_tokenize("--vocab '" + kVocabDir + "' a photo of a cat");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "49406 320 1125 539 320 2368 49407\n");
  const auto quoted =
      run_tokenize("--vocab '" + kVocabDir + "/bpe_simple_vocab_16e6.txt.gz' 'It'\\''s 1234'");
  EXPECT_EQ(quoted.exit_code, 0) << quoted.err;
  EXPECT_EQ(quoted.out, "49406 585 568 272 273 274 275 49407\n");
  // Without --vocab: the bundled vocabulary under the assets directory.
  const auto by_default = run_tokenize(
      "a photo of a cat", std::string("TESSERA_ASSETS='") + TESSERA_SOURCE_DIR + "/assets'");
  EXPECT_EQ(by_default.exit_code, 0) << by_default.err;
  EXPECT_EQ(by_default.out, "49406 320 1125 539 320 2368 49407\n");
}

TEST(TokenizeCli, PadsWithEosWhenAsked) {
  const auto r = run_tokenize("--vocab '" + kVocabDir + "' --pad 9 a photo of a cat");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "49406 320 1125 539 320 2368 49407 49407 49407\n");
  const auto cut = run_tokenize("--vocab '" + kVocabDir + "' --pad 4 --pad-id 0 a photo of a cat");
  EXPECT_EQ(cut.exit_code, 0) << cut.err;
  EXPECT_EQ(cut.out, "49406 320 1125 49407\n");
}

TEST(TokenizeCli, BadVocabularyIsAnErrorOnStderr) {
  const auto r = run_tokenize("--vocab /nonexistent/vocab.txt.gz a cat");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("tessera tokenize: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/vocab.txt.gz"), std::string::npos) << r.err;
}

}  // namespace
