#include "engine/runtime/image_inputs.h"

#include "engine/diffusion/lora.h"
#include "engine/diffusion/pipeline.h"
#include "engine/runtime/user_dirs.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

namespace tessera::runtime {
namespace {

std::string size_text(int64_t w, int64_t h) {
  return std::to_string(w) + "x" + std::to_string(h);
}

Status check_picture(const mesh::TextureImage* image, const char* what) {
  if (image == nullptr) return Status();
  if (image->width < 1 || image->height < 1 ||
      image->rgb.size() != static_cast<size_t>(image->width * image->height * 3)) {
    return invalid_argument(std::string(what) + ": " + size_text(image->width, image->height) +
                            " with " + std::to_string(image->rgb.size()) +
                            " bytes is not an RGB picture");
  }
  return Status();
}

}  // namespace

Expected<PreparedImageInputs> prepare_image_inputs(
    int64_t width, int64_t height, const std::shared_ptr<const mesh::TextureImage>& init_image,
    const std::shared_ptr<const mesh::TextureImage>& mask, int64_t multiple, int64_t side,
    const std::shared_ptr<const mesh::TextureImage>& control) {
  TESSERA_RETURN_IF_ERROR(check_picture(init_image.get(), "init image"));
  TESSERA_RETURN_IF_ERROR(check_picture(mask.get(), "mask"));
  TESSERA_RETURN_IF_ERROR(check_picture(control.get(), "control image"));
  PreparedImageInputs p;
  const std::shared_ptr<const mesh::TextureImage>& init = init_image;
  // One side given: the other keeps the init image's aspect ratio.
  if (init != nullptr && (width > 0) != (height > 0)) {
    const double aspect = static_cast<double>(init->height) / static_cast<double>(init->width);
    const auto round_to = [&](double v) {
      return std::max(
          multiple,
          static_cast<int64_t>(std::lround(v / static_cast<double>(multiple))) * multiple);
    };
    if (width > 0) {
      height = round_to(static_cast<double>(width) * aspect);
    } else {
      width = round_to(static_cast<double>(height) / aspect);
    }
  }
  // A picture's own size, shrunk (aspect kept) to at most (2 x side)^2 pixels: a 4000 x 3000 photo
  // would not fit in memory at its size.
  double shrink = 1.0;
  if (init != nullptr && width <= 0 && height <= 0) {
    const double max_pixels = 4.0 * static_cast<double>(side) * static_cast<double>(side);
    const double pixels = static_cast<double>(init->width) * static_cast<double>(init->height);
    if (pixels > max_pixels) shrink = std::sqrt(max_pixels / pixels);
  }
  const auto from_init = [&](int64_t given, int64_t init_side) {
    if (given > 0) return given;
    if (init == nullptr) return side;
    const auto scaled = static_cast<int64_t>(static_cast<double>(init_side) * shrink);
    return std::max(multiple, scaled / multiple * multiple);
  };
  p.width = from_init(width, init ? init->width : 0);
  p.height = from_init(height, init ? init->height : 0);
  const auto fit = [&](const std::shared_ptr<const mesh::TextureImage>& image, const char* what,
                       bool nearest) -> std::shared_ptr<const mesh::TextureImage> {
    if (image == nullptr) return nullptr;
    if (image->width == p.width && image->height == p.height) return image;
    p.notes.push_back(
        std::string(what) + " resized from " + size_text(image->width, image->height) + " to " +
        size_text(p.width, p.height) +
        (width > 0 || height > 0 ? std::string(" (the size asked for)")
         : shrink < 1.0
             ? " (at most " + std::to_string(2 * side) + "x" + std::to_string(2 * side) +
                   " pixels' worth for this model; --width/--height ask for "
                   "another size)"
             : " (a multiple of " + std::to_string(multiple) + ", the model's size step)"));
    return std::make_shared<mesh::TextureImage>(
        mesh::resize_texture(*image, p.width, p.height, nearest));
  };
  p.init = fit(init_image, "init image", false);
  p.mask = fit(mask, "mask", true);
  p.control = fit(control, "control image", false);
  return p;
}

Expected<std::string> default_control_net(const std::string& model_path) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::is_directory(model_path, ec)
                                        ? std::filesystem::path(model_path)
                                        : std::filesystem::path(model_path).parent_path();
  return diffusion::model_card_control_net(dir.string());
}

Expected<std::vector<LoraChoice>> take_lora_tags(std::string* prompt, const std::string& dir) {
  std::vector<LoraChoice> found;
  std::string& p = *prompt;
  for (size_t at = p.find("<lora:"); at != std::string::npos; at = p.find("<lora:", at)) {
    const size_t end = p.find('>', at);
    if (end == std::string::npos) {
      return invalid_argument("prompt: '" + p.substr(at) +
                              "' has no closing '>' (write <lora:NAME:1>)");
    }
    const std::string tag = p.substr(at, end + 1 - at);
    std::string body = p.substr(at + 6, end - at - 6);
    LoraChoice choice;
    const size_t colon = body.rfind(':');
    if (colon != std::string::npos) {
      const std::string m = body.substr(colon + 1);
      char* stop = nullptr;
      const float v = std::strtof(m.c_str(), &stop);
      if (m.empty() || *stop != '\0' || !std::isfinite(v)) {
        return invalid_argument("prompt: " + tag + ": '" + m + "' is not a multiplier (a number)");
      }
      choice.multiplier = v;
      body = body.substr(0, colon);
    }
    if (body.empty()) return invalid_argument("prompt: " + tag + " names no LoRA");
    std::error_code ec;
    const std::filesystem::path base(dir);
    for (const std::filesystem::path& candidate : {base / body, base / (body + ".safetensors")}) {
      if (std::filesystem::is_regular_file(candidate, ec)) {
        choice.path = candidate.string();
        break;
      }
    }
    if (choice.path.empty()) {
      return not_found("prompt: " + tag + ": no LoRA '" + body + "' or '" + body +
                       ".safetensors' in " + dir + " (--lora-dir says where)");
    }
    add_loras(&found, {choice});
    // The tag goes, with one space beside it.
    size_t from = at, to = end + 1;
    if (to < p.size() && p[to] == ' ') {
      ++to;
    } else if (from > 0 && p[from - 1] == ' ') {
      --from;
    }
    p.erase(from, to - from);
    at = from;
  }
  return found;
}

void add_loras(std::vector<LoraChoice>* loras, const std::vector<LoraChoice>& more) {
  for (const LoraChoice& m : more) {
    auto it = std::find_if(loras->begin(), loras->end(),
                           [&](const LoraChoice& l) { return l.path == m.path; });
    if (it == loras->end()) {
      loras->push_back(m);
    } else {
      it->multiplier += m.multiplier;
    }
  }
}

Expected<LoraChoice> parse_lora_choice(const std::string& text) {
  TESSERA_ASSIGN_OR_RETURN(const diffusion::LoraSpec spec, diffusion::parse_lora_spec(text));
  return LoraChoice{spec.path, spec.multiplier};
}

Status check_image_job(const ImageJobOptions& job, bool json_names) {
  // The field as the front end spells it: "control scale" on a command line, "\"control_scale\""
  // in a JSON request (whose errors name the field that way).
  const auto name = [&](const char* words, const char* key) {
    if (!json_names) return std::string(words);
    std::string quoted(1, '"');
    quoted.append(key);
    quoted.push_back('"');
    return quoted;
  };
  if (job.steps < 1 || job.steps > kMaxImageSteps) {
    return invalid_argument(name("steps", "steps") + " " + std::to_string(job.steps) +
                            " is outside 1.." + std::to_string(kMaxImageSteps));
  }
  if (job.mask != nullptr && job.init_image == nullptr) {
    return invalid_argument(name("a mask", "mask") +
                            " needs an init image (the picture whose white part is repainted)");
  }
  if (!(job.control_scale >= 0.0f && job.control_scale <= kMaxControlScale)) {
    return invalid_argument(name("control scale", "control_scale") + " " +
                            std::to_string(job.control_scale) + " is outside [0, " +
                            std::to_string(static_cast<int>(kMaxControlScale)) +
                            "] (1: follow the control image, 0.5: loosely)");
  }
  if (!job.control_model.empty() && job.control_image == nullptr) {
    return invalid_argument(name("a ControlNet", "control_model") + " (" + job.control_model +
                            ") needs a control image to follow (a depth map)");
  }
  if (job.init_image != nullptr && !(job.strength > 0.0f && job.strength <= 1.0f)) {
    return invalid_argument(name("strength", "strength") + " " + std::to_string(job.strength) +
                            " is outside (0, 1] (0.3: a light touch, 0.75: the default, 1: "
                            "repaint fully)");
  }
  return Status();
}

Expected<std::vector<LoraChoice>> image_job_loras(const ImageJobOptions& job, std::string* prompt) {
  std::string text = job.prompt;
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<LoraChoice> tagged,
      take_lora_tags(&text, job.lora_dir.empty() ? default_lora_dir() : job.lora_dir));
  std::vector<LoraChoice> all = job.loras;
  add_loras(&all, tagged);
  if (prompt != nullptr) *prompt = std::move(text);
  return all;
}

Status apply_fast_choice(ImageJobOptions* job, const std::string& lora_dir) {
  bool have = false;
  for (const LoraChoice& l : job->loras) {
    std::string stem = std::filesystem::path(l.path).stem().string();
    std::transform(stem.begin(), stem.end(), stem.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (stem.find("lcm") != std::string::npos) have = true;
  }
  if (!have) {
    const std::filesystem::path file = std::filesystem::path(lora_dir) / kLcmLoraFile;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) {
      return not_found("fast needs the LCM-LoRA for SD 1.5: put it at " + file.string() +
                       " or give it with --lora (a file with 'lcm' in its name); without it, "
                       "4 LCM steps give a blurred image");
    }
    job->loras.push_back({file.string(), 1.0f});
  }
  if (job->tiny_decoder.empty()) {
    const std::filesystem::path tiny = std::filesystem::path(lora_dir) / kTinyDecoderFile;
    std::error_code ec;
    if (std::filesystem::is_regular_file(tiny, ec)) job->tiny_decoder = tiny.string();
  }
  job->sampler = SamplerKind::kLcm;
  job->steps = kFastImageSteps;
  job->guidance = kFastImageGuidance;
  return Status();
}

std::string default_lora_dir() {
  return (std::filesystem::path(user_data_dir()) / "loras").string();
}

}  // namespace tessera::runtime
