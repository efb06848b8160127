// `tessera generate --weights int8` on the embedded model (issue 25, first part): the shape GPT's
// linear layers are quantized at load and the run makes a closed mesh; greedy tokens agree with the
// f32 run for most of the object on prompts the model knows well ("a torus", "a table": 64/64 on
// the machine this was written on; the test asks for the first 16 of each, which no kernel order
// should flip), and a bad --weights value is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/cli_runner.h"

namespace tessera::testing {
namespace {

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(Int8Cli, GenerateWithInt8WeightsMakesTheShape) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera-int8-cli";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* prompt : {"a torus", "a table"}) {
    SCOPED_TRACE(prompt);
    const std::string f32 = (dir / "f32.txt").string(), i8 = (dir / "i8.txt").string();
    CliResult r = run_tessera("generate -p " + shell_quote(prompt) + " --tokens-out " +
                              shell_quote(f32) + " -o " + shell_quote((dir / "f.glb").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_tessera("generate -p " + shell_quote(prompt) + " --weights int8 --tokens-out " +
                    shell_quote(i8) + " -o " + shell_quote((dir / "i.stl").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(run_tessera("check " + shell_quote((dir / "i.stl").string())).exit_code, 0);
    const auto a = words(slurp(f32)), b = words(slurp(i8));
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GE(a.size(), 16u);
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(a[i], b[i]) << "token " << i;
  }
  const CliResult bad = run_tessera("generate -p 'a cube' --weights int4 -o " +
                                    shell_quote((dir / "x.glb").string()));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--weights"), std::string::npos) << bad.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::testing
