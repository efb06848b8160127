// LoRA files merged at load (engine/diffusion/lora.h) against the PyTorch reference
// (tests/fixtures/diffusion/lora/, tools/make_lora_fixtures.py): kohya keys with diffusers and LDM
// paths and text encoder modules, PEFT keys, multipliers, 1x1 and 3x3 convolutions, the merged
// weights and the image they make, both checkpoint layouts; and the files it must refuse.
#include "engine/diffusion/lora.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/diffusion/pipeline.h"
#include "tests/engine/diffusion/diffusion_test_util.h"
#include "tests/engine/diffusion/pipeline_test_util.h"

namespace tessera::diffusion {
namespace {

namespace pt = pipeline_test;
using test_util::close_rel;
using test_util::to_nhwc;

std::string lora_dir() {
  return test_util::fixture_dir() + "lora/";
}

std::vector<float> expected(const std::string& name) {
  auto file = SafeTensors::open(lora_dir() + "expected.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().message();
  auto v = file->to_f32(name);
  EXPECT_TRUE(v.ok()) << name << ": " << v.status().message();
  return v.ok() ? *v : std::vector<float>();
}

class DiffusionLora : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new pt::TempDir("sd-lora");
    ASSERT_TRUE(pt::compvis_tensors(&tensors()));
    ASSERT_TRUE(pt::write_compvis_model(dir_->path() / "compvis", tensors()));
    ASSERT_TRUE(pt::write_diffusers_model(dir_->path() / "diffusers", tensors()));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static pt::Tensors& tensors() {
    static pt::Tensors t;
    return t;
  }
  static DiffusionLoadOptions options() {
    DiffusionLoadOptions o;
    o.unet_heads = pt::kUNetHeads;
    o.text_heads = pt::kTextHeads;
    o.loras = {{lora_dir() + "kohya.safetensors", 1.0f}, {lora_dir() + "peft.safetensors", 0.5f}};
    return o;
  }
  static std::string compvis() { return (dir_->path() / "compvis" / "model.safetensors").string(); }
  static std::string diffusers() { return (dir_->path() / "diffusers").string(); }
  static pt::TempDir* dir_;
};
pt::TempDir* DiffusionLora::dir_ = nullptr;

GenerateRequest fixture_request() {
  GenerateRequest r;
  r.prompt = "a red torus";
  r.width = r.height = 32;
  r.steps = 3;
  r.guidance_scale = 2.0f;
  r.seed = 42;
  return r;
}

TEST(LoraNames, KohyaPathsGetTheirDotsBack) {
  EXPECT_EQ(kohya_path_to_dotted("down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"),
            "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q");
  EXPECT_EQ(kohya_path_to_dotted("up_blocks_1_attentions_2_transformer_blocks_0_ff_net_0_proj"),
            "up_blocks.1.attentions.2.transformer_blocks.0.ff.net.0.proj");
  EXPECT_EQ(kohya_path_to_dotted("input_blocks_7_1_transformer_blocks_0_attn2_to_out_0"),
            "input_blocks.7.1.transformer_blocks.0.attn2.to_out.0");
  EXPECT_EQ(kohya_path_to_dotted("down_blocks_1_resnets_0_conv_shortcut"),
            "down_blocks.1.resnets.0.conv_shortcut");
  EXPECT_EQ(kohya_path_to_dotted("text_model_encoder_layers_11_self_attn_out_proj"),
            "text_model.encoder.layers.11.self_attn.out_proj");
  EXPECT_EQ(kohya_path_to_dotted("text_model_encoder_layers_3_mlp_fc2"),
            "text_model.encoder.layers.3.mlp.fc2");
}

TEST(LoraNames, SpecsWithMultipliers) {
  EXPECT_EQ(parse_lora_spec("style.safetensors").value().multiplier, 1.0f);
  const LoraSpec s = parse_lora_spec("/a/b/style.safetensors:0.8").value();
  EXPECT_EQ(s.path, "/a/b/style.safetensors");
  EXPECT_FLOAT_EQ(s.multiplier, 0.8f);
  EXPECT_EQ(parse_lora_spec("x.safetensors:-1").value().multiplier, -1.0f);
  EXPECT_EQ(parse_lora_spec("C:/loras/x.safetensors").value().path, "C:/loras/x.safetensors");
  EXPECT_FALSE(parse_lora_spec(":0.5").ok());
}

TEST_F(DiffusionLora, MergedModelMatchesPyTorch) {
  for (const std::string& path : {compvis(), diffusers()}) {
    SCOPED_TRACE(path);
    auto model = DiffusionModel::load(path, options());
    ASSERT_TRUE(model.ok()) << model.status().message();
    ASSERT_EQ((*model)->loras().size(), 2u);
    EXPECT_EQ((*model)->loras()[0].unet_modules, 5);
    EXPECT_EQ((*model)->loras()[0].text_modules, 2);
    EXPECT_EQ((*model)->loras()[1].unet_modules, 2);
    EXPECT_EQ((*model)->loras()[1].text_modules, 1);
    std::vector<float> context;
    ASSERT_TRUE((*model)->encode_prompts("a red torus", "", &context).ok());
    EXPECT_TRUE(close_rel(context, expected("text.context"), 1e-5));
    auto image = (*model)->generate(fixture_request());
    ASSERT_TRUE(image.ok()) << image.status().message();
    EXPECT_TRUE(close_rel(image->latents, to_nhwc(expected("latents.2"), 1, 4, 16, 16), 1e-4));
    EXPECT_TRUE(close_rel(image->decoded, to_nhwc(expected("image"), 1, 3, 32, 32), 1e-4));
  }
  // Without the LoRAs the image differs (the fixture is not the plain model's).
  DiffusionLoadOptions plain = options();
  plain.loras.clear();
  auto model = DiffusionModel::load(compvis(), plain);
  ASSERT_TRUE(model.ok());
  auto image = (*model)->generate(fixture_request());
  ASSERT_TRUE(image.ok());
  EXPECT_FALSE(close_rel(image->decoded, to_nhwc(expected("image"), 1, 3, 32, 32), 1e-3));
}

TEST_F(DiffusionLora, MergedWeightsMatchTheReference) {
  // The merge on its own: a 3x3 conv, a 1x1 conv and a text linear layer.
  auto file = SafeTensors::open(compvis());
  ASSERT_TRUE(file.ok());
  WeightStore unet(std::move(*file), WeightFormat::kF32);
  WeightStore text(SafeTensors::open(compvis()).value(), WeightFormat::kF32);
  UNetConfig cfg = infer_unet_config(unet.file(), pt::kUNetHeads).value();
  for (const LoraSpec& spec : options().loras) {
    auto modules = read_lora_modules(spec.path);
    ASSERT_TRUE(modules.ok()) << modules.status().message();
    LoraMerged merged;
    ASSERT_TRUE(
        merge_lora(spec, *modules, cfg, &unet, &text, "cond_stage_model.transformer.", &merged)
            .ok());
  }
  for (const std::string& name : {std::string(kUNetPrefix) + "input_blocks.1.0.in_layers.2.weight",
                                  std::string(kUNetPrefix) + "input_blocks.1.1.proj_in.weight"}) {
    const TensorInfo* info = unet.file().find(name);
    auto got = unet.f32(name, info->shape);
    ASSERT_TRUE(got.ok());
    const std::vector<float> v(*got, *got + info->numel());
    EXPECT_TRUE(close_rel(v, expected("merged." + name), 1e-6)) << name;
  }
  const std::string te = "text_model.encoder.layers.0.self_attn.q_proj.weight";
  auto got = text.f32("cond_stage_model.transformer." + te, {32, 32});
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(close_rel(std::vector<float>(*got, *got + 32 * 32), expected("merged." + te), 1e-6));
}

// A PEFT file's alpha from its metadata (diffusers' lora_adapter_metadata): the fixture's PEFT
// modules have no alpha (scale 1); with "unet.lora_alpha": 8 the rank-4 module's change doubles,
// and an alpha_pattern entry overrides it for the module it names.
TEST_F(DiffusionLora, PeftAlphaFromTheAdapterMetadata) {
  const std::string target =
      std::string(kUNetPrefix) + "input_blocks.1.1.transformer_blocks.0.attn2.to_out.0.weight";
  const auto change = [&](const std::string& lora_path) {
    WeightStore unet(SafeTensors::open(compvis()).value(), WeightFormat::kF32);
    const TensorInfo* info = unet.file().find(target);
    std::vector<float> base = unet.file().to_f32(target).value();
    UNetConfig cfg = infer_unet_config(unet.file(), pt::kUNetHeads).value();
    auto modules = read_lora_modules(lora_path);
    EXPECT_TRUE(modules.ok()) << modules.status().message();
    LoraMerged merged;
    EXPECT_TRUE(merge_lora({lora_path, 1.0f}, *modules, cfg, &unet, nullptr, "", &merged).ok());
    const float* got = unet.f32(target, info->shape).value();
    for (size_t k = 0; k < base.size(); ++k) base[k] = got[k] - base[k];
    return base;
  };
  pt::Tensors t;
  ASSERT_TRUE(pt::read_tensors(lora_dir() + "peft.safetensors", "", &t));
  const auto write_with = [&](const std::string& name, const std::string& metadata) {
    std::vector<TensorToWrite> out;
    for (const auto& [key, v] : t) {
      out.push_back(TensorToWrite::from_f32(key, DType::kF32, v.shape, v.values.data()));
    }
    const std::string path = (dir_->path() / name).string();
    EXPECT_TRUE(write_safetensors(path, out, {{"lora_adapter_metadata", metadata}}).ok());
    return path;
  };
  const std::vector<float> plain = change(lora_dir() + "peft.safetensors");
  const std::vector<float> doubled =
      change(write_with("alpha8.safetensors", R"({"unet.r": 4, "unet.lora_alpha": 8})"));
  const std::vector<float> patterned =
      change(write_with("pattern.safetensors",
                        R"({"unet.lora_alpha": 8, "unet.alpha_pattern": {"attn2.to_out.0": 2}})"));
  ASSERT_EQ(plain.size(), doubled.size());
  double scale = 0, pattern_scale = 0, norm = 0;
  for (size_t k = 0; k < plain.size(); ++k) {
    scale += static_cast<double>(doubled[k]) * plain[k];
    pattern_scale += static_cast<double>(patterned[k]) * plain[k];
    norm += static_cast<double>(plain[k]) * plain[k];
  }
  ASSERT_GT(norm, 0);
  EXPECT_NEAR(scale / norm, 2.0, 1e-4);          // 8 / rank 4
  EXPECT_NEAR(pattern_scale / norm, 0.5, 1e-4);  // 2 / rank 4
  // A malformed metadata entry is named.
  auto bad = read_lora_modules(write_with("bad.safetensors", R"({"unet.lora_alpha": "big"})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("lora_adapter_metadata"), std::string::npos);
  EXPECT_NE(bad.status().message().find("unet.lora_alpha"), std::string::npos);
}

// A LoRA file written from `tensors` (name -> shape, all zeros but the alpha).
std::string write_lora(const pt::TempDir& dir, const std::string& name,
                       const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  pt::Tensors t;
  for (const auto& [key, shape] : tensors) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t[key] = {shape, std::vector<float>(static_cast<size_t>(n), 0.01f)};
  }
  const auto path = dir.path() / (name + ".safetensors");
  EXPECT_TRUE(pt::write_tensors(path, t));
  return path.string();
}

TEST_F(DiffusionLora, BadFilesAreNamedAndNothingLoads) {
  auto load_with = [&](const std::string& path) {
    DiffusionLoadOptions o = options();
    o.loras = {{path, 1.0f}};
    return DiffusionModel::load(compvis(), o).status();
  };
  // SDXL: two text encoders.
  Status st = load_with(
      write_lora(*dir_, "sdxl",
                 {{"lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_down.weight", {4, 768}}}));
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("SDXL"), std::string::npos) << st.message();
  // SD 2.x: a 1024-wide cross-attention does not fit the 32-wide context.
  st = load_with(write_lora(
      *dir_, "sd2",
      {{"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k.lora_down.weight",
        {4, 1024}},
       {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k.lora_up.weight",
        {32, 4}}}));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("attn2_to_k"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("does not fit"), std::string::npos) << st.message();
  // A module this model does not have.
  st = load_with(
      write_lora(*dir_, "other",
                 {{"lora_unet_down_blocks_3_attentions_0_proj_in.lora_down.weight", {4, 32}},
                  {"lora_unet_down_blocks_3_attentions_0_proj_in.lora_up.weight", {32, 4}}}));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("changes no weight"), std::string::npos) << st.message();
  // Keys that match nothing; a down without its up; LoHa.
  st = load_with(write_lora(*dir_, "nothing", {{"model.diffusion_model.out.2.weight", {4}}}));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no LoRA module"), std::string::npos) << st.message();
  st = load_with(write_lora(*dir_, "half", {{"lora_unet_x.lora_down.weight", {4, 32}}}));
  EXPECT_EQ(st.code(), ErrorCode::kCorruptData);
  st = load_with(write_lora(*dir_, "loha", {{"lora_unet_x.hada_w1_a", {4, 32}}}));
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  // A truncated file and a missing one.
  const auto truncated = dir_->path() / "truncated.safetensors";
  {
    std::FILE* f = std::fopen(truncated.c_str(), "wb");
    std::fputs("\x40\x00\x00\x00", f);
    std::fclose(f);
  }
  st = load_with(truncated.string());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("truncated.safetensors"), std::string::npos) << st.message();
  st = load_with((dir_->path() / "missing.safetensors").string());
  EXPECT_EQ(st.code(), ErrorCode::kNotFound) << st.message();
}

}  // namespace
}  // namespace tessera::diffusion
