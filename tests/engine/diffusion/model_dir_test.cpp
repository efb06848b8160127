// Which checkpoint a model folder means (engine/diffusion/model_dir.h) and what its card says
// (model_card_control_net): one .safetensors file is the model; several need a card that names
// the checkpoint (the ControlNet beside it is not the model); a malformed card, or one that names
// a missing file, is named.
#include "engine/diffusion/model_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/diffusion/pipeline.h"

namespace tessera::diffusion {
namespace {

namespace fs = std::filesystem;

class DiffusionModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-model-dir-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  fs::path dir_;
};

TEST_F(DiffusionModelDir, TheCardNamesTheCheckpointAndItsControlNet) {
  write("model.safetensors", "x");
  auto one = locate_diffusion_model(dir_.string());
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(fs::path(one->files.unet).filename(), "model.safetensors");
  EXPECT_EQ(model_card_control_net(dir_.string()).value(), "");

  // A second file: ambiguous without a card, the named one with it.
  write("controlnet-depth.safetensors", "x");
  auto two = locate_diffusion_model(dir_.string());
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("2 .safetensors files"), std::string::npos);
  write("model.json",
        R"({"files": {"weights": "model.safetensors"},
            "controlnet_depth": {"file": "controlnet-depth.safetensors"}})");
  auto named = locate_diffusion_model(dir_.string());
  ASSERT_TRUE(named.ok()) << named.status().message();
  EXPECT_EQ(fs::path(named->files.unet).filename(), "model.safetensors");
  EXPECT_EQ(fs::path(model_card_control_net(dir_.string()).value()).filename(),
            "controlnet-depth.safetensors");

  // A card naming what is not there, or not JSON, is named.
  write("model.json", R"({"files": {"weights": "gone.safetensors"},
                          "controlnet_depth": {"file": "gone-too.safetensors"}})");
  auto missing = locate_diffusion_model(dir_.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("gone.safetensors"), std::string::npos);
  auto missing_cn = model_card_control_net(dir_.string());
  ASSERT_FALSE(missing_cn.ok());
  EXPECT_NE(missing_cn.status().message().find("gone-too.safetensors"), std::string::npos);
  write("model.json", "{not json");
  auto broken = locate_diffusion_model(dir_.string());
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("model.json"), std::string::npos);
}

}  // namespace
}  // namespace tessera::diffusion
