// Loading a diffusion model (DiffusionModel::load, pipeline.h): the backend, the files, the UNet
// and VAE weights (a CompVis checkpoint, or diffusers folders renamed by pipeline_diffusers.cpp),
// the head count the shapes do not show, whether the two belong together, and the networks. The
// text stage finds and loads its own parts (pipeline_text.cpp).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "core/safetensors.h"
#include "engine/diffusion/model_dir.h"
#include "engine/diffusion/pipeline_internal.h"

namespace tessera::diffusion {
namespace fs = std::filesystem;
using pipeline_detail::is_file;
using pipeline_detail::open_diffusers_unet;
using pipeline_detail::open_diffusers_vae;
using pipeline_detail::RenamedFile;
using pipeline_detail::with_prefix;

namespace {

// A diffusers unet/config.json's head count ("num_attention_heads", else "attention_head_dim", an
// integer or a per-level list); 0 when the file or both keys are absent.
Expected<int64_t> read_unet_heads(const std::string& config_path) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json j, read_json_file(config_path));
  if (j.is_null()) return int64_t{0};
  for (const char* key : {"num_attention_heads", "attention_head_dim"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    nlohmann::json v = j[key];
    if (v.is_array() && !v.empty()) v = v[0];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
      return corrupt_data(config_path + ": '" + key + "' must be a positive integer, got " +
                          j[key].dump());
    }
    return v.get<int64_t>();
  }
  return int64_t{0};
}

}  // namespace

Expected<int64_t> model_card_unet_heads(const std::string& model_dir) {
  const std::string card_path = (fs::path(model_dir) / "model.json").string();
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json j, read_json_file(card_path));
  if (j.is_null() || !j.contains("unet") || !j["unet"].is_object() ||
      !j["unet"].contains("num_heads")) {
    return int64_t{0};
  }
  const nlohmann::json& v = j["unet"]["num_heads"];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    return corrupt_data(card_path + ": 'unet.num_heads' must be a positive integer, got " +
                        v.dump());
  }
  return v.get<int64_t>();
}

Expected<std::string> model_card_control_net(const std::string& model_dir) {
  const std::string card_path = (fs::path(model_dir) / "model.json").string();
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json j, read_json_file(card_path));
  if (j.is_null() || !j.contains("controlnet_depth")) return std::string();
  const nlohmann::json& cn = j["controlnet_depth"];
  if (!cn.is_object() || !cn.contains("file") || !cn["file"].is_string()) {
    return corrupt_data(card_path + ": 'controlnet_depth' has no 'file' string");
  }
  const fs::path file = fs::path(model_dir) / cn["file"].get<std::string>();
  if (!is_file(file)) {
    return corrupt_data(card_path + ": its depth ControlNet '" + file.string() + "' is missing");
  }
  return file.string();
}

namespace {

// A model's UNet and VAE weights, opened, with the configurations their tensors imply.
struct DenoiserWeights {
  std::vector<std::unique_ptr<uint8_t[]>> renamed_bytes;  // diffusers tensors under CompVis names
  std::unique_ptr<WeightStore> unet_store, vae_store;     // vae_store null: in unet_store
  UNetConfig unet;
  VaeDecoderConfig vae;
  std::optional<VaeEncoderConfig> encoder;  // none: the file has no VAE encoder
  bool text_in_checkpoint = false;          // a CompVis checkpoint carrying its CLIP text encoder
};

// The VAE encoder's configuration when `file` has one (image-to-image needs it; many SD files ship
// it, some decoder-only VAEs do not): none for a missing encoder, an error naming the tensor for a
// malformed one.
Expected<std::optional<VaeEncoderConfig>> optional_encoder(const SafeTensors& file) {
  if (!file.contains(std::string(kVaePrefix) + "encoder.conv_in.weight")) {
    return std::optional<VaeEncoderConfig>();
  }
  auto inferred = infer_vae_encoder_config(file);
  if (!inferred.ok()) return with_prefix(inferred.status(), "VAE encoder: ");
  return std::optional<VaeEncoderConfig>(*inferred);
}

// The UNet's attention head count, not visible in tensor shapes: the option, else `config`'s,
// else 8 (SD 1.x).
Expected<int64_t> unet_head_count(int64_t given, const std::vector<fs::path>& configs,
                                  const fs::path& card_dir) {
  int64_t heads = given;
  if (heads == 0 && !card_dir.empty()) {
    // A Tessera model card next to the checkpoint (tools/train/diffusion/export.py writes
    // "unet": {"num_heads": N}).
    TESSERA_ASSIGN_OR_RETURN(heads, model_card_unet_heads(card_dir.string()));
  }
  for (const fs::path& config : configs) {
    if (heads != 0) break;
    TESSERA_ASSIGN_OR_RETURN(heads, read_unet_heads(config.string()));
  }
  return heads != 0 ? heads : 8;
}

// diffusers: unet/ and vae/ folders, their tensors renamed to CompVis names.
Expected<DenoiserWeights> open_diffusers_weights(const std::string& path, const fs::path& dir,
                                                 const DiffusionModelFiles& files,
                                                 const DiffusionLoadOptions& options) {
  if (!is_file(files.unet)) {
    return not_found("diffusers model '" + path + "': missing unet/" + kDiffusersWeights +
                     " (the UNet)");
  }
  if (!is_file(files.vae)) {
    return not_found("diffusers model '" + path + "': missing vae/" + kDiffusersWeights +
                     " (the VAE decoder)");
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t heads,
                           unet_head_count(options.unet_heads, {dir / "unet" / "config.json"}, {}));
  DenoiserWeights w;
  TESSERA_ASSIGN_OR_RETURN(RenamedFile unet_file, open_diffusers_unet(files.unet));
  TESSERA_ASSIGN_OR_RETURN(w.unet, infer_unet_config(unet_file.file, heads));
  TESSERA_ASSIGN_OR_RETURN(RenamedFile vae_file, open_diffusers_vae(files.vae));
  auto vae_inferred = infer_vae_decoder_config(vae_file.file);
  if (!vae_inferred.ok()) return with_prefix(vae_inferred.status(), "VAE decoder: ");
  w.vae = *vae_inferred;
  TESSERA_ASSIGN_OR_RETURN(w.encoder, optional_encoder(vae_file.file));
  w.unet_store = std::make_unique<WeightStore>(std::move(unet_file.file), options.weights);
  w.vae_store = std::make_unique<WeightStore>(std::move(vae_file.file), options.weights);
  w.renamed_bytes.push_back(std::move(unet_file.bytes));
  w.renamed_bytes.push_back(std::move(vae_file.bytes));
  return w;
}

// CompVis: one SD 1.x checkpoint with the UNet, the VAE and usually the text encoder.
Expected<DenoiserWeights> open_compvis_weights(const fs::path& dir,
                                               const DiffusionModelFiles& files,
                                               const DiffusionLoadOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(files.unet));
  for (const TensorInfo& info : file.tensors()) {
    if (info.name.rfind("conditioner.", 0) == 0) {
      return unsupported(files.unet + ": tensor '" + info.name +
                         "' is SDXL's conditioner; only SD 1.x checkpoints are supported");
    }
    if (info.name.rfind("cond_stage_model.model.", 0) == 0) {
      return unsupported(files.unet + ": tensor '" + info.name +
                         "' is an OpenCLIP text encoder (SD 2.x); only SD 1.x checkpoints "
                         "(CLIP ViT-L under cond_stage_model.transformer.) are supported");
    }
  }
  if (!file.contains(std::string(kUNetPrefix) + "input_blocks.0.0.weight")) {
    return not_found(files.unet + ": no UNet (missing tensor '" + kUNetPrefix +
                     "input_blocks.0.0.weight')");
  }
  if (!file.contains(std::string(kVaePrefix) + "post_quant_conv.weight") &&
      !file.contains(std::string(kVaePrefix) + "decoder.conv_in.weight")) {
    return not_found(files.unet + ": no VAE decoder (missing tensors '" + kVaePrefix +
                     "post_quant_conv.weight' and '" + kVaePrefix + "decoder.*')");
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t heads,
                           unet_head_count(options.unet_heads, {dir / "config.json"}, dir));
  DenoiserWeights w;
  TESSERA_ASSIGN_OR_RETURN(w.unet, infer_unet_config(file, heads));
  auto vae_inferred = infer_vae_decoder_config(file);
  if (!vae_inferred.ok()) return with_prefix(vae_inferred.status(), "VAE decoder: ");
  w.vae = *vae_inferred;
  TESSERA_ASSIGN_OR_RETURN(w.encoder, optional_encoder(file));
  w.text_in_checkpoint =
      file.contains(std::string(kCompVisText) + "text_model.embeddings.token_embedding.weight");
  w.unet_store = std::make_unique<WeightStore>(std::move(file), options.weights);
  return w;
}

// The UNet and the VAE belong together: an RGB decoder whose latent channels are the UNet's
// output; the UNet's input is those latents, or (an inpainting UNet) latents, mask and masked
// image latents; an encoder, where there is one, makes the decoder's latents from RGB.
Status check_denoiser_fit(const DiffusionModelFiles& files, const UNetConfig& unet,
                          const VaeDecoderConfig& vae,
                          const std::optional<VaeEncoderConfig>& encoder) {
  if (vae.out_channels != 3) {
    return unsupported(files.vae + ": the VAE decoder has " + std::to_string(vae.out_channels) +
                       " output channels (tensor '" + kVaePrefix +
                       "decoder.conv_out.weight'); an RGB image needs 3");
  }
  const int64_t z = vae.z_channels;
  if ((unet.in_channels != z && unet.in_channels != 2 * z + 1) || unet.out_channels != z) {
    return invalid_argument(files.unet + ": UNet in/out channels " +
                            std::to_string(unet.in_channels) + "/" +
                            std::to_string(unet.out_channels) + " do not match the VAE's " +
                            std::to_string(z) + " latent channels (" + files.vae +
                            "; an inpainting UNet takes " + std::to_string(2 * z + 1) + ")");
  }
  if (encoder && (encoder->z_channels != z || encoder->in_channels != 3 ||
                  encoder->downscale() != vae.upscale())) {
    return invalid_argument(files.vae + ": the VAE encoder (" + encoder->summary() + ", " +
                            std::to_string(encoder->in_channels) +
                            " input channels) does not fit its decoder (" + vae.summary() +
                            ", upscale " + std::to_string(vae.upscale()) + ")");
  }
  if (unet.in_channels != z && !encoder) {
    return not_found(files.vae + ": an inpainting UNet (" + std::to_string(unet.in_channels) +
                     " input channels) needs the VAE encoder, and the VAE has none (tensor '" +
                     kVaePrefix + "encoder.conv_in.weight')");
  }
  return Status();
}

}  // namespace

// Load in named steps: the backend, the files (locate_diffusion_model), the UNet and VAE weights
// and their fit, the networks, the text encoder, the tokenizer.
Expected<std::unique_ptr<DiffusionModel>> DiffusionModel::load(
    const std::string& path, const DiffusionLoadOptions& options) {
  auto impl = std::make_unique<Impl>();
  {
    auto selected = kernels::make_backend(options.device, options.cuda_device);
    if (!selected.ok()) return with_prefix(selected.status(), "diffusion model '" + path + "': ");
    impl->backend = std::move(selected->backend);
    impl->device_note = std::move(selected->note);
    impl->dev = Workspace(impl->backend.get());
  }
  TESSERA_ASSIGN_OR_RETURN(DiffusionModelLocation location, locate_diffusion_model(path));
  DiffusionModelFiles files = std::move(location.files);
  const fs::path dir = location.dir;

  TESSERA_ASSIGN_OR_RETURN(DenoiserWeights weights,
                           files.layout == ModelLayout::kDiffusers
                               ? open_diffusers_weights(path, dir, files, options)
                               : open_compvis_weights(dir, files, options));
  TESSERA_RETURN_IF_ERROR(check_denoiser_fit(files, weights.unet, weights.vae, weights.encoder));
  impl->renamed_bytes = std::move(weights.renamed_bytes);
  impl->unet_store = std::move(weights.unet_store);
  impl->vae_store = std::move(weights.vae_store);
  // LoRAs: every file read first (a bad one fails before any merge), then the UNet's modules
  // merged before the UNet reads its weights; the text encoder's wait for load_text_stage.
  for (const LoraSpec& spec : options.loras) {
    auto modules = read_lora_modules(spec.path);
    if (!modules.ok()) return with_prefix(modules.status(), "LoRA: ");
    impl->pending_loras.emplace_back(spec, std::move(*modules));
  }
  impl->loras.resize(impl->pending_loras.size());
  for (size_t i = 0; i < impl->pending_loras.size(); ++i) {
    const auto& [spec, modules] = impl->pending_loras[i];
    const Status merged = merge_lora(spec, modules, weights.unet, impl->unet_store.get(), nullptr,
                                     "", &impl->loras[i]);
    if (!merged.ok()) return with_prefix(merged, "LoRA: ");
  }
  TESSERA_ASSIGN_OR_RETURN(
      impl->unet, UNet::load(*impl->unet_store, weights.unet, kUNetPrefix, impl->backend.get()));
  WeightStore& vae_store = impl->vae_store ? *impl->vae_store : *impl->unet_store;
  auto vae = VaeDecoder::load(vae_store, weights.vae, kVaePrefix, impl->backend.get());
  if (!vae.ok()) return with_prefix(vae.status(), "VAE decoder: ");
  impl->vae = std::move(*vae);
  if (weights.encoder) {
    auto encoder = VaeEncoder::load(vae_store, *weights.encoder, kVaePrefix, impl->backend.get());
    if (!encoder.ok()) return with_prefix(encoder.status(), "VAE encoder: ");
    impl->encoder = std::move(*encoder);
  }
  // The networks hold their (merged) weights: the LoRA factors can go (the LCM-LoRA's are 270 MB).
  impl->unet_store->release_low_rank();
  KernelOptions kernel_options;
  kernel_options.precision =
      resolve_precision(options.precision, weights.unet.model_channels, *impl->backend);
  impl->unet->set_options(kernel_options);
  impl->vae->set_options(kernel_options);
  if (impl->encoder) impl->encoder->set_options(kernel_options);

  TESSERA_RETURN_IF_ERROR(
      impl->load_text_stage(path, dir, weights.text_in_checkpoint, weights.unet, options, &files));

  auto model = std::unique_ptr<DiffusionModel>(new DiffusionModel(std::move(impl)));
  model->files_ = std::move(files);
  return model;
}

}  // namespace tessera::diffusion
