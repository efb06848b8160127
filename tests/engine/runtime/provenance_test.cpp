// The settings a file carries are read back by one reader (restored_settings) for every front end:
// what shape_settings_json and export_record write comes back field for field, and a bad field is
// refused naming the file and the field.
#include "engine/runtime/provenance.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/runtime/export_asset.h"

namespace tessera::runtime {
namespace {

TEST(Provenance, WhatIsWrittenIsReadBack) {
  JobOptions job;
  job.prompt = "a chair";
  job.generation.sampling.sample = true;
  job.generation.sampling.temperature = 0.8f;
  job.generation.sampling.top_k = 40;
  job.generation.sampling.top_p = 0.75f;
  job.generation.sampling.guidance = 4.5f;
  job.generation.bbox = std::array<float, 3>{1.0f, 2.0f, 0.5f};
  job.generation.num_tokens = 48;
  nlohmann::json settings = shape_settings_json(job, 12, 65, "tessera-tiny", "ab");
  AssetExport request;
  request.preset = "roblox";
  request.options.up_axis = mesh::UpAxis::kZ;
  request.options.scale = 2.0f;
  request.asset.max_triangles = 5000;
  request.asset.lods = 2;
  request.asset.closed = true;
  settings["export"] = export_record(request, nullptr);

  auto r = restored_settings(settings, "chair.glb");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->prompt, "a chair");
  EXPECT_TRUE(r->has_sampling && r->sampling.sample && r->has_seed);
  EXPECT_TRUE(r->has_guidance);
  SamplingSettings written = job.generation.sampling;
  written.seed = 12;  // the candidate's own seed
  EXPECT_EQ(r->sampling, written);
  ASSERT_TRUE(r->bbox.has_value());
  EXPECT_FLOAT_EQ((*r->bbox)[1], 2.0f);
  EXPECT_EQ(r->resolution, 65);
  EXPECT_EQ(r->tokens, 48);
  EXPECT_EQ(r->model_name, "tessera-tiny");
  ASSERT_TRUE(r->exporting.has_value());
  EXPECT_EQ(r->exporting->preset, "roblox");
  EXPECT_EQ(r->exporting->up_axis, "z");
  ASSERT_TRUE(r->exporting->scale.has_value());
  EXPECT_FLOAT_EQ(*r->exporting->scale, 2.0f);
  EXPECT_EQ(r->exporting->max_faces, 5000);
  EXPECT_EQ(r->exporting->lods, 2);
  EXPECT_EQ(r->exporting->closed, true);
}

TEST(Provenance, AbsentFieldsKeepTheProductDefaults) {
  auto r = restored_settings(nlohmann::json{{"prompt", "a ball"}}, "ball.obj");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->has_sampling || r->has_seed || r->has_guidance);
  EXPECT_EQ(r->sampling, kDefaultSampling);
  EXPECT_FALSE(r->bbox || r->exporting);
  EXPECT_EQ(r->resolution, 0);
  EXPECT_EQ(r->tokens, 0);
}

TEST(Provenance, ABadFieldIsRefusedNamingFileAndField) {
  struct Case {
    const char* json;
    const char* field;
  };
  for (const Case& c : {
           Case{R"({"seed": 3})", "'prompt'"},
           Case{R"({"prompt": "a", "sampling": {"seed": "x"}})", "'sampling.seed'"},
           Case{R"({"prompt": "a", "sampling": {"top_k": 1.5}})", "'sampling.top_k'"},
           Case{R"({"prompt": "a", "sampling": {"top_p": "x"}})", "'sampling.top_p'"},
           Case{R"({"prompt": "a", "bbox": [1, 2]})", "'bbox'"},
           Case{R"({"prompt": "a", "bbox": [1, 2, "x"]})", "'bbox'"},
           Case{R"({"prompt": "a", "resolution": 4000})", "'resolution'"},
           Case{R"({"prompt": "a", "tokens": -2})", "'tokens'"},
           Case{R"({"prompt": "a", "export": 3})", "'export'"},
           Case{R"({"prompt": "a", "export": {"up_axis": "x"}})", "'export.up_axis'"},
           Case{R"({"prompt": "a", "export": {"preset": "nope"}})", "'export.preset'"},
           Case{R"({"prompt": "a", "export": {"unit": "ft"}})", "'export.unit'"},
           Case{R"({"prompt": "a", "export": {"pivot": "top"}})", "'export.pivot'"},
           Case{R"({"prompt": "a", "export": {"scale": "big"}})", "'export.scale'"},
           Case{R"({"prompt": "a", "export": {"lods": 99}})", "'export.lods'"},
           Case{R"({"prompt": "a", "export": {"closed_asked": 1}})", "'export.closed_asked'"},
       }) {
    auto r = restored_settings(nlohmann::json::parse(c.json), "m.fbx");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << c.json;
    EXPECT_NE(r.status().message().find("m.fbx"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().message();
  }
}

// A file written before any of this (greedy, so no sampling fields) still loads, with the
// product's defaults for what it leaves out.
TEST(Provenance, AGreedyFileLoadsWithTheDefaults) {
  const auto r = restored_settings(
      nlohmann::json::parse(R"({"tessera": "0.1.0", "prompt": "a cup", "sampling": {"sample":
      false}, "guidance": 3.0, "bbox": null, "resolution": 65, "tokens": 0})"),
      "cup.glb");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->has_sampling && r->has_guidance && !r->has_seed);
  EXPECT_EQ(r->sampling, kDefaultSampling);
}

// Sampling settings out of range are refused with check_sampling's message, one per bad field,
// after the file's name: the same words as the command line and a JSON job.
TEST(Provenance, SamplingOutOfRangeGivesTheOneMessage) {
  auto r = restored_settings(nlohmann::json::parse(R"({"prompt": "a", "sampling": {"sample": true,
      "top_p": 1.5, "top_k": -1}, "guidance": -2})"),
                             "m.glb");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  SamplingSettings bad = kDefaultSampling;
  bad.sample = true;
  bad.top_p = 1.5f;
  bad.top_k = -1;
  bad.guidance = -2.0f;
  EXPECT_EQ(r.status().message(), "m.glb: metadata: " + check_sampling(bad).message());
  EXPECT_EQ(r.status().message(),
            "m.glb: metadata: top_k: -1 is outside [0, inf); top_p: 1.5 is outside (0, 1]; "
            "guidance: -2 is outside [0, inf)");
}

}  // namespace
}  // namespace tessera::runtime

namespace tessera::runtime {
namespace {

TEST(ImageProvenance, TesseraJsonAndA1111Parameters) {
  ImageJobOptions job;
  job.prompt = "a red torus";
  job.negative_prompt = "blurry";
  job.steps = 20;
  job.guidance = 7.5f;
  job.sampler = SamplerKind::kEulerAncestral;
  job.seed = 42;
  ImageProvenance p;
  p.job = &job;
  p.width = 512;
  p.height = 448;
  p.model_name = "v1-5-pruned-emaonly.safetensors";
  p.precision = "bf16";
  EXPECT_EQ(a1111_parameters(p),
            std::string("a red torus\nNegative prompt: blurry\nSteps: 20, Sampler: Euler a, CFG "
                        "scale: 7.5, Seed: 42, Size: 512x448, Model: "
                        "v1-5-pruned-emaonly.safetensors, Version: Tessera ") +
                TESSERA_VERSION);
  nlohmann::json j = image_settings_json(p);
  EXPECT_EQ(j["sampler"], "euler_a");
  EXPECT_EQ(j["guidance"], 7.5);
  EXPECT_FALSE(j.contains("strength"));
  // Image-to-image: the strength as written (0.6, not 0.600000023841858) and the file names.
  auto picture = std::make_shared<mesh::TextureImage>();
  job.init_image = picture;
  job.mask = picture;
  job.strength = 0.6f;
  job.negative_prompt.clear();
  p.init_name = "photo.png";
  p.mask_name = "mask.png";
  const std::string a = a1111_parameters(p);
  EXPECT_EQ(a.find("Negative prompt"), std::string::npos) << a;
  EXPECT_NE(a.find(", Denoising strength: 0.6,"), std::string::npos) << a;
  j = image_settings_json(p);
  EXPECT_EQ(j["strength"], 0.6);
  EXPECT_EQ(j["init_image"], "photo.png");
  EXPECT_EQ(j["mask"], "mask.png");
  const auto text = image_png_text(p);
  ASSERT_EQ(text.size(), 3u);
  EXPECT_EQ(text[2].first, "parameters");
}

}  // namespace
}  // namespace tessera::runtime
