// Model directory location and opening (see model_dir.h).
#include "engine/shape/model_dir.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engine/text/clip_text_encoder.h"

namespace tessera::shape {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kClipVocabSize = 49408;  // openai/clip-vit-large-patch14
constexpr const char* kBpeVocabFile = "bpe_simple_vocab_16e6.txt.gz";
constexpr const char* kTokenEmbeddingSuffix = "text_model.embeddings.token_embedding.weight";

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::string prefix_of(const std::string& dir) {
  return "model directory '" + dir + "': ";
}

bool has_hf_vocab(const fs::path& dir) {
  return is_file(dir / "vocab.json") && is_file(dir / "merges.txt");
}

std::string describe(const CheckpointKindInfo& info) {
  return info.version.empty() ? info.name : info.name + " " + info.version;
}

// Requires `key` in both infos to agree (when both are known).
Status check_same(const std::string& dir, const CheckpointKindInfo& a, const std::string& a_key,
                  const std::string& a_what, const CheckpointKindInfo& b, const std::string& b_key,
                  const std::string& b_what, int64_t b_offset = 0) {
  const auto va = a.get(a_key);
  const auto vb = b.get(b_key);
  if (va && vb && *va != *vb + b_offset) {
    return invalid_argument(prefix_of(dir) + "mismatched checkpoints: " + a_what + " is " +
                            std::to_string(*va) + " but " + b_what + " implies " +
                            std::to_string(*vb + b_offset));
  }
  return Status();
}

Expected<WeightStore> open_checkpoint(const std::string& dir, const std::string& path,
                                      CheckpointKind want, const char* label,
                                      const ModelDirOptions& options, CheckpointKindInfo* info) {
  auto file = SafeTensors::open(path);
  if (!file.ok()) {
    return Status(file.status().code(), prefix_of(dir) + file.status().message());
  }
  *info = infer_checkpoint_kind(*file);
  if (info->kind != want) {
    return invalid_argument(prefix_of(dir) + label + " is a " + describe(*info) +
                            " checkpoint, expected " + checkpoint_kind_name(want));
  }
  if (options.check_finite) {
    const Status finite = scan_non_finite(*file);
    if (!finite.ok()) return Status(finite.code(), prefix_of(dir) + finite.message());
  }
  return WeightStore(std::move(file).value(), options.weights);
}

}  // namespace

Expected<ModelPaths> locate_model_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return not_found(prefix_of(dir) + "does not exist");
  if (!fs::is_directory(dir, ec)) return invalid_argument(prefix_of(dir) + "not a directory");
  const fs::path root(dir);
  ModelPaths paths;
  paths.dir = dir;

  for (const char* name : {"shape_gpt.safetensors", "shape_tokenizer.safetensors"}) {
    if (!is_file(root / name)) return not_found(prefix_of(dir) + "missing " + name);
  }
  paths.shape_gpt = (root / "shape_gpt.safetensors").string();
  paths.shape_tokenizer = (root / "shape_tokenizer.safetensors").string();

  // CLIP text encoder: diffusers-style text_encoder/ first, then a Hugging Face CLIP repository
  // copied into the directory itself.
  for (const fs::path& candidate : {root / "text_encoder", root}) {
    if (is_file(candidate / "model.safetensors")) {
      paths.text_encoder = (candidate / "model.safetensors").string();
      if (is_file(candidate / "config.json"))
        paths.text_config = (candidate / "config.json").string();
      break;
    }
  }
  if (paths.text_encoder.empty()) {
    return not_found(prefix_of(dir) +
                     "missing the CLIP text encoder (looked for text_encoder/model.safetensors "
                     "and model.safetensors)");
  }

  for (const fs::path& candidate : {root, root / "text_encoder", root / "tokenizer"}) {
    if (has_hf_vocab(candidate)) {
      paths.vocab = candidate.string();
      break;
    }
  }
  if (paths.vocab.empty() && is_file(root / kBpeVocabFile)) {
    paths.vocab = (root / kBpeVocabFile).string();
  }
  return paths;
}

Expected<ModelDir> open_model_dir(const std::string& dir, const ModelDirOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(ModelPaths paths, locate_model_dir(dir));
  ModelDir model;

  TESSERA_ASSIGN_OR_RETURN(model.shape_gpt,
                           open_checkpoint(dir, paths.shape_gpt, CheckpointKind::kCube3dGpt,
                                           "shape_gpt.safetensors", options, &model.gpt_info));
  TESSERA_ASSIGN_OR_RETURN(
      model.shape_tokenizer,
      open_checkpoint(dir, paths.shape_tokenizer, CheckpointKind::kCube3dShapeTokenizer,
                      "shape_tokenizer.safetensors", options, &model.tokenizer_info));
  const std::string text_label = fs::relative(paths.text_encoder, dir).string();
  TESSERA_ASSIGN_OR_RETURN(model.text_encoder,
                           open_checkpoint(dir, paths.text_encoder, CheckpointKind::kClipText,
                                           text_label.c_str(), options, &model.text_info));

  // The GPT's vocabulary is the codebook plus BOS, EOS and PAD; its shape_proj reads codebook
  // vectors, its text_proj CLIP's hidden states.
  TESSERA_RETURN_IF_ERROR(check_same(dir, model.gpt_info, "vocab_size",
                                     "the GPT vocabulary (transformer.wte.weight rows)",
                                     model.tokenizer_info, "codebook_size",
                                     "the shape tokenizer's codebook size + 3 special tokens", 3));
  TESSERA_RETURN_IF_ERROR(
      check_same(dir, model.gpt_info, "code_dim", "the GPT code width (shape_proj.weight columns)",
                 model.tokenizer_info, "codebook_dim", "the shape tokenizer's codebook width"));
  TESSERA_RETURN_IF_ERROR(check_same(dir, model.gpt_info, "num_latents",
                                     "the GPT generation length", model.tokenizer_info,
                                     "num_latents", "the shape tokenizer's latent count"));
  TESSERA_RETURN_IF_ERROR(check_same(dir, model.gpt_info, "text_dim",
                                     "the GPT text width (text_proj.weight columns)",
                                     model.text_info, "width", "the CLIP text encoder's width"));

  const auto width = model.text_info.get("width");
  const auto vocab_size = model.text_info.get("vocab_size");
  if (!width || !vocab_size) {
    return invalid_argument(prefix_of(dir) + text_label + ": missing tensor '" +
                            model.text_info.prefix + kTokenEmbeddingSuffix + "'");
  }
  model.text_vocab_size = *vocab_size;
  auto heads = text::read_clip_num_heads(paths.text_config);
  if (!heads.ok()) return Status(heads.status().code(), prefix_of(dir) + heads.status().message());
  model.text_heads = *heads;
  if (model.text_heads == 0) {
    if (*width % 64 != 0) {
      return invalid_argument(prefix_of(dir) + "the CLIP width " + std::to_string(*width) +
                              " is not a multiple of 64 and no config.json gives "
                              "num_attention_heads beside " +
                              text_label);
    }
    model.text_heads = *width / 64;
  }

  if (paths.vocab.empty()) {
    std::string fallback = options.clip_vocab_fallback;
    if (fallback.empty()) {
      if (const char* assets = std::getenv("TESSERA_ASSETS"); assets != nullptr && *assets != 0) {
        fallback = (fs::path(assets) / "vocab" / "clip" / kBpeVocabFile).string();
      }
    }
    std::error_code ec;
    if (model.text_vocab_size == kClipVocabSize && !fallback.empty() && fs::exists(fallback, ec)) {
      paths.vocab = fallback;
    } else {
      std::string message = prefix_of(dir) +
                            "missing the CLIP vocabulary (looked for vocab.json + merges.txt in "
                            "the directory, text_encoder/ and tokenizer/, and for " +
                            std::string(kBpeVocabFile) + ")";
      if (model.text_vocab_size == kClipVocabSize) {
        message += fallback.empty() ? "; no bundled CLIP vocabulary configured"
                                    : "; the bundled CLIP vocabulary " + fallback + " is missing";
      } else {
        message += "; the text encoder's vocabulary (" + std::to_string(model.text_vocab_size) +
                   " tokens) is not CLIP's 49408, so the bundled one cannot stand in";
      }
      return not_found(message);
    }
  }
  model.paths = std::move(paths);
  return model;
}

}  // namespace tessera::shape
