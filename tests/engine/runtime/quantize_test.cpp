// int8 files (engine/runtime/quantize.h): a GPT quantized on disk loads as int8 and computes
// exactly what quantizing at load computes; the loader's checks on a quantized file (missing or
// mis-shaped scales, groups that do not divide a row or are not a multiple of 32,
// NaN/Inf/zero/negative scales, -128 weights, scales beside a float weight, an I8 token table) name
// the tensor and never crash; quantize_model_dir writes a complete directory or nothing.
#include "engine/runtime/quantize.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint_kind.h"
#include "core/safetensors.h"
#include "engine/shape/gpt.h"
#include "engine/shape/model_dir.h"
#include "kernels/backend.h"

namespace tessera::runtime {
namespace {

using namespace shape;  // the models a quantized file is loaded into

namespace fs = std::filesystem;

const fs::path kParity = fs::path(TESSERA_SOURCE_DIR) / "tests" / "fixtures" / "parity";
const fs::path kTiny = fs::path(TESSERA_SOURCE_DIR) / "assets" / "models" / "tessera-tiny";

class QuantizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() / ("tessera_quantize_test_" + std::to_string(::getpid()) +
                                        "_" + std::to_string(counter++));
    fs::create_directories(dir_);
    gpt_ = SafeTensors::open((kParity / "gpt_v05" / "shape_gpt.safetensors").string()).value();
    auto tokenizer = SafeTensors::open((kParity / "shape_tokenizer.safetensors").string()).value();
    codebook_ = load_normalized_codebook(tokenizer).value();
    backend_ = kernels::make_cpu_backend();
    quantized_path_ = (dir_ / "q.safetensors").string();
    ASSERT_TRUE(quantize_gpt_file(gpt_, quantized_path_, &report_).ok());
    quantized_ = SafeTensors::open(quantized_path_).value();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Logits of a teacher-forced pass over a few tokens (batch 1, zero condition).
  std::vector<float> logits(const CubeGpt& model) {
    const GptConfig& c = model.config();
    auto s = GptSession::create(model, 1, 6).value();
    std::vector<float> hidden(static_cast<size_t>(c.text_len * c.text_embed_dim));
    for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = std::sin(0.37f * static_cast<float>(i));
    const float bbox[3] = {0.5f, 0.2f, 0.9f};
    EXPECT_TRUE(s->set_condition(1, hidden.data(), bbox).ok());
    const std::vector<int32_t> ids = {static_cast<int32_t>(c.codebook_size), 3, 17, 5, 40, 2};
    std::vector<float> out(static_cast<size_t>(6 * c.vocab_size));
    EXPECT_TRUE(s->forward_full(ids.data(), 6, nullptr, out.data()).ok());
    return out;
  }

  // The quantized file rewritten by `edit`, which may change any tensor (values, shape, dtype) or
  // drop it; returns the load's status.
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  Status load_edited(const std::function<void(std::vector<Tensor>&)>& edit) {
    std::vector<Tensor> tensors;
    for (const TensorInfo& t : quantized_.tensors()) {
      const auto* p = static_cast<const uint8_t*>(quantized_.view(t.name).value().data);
      tensors.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(p, p + t.nbytes)});
    }
    edit(tensors);
    std::vector<TensorToWrite> out;
    for (const Tensor& t : tensors) {
      out.push_back(TensorToWrite::raw(t.name, t.dtype, t.shape, t.bytes.data()));
    }
    const std::string path = (dir_ / "edited.safetensors").string();
    EXPECT_TRUE(write_safetensors(path, out).ok());
    auto file = SafeTensors::open(path);
    if (!file.ok()) return file.status();
    return CubeGpt::load(*file, codebook_, *backend_).status();
  }
  static Tensor& find(std::vector<Tensor>& tensors, const std::string& name) {
    for (Tensor& t : tensors) {
      if (t.name == name) return t;
    }
    ADD_FAILURE() << "no tensor " << name;
    static Tensor none;
    return none;
  }
  static void set_scale(std::vector<Tensor>& tensors, const std::string& name, size_t index,
                        float value) {
    Tensor& t = find(tensors, name);
    ASSERT_EQ(t.dtype, DType::kF32);
    std::memcpy(t.bytes.data() + index * sizeof(float), &value, sizeof value);
  }

  fs::path dir_;
  SafeTensors gpt_, quantized_;
  NormalizedCodebook codebook_;
  std::unique_ptr<kernels::Backend> backend_;
  std::string quantized_path_;
  QuantizeReport report_;
};

const std::string kMatrix = "transformer.dual_blocks.1.post_1.mlp.up_proj.weight";  // [256, 64]

// The pages of weights used in place from the mapped file can leave resident memory between the
// phases of a job (PipelineOptions::release_idle_pages): the model computes the same bits after
// each release, the weights being read again from the page cache.
TEST_F(QuantizeTest, ReleasedWeightPagesAreReadAgainWithTheSameResults) {
  auto stored = CubeGpt::load(quantized_, codebook_, *backend_).value();
  const std::vector<float> before = logits(*stored);
  stored->release_condition_pages();
  EXPECT_EQ(logits(*stored), before);
  stored->release_weight_pages();
  EXPECT_EQ(logits(*stored), before);
  // Also for a float file used in place (f32, zero-copy) and a model that owns its weights.
  auto f32 = CubeGpt::load(gpt_, codebook_, *backend_).value();
  const std::vector<float> f32_before = logits(*f32);
  f32->release_condition_pages();
  f32->release_weight_pages();
  EXPECT_EQ(logits(*f32), f32_before);
}

TEST_F(QuantizeTest, FileHoldsInt8AndScalesAndLoadsLikeQuantizingAtLoad) {
  EXPECT_GT(report_.int8_matrices, 10);
  EXPECT_GE(report_.int8_group, 64);
  EXPECT_LE(report_.max_group_rel_error, 1.0 / 254 + 1e-6);
  EXPECT_LT(report_.gpt_bytes_out, report_.gpt_bytes_in / 3);
  const TensorInfo* w = quantized_.find(kMatrix);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kI8);
  const TensorInfo* s = quantized_.find(kMatrix + "_scale");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->dtype, DType::kF32);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{w->shape[0], w->shape[1] / 64}));
  // The token table and the norms stay as they were; the 3-column bbox_proj too.
  EXPECT_EQ(quantized_.find("transformer.wte.weight")->dtype, DType::kF32);
  EXPECT_EQ(quantized_.find("bbox_proj.weight")->dtype, DType::kF32);
  EXPECT_EQ(quantized_.metadata().at("tessera.weights"), "int8");

  GptLoadOptions int8;
  int8.int8 = true;
  auto at_load = CubeGpt::load(gpt_, codebook_, *backend_, int8).value();
  auto stored = CubeGpt::load(quantized_, codebook_, *backend_).value();
  auto f32 = CubeGpt::load(gpt_, codebook_, *backend_).value();
  EXPECT_TRUE(stored->int8_weights());
  EXPECT_TRUE(at_load->int8_weights());
  EXPECT_FALSE(f32->int8_weights());
  const std::vector<float> a = logits(*at_load), b = logits(*stored), ref = logits(*f32);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;  // bit for bit
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(double(a[i]) - ref[i]));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  EXPECT_LT(err, 0.05 * scale) << "int8 logits against f32";

  // A quantized file is not quantized twice.
  const Status again = quantize_gpt_file(quantized_, (dir_ / "qq.safetensors").string(), nullptr);
  EXPECT_EQ(again.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(again.message().find("already"), std::string::npos) << again.message();
  EXPECT_FALSE(fs::exists(dir_ / "qq.safetensors"));
}

void expect_error(const Status& s, const std::string& tensor, const std::string& words) {
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(tensor), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("edited.safetensors"), std::string::npos) << s.message();
}

TEST_F(QuantizeTest, MissingScalesAreNamed) {
  expect_error(load_edited([](std::vector<Tensor>& t) {
                 t.erase(std::find_if(t.begin(), t.end(), [](const Tensor& x) {
                   return x.name == kMatrix + "_scale";
                 }));
               }),
               kMatrix + "_scale", "no scales");
}

TEST_F(QuantizeTest, MisShapedScalesAreNamed) {
  // Rows that do not match.
  expect_error(load_edited([](std::vector<Tensor>& t) {
                 Tensor& s = find(t, kMatrix + "_scale");
                 s.shape[0] -= 1;
                 s.bytes.resize(s.bytes.size() - sizeof(float));
               }),
               kMatrix + "_scale", "expected [256, groups]");
  // The scales of kMatrix replaced by `groups` scales of 0.01 per row.
  const auto regroup = [](int64_t groups) {
    return [groups](std::vector<Tensor>& t) {
      Tensor& s = find(t, kMatrix + "_scale");
      s.shape = {256, groups};
      const std::vector<float> values(static_cast<size_t>(256 * groups), 0.01f);
      s.bytes.resize(values.size() * sizeof(float));
      std::memcpy(s.bytes.data(), values.data(), s.bytes.size());
    };
  };
  // 3 groups for 64 weights: the group does not divide the row.
  expect_error(load_edited(regroup(3)), kMatrix + "_scale", "do not divide");
  // Groups of 16: divide the row but are not a multiple of 32.
  const Status g16 = load_edited(regroup(4));
  expect_error(g16, kMatrix, "groups of 16");
  EXPECT_EQ(g16.code(), ErrorCode::kUnsupported);
  // Scales of an integer type.
  expect_error(
      load_edited([](std::vector<Tensor>& t) { find(t, kMatrix + "_scale").dtype = DType::kI32; }),
      kMatrix + "_scale", "dtype I32");
}

TEST_F(QuantizeTest, NonFiniteZeroAndNegativeScalesAreNamedWithTheirPlace) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(), 0.0f, -0.02f};
  for (float v : bad) {
    SCOPED_TRACE(v);
    const Status s = load_edited([v](std::vector<Tensor>& t) {
      set_scale(t, kMatrix + "_scale", 5, v);  // row 5, group 0
    });
    expect_error(s, kMatrix + "_scale", "at [5, 0]");
    EXPECT_NE(s.message().find("finite and positive"), std::string::npos) << s.message();
    EXPECT_EQ(s.code(), ErrorCode::kCorruptData);
  }
}

TEST_F(QuantizeTest, Minus128AndStrayScalesAndAnInt8TokenTableAreRefused) {
  expect_error(load_edited([](std::vector<Tensor>& t) {
                 find(t, kMatrix).bytes[64 * 3 + 7] = 0x80;  // -128 at [3, 7]
               }),
               kMatrix, "-128 at [3, 7]");
  // Scales beside a float weight: the file is not what it claims.
  expect_error(load_edited([](std::vector<Tensor>& t) {
                 Tensor& w = find(t, kMatrix);
                 const Tensor& s = find(t, kMatrix + "_scale");
                 std::vector<uint8_t> f(w.bytes.size() * 4);
                 for (size_t i = 0; i < w.bytes.size(); ++i) {
                   const float v = static_cast<float>(static_cast<int8_t>(w.bytes[i])) * 0.01f;
                   std::memcpy(f.data() + i * 4, &v, 4);
                 }
                 (void)s;
                 w.dtype = DType::kF32;
                 w.bytes = std::move(f);
               }),
               kMatrix + "_scale", "not an int8 weight");
  // The token table is read as a table, never as int8.
  expect_error(load_edited([](std::vector<Tensor>& t) {
                 Tensor& w = find(t, "transformer.wte.weight");
                 w.dtype = DType::kI8;
                 w.bytes.resize(w.bytes.size() / 4);
               }),
               "transformer.wte.weight", "dtype I8");
  // A weight that lost its I8 dtype to I16 of the same bytes: refused by dtype.
  expect_error(load_edited([](std::vector<Tensor>& t) {
                 Tensor& w = find(t, kMatrix);
                 w.dtype = DType::kI16;
                 w.shape[1] /= 2;
               }),
               kMatrix, "shape");
}

TEST_F(QuantizeTest, ModelDirectoryIsWrittenWholeOrNotAtAll) {
  const fs::path out = dir_ / "tiny-int8";
  QuantizeReport report;
  ASSERT_TRUE(quantize_model_dir(kTiny.string(), out.string(), &report).ok());
  EXPECT_TRUE(fs::exists(out / "shape_gpt.safetensors"));
  EXPECT_TRUE(fs::exists(out / "model.json"));
  EXPECT_GE(report.copied.size(), 4u);
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
  }
  auto opened = open_model_dir(out.string());
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ(opened->shape_gpt.file().metadata().at("tessera.weights"), "int8");
  EXPECT_EQ(infer_checkpoint_kind(opened->shape_gpt.file()).get("int8_matrices"),
            report.int8_matrices);
  // The CLIP encoder and the shape tokenizer: the matrices int8 runs in bf16 are stored as BF16
  // (used in place), what the models read in f32 (norms, biases, the codebook) is unchanged.
  EXPECT_GT(report.bf16_matrices, 10);
  EXPECT_LT(report.companion_bytes_out, report.companion_bytes_in);
  auto original = open_model_dir(kTiny.string()).value();
  int64_t bf16 = 0;
  for (const auto* pair : {&opened->text_encoder, &opened->shape_tokenizer}) {
    EXPECT_EQ(pair->file().metadata().at("tessera.matrices"), "bf16");
  }
  for (const auto& [written, source] :
       {std::pair{&opened->text_encoder, &original.text_encoder},
        std::pair{&opened->shape_tokenizer, &original.shape_tokenizer}}) {
    for (const TensorInfo& t : written->file().tensors()) {
      const TensorInfo* was = source->file().find(t.name);
      ASSERT_NE(was, nullptr) << t.name;
      EXPECT_EQ(t.shape, was->shape) << t.name;
      if (t.dtype == was->dtype) continue;
      EXPECT_EQ(t.dtype, DType::kBF16) << t.name;
      EXPECT_EQ(t.shape.size(), 2u) << t.name;  // matrices only
      ++bf16;
    }
  }
  EXPECT_EQ(bf16, report.bf16_matrices);

  // An existing output is never overwritten.
  const Status exists = quantize_model_dir(kTiny.string(), out.string(), nullptr);
  EXPECT_EQ(exists.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(exists.message().find("already exists"), std::string::npos) << exists.message();
  // Inside the source.
  const Status inside = quantize_model_dir(out.string(), (out / "sub").string(), nullptr);
  EXPECT_NE(inside.message().find("inside"), std::string::npos) << inside.message();
  EXPECT_FALSE(fs::exists(out / "sub"));
  // Not a model directory: its own error, and nothing at the output.
  const Status missing =
      quantize_model_dir((dir_ / "nope").string(), (dir_ / "o2").string(), nullptr);
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir_ / "o2"));
  // An already quantized directory: refused, nothing left behind.
  const Status twice = quantize_model_dir(out.string(), (dir_ / "o3").string(), nullptr);
  EXPECT_NE(twice.message().find("already I8"), std::string::npos) << twice.message();
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find("o3"), std::string::npos) << e.path();
  }
}

}  // namespace
}  // namespace tessera::runtime
