#include "engine/runtime/provenance.h"

#include "core/png.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <type_traits>

#include "core/sha256.h"
#include "engine/mesh/asset.h"
#include "engine/mesh/export_options.h"
#include "engine/runtime/user_text.h"

namespace tessera::runtime {

nlohmann::json shape_settings_json(const JobOptions& job, uint64_t seed, int resolution,
                                   const std::string& model_name, const std::string& gpt_sha256) {
  const SamplingSettings& s = job.generation.sampling;
  nlohmann::json j;
  j["tessera"] = TESSERA_VERSION;
  // Text that reaches a file is always valid (a front end that skipped the rule included).
  j["prompt"] = check_user_text("prompt", job.prompt, std::string::npos)->text;
  j["sampling"] = {{"sample", s.sample}};
  if (s.sample) {
    j["sampling"]["seed"] = seed;
    j["sampling"]["temperature"] = s.temperature;
    j["sampling"]["top_k"] = s.top_k;
    j["sampling"]["top_p"] = s.top_p;
  }
  j["guidance"] = s.guidance;
  j["bbox"] = job.generation.bbox ? nlohmann::json(*job.generation.bbox) : nlohmann::json();
  j["resolution"] = resolution;
  j["tokens"] = job.generation.num_tokens;
  j["model"] = {{"name", display_path(model_name)}, {"gpt_sha256", gpt_sha256}};
  return j;
}

namespace {

// A float as people write it (0.6, not 0.600000023841858): the shortest of %g's forms that reads
// back as the same float.
std::string short_number(float v) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

// A1111's names for the samplers (its "Sampler:" field).
const char* a1111_sampler_name(SamplerKind kind) {
  switch (kind) {
    case SamplerKind::kEuler:
      return "Euler";
    case SamplerKind::kEulerAncestral:
      return "Euler a";
    case SamplerKind::kDpmpp2m:
      return "DPM++ 2M Karras";
    case SamplerKind::kLcm:
      return "LCM";
  }
  return "Euler";
}

}  // namespace

nlohmann::json image_settings_json(const ImageProvenance& p) {
  const ImageJobOptions& job = *p.job;
  nlohmann::json j = {
      {"tessera", TESSERA_VERSION},
      {"prompt", check_user_text("prompt", job.prompt, std::string::npos)->text},
      {"negative_prompt",
       check_user_text("negative prompt", job.negative_prompt, std::string::npos)->text},
      {"seed", job.seed},
      {"steps", job.steps},
      {"guidance", std::stod(short_number(job.guidance))},
      {"sampler", sampler_kind_name(job.sampler)},
      {"width", p.width},
      {"height", p.height},
      {"model", display_path(p.model_name)},
      {"precision", p.precision}};
  if (!job.loras.empty()) {
    j["loras"] = nlohmann::json::array();
    for (const LoraChoice& l : job.loras) {
      j["loras"].push_back(
          {{"file", display_path(std::filesystem::path(l.path).filename().string())},
           {"multiplier", std::stod(short_number(l.multiplier))}});
    }
  }
  if (job.init_image != nullptr) {
    j["init_image"] = display_path(p.init_name);
    j["strength"] = std::stod(short_number(job.strength));
    if (job.mask != nullptr) j["mask"] = display_path(p.mask_name);
  }
  if (job.control_image != nullptr) {
    j["control"] = {
        {"image", display_path(p.control_name)},
        {"model", display_path(std::filesystem::path(p.control_net).filename().string())},
        {"scale", std::stod(short_number(job.control_scale))},
        {"guess_mode", job.control_guess_mode}};
  }
  if (!job.tiny_decoder.empty()) {
    j["tiny_decoder"] = display_path(std::filesystem::path(job.tiny_decoder).filename().string());
  }
  return j;
}

nlohmann::json paint_settings_json(const PaintJobOptions& job,
                                   const std::optional<ImageModelInfo>& model, int64_t view_size,
                                   bool new_atlas) {
  const ImageJobOptions& image = job.image;
  const auto file_name = [](const std::string& path) {
    return display_path(std::filesystem::path(path).filename().string());
  };
  nlohmann::json j = {
      {"prompt", check_user_text("prompt", image.prompt, std::string::npos)->text},
      {"negative_prompt",
       check_user_text("negative prompt", image.negative_prompt, std::string::npos)->text},
      {"seed", image.seed},
      {"steps", image.steps},
      {"guidance", std::stod(short_number(image.guidance))},
      {"sampler", sampler_kind_name(image.sampler)},
      {"image_model", model ? file_name(model->path) : std::string()},
      {"control_model", file_name(image.control_model)},
      {"control_scale", std::stod(short_number(image.control_scale))},
      {"views",
       {{"ring", job.views.ring},
        {"elevation", std::stod(short_number(static_cast<float>(job.views.ring_elevation_deg)))},
        {"top", job.views.top},
        {"bottom", job.views.bottom}}},
      {"view_size", view_size},
      {"texture_size", job.texture_size},
      {"new_atlas", new_atlas}};
  // The model's are what was merged (the job's list and its prompt's tags).
  const std::vector<LoraChoice>& loras = model ? model->loras : image.loras;
  if (!loras.empty()) {
    j["loras"] = nlohmann::json::array();
    for (const LoraChoice& l : loras) {
      j["loras"].push_back(
          {{"file", file_name(l.path)}, {"multiplier", std::stod(short_number(l.multiplier))}});
    }
  }
  if (!image.tiny_decoder.empty()) j["tiny_decoder"] = file_name(image.tiny_decoder);
  return j;
}

std::string a1111_parameters(const ImageProvenance& p) {
  const ImageJobOptions& job = *p.job;
  // The prompt keeps its <lora:...> tags; LoRAs given otherwise become tags (how A1111 reads them).
  std::string s = check_user_text("prompt", job.prompt, std::string::npos)->text;
  for (const LoraChoice& l : job.loras) {
    s += " <lora:" + std::filesystem::path(l.path).stem().string() + ":" +
         short_number(l.multiplier) + ">";
  }
  s += "\n";
  const std::string negative =
      check_user_text("negative prompt", job.negative_prompt, std::string::npos)->text;
  if (!negative.empty()) s += "Negative prompt: " + negative + "\n";
  s += "Steps: " + std::to_string(job.steps) + ", Sampler: " + a1111_sampler_name(job.sampler) +
       ", CFG scale: " + short_number(job.guidance) + ", Seed: " + std::to_string(job.seed) +
       ", Size: " + std::to_string(p.width) + "x" + std::to_string(p.height) +
       ", Model: " + display_path(p.model_name);
  if (job.init_image != nullptr) s += ", Denoising strength: " + short_number(job.strength);
  if (job.control_image != nullptr) {
    // sd-webui-controlnet's unit line (what A1111 shows and reads back; its older "Guess Mode").
    s += ", ControlNet 0: \"Module: none, Model: " +
         display_path(std::filesystem::path(p.control_net).stem().string()) +
         ", Weight: " + short_number(job.control_scale) +
         (job.control_guess_mode ? ", Guess Mode: True" : "") + "\"";
  }
  if (!job.tiny_decoder.empty()) {
    s += ", VAE: " + display_path(std::filesystem::path(job.tiny_decoder).stem().string());
  }
  s += std::string(", Version: Tessera ") + TESSERA_VERSION;
  return s;
}

ImageProvenance image_provenance(const ImageJobOptions& job, const ImageEvent& made,
                                 const std::optional<ImageModelInfo>& model) {
  ImageProvenance p;
  p.job = &job;
  p.width = made.image->width;
  p.height = made.image->height;
  p.model_name = model ? std::filesystem::path(model->path).filename().string() : "";
  p.precision = model ? model->precision : "";
  p.control_net = made.control_net;
  return p;
}

Expected<std::string> image_png(const ImageEvent& made, const ImageProvenance& p, bool metadata) {
  TESSERA_ASSIGN_OR_RETURN(std::string png, encode_png(made.image->rgb.data(), made.image->width,
                                                       made.image->height, 3));
  return add_png_text(std::move(png), metadata ? image_png_text(p) : tessera_png_text(""));
}

std::vector<std::pair<std::string, std::string>> image_png_text(const ImageProvenance& p) {
  return {{"Software", std::string("Tessera ") + TESSERA_VERSION},
          {"tessera", image_settings_json(p).dump()},
          {"parameters", a1111_parameters(p)}};
}

Expected<ModelIdentity> model_identity(const ShapeModelInfo& model) {
  ModelIdentity id;
  id.name = display_path(std::filesystem::path(model.path).filename().string());
  TESSERA_ASSIGN_OR_RETURN(id.gpt_sha256, sha256_file(model.shape_gpt_file));
  return id;
}

namespace {

using Bad = std::function<Status(const std::string& field, const std::string& what)>;

Expected<RestoredExport> restored_export(const nlohmann::json& e, const Bad& bad) {
  if (!e.is_object()) return bad("export", "is not an object");
  RestoredExport x;
  auto text = [&](const char* key, std::string* out) -> Status {
    if (const auto v = e.find(key); v != e.end()) {
      if (!v->is_string()) return bad(std::string("export.") + key, "is not text");
      *out = v->get<std::string>();
    }
    return Status();
  };
  auto number = [&](const char* key, auto* out) -> Status {
    if (const auto v = e.find(key); v != e.end()) {
      if (!v->is_number()) return bad(std::string("export.") + key, "is not a number");
      *out = v->get<typename std::decay_t<decltype(*out)>::value_type>();
    }
    return Status();
  };
  TESSERA_RETURN_IF_ERROR(text("up_axis", &x.up_axis));
  if (!x.up_axis.empty() && x.up_axis != "y" && x.up_axis != "z") {
    return bad("export.up_axis", "is not \"y\" or \"z\"");
  }
  TESSERA_RETURN_IF_ERROR(text("preset", &x.preset));
  if (!x.preset.empty() && mesh::find_preset(x.preset) == nullptr) {
    return bad("export.preset", "is not a preset (" + mesh::preset_names() + ")");
  }
  TESSERA_RETURN_IF_ERROR(text("forward", &x.forward));
  if (!x.forward.empty() && x.forward != "x" && x.forward != "default") {
    return bad("export.forward", "is not \"x\" or \"default\"");
  }
  TESSERA_RETURN_IF_ERROR(text("unit", &x.unit));
  if (!x.unit.empty() && !mesh::parse_unit(x.unit)) {
    return bad("export.unit", "is not m, cm, mm or studs");
  }
  TESSERA_RETURN_IF_ERROR(text("pivot", &x.pivot));
  if (!mesh::parse_pivot(x.pivot)) return bad("export.pivot", "is not origin, base or center");
  TESSERA_RETURN_IF_ERROR(number("scale", &x.scale));
  TESSERA_RETURN_IF_ERROR(number("size", &x.size));
  TESSERA_RETURN_IF_ERROR(number("height", &x.height));
  if (const auto v = e.find("max_faces"); v != e.end()) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0) {
      return bad("export.max_faces", "is not a count");
    }
    x.max_faces = v->get<int64_t>();
  }
  if (const auto v = e.find("lods"); v != e.end()) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0)
      return bad("export.lods", "is not a count");
    if (v->get<int64_t>() > mesh::kMaxLods) return bad("export.lods", "is out of range");
    x.lods = v->get<int>();
  }
  if (const auto v = e.find("max_texture"); v != e.end()) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0) {
      return bad("export.max_texture", "is not a size");
    }
    x.max_texture = v->get<int64_t>();
  }
  if (const auto v = e.find("closed_asked"); v != e.end()) {
    if (!v->is_boolean()) return bad("export.closed_asked", "is not true or false");
    x.closed = v->get<bool>();
  }
  return x;
}

}  // namespace

Expected<RestoredSettings> restored_settings(const nlohmann::json& m, const std::string& file) {
  auto bad = [&](const std::string& field, const std::string& what) {
    return invalid_argument(file + ": metadata field '" + field + "' " + what);
  };
  RestoredSettings r;
  if (!m.is_object()) return bad("(root)", "is not an object");
  if (!m.contains("prompt") || !m["prompt"].is_string())
    return bad("prompt", "is missing or not text");
  TESSERA_ASSIGN_OR_RETURN(CheckedText prompt, check_user_text(file + ": metadata field 'prompt'",
                                                               m["prompt"].get<std::string>()));
  r.prompt = std::move(prompt.text);
  if (prompt.changed()) r.notes.push_back("metadata field 'prompt': " + prompt.repairs);
  if (const auto s = m.find("sampling"); s != m.end()) {
    if (!s->is_object()) return bad("sampling", "is not an object");
    r.has_sampling = true;
    if (const auto v = s->find("sample"); v != s->end()) {
      if (!v->is_boolean()) return bad("sampling.sample", "is not true or false");
      r.sampling.sample = v->get<bool>();
    }
    if (const auto v = s->find("seed"); v != s->end()) {
      if (!v->is_number_unsigned()) return bad("sampling.seed", "is not a non-negative integer");
      r.sampling.seed = v->get<uint64_t>();
      r.has_seed = true;
    }
    if (const auto v = s->find("temperature"); v != s->end()) {
      if (!v->is_number()) return bad("sampling.temperature", "is not a number");
      r.sampling.temperature = v->get<float>();
    }
    if (const auto v = s->find("top_p"); v != s->end()) {
      if (!v->is_number()) return bad("sampling.top_p", "is not a number");
      r.sampling.top_p = v->get<float>();
    }
    if (const auto v = s->find("top_k"); v != s->end()) {
      if (!v->is_number_integer() ||
          (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX})) {
        return bad("sampling.top_k", "is not an integer");
      }
      r.sampling.top_k = v->get<int64_t>();
    }
  }
  if (const auto v = m.find("guidance"); v != m.end()) {
    if (!v->is_number()) return bad("guidance", "is not a number");
    r.sampling.guidance = v->get<float>();
    r.has_guidance = true;
  }
  if (Status st = check_sampling(r.sampling); !st.ok()) {
    return invalid_argument(file + ": metadata: " + st.message());
  }
  if (const auto v = m.find("bbox"); v != m.end() && !v->is_null()) {
    if (!v->is_array() || v->size() != 3) return bad("bbox", "is not 3 numbers");
    std::array<float, 3> box{};
    for (size_t i = 0; i < 3; ++i) {
      if (!(*v)[i].is_number()) return bad("bbox", "is not 3 numbers");
      box[i] = (*v)[i].get<float>();
    }
    r.bbox = box;
  }
  if (const auto v = m.find("resolution"); v != m.end()) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > 1025) {
      return bad("resolution", "is out of range");
    }
    r.resolution = v->get<int>();
  }
  if (const auto v = m.find("tokens"); v != m.end()) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0) return bad("tokens", "is not a count");
    r.tokens = v->get<int64_t>();
  }
  if (const auto e = m.find("export"); e != m.end()) {
    TESSERA_ASSIGN_OR_RETURN(r.exporting, restored_export(*e, bad));
  }
  if (const auto v = m.find("model"); v != m.end() && v->is_object()) {
    if (const auto n = v->find("name"); n != v->end() && n->is_string()) {
      r.model_name = n->get<std::string>();
    }
  }
  return r;
}

}  // namespace tessera::runtime
