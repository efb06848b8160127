#include "engine/runtime/image_request.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/base64.h"
#include "engine/mesh/import.h"
#include "core/mapped_file.h"
#include "core/png.h"
#include "engine/runtime/image_inputs.h"

namespace tessera::runtime {

using nlohmann::json;

const std::set<std::string>& image_request_keys() {
  static const std::set<std::string> keys = {
      "kind",          "prompt", "negative_prompt", "steps",         "guidance",
      "sampler",       "seed",   "width",           "height",        "init_image",
      "strength",      "mask",   "control_image",   "control_model", "control_scale",
      "control_guess", "loras",  "lora_dir",        "fast",          "tiny_decoder"};
  return keys;
}

namespace {

// A request's pictures are resized to the image (at most 2048 x 2048 for SD 1.5); a bigger one
// only costs the server memory while it waits.
constexpr int64_t kMaxRequestPicturePixels = 4096 * 4096;

// Width and height from a PNG's IHDR (0, 0 when the bytes do not start like a PNG: decode_png
// then says what is wrong).
std::pair<int64_t, int64_t> png_header_size(const std::string& b) {
  if (b.size() < 24 || b.compare(12, 4, "IHDR") != 0) return {0, 0};
  const auto be32 = [&](size_t at) {
    return (int64_t{static_cast<uint8_t>(b[at])} << 24) |
           (int64_t{static_cast<uint8_t>(b[at + 1])} << 16) |
           (int64_t{static_cast<uint8_t>(b[at + 2])} << 8) |
           int64_t{static_cast<uint8_t>(b[at + 3])};
  };
  return {be32(16), be32(20)};
}

Status field_error(const std::string& key, const std::string& what) {
  return invalid_argument("\"" + key + "\" " + what);
}

Expected<std::shared_ptr<const mesh::TextureImage>> picture(const json& j, const std::string& key,
                                                            const std::string& picture_dir) {
  if (!j[key].is_string()) {
    return field_error(key, picture_dir.empty() ? "must be a PNG file in base64 (a string)"
                                                : "must be a PNG file's path (a string)");
  }
  std::string text = j[key].get<std::string>();
  std::optional<std::string> bytes;
  if (!picture_dir.empty()) {
    std::filesystem::path path(text);
    if (path.is_relative()) path = std::filesystem::path(picture_dir) / path;
    auto read = read_file(path.string());
    if (!read.ok()) return field_error(key, read.status().message());
    bytes = std::move(*read);
  } else {
    // A data: URI is accepted too (what a browser's canvas gives).
    const size_t comma = text.rfind(',');
    if (text.rfind("data:", 0) == 0 && comma != std::string::npos) text = text.substr(comma + 1);
    bytes = decode_base64(text);
    if (!bytes) return field_error(key, "is not base64");
  }
  // The size first, from the header: a small file may claim a huge image.
  const auto [w, h] = png_header_size(*bytes);
  if (w * h > kMaxRequestPicturePixels) {
    return field_error(key, "is " + std::to_string(w) + "x" + std::to_string(h) +
                                " pixels; at most " +
                                std::to_string(kMaxRequestPicturePixels / 1000000) +
                                " megapixels (it is resized to the image's size anyway)");
  }
  auto png = decode_png(bytes->data(), bytes->size(), 3, key);
  if (!png.ok()) return field_error(key, "is not a PNG image: " + png.status().message());
  auto image = std::make_shared<mesh::TextureImage>();
  image->width = png->width;
  image->height = png->height;
  image->rgb = std::move(png->pixels);
  return std::shared_ptr<const mesh::TextureImage>(std::move(image));
}

}  // namespace

Expected<ImageJobOptions> parse_image_request(const json& j, const std::string& picture_dir) {
  if (!j.is_object()) return invalid_argument("an image job must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (image_request_keys().count(key) == 0) {
      std::string known;
      for (const std::string& k : image_request_keys()) known += (known.empty() ? "" : ", ") + k;
      return invalid_argument("unknown key \"" + key + "\" (known for an image job: " + known +
                              ")");
    }
  }
  if (j.contains("kind") && (!j["kind"].is_string() || j["kind"].get<std::string>() != "image")) {
    return field_error("kind", "must be \"image\" here");
  }
  if (!j.contains("prompt") || !j["prompt"].is_string()) {
    return invalid_argument("\"prompt\" (a string) is required");
  }
  ImageJobOptions job;
  job.prompt = j["prompt"].get<std::string>();
  auto text = [&](const char* key, std::string* out) -> Status {
    if (!j.contains(key)) return Status();
    if (!j[key].is_string()) return field_error(key, "must be a string");
    *out = j[key].get<std::string>();
    return Status();
  };
  auto number = [&](const char* key, double lo, double hi, bool integer, auto* out) -> Status {
    if (!j.contains(key)) return Status();
    const json& v = j[key];
    if (!v.is_number() || (integer && !v.is_number_integer())) {
      return field_error(key, integer ? "must be an integer" : "must be a number");
    }
    const double d = v.get<double>();
    if (!(d >= lo && d <= hi)) return field_error(key, v.dump() + " is out of range");
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(d);
    return Status();
  };
  TESSERA_RETURN_IF_ERROR(text("negative_prompt", &job.negative_prompt));
  TESSERA_RETURN_IF_ERROR(number("steps", 1, kMaxImageSteps, true, &job.steps));
  TESSERA_RETURN_IF_ERROR(number("guidance", 0, 100, false, &job.guidance));
  TESSERA_RETURN_IF_ERROR(number("width", 8, 4096, true, &job.width));
  TESSERA_RETURN_IF_ERROR(number("height", 8, 4096, true, &job.height));
  TESSERA_RETURN_IF_ERROR(number("strength", 0, 1, false, &job.strength));
  // Its range is check_image_job's (below).
  TESSERA_RETURN_IF_ERROR(number("control_scale", -1e30, 1e30, false, &job.control_scale));
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned()) return field_error("seed", "must be an integer >= 0");
    job.seed = j["seed"].get<uint64_t>();
  }
  if (j.contains("sampler")) {
    if (!j["sampler"].is_string()) return field_error("sampler", "must be a string");
    auto sampler = parse_sampler(j["sampler"].get<std::string>());
    if (!sampler.ok()) return field_error("sampler", sampler.status().message());
    job.sampler = *sampler;
  }
  for (const char* key : {"init_image", "mask", "control_image"}) {
    if (!j.contains(key)) continue;
    TESSERA_ASSIGN_OR_RETURN(auto image, picture(j, key, picture_dir));
    (std::string(key) == "init_image" ? job.init_image
     : std::string(key) == "mask"     ? job.mask
                                      : job.control_image) = std::move(image);
  }
  TESSERA_RETURN_IF_ERROR(text("control_model", &job.control_model));
  TESSERA_RETURN_IF_ERROR(text("tiny_decoder", &job.tiny_decoder));
  if (j.contains("control_guess")) {
    if (!j["control_guess"].is_boolean()) return field_error("control_guess", "must be true/false");
    job.control_guess_mode = j["control_guess"].get<bool>();
  }
  TESSERA_RETURN_IF_ERROR(text("lora_dir", &job.lora_dir));
  if (j.contains("loras")) {
    if (!j["loras"].is_array()) return field_error("loras", "must be a list of \"FILE[:M]\"");
    for (const json& l : j["loras"]) {
      if (!l.is_string()) return field_error("loras", "must be a list of \"FILE[:M]\"");
      auto choice = parse_lora_choice(l.get<std::string>());
      if (!choice.ok()) return field_error("loras", choice.status().message());
      job.loras.push_back(*choice);
    }
  }
  if (j.contains("fast")) {
    if (!j["fast"].is_boolean()) return field_error("fast", "must be true/false");
    if (j["fast"].get<bool>()) {
      TESSERA_RETURN_IF_ERROR(
          apply_fast_choice(&job, job.lora_dir.empty() ? default_lora_dir() : job.lora_dir));
    }
  }
  TESSERA_RETURN_IF_ERROR(check_image_job(job, true));
  return job;
}

const std::set<std::string>& paint_request_keys() {
  static const std::set<std::string> keys = {
      "kind",     "mesh",      "mesh_format",   "prompt",        "negative_prompt",
      "steps",    "guidance",  "sampler",       "seed",          "loras",
      "lora_dir", "fast",      "control_model", "control_scale", "tiny_decoder",
      "views",    "view_size", "texture_size",  "new_atlas"};
  return keys;
}

Expected<PaintJobOptions> parse_paint_request(const json& j,
                                              const std::set<std::string>& extra_keys) {
  if (!j.is_object()) return invalid_argument("a paint job must be a JSON object");
  json image = json::object();
  for (const auto& [key, value] : j.items()) {
    if (extra_keys.count(key) > 0) continue;
    if (paint_request_keys().count(key) == 0) {
      std::string known;
      for (const std::string& k : paint_request_keys()) known += (known.empty() ? "" : ", ") + k;
      return invalid_argument("unknown key \"" + key + "\" (known for a paint job: " + known + ")");
    }
    // The image job's fields, but its ControlNet: the painter gives it a depth map per view.
    if (image_request_keys().count(key) > 0 && key != "kind" && key != "control_model") {
      image[key] = value;
    }
  }
  if (!j.contains("kind") || !j["kind"].is_string() || j["kind"].get<std::string>() != "paint") {
    return field_error("kind", "must be \"paint\" here");
  }
  PaintJobOptions job;
  TESSERA_ASSIGN_OR_RETURN(job.image, parse_image_request(image));
  if (j.contains("control_model")) {
    if (!j["control_model"].is_string()) return field_error("control_model", "must be a string");
    job.image.control_model = j["control_model"].get<std::string>();
  }
  if (j.contains("views")) {
    const json& v = j["views"];
    if (!v.is_object())
      return field_error("views", "must be an object (ring, elevation, top, bottom)");
    for (const auto& [key, value] : v.items()) {
      if (key == "ring") {
        if (!value.is_number_integer()) return field_error("views.ring", "must be an integer");
        job.views.ring = value.get<int>();
      } else if (key == "elevation") {
        if (!value.is_number()) return field_error("views.elevation", "must be a number");
        job.views.ring_elevation_deg = value.get<double>();
      } else if (key == "top" || key == "bottom") {
        if (!value.is_boolean()) return field_error("views." + key, "must be true/false");
        (key == "top" ? job.views.top : job.views.bottom) = value.get<bool>();
      } else {
        return field_error("views",
                           "has an unknown key \"" + key + "\" (ring, elevation, top, bottom)");
      }
    }
  }
  for (const char* key : {"view_size", "texture_size"}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number_integer()) return field_error(key, "must be an integer");
    const int64_t value = j[key].get<int64_t>();
    if (value < 0 || value > 1 << 20) return field_error(key, j[key].dump() + " is out of range");
    (std::string(key) == "view_size" ? job.view_size : job.texture_size) = static_cast<int>(value);
  }
  if (j.contains("new_atlas")) {
    if (!j["new_atlas"].is_boolean()) return field_error("new_atlas", "must be true/false");
    job.new_atlas = j["new_atlas"].get<bool>();
  }
  TESSERA_RETURN_IF_ERROR(check_paint_job(job));
  // The mesh last: the cheap checks first.
  std::string format = "glb";
  if (j.contains("mesh_format")) {
    if (!j["mesh_format"].is_string()) return field_error("mesh_format", "must be a string");
    format = j["mesh_format"].get<std::string>();
    for (char& c : format) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!format.empty() && format[0] == '.') format.erase(0, 1);
  }
  if (format != "glb" && format != "fbx" && format != "obj") {
    return field_error("mesh_format", "must be glb, fbx or obj");
  }
  if (!j.contains("mesh") || !j["mesh"].is_string()) {
    return invalid_argument("\"mesh\" (a " + format + " file in base64) is required");
  }
  const std::optional<std::string> bytes = decode_base64(j["mesh"].get<std::string>());
  if (!bytes) return field_error("mesh", "is not base64");
  std::vector<std::string> warnings;
  const std::string name = "\"mesh\" (" + format + ")";
  Expected<mesh::Mesh> parsed = format == "glb"   ? mesh::parse_glb(*bytes, name, &warnings)
                                : format == "fbx" ? mesh::parse_fbx(*bytes, name, &warnings)
                                                  : mesh::parse_obj(*bytes, name, &warnings);
  if (!parsed.ok()) return invalid_argument(parsed.status().message());
  if (parsed->triangles.empty()) return field_error("mesh", "holds no triangles");
  job.mesh = std::make_shared<const mesh::Mesh>(std::move(*parsed));
  return job;
}

}  // namespace tessera::runtime
