// Model directory location and opening, on directories assembled from the parity fixtures in the
// tessera-tiny layout and in the Hugging Face CLIP layout of the real Cube 3D release, and every
// way a directory can be wrong (missing files, other architectures, mismatched checkpoints, NaN).
#include "engine/shape/model_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace tessera::shape {
namespace {

namespace fs = std::filesystem;

const fs::path kParity = fs::path(TESSERA_SOURCE_DIR) / "tests" / "fixtures" / "parity";

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / ("tessera_model_dir_test_" + std::to_string(::getpid()) +
                                         "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

void touch(const fs::path& p, const std::string& text = "{}") {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// The tessera-tiny layout: GPT and shape tokenizer at the top, text_encoder/ with config.json, a
// Hugging Face vocabulary under tokenizer/ (only its presence matters here).
void make_tiny(const fs::path& dir, const std::string& gpt = "gpt_v05") {
  fs::copy_file(kParity / gpt / "shape_gpt.safetensors", dir / "shape_gpt.safetensors");
  fs::copy_file(kParity / "shape_tokenizer.safetensors", dir / "shape_tokenizer.safetensors");
  fs::create_directories(dir / "text_encoder");
  fs::copy_file(kParity / "text_encoder" / "model.safetensors",
                dir / "text_encoder" / "model.safetensors");
  fs::copy_file(kParity / "text_encoder" / "config.json", dir / "text_encoder" / "config.json");
  touch(dir / "tokenizer" / "vocab.json");
  touch(dir / "tokenizer" / "merges.txt", "#version: 0.2\n");
}

// Copies `src` to `dst` with tensor values / shapes changed by `edit` (all tensors read as f32).
void rewrite(const fs::path& src, const fs::path& dst,
             const std::function<void(const std::string&, std::vector<int64_t>*,
                                      std::vector<float>*)>& edit) {
  auto in = SafeTensors::open(src.string());
  ASSERT_TRUE(in.ok());
  std::vector<std::vector<float>> data;
  data.reserve(in->size());
  std::vector<TensorToWrite> out;
  for (const TensorInfo& info : in->tensors()) {
    std::vector<int64_t> shape = info.shape;
    std::vector<float> values = *in->to_f32(info.name);
    edit(info.name, &shape, &values);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    values.resize(size_t(numel), 0.01f);
    data.push_back(std::move(values));
    out.push_back(TensorToWrite::raw(info.name, DType::kF32, shape, data.back().data()));
  }
  std::error_code ec;
  fs::remove(dst, ec);
  ASSERT_TRUE(write_safetensors(dst.string(), out).ok());
}

TEST(ModelDir, OpensTheTinyLayout) {
  TempDir dir;
  make_tiny(dir.path());
  auto model = open_model_dir(dir.str());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ(model->paths.shape_gpt, (dir.path() / "shape_gpt.safetensors").string());
  EXPECT_EQ(model->paths.text_encoder,
            (dir.path() / "text_encoder" / "model.safetensors").string());
  EXPECT_EQ(model->paths.text_config, (dir.path() / "text_encoder" / "config.json").string());
  EXPECT_EQ(model->paths.vocab, (dir.path() / "tokenizer").string());
  EXPECT_EQ(model->gpt_info.name, "cube3d-gpt");
  EXPECT_EQ(model->gpt_info.version, "v0.5");
  EXPECT_EQ(model->tokenizer_info.name, "cube3d-shape-tokenizer");
  EXPECT_EQ(model->text_info.name, "clip-text");
  EXPECT_EQ(model->text_heads, 4);  // from config.json
  EXPECT_EQ(model->text_vocab_size, 1000);
  // f32: weights are views of the mapped files.
  auto wte = model->shape_gpt.matrix("transformer.wte.weight", 67, 64);
  ASSERT_TRUE(wte.ok()) << wte.status().to_string();
  EXPECT_EQ(wte->dtype, DType::kF32);
  EXPECT_EQ(wte->data, model->shape_gpt.file().view("transformer.wte.weight")->data);
  EXPECT_EQ(model->shape_gpt.converted_bytes(), 0u);
}

TEST(ModelDir, Bf16OptionConvertsOnce) {
  TempDir dir;
  make_tiny(dir.path());
  ModelDirOptions options;
  options.weights = WeightFormat::kBF16;
  auto model = open_model_dir(dir.str(), options);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto w = model->shape_gpt.matrix("lm_head.weight", 67, 64);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->dtype, DType::kBF16);
  EXPECT_EQ(model->shape_gpt.converted_bytes(), 67u * 64u * 2u);
  auto again = model->shape_gpt.matrix("lm_head.weight", 67, 64);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data, w->data);
  EXPECT_EQ(model->text_encoder.format(), WeightFormat::kBF16);
}

// The real release: Cube's two files next to a Hugging Face openai/clip-vit-large-patch14
// download (model.safetensors with text_model.* keys, a CLIPModel config.json that nests the
// head count under text_config, vocab.json + merges.txt at the top). v0.1 GPT here.
TEST(ModelDir, OpensTheHuggingFaceClipLayoutWithV01) {
  TempDir dir;
  fs::copy_file(kParity / "gpt_v01" / "shape_gpt.safetensors",
                dir.path() / "shape_gpt.safetensors");
  fs::copy_file(kParity / "shape_tokenizer.safetensors",
                dir.path() / "shape_tokenizer.safetensors");
  fs::copy_file(kParity / "text_encoder" / "model.safetensors", dir.path() / "model.safetensors");
  touch(dir.path() / "config.json",
        R"({"architectures": ["CLIPModel"], "text_config": {"num_attention_heads": 4}})");
  touch(dir.path() / "vocab.json");
  touch(dir.path() / "merges.txt");
  auto model = open_model_dir(dir.str());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ(model->gpt_info.version, "v0.1");
  EXPECT_EQ(model->paths.text_encoder, (dir.path() / "model.safetensors").string());
  EXPECT_EQ(model->paths.vocab, dir.str());
  EXPECT_EQ(model->text_heads, 4);
}

TEST(ModelDir, NamesEachMissingFile) {
  {
    auto missing = open_model_dir("/nonexistent/tessera-model");
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
    EXPECT_NE(missing.status().message().find("/nonexistent/tessera-model"), std::string::npos);
  }
  for (const std::string removed :
       {"shape_gpt.safetensors", "shape_tokenizer.safetensors", "text_encoder/model.safetensors"}) {
    SCOPED_TRACE(removed);
    TempDir dir;
    make_tiny(dir.path());
    fs::remove(dir.path() / removed);
    auto model = open_model_dir(dir.str());
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), ErrorCode::kNotFound);
    const std::string message = model.status().message();
    EXPECT_NE(message.find(dir.str()), std::string::npos) << message;
    const std::string file = fs::path(removed).filename().string();
    EXPECT_NE(message.find(removed.find('/') == std::string::npos ? removed : "text encoder"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(file), std::string::npos) << message;
  }
  TempDir dir;
  make_tiny(dir.path());
  fs::remove_all(dir.path() / "tokenizer");
  auto no_vocab = open_model_dir(dir.str());
  ASSERT_FALSE(no_vocab.ok());
  EXPECT_NE(no_vocab.status().message().find("CLIP vocabulary"), std::string::npos);
  EXPECT_NE(no_vocab.status().message().find("not CLIP's 49408"), std::string::npos)
      << no_vocab.status().message();
}

TEST(ModelDir, FallsBackToTheBundledVocabularyForRealClip) {
  TempDir dir;
  make_tiny(dir.path());
  fs::remove_all(dir.path() / "tokenizer");
  // The tiny encoder with CLIP's vocabulary size (rows beyond 1000 padded).
  rewrite(kParity / "text_encoder" / "model.safetensors",
          dir.path() / "text_encoder" / "model.safetensors",
          [](const std::string& name, std::vector<int64_t>* shape, std::vector<float>*) {
            if (name == "text_model.embeddings.token_embedding.weight") *shape = {49408, 32};
          });
  const std::string bundled =
      std::string(TESSERA_SOURCE_DIR) + "/assets/vocab/clip/bpe_simple_vocab_16e6.txt.gz";
  ModelDirOptions options;
  options.clip_vocab_fallback = bundled;
  auto model = open_model_dir(dir.str(), options);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ(model->paths.vocab, bundled);
  EXPECT_EQ(model->text_vocab_size, 49408);

  options.clip_vocab_fallback = dir.str() + "/no-such-vocab.txt.gz";
  auto missing = open_model_dir(dir.str(), options);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such-vocab.txt.gz"), std::string::npos)
      << missing.status().message();
}

TEST(ModelDir, RejectsAnotherArchitecture) {
  TempDir dir;
  make_tiny(dir.path());
  fs::remove(dir.path() / "shape_gpt.safetensors");
  fs::copy_file(kParity / "shape_tokenizer.safetensors", dir.path() / "shape_gpt.safetensors");
  auto model = open_model_dir(dir.str());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(
      model.status().message().find(
          "shape_gpt.safetensors is a cube3d-shape-tokenizer checkpoint, expected cube3d-gpt"),
      std::string::npos)
      << model.status().message();
}

TEST(ModelDir, RejectsMismatchedGptAndTokenizer) {
  TempDir dir;
  make_tiny(dir.path());
  // A tokenizer with 32 codes: the GPT's 67-row vocabulary implies 64.
  rewrite(kParity / "shape_tokenizer.safetensors", dir.path() / "shape_tokenizer.safetensors",
          [](const std::string& name, std::vector<int64_t>* shape, std::vector<float>*) {
            if (name == "bottleneck.block.codebook.weight") *shape = {32, 8};
          });
  auto model = open_model_dir(dir.str());
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("mismatched checkpoints"), std::string::npos)
      << model.status().message();
  EXPECT_NE(model.status().message().find("67"), std::string::npos);
  EXPECT_NE(model.status().message().find("35"), std::string::npos);
}

TEST(ModelDir, DetectsNanWeightsWhenAsked) {
  TempDir dir;
  make_tiny(dir.path());
  rewrite(kParity / "text_encoder" / "model.safetensors",
          dir.path() / "text_encoder" / "model.safetensors",
          [](const std::string& name, std::vector<int64_t>*, std::vector<float>* values) {
            if (name == "text_model.encoder.layers.1.mlp.fc1.weight")
              (*values)[5] = std::numeric_limits<float>::quiet_NaN();
          });
  EXPECT_TRUE(open_model_dir(dir.str()).ok());  // not scanned by default
  ModelDirOptions options;
  options.check_finite = true;
  auto model = open_model_dir(dir.str(), options);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), ErrorCode::kCorruptData);
  EXPECT_NE(model.status().message().find(
                "'text_model.encoder.layers.1.mlp.fc1.weight' element 5 is NaN"),
            std::string::npos)
      << model.status().message();
}

}  // namespace
}  // namespace tessera::shape
