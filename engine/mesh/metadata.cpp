#include "engine/mesh/metadata.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/mapped_file.h"
#include "engine/mesh/export_fbx.h"
#include "engine/mesh/import_internal.h"
#include "engine/mesh/threemf.h"

namespace tessera::mesh {
namespace {

std::string lower_ext(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

Expected<nlohmann::json> parse_object(const std::string& text, const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return corrupt_data(path + ": the Tessera metadata is not a JSON object");
  }
  return j;
}

Status none(const std::string& path) {
  return not_found(path +
                   " has no Tessera metadata (written by another program, or with the "
                   "metadata switched off)");
}

}  // namespace

std::string obj_metadata_line(const std::string& json_text) {
  std::string line = json_text;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::replace(line.begin(), line.end(), '\r', ' ');
  return kObjMetadataPrefix + line + "\n";
}

nlohmann::json glb_asset(const std::string& json_text) {
  nlohmann::json asset = {{"version", "2.0"},
                          {"generator", std::string("Tessera ") + TESSERA_VERSION}};
  if (!json_text.empty()) {
    nlohmann::json extras = nlohmann::json::parse(json_text, nullptr, false);
    if (!extras.is_discarded() && extras.is_object()) asset["extras"] = std::move(extras);
  }
  return asset;
}

Expected<nlohmann::json> read_metadata(const std::string& path) {
  const std::string ext = lower_ext(path);
  if (ext != ".glb" && ext != ".obj" && ext != ".3mf" && ext != ".fbx") {
    return invalid_argument(path +
                            ": Tessera metadata is read from .glb, .fbx, .obj and .3mf files");
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string bytes, read_file(path));
  if (ext == ".fbx") {
    TESSERA_ASSIGN_OR_RETURN(const std::optional<std::string> text,
                             fbx_model_string_property(bytes, path, kFbxSettingsProperty));
    if (!text) return none(path);
    return parse_object(*text, path);
  }
  if (ext == ".obj") {
    std::istringstream in(bytes);
    std::string line;
    for (int n = 0; n < 64 && std::getline(in, line); ++n) {  // written near the top
      if (line.rfind(kObjMetadataPrefix, 0) == 0) {
        return parse_object(line.substr(std::strlen(kObjMetadataPrefix)), path);
      }
    }
    return none(path);
  }
  if (ext == ".3mf") {
    TESSERA_ASSIGN_OR_RETURN(const ThreeMfFile file, parse_3mf(bytes, path));
    for (const auto& [key, value] : file.metadata) {
      if (key != kThreeMfMetadataName || value.empty() || value[0] != '{') continue;
      TESSERA_ASSIGN_OR_RETURN(nlohmann::json j, parse_object(value, path));
      if (j.contains("tessera")) return j;
    }
    return none(path);
  }
  // GLB: header (12 bytes), then the JSON chunk (length, type "JSON", data).
  if (bytes.size() < 20 || bytes.compare(0, 4, "glTF") != 0 || bytes.compare(16, 4, "JSON") != 0) {
    return corrupt_data(path + ": not a glTF binary with a JSON chunk");
  }
  uint32_t length = 0;
  std::memcpy(&length, bytes.data() + 12, 4);
  if (length > bytes.size() - 20) return corrupt_data(path + ": the JSON chunk overruns the file");
  nlohmann::json doc = nlohmann::json::parse(bytes.substr(20, length), nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return corrupt_data(path + ": the glTF JSON is invalid");
  const auto asset = doc.find("asset");
  if (asset == doc.end() || !asset->is_object()) return none(path);
  const auto extras = asset->find("extras");
  if (extras == asset->end()) return none(path);
  if (!extras->is_object()) return corrupt_data(path + ": asset.extras is not a JSON object");
  return *extras;
}

}  // namespace tessera::mesh
