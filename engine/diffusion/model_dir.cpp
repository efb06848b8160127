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

// The checkpoint DIR/model.json names ("files": {"weights": "model.safetensors"}); "" when there
// is no card or it names none. kCorruptData naming the card when it is malformed or names a file
// that is not there.
Expected<std::string> card_weights(const fs::path& dir) {
  const fs::path card = dir / "model.json";
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json j, read_json_file(card.string()));
  if (j.is_null() || !j.contains("files") || !j["files"].is_object() ||
      !j["files"].contains("weights")) {
    return std::string();
  }
  if (!j["files"]["weights"].is_string()) {
    return corrupt_data(card.string() + ": 'files.weights' must be a file name");
  }
  const fs::path weights = dir / j["files"]["weights"].get<std::string>();
  if (!is_regular(weights)) {
    return corrupt_data(card.string() + ": its checkpoint '" + weights.string() + "' is missing");
  }
  return weights.string();
}

}  // namespace

Expected<nlohmann::json> read_json_file(const std::string& path) {
  if (!is_regular(path)) return nlohmann::json();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return io_error(path + ": cannot read");
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt_data(path + ": not a JSON object");
  return j;
}

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
      TESSERA_ASSIGN_OR_RETURN(const std::string named, card_weights(dir));
      if (!named.empty()) {
        found.push_back(named);
      } else {
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
          if (entry.is_regular_file(ec) && entry.path().extension() == ".safetensors") {
            found.push_back(entry.path().string());
          }
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
