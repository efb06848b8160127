#include "core/checkpoint_kind.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tessera {
namespace {

// Parses a tensor list beside the spec ("name (d0, d1)" per line; other lines, such as the
// TOTAL_* summaries, are skipped). *total_elems receives TOTAL_STATE_DICT_ELEMS when present.
std::vector<TensorShapeEntry> load_tensor_list(const std::string& file, int64_t* total_elems) {
  const std::string path = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/cube3d/" + file;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<TensorShapeEntry> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("TOTAL_STATE_DICT_ELEMS ", 0) == 0) {
      *total_elems = std::stoll(line.substr(23));
      continue;
    }
    const auto open = line.find(" (");
    if (open == std::string::npos || line.back() != ')') continue;
    TensorShapeEntry e;
    e.name = line.substr(0, open);
    std::stringstream dims(line.substr(open + 2, line.size() - open - 3));
    std::string dim;
    while (std::getline(dims, dim, ',')) {
      if (dim.find_first_not_of(' ') == std::string::npos) continue;  // "(1536,)"
      e.shape.push_back(std::stoll(dim));
    }
    out.push_back(std::move(e));
  }
  return out;
}

int64_t total_numel(const std::vector<TensorShapeEntry>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    total += n;
  }
  return total;
}

void expect_config(const CheckpointKindInfo& info,
                   const std::vector<std::pair<std::string, int64_t>>& expected) {
  for (const auto& [key, value] : expected) {
    const auto got = info.get(key);
    ASSERT_TRUE(got.has_value()) << info.name << " lacks " << key;
    EXPECT_EQ(*got, value) << info.name << " " << key;
  }
}

TEST(CheckpointKind, Cube3dGptBothVersions) {
  for (const auto& [file, version, latents] :
       {std::tuple{"cube3d-gpt_v01-tensors.txt", "v0.1", 512},
        std::tuple{"cube3d-gpt_v05-tensors.txt", "v0.5", 1024}}) {
    int64_t total = -1;
    const auto tensors = load_tensor_list(file, &total);
    ASSERT_GT(tensors.size(), 600u) << file;
    EXPECT_EQ(total_numel(tensors), total) << file;  // the fixture parsed completely
    const CheckpointKindInfo info = infer_checkpoint_kind(tensors);
    EXPECT_EQ(info.kind, CheckpointKind::kCube3dGpt) << file;
    EXPECT_EQ(info.name, "cube3d-gpt");
    EXPECT_EQ(info.version, version);
    expect_config(info, {{"n_embd", 1536},
                         {"n_head", 12},
                         {"head_dim", 128},
                         {"n_dual_blocks", 23},
                         {"n_single_blocks", 1},
                         {"vocab_size", 16387},
                         {"mlp_hidden", 6144},
                         {"text_dim", 768},
                         {"code_dim", 32},
                         {"num_latents", latents}});
  }
}

TEST(CheckpointKind, Cube3dGptWithoutQNormHasNoHeadCount) {
  int64_t total = 0;
  auto tensors = load_tensor_list("cube3d-gpt_v05-tensors.txt", &total);
  std::erase_if(tensors, [](const TensorShapeEntry& t) {
    return t.name == "transformer.dual_blocks.0.attn.pre_x.q_norm.weight";
  });
  const CheckpointKindInfo info = infer_checkpoint_kind(tensors);
  EXPECT_EQ(info.kind, CheckpointKind::kCube3dGpt);
  EXPECT_FALSE(info.get("n_head").has_value());
  EXPECT_FALSE(info.get("head_dim").has_value());
  ASSERT_FALSE(info.notes.empty());
  EXPECT_NE(info.notes[0].find("q_norm"), std::string::npos);
}

TEST(CheckpointKind, Cube3dShapeTokenizerBothVersions) {
  for (const auto& [file, version, latents] :
       {std::tuple{"cube3d-shape_v01-tensors.txt", "v0.1", 512},
        std::tuple{"cube3d-shape_v05-tensors.txt", "v0.5", 1024}}) {
    int64_t total = -1;
    const auto tensors = load_tensor_list(file, &total);
    EXPECT_EQ(total_numel(tensors), total) << file;
    const CheckpointKindInfo info = infer_checkpoint_kind(tensors);
    EXPECT_EQ(info.kind, CheckpointKind::kCube3dShapeTokenizer) << file;
    EXPECT_EQ(info.name, "cube3d-shape-tokenizer");
    EXPECT_EQ(info.version, version);
    expect_config(info, {{"num_latents", latents},
                         {"width", 768},
                         {"n_head", 12},
                         {"head_dim", 64},
                         {"codebook_size", 16384},
                         {"codebook_dim", 32},
                         {"n_encoder_layers", 13},
                         {"n_decoder_layers", 24},
                         {"mlp_hidden", 3072},
                         {"fourier_freqs", 128}});
  }
}

std::vector<TensorShapeEntry> clip_text(const std::string& prefix, int64_t width, int layers,
                                        int64_t vocab, int64_t positions) {
  std::vector<TensorShapeEntry> t = {
      {prefix + "text_model.embeddings.token_embedding.weight", {vocab, width}},
      {prefix + "text_model.embeddings.position_embedding.weight", {positions, width}},
      {prefix + "text_model.final_layer_norm.weight", {width}},
      {prefix + "text_model.final_layer_norm.bias", {width}},
  };
  for (int l = 0; l < layers; ++l) {
    const std::string p = prefix + "text_model.encoder.layers." + std::to_string(l) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      t.push_back({p + "self_attn." + proj + ".weight", {width, width}});
      t.push_back({p + "self_attn." + proj + ".bias", {width}});
    }
    t.push_back({p + "mlp.fc1.weight", {4 * width, width}});
    t.push_back({p + "mlp.fc2.weight", {width, 4 * width}});
  }
  return t;
}

TEST(CheckpointKind, ClipTextHuggingFaceLayout) {
  const CheckpointKindInfo info = infer_checkpoint_kind(clip_text("", 768, 12, 49408, 77));
  EXPECT_EQ(info.kind, CheckpointKind::kClipText);
  EXPECT_EQ(info.name, "clip-text");
  EXPECT_EQ(info.prefix, "");
  expect_config(info, {{"width", 768},
                       {"n_layers", 12},
                       {"vocab_size", 49408},
                       {"max_positions", 77},
                       {"mlp_hidden", 3072}});
  EXPECT_FALSE(info.get("projection_dim").has_value());
  ASSERT_FALSE(info.notes.empty());
  EXPECT_NE(info.notes[0].find("= 12"), std::string::npos);
}

std::vector<TensorShapeEntry> compvis_unet(int64_t ch, int64_t context) {
  const std::string p = "model.diffusion_model.";
  return {{p + "input_blocks.0.0.weight", {ch, 4, 3, 3}},
          {p + "input_blocks.0.0.bias", {ch}},
          {p + "input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight", {ch, context}},
          {p + "time_embed.0.weight", {4 * ch, ch}},
          {p + "out.2.weight", {4, ch, 3, 3}}};
}

std::vector<TensorShapeEntry> vae(const std::string& p) {
  return {{p + "post_quant_conv.weight", {4, 4, 1, 1}},
          {p + "decoder.conv_in.weight", {512, 4, 3, 3}},
          {p + "decoder.conv_out.weight", {3, 128, 3, 3}},
          {p + "encoder.conv_in.weight", {128, 3, 3, 3}}};
}

TEST(CheckpointKind, StableDiffusionLayouts) {
  // CompVis full checkpoint: UNet + VAE + CLIP under cond_stage_model.transformer.
  auto full = compvis_unet(320, 768);
  for (auto& t : vae("first_stage_model.")) full.push_back(t);
  for (auto& t : clip_text("cond_stage_model.transformer.", 768, 12, 49408, 77)) full.push_back(t);
  CheckpointKindInfo info = infer_checkpoint_kind(full);
  EXPECT_EQ(info.name, "sd-checkpoint");
  expect_config(info, {{"unet_in_channels", 4},
                       {"unet_model_channels", 320},
                       {"unet_out_channels", 4},
                       {"unet_context_dim", 768},
                       {"vae_latent_channels", 4},
                       {"vae_decoder_channels", 512},
                       {"vae_out_channels", 3},
                       {"clip_width", 768},
                       {"clip_layers", 12}});

  info = infer_checkpoint_kind(compvis_unet(32, 32));
  EXPECT_EQ(info.name, "sd-unet");
  expect_config(info, {{"unet_model_channels", 32}, {"unet_context_dim", 32}});

  const std::vector<TensorShapeEntry> diffusers_unet = {
      {"conv_in.weight", {32, 4, 3, 3}},
      {"conv_out.weight", {4, 32, 3, 3}},
      {"time_embedding.linear_1.weight", {128, 32}},
      {"down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight", {32, 64}}};
  info = infer_checkpoint_kind(diffusers_unet);
  EXPECT_EQ(info.name, "sd-unet");
  expect_config(info,
                {{"unet_in_channels", 4}, {"unet_model_channels", 32}, {"unet_context_dim", 64}});

  info = infer_checkpoint_kind(vae(""));
  EXPECT_EQ(info.name, "sd-vae");
  expect_config(info, {{"vae_latent_channels", 4}, {"vae_decoder_channels", 512}});
  info = infer_checkpoint_kind(vae("first_stage_model."));
  EXPECT_EQ(info.name, "sd-vae");
  EXPECT_EQ(info.prefix, "first_stage_model.");
}

TEST(CheckpointKind, UnknownAndEmpty) {
  EXPECT_EQ(infer_checkpoint_kind(std::vector<TensorShapeEntry>{}).kind, CheckpointKind::kUnknown);
  const CheckpointKindInfo info = infer_checkpoint_kind(
      std::vector<TensorShapeEntry>{{"fc.weight", {10, 10}}, {"fc.bias", {10}}});
  EXPECT_EQ(info.kind, CheckpointKind::kUnknown);
  EXPECT_EQ(info.name, "unknown");
  EXPECT_TRUE(info.config.empty());
}

TEST(CheckpointKind, FromAWrittenFile) {
  // A tiny CLIP text model written to disk and read back through SafeTensors.
  const auto entries = clip_text("", 8, 2, 50, 7);
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  data.reserve(entries.size());
  for (const auto& e : entries) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    data.emplace_back(static_cast<size_t>(n), 0.25f);
    tensors.push_back(TensorToWrite::from_f32(e.name, DType::kBF16, e.shape, data.back().data()));
  }
  const std::string path =
      ::testing::TempDir() + "tessera_ck_" + std::to_string(::getpid()) + ".safetensors";
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
  auto st = SafeTensors::open(path);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  const CheckpointKindInfo info = infer_checkpoint_kind(*st);
  EXPECT_EQ(info.name, "clip-text");
  expect_config(info, {{"width", 8}, {"n_layers", 2}, {"vocab_size", 50}, {"max_positions", 7}});
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tessera
