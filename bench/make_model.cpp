// tessera-bench make-model -o DIR: a full-size Cube 3D v0.5 model directory in the release layout,
// random weights (no download): shape_gpt.safetensors in bf16, shape_tokenizer.safetensors in f32
// (as released: 1.1 GB), text_encoder/model.safetensors a CLIP ViT-L/14 text tower in f32 with its
// config.json (the bundled CLIP vocabulary stands in for the missing one). What `tessera-bench
// generate --model DIR` and `tessera quantize --model DIR` time and measure as a user runs them:
// from files on disk. The shapes come from tests/fixtures/cube3d/*-tensors.txt (the published
// checkpoints' lists). Random weights make no particular shape (the occupancy head's bias is set
// so that the field crosses zero and extraction has a surface to follow); times and memory are
// the point.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/random_checkpoint.h"
#include "bench/subcommands.h"
#include "core/mapped_file.h"

namespace tessera::bench {
namespace {

namespace fs = std::filesystem;

// CLIP ViT-L/14's text tower (openai/clip-vit-large-patch14, text_model.*).
shape::TensorShapes clip_l_text_shapes() {
  const int64_t d = 768, ff = 3072;
  shape::TensorShapes s;
  s["text_model.embeddings.token_embedding.weight"] = {49408, d};
  s["text_model.embeddings.position_embedding.weight"] = {77, d};
  for (int i = 0; i < 12; ++i) {
    const std::string p = "text_model.encoder.layers." + std::to_string(i) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      s[p + "self_attn." + proj + ".weight"] = {d, d};
      s[p + "self_attn." + proj + ".bias"] = {d};
    }
    for (const char* norm : {"layer_norm1", "layer_norm2"}) {
      s[p + norm + ".weight"] = {d};
      s[p + norm + ".bias"] = {d};
    }
    s[p + "mlp.fc1.weight"] = {ff, d};
    s[p + "mlp.fc1.bias"] = {ff};
    s[p + "mlp.fc2.weight"] = {d, ff};
    s[p + "mlp.fc2.bias"] = {d};
  }
  s["text_model.final_layer_norm.weight"] = {d};
  s["text_model.final_layer_norm.bias"] = {d};
  return s;
}

// set: f32 tensors whose every value is replaced (f32 files only).
Status write_random(const shape::TensorShapes& shapes, DType dtype, const fs::path& path,
                    const std::vector<std::pair<std::string, float>>& set = {}) {
  TESSERA_ASSIGN_OR_RETURN(RandomCheckpoint ck, make_random_checkpoint(shapes, dtype));
  for (const auto& [name, value] : set) {
    const TensorInfo* t = ck.file.find(name);
    if (t == nullptr || t->dtype != DType::kF32) continue;
    uint8_t* p = ck.bytes.get() + ck.file.data_section_offset() + t->offset;
    for (uint64_t i = 0; i < t->nbytes; i += 4) std::memcpy(p + i, &value, 4);
  }
  TESSERA_RETURN_IF_ERROR(write_file_atomic(path.string(), ck.bytes.get(), ck.total_bytes));
  std::printf("  %-34s %s, %.2f GB\n", fs::relative(path, path.parent_path().parent_path()).c_str(),
              dtype_name(dtype), static_cast<double>(ck.total_bytes) / 1e9);
  return {};
}

Status run_make_model(const std::string& out) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    return invalid_argument("bench make-model: '" + out + "' already exists (nothing overwritten)");
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string lists = std::string(TESSERA_BENCH_FIXTURES) + "/cube3d/";
  TESSERA_ASSIGN_OR_RETURN(const shape::TensorShapes gpt,
                           read_tensor_list(lists + "cube3d-gpt_v05-tensors.txt"));
  TESSERA_ASSIGN_OR_RETURN(const shape::TensorShapes tokenizer,
                           read_tensor_list(lists + "cube3d-shape_v05-tensors.txt"));
  fs::create_directories(fs::path(out) / "text_encoder", ec);
  if (ec) return io_error(out + ": cannot create the directory: " + ec.message());
  std::printf("writing a full-size Cube 3D v0.5 directory with random weights to %s\n",
              out.c_str());
  TESSERA_RETURN_IF_ERROR(write_random(gpt, DType::kBF16, fs::path(out) / "shape_gpt.safetensors"));
  // The occupancy head's bias moved so that the random field (logits 0.0028 .. 0.0070 with a 0
  // bias, measured) crosses zero: extraction then follows a (random) surface instead of finding
  // an empty cube, as it would with a real shape.
  TESSERA_RETURN_IF_ERROR(write_random(tokenizer, DType::kF32,
                                       fs::path(out) / "shape_tokenizer.safetensors",
                                       {{"occupancy_decoder.c_head.bias", -0.0049f}}));
  TESSERA_RETURN_IF_ERROR(write_random(clip_l_text_shapes(), DType::kF32,
                                       fs::path(out) / "text_encoder" / "model.safetensors"));
  const std::string config =
      "{\n  \"architectures\": [\"CLIPTextModel\"],\n  \"hidden_size\": 768,\n"
      "  \"intermediate_size\": 3072,\n  \"num_attention_heads\": 12,\n"
      "  \"num_hidden_layers\": 12,\n  \"max_position_embeddings\": 77,\n"
      "  \"vocab_size\": 49408,\n  \"hidden_act\": \"quick_gelu\"\n}\n";
  TESSERA_RETURN_IF_ERROR(write_file_atomic(
      (fs::path(out) / "text_encoder" / "config.json").string(), config.data(), config.size()));
  std::printf("done in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return {};
}

}  // namespace

void register_make_model_bench(CLI::App* bench, int* exit_code) {
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = bench->add_subcommand("make-model",
                                        "Write a full-size Cube 3D v0.5 directory (release layout, "
                                        "random weights) to time from disk");
  cmd->add_option("-o,--output", *out, "New directory")->required();
  cmd->callback([out, exit_code] {
    if (Status st = run_make_model(*out); !st.ok()) {
      std::fprintf(stderr, "tessera-bench make-model: %s\n", st.message().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tessera::bench
