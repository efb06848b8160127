// `tessera-bench diffusion` end to end on the hidden tiny config (the parity fixtures'
// architecture, random weights): the ablation table, the RESULTS.md section write that keeps the
// other sections, the JSON, and bad sizes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "kernels/diffusion_ops.h"
#include "tests/support/cli_runner.h"

namespace tessera {
namespace {

using testing::run_bench;
using testing::run_tessera;
using testing::shell_quote;

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class BenchDiffusionCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera-bench-diffusion-" + std::to_string(static_cast<long>(::getpid())));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(BenchDiffusionCliTest, TinyQuickAblationWritesTheSection) {
  const std::filesystem::path results = dir_ / "RESULTS.md";
  const std::filesystem::path json = dir_ / "bench.json";
  std::ofstream(results) << "# Results\n\n## Kernels (CPU)\n\nkeep me\n\n"
                            "## Diffusion (CPU)\n\nold table\n\n## Studio\n\nkeep me too\n";
  const auto r = run_bench(
      "diffusion --config tiny --quick --size 32 --repeat 1 --lcm --controlnet "
      "--write-results --results " +
      shell_quote(results.string()) + " --json " + shell_quote(json.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Machine header with the load average, then every ablation row of the UNet and the VAE's
  // all-on row (--quick), each with a positive rate.
  EXPECT_NE(r.out.find("load average before the run"), std::string::npos) << r.out;
  for (const char* row :
       {"| UNet step (batch 2, guidance) | all fusions on (default chooser) |",
        "| UNet step (batch 2, guidance) | GroupNorm+SiLU unfused |",
        "| UNet step (batch 2, guidance) | GEGLU unfused |",
        "| UNet step (batch 2, guidance) | attention naive |",
        "| UNet step (batch 2, guidance) | conv im2col+GEMM only (Winograd off) |",
        "| UNet step (batch 2, guidance) | upsample unfused |",
        "| UNet step (batch 2, guidance) | everything off |",
        "| VAE decode | all fusions on (default chooser) |"}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("| VAE decode | everything off |"), std::string::npos) << r.out;
  // The bf16 compute rows (both models, also under --quick) with their speed-up over f32, on
  // CPUs that have them (the bench runs on this same CPU).
  if (kernels::cpu::bf16_compute_available()) {
    for (const char* row : {"| UNet step (batch 2, guidance) | all on, bf16 compute",
                            "| VAE decode | all on, bf16 compute", "x faster than f32 |"}) {
      EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
    }
  } else {
    EXPECT_EQ(r.out.find("bf16 compute"), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find("image 32x32 (latent 16x16)"), std::string::npos) << r.out;
  // --lcm: the unguided step and the 4-step image's phases; --controlnet: the step with one.
  for (const char* row : {"| UNet step (batch 1, LCM) | all fusions on (default chooser) |",
                          "LCM image, 4 unguided steps + VAE decode (f32): ",
                          "| UNet step + ControlNet | all fusions on (default chooser) |",
                          "per guided step against"}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  }

  const std::string md = slurp(results);
  EXPECT_NE(md.find("keep me\n"), std::string::npos) << md;
  EXPECT_NE(md.find("## Studio\n\nkeep me too"), std::string::npos) << md;
  EXPECT_EQ(md.find("old table"), std::string::npos) << md;
  const size_t section = md.find("## Diffusion (CPU)\n");
  ASSERT_NE(section, std::string::npos) << md;
  EXPECT_EQ(md.find("## Diffusion (CPU)\n", section + 1), std::string::npos) << md;
  EXPECT_NE(md.find("| UNet step (batch 2, guidance) | everything off |", section),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Tiny fixture config", section), std::string::npos) << md;

  const std::string j = slurp(json);
  EXPECT_NE(j.find("\"gflops\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"config\": \"tiny\""), std::string::npos) << j;
}

// The embedded model's real weights (assets/models/tessera-tiny/diffusion, heads from its card).
TEST_F(BenchDiffusionCliTest, EmbeddedTinyModelRuns) {
  const auto r = run_bench("diffusion --config tessera-tiny --quick --repeat 1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tessera-tiny/diffusion (shipped weights, f32)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| UNet step (batch 2, guidance) | all fusions on"), std::string::npos)
      << r.out;
}

TEST_F(BenchDiffusionCliTest, SizeNotAMultipleIsAClearError) {
  for (const char* size : {"30", "6", "-8"}) {
    const auto r = run_bench(std::string("diffusion --config tiny --size ") + size);
    EXPECT_EQ(r.exit_code, 1) << size << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("--size"), std::string::npos) << r.err;
  }
  const auto bad = run_bench("diffusion --config sd21 --size 64");
  EXPECT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--config"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace tessera
