// `tessera generate --weights int8` on the embedded model (issue 25): the shape GPT's linear
// layers are quantized at load and the run makes a closed mesh; greedy tokens agree with the f32
// run for most of the object on prompts the model knows well ("a torus", "a sphere": 64/64 on the
// machine this was written on; the test asks for 48 of 64 positions, since a near-tie flipped by
// rounding shifts the rest of a greedy sequence); --weights fast is int8 on the CPU; a bad
// --weights value is refused. `tessera quantize` writes a directory that loads as int8 (tessera
// info says so) and generates exactly the tokens of --weights int8; it never overwrites.
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
  for (const char* prompt : {"a torus", "a sphere"}) {
    SCOPED_TRACE(prompt);
    const std::string f32 = (dir / "f32.txt").string(), i8 = (dir / "i8.txt").string();
    CliResult r = run_tessera("generate -p " + shell_quote(prompt) + " --tokens-out " +
                              shell_quote(f32) + " -o " + shell_quote((dir / "f.glb").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_tessera("generate -p " + shell_quote(prompt) + " --weights int8 --tokens-out " +
                    shell_quote(i8) + " -o " + shell_quote((dir / "i.stl").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // "fast" on the CPU is int8: the same tokens, and the model line says so.
    const std::string fast = (dir / "fast.txt").string();
    const CliResult f =
        run_tessera("generate -p " + shell_quote(prompt) + " --weights fast --tokens-out " +
                    shell_quote(fast) + " -o " + shell_quote((dir / "fast.glb").string()));
    ASSERT_EQ(f.exit_code, 0) << f.err;
    EXPECT_EQ(slurp(fast), slurp(i8));
    EXPECT_NE(f.err.find("(int8 weights)"), std::string::npos) << f.err;
    EXPECT_EQ(run_tessera("check " + shell_quote((dir / "i.stl").string())).exit_code, 0);
    const auto a = words(slurp(f32)), b = words(slurp(i8));
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(a.size(), 64u);
    size_t same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
    EXPECT_GE(same, 48u);
  }
  const CliResult bad = run_tessera("generate -p 'a cube' --weights int4 -o " +
                                    shell_quote((dir / "x.glb").string()));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--weights"), std::string::npos) << bad.err;
  std::filesystem::remove_all(dir);
}

TEST(Int8Cli, QuantizedDirectoryLoadsDirectlyWithTheSameTokens) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera-int8-quantize-cli";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "tiny-int8").string();
  CliResult r = run_tessera("quantize -o " + shell_quote(model));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("int8"), std::string::npos) << r.out;
  r = run_tessera("info --summary " + shell_quote(model + "/shape_gpt.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("I8 x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("int8 weights"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tessera.weights = int8"), std::string::npos) << r.out;

  const std::string at_load = (dir / "at_load.txt").string(),
                    stored = (dir / "stored.txt").string();
  r = run_tessera("generate -p 'a table' --weights int8 --tokens-out " + shell_quote(at_load) +
                  " -o " + shell_quote((dir / "a.stl").string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_tessera("generate --model " + shell_quote(model) + " -p 'a table' --tokens-out " +
                  shell_quote(stored) + " -o " + shell_quote((dir / "b.stl").string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(at_load), slurp(stored));
  EXPECT_EQ(run_tessera("check " + shell_quote((dir / "b.stl").string())).exit_code, 0);

  // Never overwrites; a missing model names itself.
  r = run_tessera("quantize -o " + shell_quote(model));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  r = run_tessera("quantize --model " + shell_quote((dir / "none").string()) + " -o " +
                  shell_quote((dir / "out").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("none"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::testing
