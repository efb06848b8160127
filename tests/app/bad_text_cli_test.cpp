// Text a person gives never crashes a front end (the rule: engine/runtime/user_text.h): the
// command line's generate, batch and image with invalid UTF-8, an empty prompt, a 100 kB prompt,
// control characters and NUL bytes from a file, and a prompt of only emoji. Each either makes its
// file with the repaired prompt (and says so) or refuses before any work, with a message naming
// the field; never a signal, never a half-written file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/mesh/metadata.h"
#include "tests/support/cli_runner.h"

namespace tessera {
namespace {

using testing::run_tessera;
using testing::shell_quote;
using testing::slurp;

const std::string kIssuePrompt = "a torus \xff\xfe caf\xc3\xa9 \xf0\x9f\x90\xb1";
const std::string kFffd = "\xEF\xBF\xBD";

class BadTextCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("tessera-bad-text-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }
  // Files in the folder whose name holds ".tmp": leftovers of an interrupted atomic write.
  int temporaries() const {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      if (e.path().filename().string().find(".tmp") != std::string::npos) ++n;
    }
    return n;
  }
  std::filesystem::path dir_;
};

// The issue's command: the mesh is written with the repaired prompt, the repair is said, exit 0.
TEST_F(BadTextCliTest, InvalidUtf8PromptWritesTheMeshWithTheRepairedPrompt) {
  for (const std::string ext : {".obj", ".glb", ".fbx", ".3mf"}) {
    const std::string out = path("torus" + ext);
    const auto r = run_tessera("generate --prompt " + shell_quote(kIssuePrompt) + " -o " +
                               shell_quote(out) + " --resolution 17");
    ASSERT_EQ(r.exit_code, 0) << ext << "\n" << r.err;
    EXPECT_NE(r.err.find("note: prompt: 2 invalid UTF-8 bytes (the first at byte 8) replaced "
                         "with U+FFFD"),
              std::string::npos)
        << r.err;
    auto metadata = mesh::read_metadata(out);
    ASSERT_TRUE(metadata.ok()) << metadata.status().to_string();
    EXPECT_EQ((*metadata)["prompt"], "a torus " + kFffd + kFffd + " caf\xc3\xa9 \xf0\x9f\x90\xb1");
  }
  EXPECT_EQ(temporaries(), 0);
  // --from makes it again from the file: the prompt it carries is valid, nothing to repair.
  const auto again = run_tessera("generate --from " + shell_quote(path("torus.glb")) + " -o " +
                                 shell_quote(path("again.glb")));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.err.find("note: prompt"), std::string::npos) << again.err;
}

TEST_F(BadTextCliTest, EmptyEmojiAndControlPromptsMakeTheirShapes) {
  const std::string file = write("controls.txt", std::string("a\0 mug\x01\x1b[31m\x7f", 13) + "\n");
  struct Case {
    std::string args, note;
  } cases[] = {
      {"--prompt ''", ""},  // the unconditional shape
      {"--prompt " + shell_quote("\xf0\x9f\x90\xb1\xf0\x9f\x8d\xa9\xf0\x9f\xaa\x91"), ""},
      {"--prompt-file " + shell_quote(file),
       "note: prompt: 4 control characters (the first at byte 1: U+0000)"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string out = path("case" + std::to_string(i++) + ".glb");
    const auto r = run_tessera("generate " + c.args + " -o " + shell_quote(out));
    ASSERT_EQ(r.exit_code, 0) << c.args << "\n" << r.err;
    EXPECT_TRUE(std::filesystem::exists(out));
    if (!c.note.empty()) {
      EXPECT_NE(r.err.find(c.note), std::string::npos) << r.err;
    }
  }
  auto metadata = mesh::read_metadata(path("case2.glb"));
  ASSERT_TRUE(metadata.ok());
  EXPECT_EQ((*metadata)["prompt"], "a  mug  [31m ");
}

TEST_F(BadTextCliTest, HundredKilobytePromptIsRefusedBeforeAnyWork) {
  const std::string big(100 * 1024, 'a');
  const std::string file = write("big.txt", big);
  for (const std::string& args :
       {"--prompt-file " + shell_quote(file), "--prompt " + shell_quote(big)}) {
    const auto r = run_tessera("generate " + args + " -o " + shell_quote(path("big.glb")));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("prompt: 102400 bytes of text; at most 4096"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("tokens/s"), std::string::npos) << "no generation: " << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(path("big.glb")));
  // A file far too large is not even read.
  const auto huge = run_tessera("generate --prompt-file " +
                                shell_quote(write("huge.txt", std::string(2 << 20, 'b'))) + " -o " +
                                shell_quote(path("huge.glb")));
  EXPECT_EQ(huge.exit_code, 1);
  EXPECT_NE(huge.err.find("--prompt-file"), std::string::npos) << huge.err;
}

// Paths keep their bytes; where one is shown or stored in JSON it is valid text.
TEST_F(BadTextCliTest, InvalidBytesInPathsAndModelNames) {
  const std::string out = path("t\xff.obj");
  const auto r = run_tessera("generate --prompt 'a ring' --resolution 17 -o " + shell_quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(out));
  const auto info = run_tessera("info --json " + shell_quote(path("x\xfe.safetensors")));
  EXPECT_EQ(info.exit_code, 1) << info.err;  // missing file: an error, not a crash
  EXPECT_LT(info.exit_code, 128);
}

// batch: a bad line fails alone, the manifest says why, the others are made; a repaired prompt
// runs and the note names its line.
TEST_F(BadTextCliTest, BatchRunsEveryGoodLineAndRecordsWhyTheBadOnesFailed) {
  std::string prompts = kIssuePrompt + "\n";        // line 1: repaired
  prompts += std::string(100 * 1024, 'x') + "\n";   // line 2: refused
  prompts += std::string("a\0cube\x01", 7) + "\n";  // line 3: repaired
  prompts += "\xf0\x9f\x90\xb1\n";                  // line 4: emoji
  prompts += "\x01\x02\n";                          // line 5: empty once repaired
  prompts += "{\"prompt\": \"a cone\", \"name\": \"co\\u0001ne\"}\n";  // line 6: bad name
  const std::string file = write("prompts.txt", prompts);
  const std::string out = path("out");
  const auto r =
      run_tessera("batch " + shell_quote(file) + " --out " + shell_quote(out) + " --resolution 17");
  EXPECT_EQ(r.exit_code, 1) << r.err;  // bad lines make the status 1; nothing crashed
  EXPECT_NE(r.err.find(":1: note: prompt: 2 invalid UTF-8 bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(":2: prompt: 102400 bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(":3: note: prompt: 2 control characters"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(":5: empty prompt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(":6: \"name\" must be plain text"), std::string::npos) << r.err;
  std::ifstream manifest(out + "/manifest.jsonl");
  std::string line;
  int made = 0, failures = 0;
  while (std::getline(manifest, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("error")) {
      ++failures;
      EXPECT_TRUE(j["line"] == 2 || j["line"] == 5 || j["line"] == 6) << line;
    } else {
      ++made;
      EXPECT_TRUE(std::filesystem::exists(out + "/" + j["file"].get<std::string>()));
      if (j["line"] == 1) {
        EXPECT_EQ(j["prompt"], "a torus " + kFffd + kFffd + " caf\xc3\xa9 \xf0\x9f\x90\xb1");
      }
    }
  }
  EXPECT_EQ(made, 3);
  EXPECT_EQ(failures, 3);
  // Resuming: nothing made twice, the failures recorded once again (not duplicated).
  const auto again =
      run_tessera("batch " + shell_quote(file) + " --out " + shell_quote(out) + " --resolution 17");
  EXPECT_EQ(again.exit_code, 1) << again.err;
  EXPECT_NE(again.out.find("nothing to do"), std::string::npos) << again.out;
  std::ifstream second(out + "/manifest.jsonl");
  int lines = 0;
  while (std::getline(second, line)) ++lines;
  EXPECT_EQ(lines, 6);
}

TEST_F(BadTextCliTest, ImagePromptsPassTheSameRule) {
  const std::string out = path("i.png");
  const auto r =
      run_tessera("image --steps 2 --prompt " + shell_quote(kIssuePrompt) + " --negative-prompt " +
                  shell_quote("\x01") + " -o " + shell_quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("note: prompt: 2 invalid UTF-8 bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("note: negative prompt: 1 control character"), std::string::npos) << r.err;
  const auto refused = run_tessera("image --steps 2 --prompt " +
                                   shell_quote(std::string(5000, 'a')) + " -o " + shell_quote(out));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("prompt: 5000 bytes"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace tessera
