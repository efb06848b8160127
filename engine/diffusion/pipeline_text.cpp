// The text stage (pipeline.h): finding the CLIP text encoder and the tokenizer's vocabulary,
// loading both, and turning the prompt and the negative prompt into the UNet's context.
#include <filesystem>
#include <utility>

#include "core/safetensors.h"
#include "engine/diffusion/pipeline_internal.h"

namespace tessera::diffusion {
namespace fs = std::filesystem;
using pipeline_detail::is_file;
using pipeline_detail::with_prefix;

namespace {

constexpr int64_t kClipVocab = 49408;

// `loras`: the LoRAs' text modules are merged into its weights first (merged: their counts).
Expected<text::ClipTextEncoder> load_text_encoder(
    const std::string& weights, const std::string& config, int64_t heads, WeightFormat format,
    kernels::Backend& backend, const UNetConfig& unet,
    const std::vector<std::pair<LoraSpec, LoraFileModules>>& loras,
    std::vector<LoraMerged>* merged) {
  if (heads == 0) {
    TESSERA_ASSIGN_OR_RETURN(heads, text::read_clip_num_heads(config));
  }
  TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(weights));
  WeightStore store(std::move(file), format);
  for (size_t i = 0; i < loras.size(); ++i) {
    const Status st = merge_lora(loras[i].first, loras[i].second, unet, nullptr, &store,
                                 kCompVisText, &(*merged)[i]);
    if (!st.ok()) return Status(st.code(), "LoRA: " + st.message());
  }
  text::ClipTextEncoderOptions options;
  options.n_heads = heads;
  return text::ClipTextEncoder::create(std::move(store), backend, options);
}

// A HF text encoder in `dir` (model.safetensors) or the file itself.
bool find_hf_text_encoder(const fs::path& where, std::string* weights, std::string* config) {
  if (is_file(where) && where.extension() == ".safetensors") {
    *weights = where.string();
    *config = (where.parent_path() / "config.json").string();
    return true;
  }
  if (is_file(where / "model.safetensors")) {
    *weights = (where / "model.safetensors").string();
    *config = (where / "config.json").string();
    return true;
  }
  return false;
}

struct TextEncoderFiles {
  std::string weights, config;  // config "": inferred from the tensors
};

// The CLIP text encoder: the option, else the checkpoint's own, else a text_encoder/ folder beside
// (or, for CompVis, one level up).
Expected<TextEncoderFiles> locate_text_encoder(const std::string& path, const fs::path& dir,
                                               const DiffusionModelFiles& files,
                                               bool text_in_checkpoint,
                                               const DiffusionLoadOptions& options) {
  TextEncoderFiles t;
  if (!options.text_encoder.empty()) {
    if (!find_hf_text_encoder(options.text_encoder, &t.weights, &t.config)) {
      return not_found("text encoder '" + options.text_encoder +
                       "': no such .safetensors file or directory with model.safetensors");
    }
  } else if (text_in_checkpoint) {
    t.weights = files.unet;
  } else if (!find_hf_text_encoder(dir / "text_encoder", &t.weights, &t.config) &&
             (files.layout == ModelLayout::kDiffusers ||
              !find_hf_text_encoder(dir.parent_path() / "text_encoder", &t.weights, &t.config))) {
    return not_found(
        "diffusion model '" + path + "': no CLIP text encoder (looked for " +
        (files.layout == ModelLayout::kDiffusers
             ? (dir / "text_encoder" / "model.safetensors").string()
             : "tensors '" + std::string(kCompVisText) + "text_model.*' in " + files.unet + ", " +
                   (dir / "text_encoder" / "model.safetensors").string() + ", " +
                   (dir.parent_path() / "text_encoder" / "model.safetensors").string()) +
        ")");
  }
  return t;
}

// The CLIP tokenizer's vocabulary: the option, else vocab.json + merges.txt in the usual folders,
// else the bundled vocabulary file beside, else the fallback for CLIP-sized vocabularies.
Expected<std::string> locate_vocab(const std::string& path, const fs::path& dir, int64_t vocab_size,
                                   const DiffusionLoadOptions& options) {
  if (!options.vocab.empty()) return options.vocab;
  std::vector<std::string> looked;
  for (const fs::path& d : {dir / "tokenizer", dir, dir / "text_encoder", dir.parent_path()}) {
    looked.push_back((d / "vocab.json").string());
    if (is_file(d / "vocab.json") && is_file(d / "merges.txt")) return d.string();
  }
  const fs::path gz = dir / text::ClipTokenizer::kDefaultVocabFile;
  looked.push_back(gz.string());
  if (is_file(gz)) return gz.string();
  if (vocab_size == kClipVocab && !options.clip_vocab_fallback.empty()) {
    return options.clip_vocab_fallback;
  }
  std::string list;
  for (const std::string& l : looked) list += (list.empty() ? "" : ", ") + l;
  return not_found("diffusion model '" + path + "': no CLIP tokenizer vocabulary (looked for " +
                   list + ")");
}

}  // namespace

Status DiffusionModel::Impl::load_text_stage(const std::string& path, const fs::path& dir,
                                             bool text_in_checkpoint, const UNetConfig& unet,
                                             const DiffusionLoadOptions& options,
                                             DiffusionModelFiles* files) {
  TESSERA_ASSIGN_OR_RETURN(const TextEncoderFiles text_files,
                           locate_text_encoder(path, dir, *files, text_in_checkpoint, options));
  files->text_encoder = text_files.weights;
  auto encoder = load_text_encoder(text_files.weights, text_files.config, options.text_heads,
                                   options.weights, *backend, unet, pending_loras, &loras);
  if (!encoder.ok()) {
    const bool lora = encoder.status().message().rfind("LoRA: ", 0) == 0;
    return lora ? encoder.status() : with_prefix(encoder.status(), "text encoder: ");
  }
  text.emplace(std::move(*encoder));
  const text::ClipTextConfig& tc = text->config();
  if (tc.width != unet.context_dim) {
    return invalid_argument("text encoder " + text_files.weights + " has width " +
                            std::to_string(tc.width) + " but the UNet in " + files->unet +
                            " cross-attends to context dim " + std::to_string(unet.context_dim) +
                            " (tensor '" + kUNetPrefix +
                            "...attn2.to_k.weight'): the two do not belong together");
  }

  TESSERA_ASSIGN_OR_RETURN(files->vocab, locate_vocab(path, dir, tc.vocab_size, options));
  auto loaded_tokenizer = text::ClipTokenizer::load(files->vocab);
  if (!loaded_tokenizer.ok()) return with_prefix(loaded_tokenizer.status(), "tokenizer: ");
  tokenizer.emplace(std::move(*loaded_tokenizer));
  return Status();
}

Status DiffusionModel::encode_prompts(const std::string& prompt, const std::string& negative_prompt,
                                      std::vector<float>* context) {
  Impl& m = *impl_;
  const int length = static_cast<int>(context_length());
  std::vector<int32_t> ids;
  for (const std::string* text : {&negative_prompt, &prompt}) {
    TESSERA_ASSIGN_OR_RETURN(text::PaddedTokens tokens,
                             m.tokenizer->encode_padded(*text, length, m.tokenizer->eos_id()));
    ids.insert(ids.end(), tokens.ids.begin(), tokens.ids.end());
  }
  // SD runs CLIP causal-only: the EOS padding is not masked (valid_lengths = null).
  return m.text->encode_to_host(ids.data(), nullptr, 2, length, context);
}

}  // namespace tessera::diffusion
