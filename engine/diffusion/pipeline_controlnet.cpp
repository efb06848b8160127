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

}  // namespace tessera::diffusion
