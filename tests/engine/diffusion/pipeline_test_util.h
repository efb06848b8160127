// Test models for the SD pipeline (tests/engine/diffusion/pipeline_test.cpp, tests/app/
// image_cli_test.cpp), assembled from the committed fixtures: the tiny UNet + VAE of
// tests/fixtures/diffusion/sd_tiny.safetensors (CompVis keys, UNet heads 2), the tiny CLIP of
// tests/fixtures/parity/text_encoder/ (width 32, 4 heads) and the BPE vocabulary of
// tests/fixtures/diffusion/pipeline/. Writes the same weights in both layouts:
//   CompVis single file: DIR/model.safetensors (UNet, VAE and cond_stage_model.transformer.*) +
//                        DIR/vocab.json + merges.txt (the embedded CLIP has no config: heads 4
//                        and UNet heads 2 must be passed as load options);
//   diffusers folder:    DIR/{unet,vae}/diffusion_pytorch_model.safetensors (+ unet/config.json
//                        with attention_head_dim 2), DIR/text_encoder/, DIR/tokenizer/.
// The CompVis -> diffusers renaming here is written independently of the engine's
// diffusers -> CompVis one, so a loaded diffusers folder that matches the CompVis file checks it.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/safetensors.h"

namespace tessera::diffusion::pipeline_test {

namespace fs = std::filesystem;

inline std::string source_dir() {
  return std::string(TESSERA_SOURCE_DIR);
}
inline std::string sd_tiny_path() {
  return source_dir() + "/tests/fixtures/diffusion/sd_tiny.safetensors";
}
inline std::string clip_dir() {
  return source_dir() + "/tests/fixtures/parity/text_encoder";
}
inline std::string pipeline_fixture_dir() {
  return source_dir() + "/tests/fixtures/diffusion/pipeline";
}
inline constexpr int64_t kUNetHeads = 2;
inline constexpr int64_t kTextHeads = 4;
inline constexpr int64_t kUNetLayersPerBlock = 1;  // num_res_blocks of the fixture UNet
inline constexpr int64_t kVaeLevels = 2;

// A fresh temporary directory, removed with its contents by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    path_ = fs::temp_directory_path() /
            ("tessera-" + name + "-" + std::to_string(static_cast<long>(::getpid())));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  fs::path path() const { return path_; }

 private:
  fs::path path_;
};

// name -> (shape, f32 values).
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
using Tensors = std::map<std::string, Tensor>;

inline bool read_tensors(const std::string& path, const std::string& prefix, Tensors* out) {
  auto file = SafeTensors::open(path);
  if (!file.ok()) return false;
  for (const TensorInfo& info : file->tensors()) {
    auto values = file->to_f32(info.name);
    if (!values.ok()) return false;
    (*out)[prefix + info.name] = {info.shape, std::move(*values)};
  }
  return true;
}

inline bool write_tensors(const fs::path& path, const Tensors& tensors) {
  fs::create_directories(path.parent_path());
  std::vector<TensorToWrite> out;
  for (const auto& [name, t] : tensors) {
    out.push_back(TensorToWrite::from_f32(name, DType::kF32, t.shape, t.values.data()));
  }
  return write_safetensors(path.string(), out).ok();
}

inline bool write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  return write_file_atomic(path.string(), text.data(), text.size()).ok();
}

inline void copy_vocab(const fs::path& dir) {
  fs::create_directories(dir);
  for (const char* f : {"vocab.json", "merges.txt"}) {
    fs::copy_file(fs::path(pipeline_fixture_dir()) / f, dir / f,
                  fs::copy_options::overwrite_existing);
  }
}

// The whole model in CompVis names (UNet, VAE, text encoder under cond_stage_model.transformer.).
inline bool compvis_tensors(Tensors* out) {
  return read_tensors(sd_tiny_path(), "", out) &&
         read_tensors(clip_dir() + "/model.safetensors", "cond_stage_model.transformer.", out);
}

// Writes DIR/model.safetensors from `tensors` and the vocabulary beside it.
inline bool write_compvis_model(const fs::path& dir, const Tensors& tensors) {
  if (!write_tensors(dir / "model.safetensors", tensors)) return false;
  copy_vocab(dir);
  return true;
}

inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0, dot;
  while ((dot = s.find('.', start)) != std::string::npos) {
    parts.push_back(s.substr(start, dot - start));
    start = dot + 1;
  }
  parts.push_back(s.substr(start));
  return parts;
}
inline std::string join(const std::vector<std::string>& p, size_t from) {
  std::string out;
  for (size_t i = from; i < p.size(); ++i) out += (i > from ? "." : "") + p[i];
  return out;
}

inline std::string unet_resnet_to_diffusers(const std::string& rest) {
  static const std::map<std::string, std::string> kMap = {
      {"in_layers.0", "norm1"},  {"in_layers.2", "conv1"},  {"emb_layers.1", "time_emb_proj"},
      {"out_layers.0", "norm2"}, {"out_layers.3", "conv2"}, {"skip_connection", "conv_shortcut"}};
  for (const auto& [from, to] : kMap) {
    if (rest.rfind(from + ".", 0) == 0) return to + rest.substr(from.size());
  }
  return "UNMAPPED." + rest;
}

// CompVis UNet key (without model.diffusion_model.) -> diffusers.
inline std::string unet_key_to_diffusers(const std::string& key) {
  const int64_t per = kUNetLayersPerBlock + 1;
  const auto p = split(key);
  if (p[0] == "time_embed")
    return std::string("time_embedding.linear_") + (p[1] == "0" ? "1" : "2") + "." + join(p, 2);
  if (p[0] == "out") return std::string(p[1] == "0" ? "conv_norm_out." : "conv_out.") + join(p, 2);
  if (p[0] == "input_blocks" && p[1] == "0") return "conv_in." + join(p, 3);
  if (p[0] == "middle_block") {
    if (p[1] == "1") return "mid_block.attentions.0." + join(p, 2);
    return "mid_block.resnets." + std::string(p[1] == "0" ? "0." : "1.") +
           unet_resnet_to_diffusers(join(p, 2));
  }
  const int64_t n = std::stoll(p[1]);
  if (p[0] == "input_blocks") {
    const int64_t i = (n - 1) / per, j = (n - 1) % per;
    const std::string blk = "down_blocks." + std::to_string(i) + ".";
    if (j == kUNetLayersPerBlock) return blk + "downsamplers.0.conv." + join(p, 4);  // .0.op.
    if (p[2] == "0")
      return blk + "resnets." + std::to_string(j) + "." + unet_resnet_to_diffusers(join(p, 3));
    return blk + "attentions." + std::to_string(j) + "." + join(p, 3);
  }
  const int64_t i = n / per, j = n % per;
  const std::string blk = "up_blocks." + std::to_string(i) + ".";
  if (p[2] == "0")
    return blk + "resnets." + std::to_string(j) + "." + unet_resnet_to_diffusers(join(p, 3));
  if (p[3] == "conv") return blk + "upsamplers.0.conv." + join(p, 4);
  return blk + "attentions." + std::to_string(j) + "." + join(p, 3);
}

// CompVis VAE key (without first_stage_model.) -> diffusers; "" for the 2-D reshaped attention
// handled by the caller.
inline std::string vae_key_to_diffusers(const std::string& key) {
  const auto p = split(key);
  if (p[0] == "post_quant_conv" || p[0] == "quant_conv") return key;
  const std::string& part = p[0];  // decoder or encoder
  if (p[1] == "conv_in" || p[1] == "conv_out") return key;
  if (p[1] == "norm_out") return part + ".conv_norm_out." + join(p, 2);
  auto res = [](const std::string& rest) {
    return rest.rfind("nin_shortcut.", 0) == 0 ? "conv_shortcut" + rest.substr(12) : rest;
  };
  if (p[1] == "mid") {
    if (p[2] == "block_1") return part + ".mid_block.resnets.0." + res(join(p, 3));
    if (p[2] == "block_2") return part + ".mid_block.resnets.1." + res(join(p, 3));
    static const std::map<std::string, std::string> kAttn = {{"norm", "group_norm"},
                                                             {"q", "to_q"},
                                                             {"k", "to_k"},
                                                             {"v", "to_v"},
                                                             {"proj_out", "to_out.0"}};
    return part + ".mid_block.attentions.0." + kAttn.at(p[3]) + "." + join(p, 4);
  }
  if (part == "encoder") {  // encoder.down.L.{block.J, downsample.conv}: levels in order
    const std::string blk = "encoder.down_blocks." + p[2] + ".";
    if (p[3] == "downsample") return blk + "downsamplers.0.conv." + join(p, 5);
    return blk + "resnets." + p[4] + "." + res(join(p, 5));
  }
  const int64_t level = std::stoll(p[2]);
  const std::string blk = "decoder.up_blocks." + std::to_string(kVaeLevels - 1 - level) + ".";
  if (p[3] == "upsample") return blk + "upsamplers.0.conv." + join(p, 5);
  return blk + "resnets." + p[4] + "." + res(join(p, 5));
}

// Writes the diffusers folder from CompVis-named `tensors`; `with_vae` false leaves out vae/.
inline bool write_diffusers_model(const fs::path& dir, const Tensors& tensors,
                                  bool with_vae = true) {
  Tensors unet, vae, text;
  const std::string up = "model.diffusion_model.", vp = "first_stage_model.",
                    tp = "cond_stage_model.transformer.";
  for (const auto& [name, t] : tensors) {
    if (name.rfind(up, 0) == 0) {
      unet[unet_key_to_diffusers(name.substr(up.size()))] = t;
    } else if (name.rfind(vp, 0) == 0) {
      Tensor copy = t;
      const std::string key = vae_key_to_diffusers(name.substr(vp.size()));
      if (key.find("mid_block.attentions") != std::string::npos && copy.shape.size() == 4) {
        copy.shape.resize(2);  // diffusers: linear [C, C]
      }
      vae[key] = copy;
    } else if (name.rfind(tp, 0) == 0) {
      text[name.substr(tp.size())] = t;
    }
  }
  // A tensor of the diffusers VAE that no SD 1.x part reads: the loader must ignore it.
  vae["encoder.conv_act.unused"] = {{4}, {0.f, 1.f, 2.f, 3.f}};
  if (!write_tensors(dir / "unet" / "diffusion_pytorch_model.safetensors", unet)) return false;
  if (!write_text(dir / "unet" / "config.json",
                  "{\"_class_name\": \"UNet2DConditionModel\", \"attention_head_dim\": 2}\n")) {
    return false;
  }
  if (with_vae && !write_tensors(dir / "vae" / "diffusion_pytorch_model.safetensors", vae)) {
    return false;
  }
  if (!write_tensors(dir / "text_encoder" / "model.safetensors", text)) return false;
  fs::copy_file(fs::path(clip_dir()) / "config.json", dir / "text_encoder" / "config.json",
                fs::copy_options::overwrite_existing);
  copy_vocab(dir / "tokenizer");
  return true;
}

// The pipeline fixture written once per process as a diffusers folder in a temporary directory
// (its path; the folder lives until the process ends). For tests that need a loadable model dir.
inline const std::string& fixture_diffusers_model_dir() {
  static TempDir* dir = [] {
    auto* d = new TempDir("fixture-diffusers-model");
    Tensors tensors;
    EXPECT_TRUE(compvis_tensors(&tensors));
    EXPECT_TRUE(write_diffusers_model(d->path() / "model", tensors));
    return d;
  }();
  static const std::string path = (dir->path() / "model").string();
  return path;
}
}  // namespace tessera::diffusion::pipeline_test
