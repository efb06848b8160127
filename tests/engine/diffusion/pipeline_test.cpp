// The SD text-to-image pipeline (engine/diffusion/pipeline.h) against the PyTorch reference
// (tests/fixtures/diffusion/pipeline/, tools/make_pipeline_fixtures.py), both checkpoint layouts,
// and its bad-input paths.
#include "engine/diffusion/pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/engine/diffusion/diffusion_test_util.h"
#include "tests/engine/diffusion/pipeline_test_util.h"

namespace tessera::diffusion {
namespace {

namespace pt = pipeline_test;
using test_util::close_rel;
using test_util::to_nhwc;

constexpr int64_t kSize = 32;  // pixels (16 x 16 latents)
constexpr int64_t kLatent = 16;

std::vector<float> expected(const std::string& name) {
  auto file = SafeTensors::open(pt::pipeline_fixture_dir() + "/expected.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().message();
  auto v = file->to_f32(name);
  EXPECT_TRUE(v.ok()) << v.status().message();
  return *v;
}

DiffusionLoadOptions compvis_options() {
  DiffusionLoadOptions o;
  o.unet_heads = pt::kUNetHeads;
  o.text_heads = pt::kTextHeads;
  return o;
}

GenerateRequest fixture_request() {
  GenerateRequest r;
  r.prompt = "a red torus";
  r.negative_prompt = "";
  r.width = r.height = kSize;
  r.steps = 3;
  r.guidance_scale = 2.0f;
  r.sampler = SamplerKind::kEuler;
  r.seed = 42;
  return r;
}

// Both layouts written once for the suite.
class DiffusionPipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new pt::TempDir("sd-pipeline");
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
  static std::string compvis_file() {
    return (dir_->path() / "compvis" / "model.safetensors").string();
  }
  static std::string diffusers_dir() { return (dir_->path() / "diffusers").string(); }

  static std::unique_ptr<DiffusionModel> load_compvis() {
    auto m = DiffusionModel::load(compvis_file(), compvis_options());
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? std::move(*m) : nullptr;
  }
  // An edited CompVis model in its own directory; returns the load result.
  static Expected<std::unique_ptr<DiffusionModel>> load_edited(
      const std::string& name, const std::function<void(pt::Tensors&)>& edit) {
    pt::Tensors t = tensors();
    edit(t);
    const auto dir = dir_->path() / name;
    EXPECT_TRUE(pt::write_compvis_model(dir, t));
    return DiffusionModel::load((dir / "model.safetensors").string(), compvis_options());
  }

  static pt::TempDir* dir_;
};
pt::TempDir* DiffusionPipeline::dir_ = nullptr;

TEST_F(DiffusionPipeline, MatchesPyTorchReference) {
  auto model = load_compvis();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->files().layout, ModelLayout::kCompVis);
  EXPECT_EQ(model->size_multiple(), 4);  // VAE 2x, UNet one downsample
  EXPECT_EQ(model->unet_config().context_dim, model->text_width());

  std::vector<float> context;
  ASSERT_TRUE(model->encode_prompts("a red torus", "", &context).ok());
  EXPECT_TRUE(close_rel(context, expected("text.context"), 1e-5));

  // The seed's noise is the reference's (NoiseRng reimplemented in Python).
  std::vector<float> noise(static_cast<size_t>(kLatent * kLatent * 4));
  NoiseRng(42).fill(0, noise.data(), static_cast<int64_t>(noise.size()));
  const std::vector<float> ref_noise = to_nhwc(expected("noise"), 1, 4, kLatent, kLatent);
  EXPECT_TRUE(close_rel(noise, ref_noise, 1e-6));

  std::vector<std::vector<float>> latents;
  std::vector<double> sigmas;
  GenerateCallbacks cb;
  cb.on_step = [&](const StepProgress& p) {
    EXPECT_EQ(p.step, static_cast<int>(latents.size()));
    EXPECT_EQ(p.steps, 3);
    EXPECT_EQ(p.latent_height, kLatent);
    EXPECT_EQ(p.latent_channels, 4);
    EXPECT_GE(p.ms, 0.0);
    EXPECT_NE(p.preview_rgb, nullptr);
    latents.emplace_back(p.latents, p.latents + kLatent * kLatent * 4);
    sigmas.push_back(p.sigma);
  };
  auto image = model->generate(fixture_request(), cb);
  ASSERT_TRUE(image.ok()) << image.status().message();
  ASSERT_EQ(latents.size(), 3u);
  const std::vector<float> ref_sigmas = expected("sigmas");
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(sigmas[i], ref_sigmas[i], 1e-5 * ref_sigmas[i]) << "step " << i;
    // Three UNet passes in f32 with different summation orders: 1e-4 of the largest value.
    EXPECT_TRUE(close_rel(latents[i],
                          to_nhwc(expected("latents." + std::to_string(i)), 1, 4, kLatent, kLatent),
                          1e-4))
        << "latents after step " << i;
  }
  const std::vector<float> ref_image = to_nhwc(expected("image"), 1, 3, kSize, kSize);
  EXPECT_TRUE(close_rel(image->decoded, ref_image, 1e-4));
  ASSERT_EQ(image->rgb.size(), static_cast<size_t>(kSize * kSize * 3));
  std::vector<uint8_t> ref_rgb(ref_image.size());
  image_to_rgb8(ref_image.data(), kSize * kSize, ref_rgb.data());
  int worst = 0;
  for (size_t k = 0; k < ref_rgb.size(); ++k) {
    worst = std::max(worst, std::abs(static_cast<int>(ref_rgb[k]) - image->rgb[k]));
  }
  EXPECT_LE(worst, 1);

  // Caller-supplied noise equal to the seed's gives the same image.
  GenerateRequest with_noise = fixture_request();
  with_noise.seed = 7;
  with_noise.initial_noise = &noise;
  auto again = model->generate(with_noise);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->rgb, image->rgb);
}

// The UNet's head count is not in the tensor shapes: a Tessera model card next to a CompVis file
// supplies it ("unet": {"num_heads": N}) when the caller gives none; a malformed card is named.
// DiffusionLoadOptions::precision: kAuto is f32 for the tiny models (the reference parity above
// runs in it) and bf16 for SD-size UNets where the CPU has AVX-512 BF16; kBf16 falls back to f32
// elsewhere; the loaded model reports what it runs.
TEST_F(DiffusionPipeline, ComputePrecisionPolicy) {
  const bool bf16 = kernels::cpu::bf16_compute_available();
  const auto want_bf16 = bf16 ? kernels::Precision::kBf16 : kernels::Precision::kF32;
  EXPECT_EQ(resolve_precision(ComputePrecision::kAuto, 32), kernels::Precision::kF32);
  EXPECT_EQ(resolve_precision(ComputePrecision::kAuto, 320), want_bf16);
  EXPECT_EQ(resolve_precision(ComputePrecision::kF32, 320), kernels::Precision::kF32);
  EXPECT_EQ(resolve_precision(ComputePrecision::kBf16, 32), want_bf16);
  auto model = load_compvis();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->compute_precision(), kernels::Precision::kF32);
  KernelOptions o;
  o.precision = kernels::Precision::kBf16;
  model->set_kernel_options(o);
  EXPECT_EQ(model->compute_precision(), want_bf16);
  EXPECT_STREQ(model->compute_precision_label(), bf16 ? "bf16" : "f32");
}

TEST_F(DiffusionPipeline, ModelCardGivesTheUNetHeads) {
  auto reference = load_compvis();
  ASSERT_NE(reference, nullptr);
  auto want = reference->generate(fixture_request(), {});
  ASSERT_TRUE(want.ok()) << want.status().message();

  const auto dir = dir_->path() / "carded";
  ASSERT_TRUE(pt::write_compvis_model(dir, tensors()));
  ASSERT_TRUE(pt::write_text(
      dir / "model.json", "{\"unet\": {\"num_heads\": " + std::to_string(pt::kUNetHeads) + "}}"));
  DiffusionLoadOptions o;
  o.text_heads = pt::kTextHeads;  // unet_heads left 0: from the card
  auto carded = DiffusionModel::load((dir / "model.safetensors").string(), o);
  ASSERT_TRUE(carded.ok()) << carded.status().message();
  EXPECT_EQ((*carded)->unet_config().num_heads, pt::kUNetHeads);
  auto got = (*carded)->generate(fixture_request(), {});
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->rgb, want->rgb);

  ASSERT_TRUE(pt::write_text(dir / "model.json", "{\"unet\": {\"num_heads\": \"four\"}}"));
  auto bad = DiffusionModel::load((dir / "model.safetensors").string(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.json"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("unet.num_heads"), std::string::npos);
}

TEST_F(DiffusionPipeline, DiffusersFolderGivesTheSameImage) {
  auto diffusers = DiffusionModel::load(diffusers_dir());  // heads from the config files
  ASSERT_TRUE(diffusers.ok()) << diffusers.status().message();
  EXPECT_EQ((*diffusers)->files().layout, ModelLayout::kDiffusers);
  auto compvis = load_compvis();
  ASSERT_NE(compvis, nullptr);
  EXPECT_EQ((*diffusers)->unet_config().summary(), compvis->unet_config().summary());
  EXPECT_EQ((*diffusers)->vae_config().summary(), compvis->vae_config().summary());
  auto a = (*diffusers)->generate(fixture_request());
  auto b = compvis->generate(fixture_request());
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->decoded, b->decoded);
  EXPECT_EQ(a->rgb, b->rgb);
}

TEST_F(DiffusionPipeline, GuidanceNegativePromptAndSeed) {
  auto model = load_compvis();
  ASSERT_NE(model, nullptr);
  GenerateRequest r = fixture_request();
  auto cfg2 = model->generate(r);
  r.guidance_scale = 1.0f;  // one UNet pass, the negative prompt unused
  auto cfg1 = model->generate(r);
  r.negative_prompt = "a blue cube";
  auto cfg1_neg = model->generate(r);
  ASSERT_TRUE(cfg2.ok() && cfg1.ok() && cfg1_neg.ok());
  EXPECT_NE(cfg1->latents, cfg2->latents);
  EXPECT_EQ(cfg1->latents, cfg1_neg->latents);
  r.guidance_scale = 2.0f;
  auto cfg2_neg = model->generate(r);
  ASSERT_TRUE(cfg2_neg.ok());
  EXPECT_NE(cfg2_neg->latents, cfg2->latents);

  // Same seed: identical; another seed: different.
  r = fixture_request();
  auto again = model->generate(r);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->rgb, cfg2->rgb);
  EXPECT_EQ(again->latents, cfg2->latents);
  r.seed = 43;
  auto other = model->generate(r);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->latents, cfg2->latents);

  // The other samplers run and differ from Euler.
  for (SamplerKind kind : {SamplerKind::kEulerAncestral, SamplerKind::kDpmpp2m}) {
    r = fixture_request();
    r.sampler = kind;
    auto s = model->generate(r);
    ASSERT_TRUE(s.ok()) << sampler_kind_name(kind) << ": " << s.status().message();
    EXPECT_NE(s->latents, cfg2->latents) << sampler_kind_name(kind);
  }
}

// The fixture's init image and mask as bytes.
std::vector<uint8_t> fixture_bytes(const std::string& name) {
  const std::vector<float> v = expected(name);
  return std::vector<uint8_t>(v.begin(), v.end());
}

// Runs `request` with the fixture's init image (and mask when `masked`), collecting the latents of
// every step run.
Expected<GeneratedImage> run_image_request(DiffusionModel& model, GenerateRequest r, bool masked,
                                           std::vector<std::vector<float>>* latents) {
  const std::vector<uint8_t> rgb = fixture_bytes("i2i.rgb"), mask = fixture_bytes("i2i.mask");
  const ImageView init{rgb.data(), kSize, kSize, 3}, mask_view{mask.data(), kSize, kSize, 1};
  r.init_image = &init;
  if (masked) r.mask = &mask_view;
  GenerateCallbacks cb;
  cb.on_step = [&](const StepProgress& p) {
    latents->emplace_back(p.latents, p.latents + kLatent * kLatent * 4);
  };
  return model.generate(r, cb);
}

TEST_F(DiffusionPipeline, ImageToImageMatchesPyTorchReference) {
  auto model = load_compvis();
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->has_encoder());
  EXPECT_FALSE(model->is_inpainting());
  GenerateRequest r = fixture_request();
  r.steps = 5;
  r.strength = 0.6f;
  std::vector<std::vector<float>> latents;
  auto image = run_image_request(*model, r, false, &latents);
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(static_cast<int>(expected("i2i.first")[0]), 2);
  EXPECT_EQ(image->steps_run, 3);  // the last floor(5 x 0.6) of 5
  ASSERT_EQ(latents.size(), 3u);
  for (size_t i = 0; i < latents.size(); ++i) {
    EXPECT_TRUE(close_rel(
        latents[i], to_nhwc(expected("i2i.latents." + std::to_string(i)), 1, 4, kLatent, kLatent),
        1e-4))
        << "latents after step " << i;
  }
  EXPECT_TRUE(close_rel(image->decoded, to_nhwc(expected("i2i.image"), 1, 3, kSize, kSize), 1e-4));
  EXPECT_GT(image->encode_ms, 0.0);
}

TEST_F(DiffusionPipeline, FloatStrengthsRunTheStepsPeopleExpect) {
  // 0.7f is 0.69999998: 0.7 of 10 steps still runs 7 (diffusers: int(10 * 0.7) = 7).
  auto model = load_compvis();
  ASSERT_NE(model, nullptr);
  GenerateRequest r = fixture_request();
  r.steps = 10;
  r.strength = 0.7f;
  std::vector<std::vector<float>> latents;
  auto image = run_image_request(*model, r, false, &latents);
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(image->steps_run, 7);
  EXPECT_EQ(latents.size(), 7u);
}

TEST_F(DiffusionPipeline, InpaintingMatchesPyTorchReference) {
  auto model = load_compvis();
  ASSERT_NE(model, nullptr);
  GenerateRequest r = fixture_request();
  r.strength = 1.0f;
  std::vector<std::vector<float>> latents;
  auto image = run_image_request(*model, r, true, &latents);
  ASSERT_TRUE(image.ok()) << image.status().message();
  ASSERT_EQ(latents.size(), 3u);
  const std::vector<float> want = to_nhwc(expected("inpaint.latents"), 1, 4, kLatent, kLatent);
  EXPECT_TRUE(close_rel(latents.back(), want, 1e-4));
  EXPECT_TRUE(
      close_rel(image->decoded, to_nhwc(expected("inpaint.image"), 1, 3, kSize, kSize), 1e-4));
  // The kept cells are the init image's latents (the clean init after the last step; the
  // reference's encoder sums in another order, hence the tolerance); repainted cells are not.
  const std::vector<float> init = to_nhwc(expected("i2i.init_latents"), 1, 4, kLatent, kLatent);
  EXPECT_NEAR(latents.back()[0], init[0], 1e-5);  // cell (0, 0) is outside the rectangle
  EXPECT_GT(std::abs(latents.back()[(8 * kLatent + 8) * 4] - init[(8 * kLatent + 8) * 4]), 1e-2);
}

TEST_F(DiffusionPipeline, InpaintingUNetMatchesPyTorchReference) {
  const std::vector<float> conv_in = expected("inpaint9.conv_in");
  auto model = load_edited("inpaint9", [&](pt::Tensors& t) {
    auto& w = t.at("model.diffusion_model.input_blocks.0.0.weight");
    w.shape = {w.shape[0], 9, 3, 3};
    w.values = conv_in;
  });
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_TRUE((*model)->is_inpainting());
  GenerateRequest r = fixture_request();
  r.strength = 1.0f;
  std::vector<std::vector<float>> latents;
  auto image = run_image_request(**model, r, true, &latents);
  ASSERT_TRUE(image.ok()) << image.status().message();
  ASSERT_EQ(latents.size(), 3u);
  EXPECT_TRUE(close_rel(latents.back(),
                        to_nhwc(expected("inpaint9.latents"), 1, 4, kLatent, kLatent), 1e-4));
  EXPECT_TRUE(
      close_rel(image->decoded, to_nhwc(expected("inpaint9.image"), 1, 3, kSize, kSize), 1e-4));
  // Text-to-image still works with an inpainting UNet (a grey masked image, a mask of ones).
  auto t2i = (*model)->generate(fixture_request());
  EXPECT_TRUE(t2i.ok()) << t2i.status().message();
}

TEST_F(DiffusionPipeline, LcmImageToImageMatchesPyTorchReference) {
  // LCM, 2 steps at strength 0.5 (timesteps 499, 259), guidance 1: one UNet pass per step, the
  // per-step noise from the seed's streams 1 and 2.
  auto model = load_compvis();
  ASSERT_NE(model, nullptr);
  GenerateRequest r = fixture_request();
  r.steps = 2;
  r.strength = 0.5f;
  r.guidance_scale = 1.0f;
  r.sampler = SamplerKind::kLcm;
  std::vector<std::vector<float>> latents;
  auto image = run_image_request(*model, r, false, &latents);
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(image->steps_run, 2);
  const std::vector<float> t = expected("lcm.timesteps");
  EXPECT_EQ(t, (std::vector<float>{499, 259}));
  ASSERT_EQ(latents.size(), 2u);
  EXPECT_TRUE(
      close_rel(latents.back(), to_nhwc(expected("lcm.latents"), 1, 4, kLatent, kLatent), 1e-4));
  EXPECT_TRUE(close_rel(image->decoded, to_nhwc(expected("lcm.image"), 1, 3, kSize, kSize), 1e-4));
}

TEST_F(DiffusionPipeline, BadImageInputsAreNamed) {
  auto model = load_compvis();
  ASSERT_NE(model, nullptr);
  std::vector<uint8_t> rgb(kSize * kSize * 3, 100), black(kSize * kSize, 0);
  const ImageView init{rgb.data(), kSize, kSize, 3};
  const ImageView mask{black.data(), kSize, kSize, 1};
  auto message_of = [&](const GenerateRequest& r) {
    auto s = model->generate(r);
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.status().message();
  };
  GenerateRequest r = fixture_request();
  r.mask = &mask;
  EXPECT_NE(message_of(r).find("needs an init image"), std::string::npos);
  r.init_image = &init;
  EXPECT_NE(message_of(r).find("nothing would be repainted"), std::string::npos);
  r = fixture_request();
  r.init_image = &init;
  for (float bad : {0.0f, -0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    r.strength = bad;
    EXPECT_NE(message_of(r).find("outside (0, 1]"), std::string::npos) << bad;
  }
  r.strength = 0.1f;  // floor(3 x 0.1) = 0 steps
  EXPECT_NE(message_of(r).find("runs no step"), std::string::npos);
  r.strength = 0.5f;
  const ImageView small{rgb.data(), 16, 16, 3};
  r.init_image = &small;
  EXPECT_NE(message_of(r).find("init image is 16x16, the image 32x32"), std::string::npos);
  const ImageView grey{rgb.data(), kSize, kSize, 1};
  r.init_image = &grey;
  EXPECT_NE(message_of(r).find("1 channels"), std::string::npos);

  // A model without an encoder says what is missing; text-to-image still works.
  auto decoder_only = load_edited("no-encoder", [](pt::Tensors& t) {
    for (auto it = t.begin(); it != t.end();) {
      const bool enc = it->first.rfind("first_stage_model.encoder.", 0) == 0 ||
                       it->first.rfind("first_stage_model.quant_conv.", 0) == 0;
      it = enc ? t.erase(it) : std::next(it);
    }
  });
  ASSERT_TRUE(decoder_only.ok()) << decoder_only.status().message();
  EXPECT_FALSE((*decoder_only)->has_encoder());
  r.init_image = &init;
  auto s = (*decoder_only)->generate(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(s.status().message().find("VAE encoder"), std::string::npos) << s.status().message();
  EXPECT_TRUE((*decoder_only)->generate(fixture_request()).ok());
}

TEST_F(DiffusionPipeline, BadRequests) {
  auto model = load_compvis();
  ASSERT_NE(model, nullptr);
  GenerateRequest r = fixture_request();
  r.width = 30;
  auto s = model->generate(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("width 30"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("multiple of 4"), std::string::npos);
  r = fixture_request();
  r.height = 0;
  s = model->generate(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("height 0"), std::string::npos);
  r = fixture_request();
  r.steps = 0;
  s = model->generate(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("steps"), std::string::npos);
  r = fixture_request();
  r.guidance_scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(model->generate(r).ok());
  r = fixture_request();
  std::vector<float> short_noise(10);
  r.initial_noise = &short_noise;
  s = model->generate(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("initial noise"), std::string::npos);
}

TEST_F(DiffusionPipeline, CancellationMidDenoise) {
  auto model = load_compvis();
  ASSERT_NE(model, nullptr);
  std::atomic<bool> cancel{false};
  int steps_seen = 0;
  GenerateCallbacks cb;
  cb.cancel = &cancel;
  cb.on_step = [&](const StepProgress& p) {
    ++steps_seen;
    if (p.step == 0) cancel.store(true);
  };
  auto s = model->generate(fixture_request(), cb);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kCancelled);
  EXPECT_NE(s.status().message().find("after 1 of 3 steps"), std::string::npos)
      << s.status().message();
  EXPECT_EQ(steps_seen, 1);
  // Cancelled before anything runs; then the model is still usable.
  s = model->generate(fixture_request(), cb);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kCancelled);
  cancel.store(false);
  cb.on_step = nullptr;
  EXPECT_TRUE(model->generate(fixture_request(), cb).ok());
}

TEST_F(DiffusionPipeline, NaNInLatentsReportsTheStep) {
  auto model = load_edited("nan", [](pt::Tensors& t) {
    t.at("model.diffusion_model.out.2.bias").values[1] = std::numeric_limits<float>::quiet_NaN();
  });
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto s = (*model)->generate(fixture_request());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kCorruptData);
  // The sampler numbers steps from 0: the first step fails.
  EXPECT_NE(s.status().message().find("step 0 of 3"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("NaN"), std::string::npos);
}

TEST_F(DiffusionPipeline, MissingPartsAndOtherVersionsAreNamed) {
  // No VAE in the CompVis file.
  auto m = load_edited("novae", [](pt::Tensors& t) {
    std::erase_if(t, [](const auto& kv) { return kv.first.rfind("first_stage_model.", 0) == 0; });
  });
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(m.status().message().find("VAE"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("model.safetensors"), std::string::npos);
  // One VAE tensor missing: named.
  m = load_edited("vaehole",
                  [](pt::Tensors& t) { t.erase("first_stage_model.decoder.mid.attn_1.q.weight"); });
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("decoder.mid.attn_1.q.weight"), std::string::npos)
      << m.status().message();
  // A diffusers folder without vae/.
  const auto dir = dir_->path() / "diffusers-novae";
  ASSERT_TRUE(pt::write_diffusers_model(dir, tensors(), /*with_vae=*/false));
  m = DiffusionModel::load(dir.string());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(m.status().message().find("vae/diffusion_pytorch_model.safetensors"), std::string::npos)
      << m.status().message();
  // SD 2.x: linear proj_in.
  m = load_edited("sd2", [](pt::Tensors& t) {
    for (auto& [name, tensor] : t) {
      if (name.find("proj_in.weight") != std::string::npos) tensor.shape.resize(2);
    }
  });
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(m.status().message().find("SD 2.x"), std::string::npos) << m.status().message();
  // SD 2.x: OpenCLIP text encoder.
  m = load_edited("sd2clip", [](pt::Tensors& t) {
    t["cond_stage_model.model.token_embedding.weight"] = {{4, 2}, std::vector<float>(8, 0.f)};
  });
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(m.status().message().find("SD 2.x"), std::string::npos) << m.status().message();
  // Context dim 16 in the UNet vs a width-32 text encoder.
  m = load_edited("ctx", [](pt::Tensors& t) {
    for (auto& [name, tensor] : t) {
      if (name.find("attn2.to_k.weight") != std::string::npos ||
          name.find("attn2.to_v.weight") != std::string::npos) {
        const int64_t rows = tensor.shape[0], cols = tensor.shape[1];
        std::vector<float> cut;
        for (int64_t r = 0; r < rows; ++r) {
          cut.insert(cut.end(), tensor.values.begin() + r * cols,
                     tensor.values.begin() + r * cols + 16);
        }
        tensor = {{rows, 16}, cut};
      }
    }
  });
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("context dim 16"), std::string::npos) << m.status().message();
  // Nothing there.
  m = DiffusionModel::load((dir_->path() / "nothing").string());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kNotFound);
}

TEST(DiffusersKeys, SD15NamesMapToCompVis) {
  const auto attn = [](int64_t i) { return i >= 1; };  // SD 1.5: up_blocks 1..3 have attention
  EXPECT_EQ(diffusers_unet_key_to_compvis("down_blocks.1.attentions.0.proj_in.weight", 2, attn),
            "input_blocks.4.1.proj_in.weight");
  EXPECT_EQ(diffusers_unet_key_to_compvis("down_blocks.2.downsamplers.0.conv.weight", 2, attn),
            "input_blocks.9.0.op.weight");
  EXPECT_EQ(diffusers_unet_key_to_compvis("down_blocks.3.resnets.1.conv_shortcut.bias", 2, attn),
            "input_blocks.11.0.skip_connection.bias");
  EXPECT_EQ(diffusers_unet_key_to_compvis("mid_block.resnets.1.time_emb_proj.weight", 2, attn),
            "middle_block.2.emb_layers.1.weight");
  EXPECT_EQ(diffusers_unet_key_to_compvis("up_blocks.0.upsamplers.0.conv.bias", 2, attn),
            "output_blocks.2.1.conv.bias");
  EXPECT_EQ(diffusers_unet_key_to_compvis("up_blocks.1.upsamplers.0.conv.weight", 2, attn),
            "output_blocks.5.2.conv.weight");
  EXPECT_EQ(diffusers_unet_key_to_compvis(
                "up_blocks.3.attentions.2.transformer_blocks.0.attn2.to_k.weight", 2, attn),
            "output_blocks.11.1.transformer_blocks.0.attn2.to_k.weight");
  EXPECT_EQ(diffusers_unet_key_to_compvis("time_embedding.linear_2.bias", 2, attn),
            "time_embed.2.bias");
  EXPECT_EQ(diffusers_unet_key_to_compvis("add_embedding.linear_1.weight", 2, attn), "");
  EXPECT_EQ(diffusers_vae_key_to_compvis("decoder.up_blocks.0.resnets.2.conv_shortcut.weight", 4),
            "decoder.up.3.block.2.nin_shortcut.weight");
  EXPECT_EQ(diffusers_vae_key_to_compvis("decoder.up_blocks.2.upsamplers.0.conv.bias", 4),
            "decoder.up.1.upsample.conv.bias");
  EXPECT_EQ(diffusers_vae_key_to_compvis("decoder.mid_block.attentions.0.to_out.0.weight", 4),
            "decoder.mid.attn_1.proj_out.weight");
  EXPECT_EQ(diffusers_vae_key_to_compvis("decoder.mid_block.attentions.0.key.bias", 4),
            "decoder.mid.attn_1.k.bias");
  EXPECT_EQ(diffusers_vae_key_to_compvis("encoder.conv_in.weight", 4), "encoder.conv_in.weight");
  EXPECT_EQ(diffusers_vae_key_to_compvis("encoder.down_blocks.1.resnets.0.conv_shortcut.bias", 4),
            "encoder.down.1.block.0.nin_shortcut.bias");
  EXPECT_EQ(diffusers_vae_key_to_compvis("encoder.down_blocks.2.downsamplers.0.conv.weight", 4),
            "encoder.down.2.downsample.conv.weight");
  EXPECT_EQ(diffusers_vae_key_to_compvis("encoder.mid_block.attentions.0.query.weight", 4),
            "encoder.mid.attn_1.q.weight");
  EXPECT_EQ(diffusers_vae_key_to_compvis("encoder.conv_norm_out.weight", 4),
            "encoder.norm_out.weight");
  EXPECT_EQ(diffusers_vae_key_to_compvis("quant_conv.bias", 4), "quant_conv.bias");
  EXPECT_EQ(diffusers_vae_key_to_compvis("encoder.conv_act.weight", 4), "");
}

TEST(DiffusionPreview, LatentToRgb) {
  // A latent of all zeros is mid grey; channel 0 = 1 gives (1 + factors) / 2.
  const float zero[4] = {0, 0, 0, 0}, one[4] = {1, 0, 0, 0};
  uint8_t rgb[3];
  latents_to_rgb_preview(zero, 1, 1, rgb);
  EXPECT_EQ(rgb[0], 128);
  EXPECT_EQ(rgb[2], 128);
  latents_to_rgb_preview(one, 1, 1, rgb);
  EXPECT_EQ(rgb[0], static_cast<uint8_t>(std::lround((1 + kLatentRgb[0][0]) / 2 * 255)));
  const float image[6] = {-2.f, 1.f, 0.f, std::nanf(""), -1.f, 0.5f};
  uint8_t px[6];
  image_to_rgb8(image, 2, px);
  EXPECT_EQ(px[0], 0);
  EXPECT_EQ(px[1], 255);
  EXPECT_EQ(px[2], 128);
  EXPECT_EQ(px[3], 0);
  EXPECT_EQ(px[5], 191);
}

}  // namespace
}  // namespace tessera::diffusion
