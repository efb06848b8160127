// ControlNet (engine/diffusion/controlnet.h, DiffusionModel::load_control_net) against the PyTorch
// reference (tests/fixtures/diffusion/controlnet/, tools/make_controlnet_fixtures.py): its
// residuals and the UNet with them at a scale and in guess mode; both file layouts (v1.1
// `control_model.*` and diffusers' names, renamed independently by the Python tool); a
// text-to-image run with guidance; image-to-image + ControlNet + LoRA + LCM at once; and the files
// and requests it must refuse.
#include "engine/diffusion/controlnet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "engine/diffusion/pipeline.h"
#include "kernels/backend.h"
#include "tests/engine/diffusion/diffusion_test_util.h"
#include "tests/engine/diffusion/pipeline_test_util.h"

namespace tessera::diffusion {
namespace {

namespace pt = pipeline_test;
using test_util::close_rel;
using test_util::to_nhwc;

constexpr int64_t kSize = 32, kLatent = 16;

std::string cn_dir() {
  return test_util::fixture_dir() + "controlnet/";
}

std::vector<float> expected(const std::string& name) {
  auto file = SafeTensors::open(cn_dir() + "expected.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().message();
  auto v = file->to_f32(name);
  EXPECT_TRUE(v.ok()) << name << ": " << v.status().message();
  return v.ok() ? *v : std::vector<float>();
}

std::vector<uint8_t> hint_bytes() {
  const std::vector<float> v = expected("hint");
  return std::vector<uint8_t>(v.begin(), v.end());
}

std::vector<float> upload_copy(kernels::Backend& be, const std::vector<float>& host, float** dev,
                               std::vector<kernels::DeviceBuffer>* keep) {
  auto buf = be.allocate(host.size() * sizeof(float));
  EXPECT_TRUE(buf.ok());
  *dev = static_cast<float*>(buf->data());
  EXPECT_TRUE(be.upload(*dev, host.data(), host.size() * sizeof(float)).ok());
  keep->push_back(std::move(*buf));
  return host;
}

TEST(ControlNetConfig, Sd15ShapesAndCount) {
  const ControlNetConfig c = sd15_controlnet_config();
  EXPECT_EQ(c.hint.strides, (std::vector<int64_t>{1, 1, 2, 1, 2, 1, 2, 1}));
  EXPECT_EQ(c.hint.downscale(), 8);
  // The UNet's encoder half, 12 zero convolutions, middle_block_out and the hint encoder: the
  // count of tools/tessera_ref/sd_controlnet.py's ControlNet(SD15_UNET).
  EXPECT_EQ(controlnet_parameter_count(c), 361279120);
  const TensorShapes s = controlnet_tensor_shapes(c);
  EXPECT_EQ(s.at("control_model.input_hint_block.14.weight"),
            (std::vector<int64_t>{320, 256, 3, 3}));
  EXPECT_EQ(s.at("control_model.zero_convs.11.0.weight"), (std::vector<int64_t>{1280, 1280, 1, 1}));
  EXPECT_EQ(s.at("control_model.zero_convs.3.0.bias"), (std::vector<int64_t>{320}));
  EXPECT_EQ(s.count("control_model.output_blocks.0.0.in_layers.0.weight"), 0u);
  EXPECT_EQ(s.count("control_model.zero_convs.12.0.weight"), 0u);
}

TEST(ControlNetConfig, GuessModeScales) {
  const std::vector<float> s = guess_mode_scales(1.0f, 13);
  EXPECT_FLOAT_EQ(s[12], 1.0f);
  EXPECT_NEAR(s[0], std::pow(0.825, 12), 1e-7);
  EXPECT_NEAR(guess_mode_scales(0.5f, 13)[11], 0.5 * 0.825, 1e-7);
}

TEST(ControlNetNames, DiffusersKeys) {
  EXPECT_EQ(diffusers_controlnet_key_to_compvis("controlnet_cond_embedding.conv_in.weight", 2, 6),
            "input_hint_block.0.weight");
  EXPECT_EQ(diffusers_controlnet_key_to_compvis("controlnet_cond_embedding.blocks.5.bias", 2, 6),
            "input_hint_block.12.bias");
  EXPECT_EQ(diffusers_controlnet_key_to_compvis("controlnet_cond_embedding.conv_out.weight", 2, 6),
            "input_hint_block.14.weight");
  EXPECT_EQ(diffusers_controlnet_key_to_compvis("controlnet_down_blocks.11.weight", 2, 6),
            "zero_convs.11.0.weight");
  EXPECT_EQ(diffusers_controlnet_key_to_compvis("controlnet_mid_block.bias", 2, 6),
            "middle_block_out.0.bias");
  EXPECT_EQ(diffusers_controlnet_key_to_compvis("down_blocks.1.resnets.1.conv2.weight", 2, 6),
            "input_blocks.5.0.out_layers.3.weight");
  EXPECT_EQ(diffusers_controlnet_key_to_compvis("down_blocks.2.downsamplers.0.conv.weight", 2, 6),
            "input_blocks.9.0.op.weight");
  EXPECT_EQ(diffusers_controlnet_key_to_compvis("time_embedding.linear_2.bias", 2, 6),
            "time_embed.2.bias");
  EXPECT_EQ(diffusers_controlnet_key_to_compvis("up_blocks.0.resnets.0.conv1.weight", 2, 6), "");
  EXPECT_EQ(diffusers_controlnet_key_to_compvis("controlnet_cond_embedding.blocks.6.weight", 2, 6),
            "");
}

// The residuals of one pass and the UNet with them, on the network classes directly.
TEST(ControlNetForward, ResidualsAndControlledUNetMatchPyTorch) {
  auto sd = SafeTensors::open(pt::sd_tiny_path());
  ASSERT_TRUE(sd.ok()) << sd.status().message();
  auto unet_config = infer_unet_config(*sd, pt::kUNetHeads);
  ASSERT_TRUE(unet_config.ok());
  WeightStore unet_store(std::move(*sd), WeightFormat::kF32);
  auto unet = UNet::load(unet_store, *unet_config);
  ASSERT_TRUE(unet.ok()) << unet.status().message();
  auto cn_file = SafeTensors::open(cn_dir() + "control.safetensors");
  ASSERT_TRUE(cn_file.ok()) << cn_file.status().message();
  auto config = infer_controlnet_config(*cn_file, *unet_config, 2);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->hint.channels, (std::vector<int64_t>{8, 16, 32}));
  EXPECT_EQ(config->hint.strides, (std::vector<int64_t>{1, 2, 1}));
  WeightStore cn_store(std::move(*cn_file), WeightFormat::kF32);
  kernels::Backend& be = (*unet)->backend();
  auto net = ControlNet::load(cn_store, *config, kControlPrefix, &be);
  ASSERT_TRUE(net.ok()) << net.status().message();
  ASSERT_EQ((*net)->residual_count(), 5);

  std::vector<kernels::DeviceBuffer> keep;
  float *x = nullptr, *ctx = nullptr, *hint = nullptr, *eps = nullptr;
  upload_copy(be, to_nhwc(expected("forward.x"), 2, 4, kLatent, kLatent), &x, &keep);
  upload_copy(be, expected("forward.context"), &ctx, &keep);
  upload_copy(be, to_nhwc(expected("forward.hint"), 1, 3, kSize, kSize), &hint, &keep);
  std::vector<float> out(2 * kLatent * kLatent * 4);
  upload_copy(be, out, &eps, &keep);
  const std::vector<float> t = expected("forward.t");
  ASSERT_TRUE((*net)->set_hint(hint, kSize, kSize).ok());
  auto res = (*net)->forward(x, t.data(), ctx, 2, kLatent, kLatent, 77, std::vector<float>(5, 1.0f),
                             {1.0f, 1.0f});
  ASSERT_TRUE(res.ok()) << res.status().message();
  const int64_t sizes[5][3] = {{16, 16, 32}, {16, 16, 32}, {8, 8, 32}, {8, 8, 64}, {8, 8, 64}};
  for (int k = 0; k < 5; ++k) {
    const float* r = k < 4 ? (*res)->skips[static_cast<size_t>(k)] : (*res)->middle;
    const int64_t h = sizes[k][0], w = sizes[k][1], c = sizes[k][2];
    std::vector<float> got(static_cast<size_t>(2 * h * w * c));
    ASSERT_TRUE(be.download(got.data(), r, got.size() * sizeof(float)).ok());
    EXPECT_TRUE(close_rel(
        got, to_nhwc(expected("forward.residual." + std::to_string(k)), 2, c, h, w), 1e-4))
        << "residual " << k;
  }
  // The UNet with them at 0.8, then guess mode (no control on row 0).
  res = (*net)->forward(x, t.data(), ctx, 2, kLatent, kLatent, 77, std::vector<float>(5, 0.8f),
                        {1.0f, 1.0f});
  ASSERT_TRUE(res.ok());
  ASSERT_TRUE((*unet)->forward(x, t.data(), ctx, 2, kLatent, kLatent, 77, eps, *res).ok());
  ASSERT_TRUE(be.download(out.data(), eps, out.size() * sizeof(float)).ok());
  EXPECT_TRUE(close_rel(out, to_nhwc(expected("forward.eps"), 2, 4, kLatent, kLatent), 1e-4));
  res = (*net)->forward(x, t.data(), ctx, 2, kLatent, kLatent, 77, guess_mode_scales(0.8f, 5),
                        {0.0f, 1.0f});
  ASSERT_TRUE(res.ok());
  ASSERT_TRUE((*unet)->forward(x, t.data(), ctx, 2, kLatent, kLatent, 77, eps, *res).ok());
  ASSERT_TRUE(be.download(out.data(), eps, out.size() * sizeof(float)).ok());
  EXPECT_TRUE(close_rel(out, to_nhwc(expected("forward.eps_guess"), 2, 4, kLatent, kLatent), 1e-4));

  // Misuse: a latent size that is not the hint's, wrong scale counts.
  EXPECT_FALSE(
      (*net)->forward(x, t.data(), ctx, 1, 8, 8, 77, std::vector<float>(5, 1.0f), {1.0f}).ok());
  EXPECT_FALSE((*net)
                   ->forward(x, t.data(), ctx, 2, kLatent, kLatent, 77, std::vector<float>(4, 1.0f),
                             {1.0f, 1.0f})
                   .ok());
  EXPECT_FALSE((*net)->set_hint(hint, 31, 32).ok());
}

class DiffusionControlNet : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new pt::TempDir("sd-controlnet");
    ASSERT_TRUE(pt::compvis_tensors(&tensors()));
    ASSERT_TRUE(pt::write_compvis_model(dir_->path() / "compvis", tensors()));
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
    return o;
  }
  static std::unique_ptr<DiffusionModel> load(const DiffusionLoadOptions& o = options()) {
    auto m = DiffusionModel::load((dir_->path() / "compvis" / "model.safetensors").string(), o);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? std::move(*m) : nullptr;
  }
  static pt::TempDir* dir_;
};
pt::TempDir* DiffusionControlNet::dir_ = nullptr;

GenerateRequest fixture_request() {
  GenerateRequest r;
  r.prompt = "a red torus";
  r.width = r.height = kSize;
  r.steps = 3;
  r.guidance_scale = 2.0f;
  r.seed = 42;
  return r;
}

TEST_F(DiffusionControlNet, TextToImageMatchesPyTorchInBothLayouts) {
  auto model = load();
  ASSERT_NE(model, nullptr);
  const std::vector<uint8_t> hint = hint_bytes();
  const ImageView control{hint.data(), kSize, kSize, 3};
  for (const std::string& path : {cn_dir() + "control.safetensors", cn_dir() + "diffusers"}) {
    SCOPED_TRACE(path);
    ASSERT_TRUE(model->load_control_net(path).ok());
    EXPECT_EQ(model->control_net_path(), path);
    GenerateRequest r = fixture_request();
    r.control_image = &control;
    r.control_scale = 0.8f;
    auto image = model->generate(r);
    ASSERT_TRUE(image.ok()) << image.status().message();
    EXPECT_TRUE(close_rel(image->latents,
                          to_nhwc(expected("t2i.latents.2"), 1, 4, kLatent, kLatent), 1e-4));
    EXPECT_TRUE(
        close_rel(image->decoded, to_nhwc(expected("t2i.image"), 1, 3, kSize, kSize), 1e-4));
  }
  // Guess mode: the ControlNet on the prompt's row only, its residuals weighted 0.825^(n-1-i).
  {
    GenerateRequest r = fixture_request();
    r.control_image = &control;
    r.control_scale = 0.8f;
    r.control_guess_mode = true;
    auto guess = model->generate(r);
    ASSERT_TRUE(guess.ok()) << guess.status().message();
    EXPECT_TRUE(close_rel(guess->latents,
                          to_nhwc(expected("t2i_guess.latents.2"), 1, 4, kLatent, kLatent), 1e-4));
  }
  // Without a control image the loaded ControlNet is not used: the plain fixture's image.
  auto plain = model->generate(fixture_request());
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(
      close_rel(plain->latents, to_nhwc(expected("t2i.latents.2"), 1, 4, kLatent, kLatent), 1e-2));
  // Scale 0 is the plain image too (the ControlNet is not run).
  GenerateRequest r = fixture_request();
  r.control_image = &control;
  r.control_scale = 0.0f;
  auto zero = model->generate(r);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(close_rel(zero->latents, plain->latents, 1e-6));
  model->unload_control_net();
  EXPECT_FALSE(model->has_control_net());
}

TEST_F(DiffusionControlNet, ImageToImageWithLoraLcmAndControlNetMatchesPyTorch) {
  DiffusionLoadOptions o = options();
  o.loras = {{test_util::fixture_dir() + "lora/kohya.safetensors", 1.0f}};
  auto model = load(o);
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->load_control_net(cn_dir() + "control.safetensors").ok());
  auto pipe = SafeTensors::open(pt::pipeline_fixture_dir() + "/expected.safetensors");
  ASSERT_TRUE(pipe.ok());
  const std::vector<float> rgb_f = pipe->to_f32("i2i.rgb").value();
  const std::vector<uint8_t> rgb(rgb_f.begin(), rgb_f.end()), hint = hint_bytes();
  const ImageView init{rgb.data(), kSize, kSize, 3}, control{hint.data(), kSize, kSize, 3};
  GenerateRequest r = fixture_request();
  r.steps = 4;
  r.strength = 0.75f;
  r.guidance_scale = 1.0f;
  r.sampler = SamplerKind::kLcm;
  r.init_image = &init;
  r.control_image = &control;
  r.control_scale = 0.8f;
  auto image = model->generate(r);
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_TRUE(
      close_rel(image->latents, to_nhwc(expected("all.latents"), 1, 4, kLatent, kLatent), 1e-4));
  EXPECT_TRUE(close_rel(image->decoded, to_nhwc(expected("all.image"), 1, 3, kSize, kSize), 1e-4));
}

TEST_F(DiffusionControlNet, BadFilesAndRequestsAreNamed) {
  auto model = load();
  ASSERT_NE(model, nullptr);
  const std::vector<uint8_t> hint = hint_bytes();
  const ImageView control{hint.data(), kSize, kSize, 3};
  GenerateRequest r = fixture_request();
  r.control_image = &control;
  auto none = model->generate(r);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("ControlNet"), std::string::npos);

  auto missing = model->load_control_net((dir_->path() / "nope.safetensors").string());
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound);
  // A pickle is refused by name.
  const pt::fs::path pth = dir_->path() / "control_v11f1p_sd15_depth.pth";
  std::ofstream(pth) << "not a pickle";
  auto pickle = model->load_control_net(pth.string());
  EXPECT_EQ(pickle.code(), ErrorCode::kUnsupported);
  EXPECT_NE(pickle.message().find(".safetensors"), std::string::npos);
  // The UNet itself is no ControlNet.
  auto unet = model->load_control_net(pt::sd_tiny_path());
  EXPECT_EQ(unet.code(), ErrorCode::kNotFound);
  EXPECT_NE(unet.message().find("input_hint_block.0.weight"), std::string::npos);

  // Edited copies of the fixture: an SD 2.x-wide context, a truncated file, a missing zero conv.
  pt::Tensors t;
  ASSERT_TRUE(pt::read_tensors(cn_dir() + "control.safetensors", "", &t));
  auto write = [&](const pt::Tensors& tensors, const std::string& name) {
    const pt::fs::path p = dir_->path() / name;
    EXPECT_TRUE(pt::write_tensors(p, tensors));
    return p.string();
  };
  {
    pt::Tensors wide = t;
    for (auto& [name, v] : wide) {
      if (name.find("attn2.to_k.weight") != std::string::npos ||
          name.find("attn2.to_v.weight") != std::string::npos) {
        v.shape[1] = 64;
        v.values.resize(static_cast<size_t>(v.shape[0] * 64));
      }
    }
    auto st = model->load_control_net(write(wide, "sd2.safetensors"));
    EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << st.message();
    EXPECT_NE(st.message().find("another Stable Diffusion version"), std::string::npos);
  }
  {
    pt::Tensors cut = t;
    cut.erase("control_model.zero_convs.2.0.weight");
    auto st = model->load_control_net(write(cut, "cut.safetensors"));
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("zero_convs.2.0.weight"), std::string::npos) << st.message();
  }
  {
    const std::string good = cn_dir() + "control.safetensors";
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const pt::fs::path p = dir_->path() / "truncated.safetensors";
    std::ofstream(p, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    auto st = model->load_control_net(p.string());
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("truncated.safetensors"), std::string::npos) << st.message();
  }
  // After failures nothing is loaded, and a good file still loads.
  EXPECT_FALSE(model->has_control_net());
  ASSERT_TRUE(model->load_control_net(cn_dir() + "control.safetensors").ok());
  // A control image of another size, or a scale out of range.
  const ImageView small{hint.data(), 16, 16, 3};
  r.control_image = &small;
  EXPECT_EQ(model->generate(r).status().code(), ErrorCode::kInvalidArgument);
  r.control_image = &control;
  r.control_scale = -1.0f;
  EXPECT_EQ(model->generate(r).status().code(), ErrorCode::kInvalidArgument);
  r.control_scale = std::nanf("");
  EXPECT_EQ(model->generate(r).status().code(), ErrorCode::kInvalidArgument);
}

// The tiny decoder (TAESD) loads onto a model whose latents it reads; this fixture model's VAE
// is x2, a TAESD x8: refused by name. Its decode itself is tiny_decoder_test's.
TEST_F(DiffusionControlNet, TinyDecoderForAnotherLatentScaleIsRefused) {
  auto model = load();
  ASSERT_NE(model, nullptr);
  GenerateRequest r = fixture_request();
  r.tiny_decode = true;
  auto none = model->generate(r);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("tiny decoder"), std::string::npos);

  const std::string taesd = pt::source_dir() + "/tests/fixtures/diffusion/taesd/";
  for (const std::string& path : {taesd + "taesd_decoder.safetensors", taesd + "diffusers"}) {
    const Status st = model->load_tiny_decoder(path);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << path;
    EXPECT_NE(st.message().find("x8"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("x2"), std::string::npos) << st.message();
  }
  EXPECT_FALSE(model->has_tiny_decoder());
  EXPECT_EQ(model->load_tiny_decoder(pt::sd_tiny_path()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(model->load_tiny_decoder((dir_->path() / "none.safetensors").string()).code(),
            ErrorCode::kNotFound);
  const pt::fs::path pth = dir_->path() / "taesd_decoder.pth";
  std::ofstream(pth) << "not a pickle";
  EXPECT_EQ(model->load_tiny_decoder(pth.string()).code(), ErrorCode::kUnsupported);
  EXPECT_EQ(model->load_tiny_decoder(dir_->path().string()).code(), ErrorCode::kNotFound)
      << "a folder without a tiny decoder file";
  EXPECT_TRUE(model->tiny_decoder_path().empty());
}

}  // namespace
}  // namespace tessera::diffusion
