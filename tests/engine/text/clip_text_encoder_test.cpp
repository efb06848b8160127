// ClipTextEncoder against the PyTorch reference (tests/fixtures/parity: random CLIP weights with
// the real tensor names, per-layer hidden states with and without the key padding mask), on every
// CPU code path, plus config inference and bad checkpoints.
#include "engine/text/clip_text_encoder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "core/safetensors.h"
#include "kernels/backend.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;

const std::string kParityDir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/parity";
const std::string kTextEncoderDir = kParityDir + "/text_encoder";

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / ("tessera_clip_encoder_test_" + std::to_string(::getpid()) +
                                         "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

struct Fixture {
  std::vector<int32_t> ids;      // [2, 77]
  std::vector<int32_t> lengths;  // from the attention mask
  std::vector<std::vector<float>> hidden_states;
  std::vector<float> last, last_nomask;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture out;
    auto expected = SafeTensors::open(kParityDir + "/expected.safetensors");
    EXPECT_TRUE(expected.ok()) << expected.status().to_string();
    if (!expected.ok()) return out;
    auto ids = expected->view_as("clip.input_ids", DType::kI32, {2, 77});
    auto mask = expected->view_as("clip.attention_mask", DType::kI32, {2, 77});
    EXPECT_TRUE(ids.ok() && mask.ok());
    if (!ids.ok() || !mask.ok()) return out;
    out.ids.assign(ids->as<const int32_t>(), ids->as<const int32_t>() + 2 * 77);
    for (int b = 0; b < 2; ++b) {
      const int32_t* row = mask->as<const int32_t>() + b * 77;
      const int32_t length = static_cast<int32_t>(std::count(row, row + 77, 1));
      // The mask is a prefix mask (1 on BOS..EOS): exactly what lengths express.
      for (int t = 0; t < 77; ++t) EXPECT_EQ(row[t], t < length ? 1 : 0);
      out.lengths.push_back(length);
    }
    for (int n = 0; n <= 2; ++n) {
      out.hidden_states.push_back(*expected->to_f32("clip.hidden_states." + std::to_string(n)));
    }
    out.last = *expected->to_f32("clip.last_hidden_state");
    out.last_nomask = *expected->to_f32("clip.last_hidden_state_nomask");
    return out;
  }();
  return f;
}

TEST(ClipTextEncoder, InfersConfigFromShapesAndConfigJson) {
  auto backend = kernels::make_cpu_backend();
  auto encoder = ClipTextEncoder::load(kTextEncoderDir, *backend);
  ASSERT_TRUE(encoder.ok()) << encoder.status().to_string();
  const ClipTextConfig& c = encoder->config();
  EXPECT_EQ(c.vocab_size, 1000);
  EXPECT_EQ(c.max_positions, 77);
  EXPECT_EQ(c.width, 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);  // only in config.json: width / 64 would not even divide
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.mlp_hidden, 128);
  EXPECT_EQ(c.prefix, "");
}

TEST(ClipTextEncoder, MatchesReferenceWithMaskPerLayer) {
  const Fixture& f = fixture();
  ASSERT_EQ(f.ids.size(), 2u * 77u);
  auto backend = kernels::make_cpu_backend();
  auto encoder = ClipTextEncoder::load(kTextEncoderDir, *backend);
  ASSERT_TRUE(encoder.ok()) << encoder.status().to_string();
  test::for_each_cpu_mode([&] {
    std::vector<std::vector<float>> hidden;
    auto out = encoder->encode(f.ids.data(), f.lengths.data(), 2, 77, &hidden);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(hidden.size(), 3u);
    for (size_t n = 0; n < hidden.size(); ++n) {
      EXPECT_TRUE(test::close_rel(hidden[n], f.hidden_states[n], 1e-4)) << "hidden state " << n;
    }
    std::vector<float> last(f.last.size());
    ASSERT_TRUE(backend->download(last.data(), *out, last.size() * sizeof(float)).ok());
    EXPECT_TRUE(test::close_rel(last, f.last, 1e-4));
  });
}

TEST(ClipTextEncoder, MatchesReferenceWithoutMask) {
  const Fixture& f = fixture();
  ASSERT_EQ(f.ids.size(), 2u * 77u);
  auto backend = kernels::make_cpu_backend();
  auto encoder = ClipTextEncoder::load(kTextEncoderDir, *backend);
  ASSERT_TRUE(encoder.ok()) << encoder.status().to_string();
  std::vector<float> out;
  ASSERT_TRUE(encoder->encode_to_host(f.ids.data(), nullptr, 2, 77, &out).ok());
  EXPECT_TRUE(test::close_rel(out, f.last_nomask, 1e-4));
  // The mask matters at the padded positions (what makes the two fixtures differ), and not at
  // the real ones.
  std::vector<float> masked;
  ASSERT_TRUE(encoder->encode_to_host(f.ids.data(), f.lengths.data(), 2, 77, &masked).ok());
  const size_t real_end = size_t(f.lengths[0]) * 32;
  EXPECT_TRUE(test::all_close(out.data(), masked.data(), real_end, 1e-6, 1e-6));
  EXPECT_FALSE(test::all_close(out.data() + real_end, masked.data() + real_end, 77 * 32 - real_end,
                               1e-3, 1e-3));
}

TEST(ClipTextEncoder, Bf16WeightsStayClose) {
  const Fixture& f = fixture();
  ASSERT_EQ(f.ids.size(), 2u * 77u);
  auto backend = kernels::make_cpu_backend();
  auto encoder = ClipTextEncoder::load(kTextEncoderDir, *backend, WeightFormat::kBF16);
  ASSERT_TRUE(encoder.ok()) << encoder.status().to_string();
  std::vector<float> out;
  ASSERT_TRUE(encoder->encode_to_host(f.ids.data(), f.lengths.data(), 2, 77, &out).ok());
  // bf16 keeps 8 mantissa bits (2^-9 relative per weight); after two layers and the final norm
  // the outputs stay within a few percent of the layer-normed scale.
  EXPECT_TRUE(test::close_rel(out, f.last, 3e-2));
  EXPECT_FALSE(test::close_rel(out, f.last, 1e-6));  // the weights really are bf16
}

TEST(ClipTextEncoder, ReusesActivationsAcrossCalls) {
  const Fixture& f = fixture();
  ASSERT_EQ(f.ids.size(), 2u * 77u);
  auto backend = kernels::make_cpu_backend();
  auto encoder = ClipTextEncoder::load(kTextEncoderDir, *backend);
  ASSERT_TRUE(encoder.ok());
  auto first = encoder->encode(f.ids.data(), f.lengths.data(), 2, 77);
  ASSERT_TRUE(first.ok());
  // A smaller batch (the unconditional row alone) reuses the same buffers.
  auto second = encoder->encode(f.ids.data() + 77, f.lengths.data() + 1, 1, 77);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second);
  std::vector<float> row(77 * 32);
  ASSERT_TRUE(backend->download(row.data(), *second, row.size() * sizeof(float)).ok());
  EXPECT_TRUE(
      test::close_rel(row, std::vector<float>(f.last.begin() + 77 * 32, f.last.end()), 1e-4));
}

TEST(ClipTextEncoder, RejectsBadInputs) {
  const Fixture& f = fixture();
  ASSERT_EQ(f.ids.size(), 2u * 77u);
  auto backend = kernels::make_cpu_backend();
  auto encoder = ClipTextEncoder::load(kTextEncoderDir, *backend);
  ASSERT_TRUE(encoder.ok());
  std::vector<int32_t> ids = f.ids;
  ids[80] = 1000;  // == vocab_size
  auto bad_id = encoder->encode(ids.data(), nullptr, 2, 77);
  ASSERT_FALSE(bad_id.ok());
  EXPECT_NE(bad_id.status().message().find("token id 1000 at sequence 1 position 3"),
            std::string::npos)
      << bad_id.status().message();
  const int32_t zero_length[2] = {0, 1};
  EXPECT_EQ(encoder->encode(f.ids.data(), zero_length, 2, 77).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(encoder->encode(f.ids.data(), nullptr, 1, 78).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(encoder->encode(f.ids.data(), nullptr, 0, 77).status().code(),
            ErrorCode::kInvalidArgument);
}

// Rewrites the fixture's text encoder with every name passed through `rename` (a tensor whose new
// name is empty is dropped) and `reshape` (may change the shape; the data is cut or repeated).
std::string rewrite_checkpoint(
    const TempDir& dir, const std::string& file_name,
    const std::function<std::string(const std::string&)>& rename,
    const std::function<std::vector<int64_t>(const std::string&, std::vector<int64_t>)>& reshape =
        nullptr) {
  auto source = SafeTensors::open(kTextEncoderDir + "/model.safetensors");
  EXPECT_TRUE(source.ok());
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  data.reserve(source->size());
  for (const TensorInfo& info : source->tensors()) {
    const std::string name = rename(info.name);
    if (name.empty()) continue;
    std::vector<int64_t> shape = reshape ? reshape(info.name, info.shape) : info.shape;
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> values = *source->to_f32(info.name);
    values.resize(size_t(numel), 0.5f);
    data.push_back(std::move(values));
    tensors.push_back(TensorToWrite::raw(name, DType::kF32, shape, data.back().data()));
  }
  const std::string path = dir.path(file_name);
  EXPECT_TRUE(write_safetensors(path, tensors).ok());
  return path;
}

TEST(ClipTextEncoder, ToleratesAPrefix) {
  const Fixture& f = fixture();
  ASSERT_EQ(f.ids.size(), 2u * 77u);
  TempDir dir;
  const std::string path = rewrite_checkpoint(dir, "sd.safetensors", [](const std::string& name) {
    return "cond_stage_model.transformer." + name;
  });
  auto file = SafeTensors::open(path);
  ASSERT_TRUE(file.ok());
  auto backend = kernels::make_cpu_backend();
  ClipTextEncoder::Options options;
  options.n_heads = 4;
  auto encoder = ClipTextEncoder::create(WeightStore(std::move(file).value(), WeightFormat::kF32),
                                         *backend, options);
  ASSERT_TRUE(encoder.ok()) << encoder.status().to_string();
  EXPECT_EQ(encoder->config().prefix, "cond_stage_model.transformer.");
  std::vector<float> out;
  ASSERT_TRUE(encoder->encode_to_host(f.ids.data(), f.lengths.data(), 2, 77, &out).ok());
  EXPECT_TRUE(test::close_rel(out, f.last, 1e-4));
}

TEST(ClipTextEncoder, NamesAMissingTensor) {
  TempDir dir;
  const std::string path = rewrite_checkpoint(dir, "model.safetensors", [](const std::string& n) {
    return n == "text_model.encoder.layers.1.mlp.fc2.bias" ? std::string() : n;
  });
  fs::copy_file(kTextEncoderDir + "/config.json", dir.path("config.json"));
  auto backend = kernels::make_cpu_backend();
  auto encoder = ClipTextEncoder::load(path, *backend);
  ASSERT_FALSE(encoder.ok());
  EXPECT_EQ(encoder.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(encoder.status().message().find("text_model.encoder.layers.1.mlp.fc2.bias"),
            std::string::npos)
      << encoder.status().message();
  EXPECT_NE(encoder.status().message().find(path), std::string::npos);
}

TEST(ClipTextEncoder, NamesAWrongShape) {
  TempDir dir;
  const std::string path = rewrite_checkpoint(
      dir, "model.safetensors", [](const std::string& n) { return n; },
      [](const std::string& name, std::vector<int64_t> shape) {
        if (name == "text_model.encoder.layers.0.self_attn.v_proj.weight") shape = {32, 31};
        return shape;
      });
  auto backend = kernels::make_cpu_backend();
  // Without config.json beside it: the head count must come from the options (32 % 64 != 0).
  auto guessed = ClipTextEncoder::load(path, *backend);
  ASSERT_FALSE(guessed.ok());
  EXPECT_NE(guessed.status().message().find("num_attention_heads"), std::string::npos)
      << guessed.status().message();

  auto file = SafeTensors::open(path);
  ASSERT_TRUE(file.ok());
  ClipTextEncoder::Options options;
  options.n_heads = 4;
  auto encoder = ClipTextEncoder::create(WeightStore(std::move(file).value(), WeightFormat::kF32),
                                         *backend, options);
  ASSERT_FALSE(encoder.ok());
  EXPECT_EQ(encoder.status().code(), ErrorCode::kInvalidArgument);
  const std::string message = encoder.status().message();
  EXPECT_NE(message.find("text_model.encoder.layers.0.self_attn.v_proj.weight"), std::string::npos)
      << message;
  EXPECT_NE(message.find("[32, 31]"), std::string::npos) << message;
  EXPECT_NE(message.find("[32, 32]"), std::string::npos) << message;
}

TEST(ClipTextEncoder, MissingFileAndNotClip) {
  auto backend = kernels::make_cpu_backend();
  auto missing = ClipTextEncoder::load("/nonexistent/tessera/text_encoder", *backend);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/tessera/text_encoder/model.safetensors"),
            std::string::npos)
      << missing.status().message();

  // A checkpoint of another architecture (the shape tokenizer) says what it is missing.
  auto other = ClipTextEncoder::load(kParityDir + "/shape_tokenizer.safetensors", *backend);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("not a CLIP text encoder"), std::string::npos)
      << other.status().message();
}

TEST(ClipTextEncoder, ReadsHeadsFromConfigJson) {
  auto heads = read_clip_num_heads(kTextEncoderDir + "/config.json");
  ASSERT_TRUE(heads.ok());
  EXPECT_EQ(*heads, 4);
  auto none = read_clip_num_heads("/nonexistent/config.json");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  TempDir dir;
  const std::string bad = dir.path("config.json");
  const std::string negative_json = R"({"num_attention_heads": -3})";
  ASSERT_TRUE(write_file_atomic(bad, negative_json.data(), negative_json.size()).ok());
  auto negative = read_clip_num_heads(bad);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("num_attention_heads"), std::string::npos);
  ASSERT_TRUE(write_file_atomic(bad, "{not json", 9).ok());
  EXPECT_FALSE(read_clip_num_heads(bad).ok());
}

}  // namespace
}  // namespace tessera::text
