// End-to-end tests of `tessera image` on the tiny fixture diffusion model (diffusers folder
// assembled from tests/fixtures by tests/engine/diffusion/pipeline_test_util.h): the PNG is
// written and well-formed, progress is reported per step, bad arguments give clear errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/engine/diffusion/pipeline_test_util.h"
#include "core/png.h"
#include "tests/support/cli_runner.h"

namespace tessera {
namespace {

namespace pt = diffusion::pipeline_test;
using testing::run_tessera;
using testing::shell_quote;

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) |
         b[at + 3];
}

uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return ~c;
}

// Walks the chunks: signature, IHDR first with the size, every CRC right, IEND last; returns the
// concatenated IDAT payload.
::testing::AssertionResult check_png(const std::vector<uint8_t>& png, uint32_t width,
                                     uint32_t height, std::vector<uint8_t>* idat) {
  static const uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (png.size() < 8 || !std::equal(kSig, kSig + 8, png.begin())) {
    return ::testing::AssertionFailure() << "no PNG signature";
  }
  size_t at = 8;
  std::vector<std::string> types;
  while (at + 12 <= png.size()) {
    const uint32_t len = be32(png, at);
    if (at + 12 + len > png.size()) return ::testing::AssertionFailure() << "chunk past the end";
    const std::string type(png.begin() + static_cast<long>(at + 4),
                           png.begin() + static_cast<long>(at + 8));
    if (crc32(png.data() + at + 4, len + 4) != be32(png, at + 8 + len)) {
      return ::testing::AssertionFailure() << "bad CRC in " << type;
    }
    if (type == "IHDR" && (be32(png, at + 8) != width || be32(png, at + 12) != height ||
                           png[at + 16] != 8 || png[at + 17] != 2)) {
      return ::testing::AssertionFailure()
             << "IHDR says " << be32(png, at + 8) << "x" << be32(png, at + 12);
    }
    if (type == "IDAT")
      idat->insert(idat->end(), png.begin() + static_cast<long>(at + 8),
                   png.begin() + static_cast<long>(at + 8 + len));
    types.push_back(type);
    at += 12 + len;
  }
  if (types.empty() || types.front() != "IHDR" || types.back() != "IEND" || at != png.size()) {
    return ::testing::AssertionFailure() << "chunk order / trailing bytes";
  }
  return ::testing::AssertionSuccess();
}

class ImageCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new pt::TempDir("image-cli");
    pt::Tensors tensors;
    ASSERT_TRUE(pt::compvis_tensors(&tensors));
    ASSERT_TRUE(pt::write_diffusers_model(dir_->path() / "model", tensors));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string model() { return shell_quote((dir_->path() / "model").string()); }
  static std::string out(const std::string& name) { return (dir_->path() / name).string(); }
  static pt::TempDir* dir_;
};
pt::TempDir* ImageCli::dir_ = nullptr;

TEST_F(ImageCli, WritesPngWithProgress) {
  const std::string png_path = out("torus.png");
  const auto r =
      run_tessera("image --prompt 'a red torus' --negative-prompt 'blue' --model " + model() +
                  " --steps 3 --guidance 2 --sampler dpmpp_2m --seed 5 "
                  "--width 32 --height 24 -o " +
                  shell_quote(png_path));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("step 1/3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step 3/3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ms/step"), std::string::npos) << r.err;
  const auto png = slurp(png_path);
  std::vector<uint8_t> idat;
  ASSERT_TRUE(check_png(png, 32, 24, &idat));
  // Stored deflate blocks: zlib header + (1 filter byte + 32 * 3) * 24 raw bytes + block headers.
  EXPECT_GE(idat.size(), 2u + 24u * 97u + 5u + 4u);

  // Same seed, same bytes; default size is 64 for the tiny model.
  const auto again = run_tessera("image -p 'a red torus' -n blue -m " + model() +
                                 " --steps 3 -g 2 --sampler dpmpp_2m --seed 5 -W 32 -H 24 -o " +
                                 shell_quote(out("again.png")));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(slurp(out("again.png")), png);
  // The settings ride in the PNG's text; --no-metadata leaves only the Software entry.
  auto text = read_png_text(std::string(png.begin(), png.end()), png_path);
  ASSERT_TRUE(text.ok());
  std::string settings;
  for (const auto& [key, value] : *text) {
    if (key == "tessera") settings = value;
  }
  EXPECT_NE(settings.find("\"prompt\":\"a red torus\""), std::string::npos) << settings;
  EXPECT_NE(settings.find("\"seed\":5"), std::string::npos) << settings;
  EXPECT_NE(settings.find("\"negative_prompt\":\"blue\""), std::string::npos) << settings;
  const auto quiet =
      run_tessera("image -p 'a red torus' -m " + model() +
                  " --steps 1 --no-metadata -W 32 -H 24 -o " + shell_quote(out("quiet.png")));
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  const auto quiet_png = slurp(out("quiet.png"));
  EXPECT_EQ(std::string(quiet_png.begin(), quiet_png.end()).find("a red torus"), std::string::npos);
  const auto dflt = run_tessera("image -p cube -m " + model() + " --steps 1 -o " +
                                shell_quote(out("default.png")));
  ASSERT_EQ(dflt.exit_code, 0) << dflt.err;
  std::vector<uint8_t> unused;
  EXPECT_TRUE(check_png(slurp(out("default.png")), 64, 64, &unused));
}

TEST_F(ImageCli, BadArgumentsGiveClearErrors) {
  const std::string o = " -o " + shell_quote(out("bad.png"));
  auto r = run_tessera("image -p x -m " + model() + " --width 30 --steps 1" + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("width 30"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " --steps 0" + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--steps"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " --sampler ddim" + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ddim"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " -o " + shell_quote(out("bad.jpg")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(".png"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " -o " + shell_quote(out("no/such/dir.png")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + shell_quote(out("missing-model")) + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing-model"), std::string::npos) << r.err;
  // The default model directory is named when it is missing.
  r = run_tessera("image -p x" + o, "TESSERA_ASSETS=" + shell_quote(out("no-assets")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tessera-tiny/diffusion"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out("bad.png")));
  r = run_tessera("image -o " + shell_quote(out("bad.png")));  // --prompt is required
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("prompt"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera
