#include "engine/diffusion/model_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <vector>

namespace tessera::diffusion {

namespace fs = std::filesystem;

namespace {
bool is_regular(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The checkpoint DIR/model.json names ("files": {"weights": "model.safetensors"}), when that
// file exists; "" otherwise.
std::string card_weights(const fs::path& dir) {
  std::ifstream in(dir / "model.json");
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (!j.is_object() || !j.contains("files") || !j["files"].is_object() ||
      !j["files"].contains("weights") || !j["files"]["weights"].is_string()) {
    return "";
  }
  const fs::path weights = dir / j["files"]["weights"].get<std::string>();
  return is_regular(weights) ? weights.string() : "";
}

}  // namespace

Expected<DiffusionModelLocation> locate_diffusion_model(const std::string& path) {
  DiffusionModelLocation out;
  DiffusionModelFiles& files = out.files;
  std::error_code ec;
  fs::path dir;  // where the companion files (text encoder, tokenizer) are looked for
  if (fs::is_directory(path, ec)) {
    dir = path;
    if (fs::exists(dir / "unet", ec) || fs::exists(dir / "vae", ec)) {
      files.layout = ModelLayout::kDiffusers;
      files.unet = (dir / "unet" / kDiffusersWeights).string();
      files.vae = (dir / "vae" / kDiffusersWeights).string();
    } else {
      std::vector<std::string> found;
      // A Tessera model card names its checkpoint (files.weights): other .safetensors files
      // beside it (a ControlNet, LoRAs) are not the model.
      if (const std::string named = card_weights(dir); !named.empty()) found.push_back(named);
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (!found.empty()) break;
        if (entry.is_regular_file(ec) && entry.path().extension() == ".safetensors") {
          found.push_back(entry.path().string());
        }
      }
      if (found.empty()) {
        return not_found("diffusion model directory '" + path + "': no unet/" + kDiffusersWeights +
                         " (diffusers layout) and no .safetensors file "
                         "(CompVis single-file layout)");
      }
      if (found.size() > 1) {
        std::sort(found.begin(), found.end());
        return invalid_argument("diffusion model directory '" + path +
                                "': " + std::to_string(found.size()) + " .safetensors files (" +
                                found[0] + ", " + found[1] +
                                ", ...): pass the CompVis checkpoint file itself");
      }
      files.unet = files.vae = found[0];
    }
  } else if (is_regular(path)) {
    files.unet = files.vae = path;
    dir = fs::path(path).parent_path();
    if (dir.empty()) dir = ".";
  } else {
    return not_found("diffusion model '" + path + "' does not exist");
  }
  // Absolute, so that DIR/.. exists for a relative DIR.
  dir = fs::absolute(dir, ec).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();
  out.dir = dir.string();
  return out;
}

}  // namespace tessera::diffusion
