// DiffusionModel::load_control_net (pipeline.h): the ControlNet's file found in its layout,
// renamed to the v1.1 names where it has diffusers', checked against the model and loaded onto
// the model's backend.
#include <algorithm>
#include <cctype>
#include <filesystem>

#include "engine/diffusion/pipeline_internal.h"

namespace tessera::diffusion {

namespace fs = std::filesystem;
using pipeline_detail::is_file;
using pipeline_detail::RenamedFile;

namespace {

constexpr const char* kDiffusersFile = "diffusion_pytorch_model.safetensors";

// The safetensors file holding the ControlNet at `path` (see load_control_net).
Expected<std::string> locate_control_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const fs::path& p :
         {fs::path(path) / kDiffusersFile, fs::path(path) / "controlnet" / kDiffusersFile}) {
      if (is_file(p)) return p.string();
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (e.is_regular_file(ec) && e.path().extension() == ".safetensors") {
        found.push_back(e.path().string());
      }
    }
    if (found.size() == 1) return found[0];
    return not_found("ControlNet folder '" + path + "': " +
                     (found.empty() ? "no .safetensors file and no " + std::string(kDiffusersFile)
                                    : std::to_string(found.size()) +
                                          " .safetensors files (name the one to use)"));
  }
  if (!is_file(path)) return not_found("ControlNet '" + path + "': no such file or folder");
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".pth" || ext == ".ckpt" || ext == ".pt" || ext == ".bin") {
    return unsupported("ControlNet '" + path + "': a PyTorch pickle (" + ext +
                       "); Tessera reads .safetensors only (convert it, or use the .safetensors "
                       "release: most ControlNets publish one)");
  }
  return path;
}

}  // namespace

Status DiffusionModel::load_control_net(const std::string& path) {
  Impl& m = *impl_;
  TESSERA_ASSIGN_OR_RETURN(const std::string file_path, locate_control_file(path));
  std::unique_ptr<uint8_t[]> bytes;
  std::optional<SafeTensors> file;
  std::string prefix = kControlPrefix;
  {
    TESSERA_ASSIGN_OR_RETURN(SafeTensors probe, SafeTensors::open(file_path));
    if (probe.contains("controlnet_cond_embedding.conv_in.weight")) {
      TESSERA_ASSIGN_OR_RETURN(RenamedFile renamed,
                               pipeline_detail::open_diffusers_controlnet(file_path));
      bytes = std::move(renamed.bytes);
      file.emplace(std::move(renamed.file));
    } else {
      if (!probe.contains(prefix + "input_hint_block.0.weight") &&
          probe.contains("input_hint_block.0.weight")) {
        prefix.clear();
      }
      file.emplace(std::move(probe));
    }
  }
  auto config = infer_controlnet_config(*file, unet_config(), vae_config().upscale(), prefix);
  if (!config.ok()) return config.status();
  // The ControlNet's linear layers in the model's format (8-bit weights stay 8-bit).
  auto store = std::make_unique<WeightStore>(std::move(*file), m.unet_store->format());
  auto net = ControlNet::load(*store, *config, prefix, m.backend.get());
  if (!net.ok()) return net.status().with_context("ControlNet");
  (*net)->set_options(m.unet->options());
  m.control.reset();
  m.control_store = std::move(store);
  m.control_bytes = std::move(bytes);
  m.control = std::move(*net);
  m.control_path = path;
  return Status();
}

void DiffusionModel::unload_control_net() {
  Impl& m = *impl_;
  m.control.reset();
  m.control_store.reset();
  m.control_bytes.reset();
  m.control_path.clear();
}

bool DiffusionModel::has_control_net() const {
  return impl_->control != nullptr;
}

const std::string& DiffusionModel::control_net_path() const {
  return impl_->control_path;
}

const ControlNetConfig* DiffusionModel::control_net_config() const {
  return impl_->control ? &impl_->control->config() : nullptr;
}

Status DiffusionModel::load_tiny_decoder(const std::string& path) {
  Impl& m = *impl_;
  std::error_code ec;
  std::string file_path = path;
  if (fs::is_directory(path, ec)) {
    file_path.clear();
    for (const char* name : {"taesd_decoder.safetensors", "diffusion_pytorch_model.safetensors"}) {
      const fs::path p = fs::path(path) / name;
      if (fs::is_regular_file(p, ec)) {
        file_path = p.string();
        break;
      }
    }
    if (file_path.empty()) {
      return not_found(path +
                       ": no taesd_decoder.safetensors or diffusion_pytorch_model.safetensors in "
                       "this folder (a tiny decoder)");
    }
  } else if (!fs::exists(path, ec)) {
    return not_found(path + ": no such tiny decoder file");
  }
  const std::string ext = fs::path(file_path).extension().string();
  if (ext == ".pth" || ext == ".ckpt" || ext == ".pt") {
    return unsupported(file_path +
                       ": a pickled checkpoint; Tessera reads tiny decoders as .safetensors "
                       "(taesd_decoder.safetensors is published as such)");
  }
  TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(file_path));
  TESSERA_ASSIGN_OR_RETURN(TinyDecoderConfig config, infer_tiny_decoder_config(file));
  const int64_t z = unet_config().out_channels;
  if (config.latent_channels != z || config.upscale() != vae_config().upscale()) {
    return invalid_argument(
        file_path + ": a tiny decoder for " + std::to_string(config.latent_channels) +
        "-channel latents at x" + std::to_string(config.upscale()) + ", but this model's are " +
        std::to_string(z) + "-channel at x" + std::to_string(vae_config().upscale()));
  }
  auto store = std::make_unique<WeightStore>(std::move(file), WeightFormat::kF32);
  auto decoder = TinyDecoder::load(*store, config, m.backend.get());
  if (!decoder.ok()) return decoder.status().with_context("tiny decoder");
  (*decoder)->set_options(m.unet->options());
  m.tiny.reset();
  m.tiny_store = std::move(store);
  m.tiny = std::move(*decoder);
  m.tiny_path = path;
  return Status();
}

void DiffusionModel::unload_tiny_decoder() {
  Impl& m = *impl_;
  m.tiny.reset();
  m.tiny_store.reset();
  m.tiny_path.clear();
}

bool DiffusionModel::has_tiny_decoder() const {
  return impl_->tiny != nullptr;
}

const std::string& DiffusionModel::tiny_decoder_path() const {
  return impl_->tiny_path;
}

}  // namespace tessera::diffusion
