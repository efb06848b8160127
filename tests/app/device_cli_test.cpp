// `tessera generate / decode / image --device auto|cpu|cuda [--verbose]` on the fixture model
// directory: the default (cpu) prints nothing about devices; --verbose names the backend; auto
// never fails (on a machine without a usable GPU it runs on the CPU and says why only with
// --verbose); an explicit cuda request without a usable GPU fails with the reason and exit 1; a bad
// value is a usage error. With a GPU, cuda and auto run there and give the reference's greedy
// tokens. The same for `tessera image` and `tessera-bench diffusion`.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "kernels/backend.h"
#include "tests/support/cli_runner.h"
#include "tests/support/fixture_model_dir.h"

namespace tessera {
namespace {

using testing::FixtureModelDir;
using testing::run_bench;
using testing::run_tessera;
using testing::shell_quote;

std::vector<int32_t> read_ids(const std::string& path) {
  std::ifstream in(path);
  std::vector<int32_t> ids;
  int32_t id = 0;
  while (in >> id) ids.push_back(id);
  return ids;
}

class DeviceCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = new FixtureModelDir("device-cli"); }
  static void TearDownTestSuite() { delete model_; }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("tessera-device-cli-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string generate(const std::string& output, const std::string& tokens) {
    return "generate --model " + shell_quote(model_->path()) + " --prompt " +
           shell_quote(testing::kParityPrompt) + " --bbox 0.5 1 0.25 --resolution 9 -o " +
           shell_quote(output) + " --tokens-out " + shell_quote(tokens);
  }
  static std::vector<int32_t> reference_tokens() {
    const SafeTensors expected = SafeTensors::open(std::string(TESSERA_SOURCE_DIR) +
                                                   "/tests/fixtures/parity/expected.safetensors")
                                     .value();
    const TensorView greedy = expected.view("gpt.greedy_tokens").value();
    return std::vector<int32_t>(greedy.as<const int32_t>(), greedy.as<const int32_t>() + 16);
  }
  static bool gpu_usable() { return kernels::make_cuda_backend().ok(); }

  static FixtureModelDir* model_;
  std::filesystem::path dir_;
};
FixtureModelDir* DeviceCliTest::model_ = nullptr;

TEST_F(DeviceCliTest, DefaultIsQuietCpuAndVerboseNamesTheBackend) {
  const std::string obj = path("out.obj"), tokens = path("tokens.txt");
  auto r = run_tessera(generate(obj, tokens));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("device:"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("note:"), std::string::npos) << r.err;
  r = run_tessera(generate(obj, tokens) + " --device cpu --verbose");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("device: cpu ("), std::string::npos) << r.err;
  EXPECT_EQ(read_ids(tokens), reference_tokens());
}

TEST_F(DeviceCliTest, AutoNeverFailsAndSaysWhyOnlyWhenVerbose) {
  const std::string obj = path("out.obj"), tokens = path("tokens.txt");
  auto r = run_tessera(generate(obj, tokens) + " --device auto");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("note:"), std::string::npos) << r.err;  // quiet without --verbose
  EXPECT_EQ(read_ids(tokens), reference_tokens());
  r = run_tessera(generate(obj, tokens) + " --device auto -v");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (gpu_usable()) {
    EXPECT_NE(r.err.find("device: cuda ("), std::string::npos) << r.err;
  } else {
    EXPECT_NE(r.err.find("device: cpu ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("note: using the CPU backend: "), std::string::npos) << r.err;
  }
  EXPECT_EQ(read_ids(tokens), reference_tokens());
  // decode takes the option too.
  const auto d = run_tessera("decode --model " + shell_quote(model_->path()) + " --tokens " +
                             shell_quote(tokens) + " --resolution 9 --device auto -o " +
                             shell_quote(path("decoded.obj")));
  EXPECT_EQ(d.exit_code, 0) << d.err;
}

TEST_F(DeviceCliTest, ExplicitCudaFailsClearlyWithoutAGpu) {
  const std::string obj = path("out.obj"), tokens = path("tokens.txt");
  const auto r = run_tessera(generate(obj, tokens) + " --device cuda");
  if (gpu_usable()) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(read_ids(tokens), reference_tokens());
    return;
  }
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("tessera generate: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CUDA"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(obj));
  std::ofstream(tokens) << "1 2 3\n";
  const auto d = run_tessera("decode --model " + shell_quote(model_->path()) + " --tokens " +
                             shell_quote(tokens) + " --device cuda -o " + shell_quote(obj));
  EXPECT_EQ(d.exit_code, 1) << d.err;
  EXPECT_NE(d.err.find("tessera decode: "), std::string::npos) << d.err;
  EXPECT_FALSE(std::filesystem::exists(obj));
}

// The diffusion engine takes the same choice: `tessera image` on the embedded tiny model (and
// `bench diffusion --device cuda`) runs on the GPU when one is usable, else fails naming the model
// and the reason without writing the PNG; auto falls back to the CPU and says so with -v.
TEST_F(DeviceCliTest, ImageAndBenchDiffusionTakeTheDevice) {
  const std::string png = path("torus.png");
  const std::string image = "image --prompt 'a red torus' --steps 2 -o " + shell_quote(png);
  auto r = run_tessera(image + " --device cuda");
  if (gpu_usable()) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("on cuda ("), std::string::npos) << r.err;
    EXPECT_TRUE(std::filesystem::exists(png));
  } else {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("tessera image: diffusion model '"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("CUDA"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(png));
    const auto b = run_bench("diffusion --config tiny --no-ablation --repeat 1 --device cuda");
    EXPECT_EQ(b.exit_code, 1) << b.err;
    EXPECT_NE(b.err.find("CUDA"), std::string::npos) << b.err;
  }
  r = run_tessera(image + " --device auto -v");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(png));
  if (!gpu_usable()) {
    EXPECT_NE(r.err.find("f32 compute on cpu ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("note: using the CPU backend: "), std::string::npos) << r.err;
  }
}

TEST_F(DeviceCliTest, UnknownDeviceIsAUsageError) {
  const auto r = run_tessera(generate(path("out.obj"), path("t.txt")) + " --device gpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--device"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera
