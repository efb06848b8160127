// End-to-end tests of `tessera image` on the tiny fixture diffusion model (diffusers folder
// assembled from tests/fixtures by tests/engine/diffusion/pipeline_test_util.h): the PNG is
// written and well-formed, progress is reported per step, bad arguments give clear errors; a
// ControlNet steers it from a control image or from a mesh's rendered depth.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/engine/diffusion/pipeline_test_util.h"
#include "core/mapped_file.h"
#include "core/png.h"
#include "core/safetensors.h"
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

std::string png_text(const std::string& path, const std::string& key) {
  const auto png = slurp(path);
  auto text = read_png_text(std::string(png.begin(), png.end()), path);
  if (!text.ok()) return "";
  for (const auto& [k, value] : *text) {
    if (k == key) return value;
  }
  return "";
}

TEST_F(ImageCli, ControlNetFromAnImageAndFromAMeshDepth) {
  const std::string fixtures = pt::source_dir() + "/tests/fixtures/diffusion/controlnet/";
  const std::string control = shell_quote(fixtures + "control.safetensors");
  auto expected = SafeTensors::open(fixtures + "expected.safetensors");
  ASSERT_TRUE(expected.ok());
  const std::vector<float> hint_f = expected->to_f32("hint").value();
  const std::vector<uint8_t> hint(hint_f.begin(), hint_f.end());
  auto hint_png = encode_png(hint.data(), 32, 32, 3);
  ASSERT_TRUE(hint_png.ok());
  ASSERT_TRUE(write_file_atomic(out("hint.png"), hint_png->data(), hint_png->size()).ok());

  // A control image of another size is resized and said; the settings name the ControlNet.
  const std::string steered = out("steered.png");
  auto r = run_tessera("image -p 'a red torus' -m " + model() + " --control " +
                       shell_quote(out("hint.png")) + " --control-model " + control +
                       " --control-scale 0.8 --steps 2 -g 2 --seed 42 -W 64 -H 64 -o " +
                       shell_quote(steered));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("control.safetensors loaded in"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("control image resized from 32x32 to 64x64"), std::string::npos) << r.err;
  EXPECT_NE(png_text(steered, "parameters")
                .find("ControlNet 0: \"Module: none, Model: control, "
                      "Weight: 0.8\""),
            std::string::npos)
      << png_text(steered, "parameters");
  EXPECT_NE(png_text(steered, "tessera").find("\"control\":{"), std::string::npos);
  r = run_tessera("image -p 'a red torus' -m " + model() +
                  " --steps 2 -g 2 --seed 42 -W 64 -H 64 -o " + shell_quote(out("free.png")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(slurp(out("free.png")), slurp(steered));

  // A mesh's depth: a box seen from three-quarter, written with --save-control.
  std::ofstream(out("box.obj")) << "v -1 -1 -1\nv 1 -1 -1\nv 1 1 -1\nv -1 1 -1\n"
                                   "v -1 -1 1\nv 1 -1 1\nv 1 1 1\nv -1 1 1\n"
                                   "f 1 3 2\nf 1 4 3\nf 5 6 7\nf 5 7 8\nf 1 2 6\nf 1 6 5\n"
                                   "f 4 7 3\nf 4 8 7\nf 1 5 8\nf 1 8 4\nf 2 3 7\nf 2 7 6\n";
  r = run_tessera("image -p 'a cube' -m " + model() + " --control-mesh " +
                  shell_quote(out("box.obj")) + " --view three-quarter --save-control " +
                  shell_quote(out("depth.png")) + " --control-model " + control +
                  " --steps 1 -W 32 -H 32 -o " + shell_quote(out("from-mesh.png")));
  if (r.err.find("headless GL") != std::string::npos ||
      r.err.find("without the renderer") != std::string::npos) {
    GTEST_SKIP() << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("depth of"), std::string::npos) << r.err;
  auto depth_file = MappedFile::open(out("depth.png"));
  ASSERT_TRUE(depth_file.ok());
  auto depth = decode_png(depth_file->data(), depth_file->size(), 3, out("depth.png"));
  ASSERT_TRUE(depth.ok());
  ASSERT_EQ(depth->width, 32);
  // Background black in the corners, the box grey to white in the middle, the nearest corner
  // exactly white somewhere.
  EXPECT_EQ(depth->pixels[0], 0);
  const uint8_t middle = depth->pixels[(16 * 32 + 16) * 3];
  EXPECT_GT(middle, 150);
  EXPECT_EQ(*std::max_element(depth->pixels.begin(), depth->pixels.end()), 255);
  EXPECT_NE(png_text(out("from-mesh.png"), "tessera").find("depth of box.obj, three-quarter view"),
            std::string::npos);
}

// The embedded model follows a mesh's depth with its own depth ControlNet (no --control-model):
// the card names it, and the same seed without it makes another image.
TEST_F(ImageCli, EmbeddedModelUsesItsOwnDepthControlNet) {
  std::ofstream(out("post.obj")) << "v -1 0 -1\nv 1 0 -1\nv 1 0 1\nv -1 0 1\nv 0 3 0\n"
                                    "f 1 2 5\nf 2 3 5\nf 3 4 5\nf 4 1 5\nf 1 3 2\nf 1 4 3\n";
  auto r = run_tessera("image -p 'a red torus' --control-mesh " + shell_quote(out("post.obj")) +
                       " --view three-quarter --steps 4 --seed 1 -o " +
                       shell_quote(out("embedded.png")));
  if (r.err.find("headless GL") != std::string::npos ||
      r.err.find("without the renderer") != std::string::npos) {
    GTEST_SKIP() << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("controlnet-depth.safetensors loaded"), std::string::npos) << r.err;
  EXPECT_NE(png_text(out("embedded.png"), "parameters").find("Model: controlnet-depth"),
            std::string::npos)
      << png_text(out("embedded.png"), "parameters");
  r = run_tessera("image -p 'a red torus' --steps 4 --seed 1 -o " + shell_quote(out("free.png")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(slurp(out("free.png")), slurp(out("embedded.png")));
}

TEST_F(ImageCli, ControlNetMistakesAreNamed) {
  const std::string o = " -o " + shell_quote(out("bad.png"));
  {
    const std::vector<uint8_t> grey(16 * 16 * 3, 128);
    auto png = encode_png(grey.data(), 16, 16, 3);
    ASSERT_TRUE(png.ok());
    ASSERT_TRUE(write_file_atomic(out("grey.png"), png->data(), png->size()).ok());
  }
  const std::string fixtures = pt::source_dir() + "/tests/fixtures/diffusion/controlnet/";
  // No ControlNet given and the model ships none.
  auto r = run_tessera("image -p x -m " + model() + " --steps 1 --control " +
                       shell_quote(out("grey.png")) + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ships none"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " --control-model " +
                  shell_quote(fixtures + "control.safetensors") + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("needs a control image"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " --control-scale 3 --control " +
                  shell_quote(out("grey.png")) + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("control scale"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " --control-model " +
                  shell_quote(out("no-such-controlnet")) + " --control " +
                  shell_quote(out("grey.png")) + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no-such-controlnet"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " --control " + shell_quote(out("grey.png")) +
                  " --save-control " + shell_quote(out("depth-out.png")) + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--save-control needs --control-mesh"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " --control-mesh " + shell_quote(out("grey.png")) +
                  " --view sideways" + o);
  EXPECT_EQ(r.exit_code, 1);
  if (r.err.find("without the renderer") == std::string::npos) {
    EXPECT_NE(r.err.find("three-quarter"), std::string::npos) << r.err;
  }
  r = run_tessera("image -p x -m " + model() + " --control-model " +
                  shell_quote(pt::sd_tiny_path()) + " --control " + shell_quote(out("grey.png")) +
                  " --steps 1" + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("input_hint_block.0.weight"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out("bad.png")));
}

// --taesd: a missing file, and a tiny decoder (x8) for a model whose VAE is x2, each named; no
// PNG is written.
TEST_F(ImageCli, TinyDecoderMistakesAreNamed) {
  const std::string o = " -o " + shell_quote(out("taesd.png"));
  auto r = run_tessera("image -p x -m " + model() + " --steps 1 --taesd " +
                       shell_quote(out("no-such-taesd.safetensors")) + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no-such-taesd"), std::string::npos) << r.err;
  const std::string taesd =
      pt::source_dir() + "/tests/fixtures/diffusion/taesd/taesd_decoder.safetensors";
  r = run_tessera("image -p x -m " + model() + " --steps 1 --taesd " + shell_quote(taesd) + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("x8"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("taesd_decoder.safetensors"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out("taesd.png")));
}

TEST_F(ImageCli, BadArgumentsGiveClearErrors) {
  const std::string o = " -o " + shell_quote(out("bad.png"));
  auto r = run_tessera("image -p x -m " + model() + " --width 30 --steps 1" + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("width 30"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " --steps 0" + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("steps 0 is outside 1..1000"), std::string::npos) << r.err;
  r = run_tessera("image -p x -m " + model() + " --steps 1001" + o);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("steps 1001 is outside 1..1000"), std::string::npos) << r.err;
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
