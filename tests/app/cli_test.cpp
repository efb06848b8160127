// End-to-end tests of the `tessera` executable: runs it as a user would and checks output and exit
// codes, including bad input (missing files, directories, truncated checkpoints, odd prompts).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/support/cli_runner.h"

namespace tessera {
namespace {

using testing::run_tessera;
using testing::shell_quote;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("tessera-cli-test-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A small checkpoint with Cube-like names: two f32 tensors and one bf16.
  std::string write_checkpoint() {
    const std::string file = path("small.safetensors");
    std::vector<float> a(3 * 4, 0.5f), b(7, -1.0f), c(2 * 3, 2.0f);
    std::vector<TensorToWrite> tensors = {
        TensorToWrite::from_f32("text_proj.weight", DType::kF32, {3, 4}, a.data()),
        TensorToWrite::from_f32("text_proj.bias", DType::kF32, {7}, b.data()),
        TensorToWrite::from_f32("lm_head.weight", DType::kBF16, {2, 3}, c.data()),
    };
    const Status st = write_safetensors(file, tensors, {{"format", "pt"}});
    EXPECT_TRUE(st.ok()) << st.to_string();
    return file;
  }
  std::filesystem::path dir_;
};

TEST_F(CliTest, VersionNamesBuildCudaAndCpu) {
  const auto r = run_tessera("--version");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tessera " TESSERA_VERSION), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuda:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu features:"), std::string::npos) << r.out;
}

TEST_F(CliTest, IsaCapFromTheOptionOrTheEnvironment) {
  const auto scalar = run_tessera("--version", "TESSERA_ISA=scalar");
  ASSERT_EQ(scalar.exit_code, 0) << scalar.err;
  EXPECT_NE(scalar.out.find("scalar kernels"), std::string::npos) << scalar.out;
  const auto option = run_tessera("--isa scalar --version");
  ASSERT_EQ(option.exit_code, 0) << option.err;
  EXPECT_NE(option.out.find("scalar kernels"), std::string::npos) << option.out;
  const auto bad = run_tessera("--isa avx3 --version");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_LT(bad.exit_code, 128) << "killed by a signal";
  EXPECT_NE(bad.err.find("--isa: 'avx3' is not an instruction set (avx512, avx2, scalar)"),
            std::string::npos)
      << bad.err;
  const auto bad_env = run_tessera("--version", "TESSERA_ISA=sse4");
  EXPECT_NE(bad_env.exit_code, 0);
  EXPECT_NE(bad_env.err.find("TESSERA_ISA: 'sse4'"), std::string::npos) << bad_env.err;
}

// OpenBLAS picks its own kernels (the cap does not reach it): --version names them, and
// OPENBLAS_CORETYPE is how a capped measurement holds it to the same level.
TEST_F(CliTest, VersionNamesOpenBlasKernels) {
  const auto held = run_tessera("--isa avx2 --version", "OPENBLAS_CORETYPE=Haswell");
  ASSERT_EQ(held.exit_code, 0) << held.err;
  EXPECT_NE(held.out.find("avx2 kernels, OpenBLAS Haswell"), std::string::npos) << held.out;
}

TEST_F(CliTest, UnknownCommandIsAUsageError) {
  const auto r = run_tessera("frobnicate");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << "killed by a signal";
}

TEST_F(CliTest, InfoListsTensorsParametersAndMetadata) {
  const std::string file = write_checkpoint();
  const auto r = run_tessera("info " + shell_quote(file));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* expected :
       {"text_proj.weight", "text_proj.bias", "lm_head.weight", "BF16", "[3, 4]", "25", "format"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
  const auto json = run_tessera("info --json " + shell_quote(file));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"lm_head.weight\""), std::string::npos) << json.out;
}

TEST_F(CliTest, InfoOnBadInputIsAClearErrorNotACrash) {
  const std::string file = write_checkpoint();
  // Truncated copy.
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string truncated = path("truncated.safetensors");
  std::ofstream(truncated, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 5));
  const std::string garbage = path("garbage.safetensors");
  std::ofstream(garbage, std::ios::binary) << "this is not a checkpoint at all";
  for (const std::string& bad : {truncated, garbage, path("missing.safetensors"), dir_.string()}) {
    const auto r = run_tessera("info " + shell_quote(bad));
    EXPECT_EQ(r.exit_code, 1) << bad << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.rfind("tessera info: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(bad), std::string::npos) << "error must name the file: " << r.err;
  }
}

TEST_F(CliTest, TokenizeOddPromptsNeverCrash) {
  // Empty prompt: BOS EOS only.
  const auto empty = run_tessera("tokenize ''");
  EXPECT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_EQ(empty.out, "49406 49407\n");
  // 10,000 characters: works and is padded/truncated to 77 on request.
  const std::string long_prompt(10000, 'a');
  const auto longest = run_tessera(
      "tokenize --pad 77 " + shell_quote(std::string(5000, 'x') + " " + std::string(4999, 'y')));
  EXPECT_EQ(longest.exit_code, 0) << longest.err;
  int ids = 0;
  for (char c : longest.out) ids += (c == ' ');
  EXPECT_EQ(ids + 1, 77) << longest.out;
  EXPECT_NE(longest.out.find("49406 "), std::string::npos);
  EXPECT_EQ(longest.out.substr(longest.out.size() - 6), "49407\n");
  const auto unpadded = run_tessera("tokenize " + shell_quote(long_prompt));
  EXPECT_EQ(unpadded.exit_code, 0) << unpadded.err;
  // Invalid UTF-8 bytes: replaced (documented in engine/text/clip_tokenizer.h), not an error.
  const auto invalid = run_tessera("tokenize \"$(printf 'a \\377\\376 cat')\"");
  EXPECT_EQ(invalid.exit_code, 0) << invalid.err;
  EXPECT_EQ(invalid.out.rfind("49406 320 ", 0), 0u) << invalid.out;
}

}  // namespace
}  // namespace tessera
