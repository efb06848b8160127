#include "app/cli/paint_cli.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <utility>

#include "core/mapped_file.h"
#include "core/png.h"
#include "engine/mesh/export.h"
#include "engine/runtime/image_inputs.h"
#include "engine/runtime/provenance.h"
#include "engine/runtime/user_text.h"

namespace tessera::cli {
namespace {

std::atomic<bool> g_paint_cancel{false};
extern "C" void on_paint_sigint(int) {
  g_paint_cancel.store(true);
}

// Ctrl-C cancels the job while this lives; the previous handler comes back on every way out.
class SigintGuard {
 public:
  SigintGuard() : previous_(std::signal(SIGINT, on_paint_sigint)) {}
  ~SigintGuard() { std::signal(SIGINT, previous_ == SIG_ERR ? SIG_DFL : previous_); }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  void (*previous_)(int);
};

}  // namespace

void add_paint_options(CLI::App* cmd, PaintCli* o, const std::string& prefix) {
  const auto name = [&](const char* n) { return "--" + prefix + n; };
  cmd->add_option(prefix.empty() ? "-m,--model" : name("model"), o->model,
                  "Image model (default: the embedded tessera-tiny, which ships its depth "
                  "ControlNet)");
  cmd->add_option(name("negative-prompt"), o->negative_prompt, "What to keep out of the views");
  cmd->add_option(name("steps"), o->steps, "Denoising steps per view (default 20)");
  cmd->add_option(name("guidance"), o->guidance, "Guidance scale (default 7.5)");
  cmd->add_option(name("sampler"), o->sampler, "euler, euler_a, dpmpp_2m or lcm");
  cmd->add_option(name("seed"), o->seed,
                  prefix.empty() ? "Seed of the first view (view k uses seed + k; default 0)"
                                 : "Seed of the first view (view k uses seed + k; default: the "
                                   "shape's seed)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag(name("fast"), o->fast,
                "LCM with the LCM-LoRA, 4 steps per view (and the tiny decoder when "
                "taesd_decoder.safetensors is in the LoRA folder)");
  cmd->add_option(name("lora"), o->loras, "A LoRA, FILE or FILE:MULTIPLIER; repeat for several");
  cmd->add_option(name("lora-dir"), o->lora_dir, "Where <lora:NAME> tags and --fast look");
  cmd->add_option(name("taesd"), o->taesd, "Decode the views with this tiny decoder (TAESD)");
  cmd->add_option(name("control-model"), o->control_model,
                  "The depth ControlNet (default: the model's own)");
  cmd->add_option(name("control-scale"), o->control_scale,
                  "How strongly each view follows the mesh's depth, in [0, 2] (default 1)");
  cmd->add_option(name("views"), o->views.ring, "Views around the object (1..16, default 4)");
  cmd->add_option(name("elevation"), o->views.ring_elevation_deg,
                  "Their height above the horizon, degrees (-60..60, default 15)");
  cmd->add_flag(name("no-top"), o->no_top, "No view from above");
  cmd->add_flag(name("no-bottom"), o->no_bottom, "No view from below");
  cmd->add_option(name("view-size"), o->view_size,
                  "Pixels per view side (default: the model's image size)");
  cmd->add_option(name("texture-size"), o->texture_size, "1024 (default), 2048 or 4096");
  if (prefix.empty()) {
    cmd->add_flag("--new-atlas", o->new_atlas, "Replace the mesh's own uvs with a new atlas");
  }
  cmd->add_option(name("save-views"), o->save_views,
                  "Also write each view and its mask here (PNG)");
  cmd->add_option(name("precision"), o->precision, "auto (default), f32 or bf16");
}

Status check_paint_output(const std::string& path, const std::string& option) {
  if (mesh::carries_texture(path)) return Status();
  return invalid_argument(option + " " + path +
                          ": a painted mesh needs a format that keeps its texture (.glb, .fbx or "
                          ".obj); STL and 3MF carry the geometry only");
}

PaintRunner::PaintRunner(PaintCli options, std::string prefix, DeviceCli device)
    : o_(std::move(options)), prefix_(std::move(prefix)), device_(std::move(device)) {}

PaintRunner::~PaintRunner() = default;

Expected<runtime::PaintJobOptions> PaintRunner::job(const std::string& prompt,
                                                    uint64_t seed) const {
  const auto named = [&](const std::string& option, const Status& st) {
    return invalid_argument("--" + prefix_ + option + ": " + st.message());
  };
  runtime::PaintJobOptions job;
  runtime::ImageJobOptions& image = job.image;
  auto sampler = runtime::parse_sampler(o_.sampler);
  if (!sampler.ok()) return named("sampler", sampler.status());
  image.prompt = prompt;
  image.negative_prompt = o_.negative_prompt;
  image.steps = o_.steps;
  image.guidance = o_.guidance;
  image.sampler = *sampler;
  image.seed = o_.seed >= 0 ? static_cast<uint64_t>(o_.seed) : seed;
  image.lora_dir = o_.lora_dir;
  image.control_model = o_.control_model;
  image.control_scale = o_.control_scale;
  image.tiny_decoder = o_.taesd;
  for (const std::string& text : o_.loras) {
    auto spec = runtime::parse_lora_choice(text);
    if (!spec.ok()) return named("lora " + text, spec.status());
    image.loras.push_back(*spec);
  }
  if (o_.fast) {
    if (Status st = runtime::apply_fast_choice(
            &image, o_.lora_dir.empty() ? runtime::default_lora_dir() : o_.lora_dir);
        !st.ok()) {
      return named("fast", st);
    }
  }
  job.views = o_.views;
  job.views.top = !o_.no_top;
  job.views.bottom = !o_.no_bottom;
  job.view_size = o_.view_size;
  job.texture_size = o_.texture_size;
  job.new_atlas = o_.new_atlas;
  return job;
}

Status PaintRunner::check(const std::string& prompt) const {
  TESSERA_ASSIGN_OR_RETURN(runtime::PaintJobOptions j, job(prompt, 0));
  TESSERA_RETURN_IF_ERROR(runtime::parse_precision(o_.precision).status());
  TESSERA_RETURN_IF_ERROR(runtime::accept_job_text(&j.image).status());
  TESSERA_RETURN_IF_ERROR(runtime::check_paint_job(j));
  if (!o_.save_views.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o_.save_views, ec);
    if (ec)
      return invalid_argument("--" + prefix_ + "save-views " + o_.save_views + ": " + ec.message());
  }
  return runtime::image_job_loras(j.image, nullptr).status();
}

Status PaintRunner::load(const std::string& prompt) {
  if (session_ != nullptr) return Status();
  // The LoRAs the job asks for, its prompt's <lora:...> tags included, merged at load: the job
  // then runs with the same list and nothing is merged again.
  TESSERA_ASSIGN_OR_RETURN(runtime::PaintJobOptions j, job(prompt, 0));
  TESSERA_RETURN_IF_ERROR(runtime::accept_job_text(&j.image).status());
  TESSERA_ASSIGN_OR_RETURN(const runtime::ImagePrecision precision,
                           runtime::parse_precision(o_.precision));
  TESSERA_ASSIGN_OR_RETURN(std::vector<runtime::LoraChoice> loras,
                           runtime::image_job_loras(j.image, nullptr));
  auto session = runtime::Session::create();
  runtime::ImageModelOptions model;
  model.path = o_.model;
  model.precision = precision;
  model.device = device_.choice();
  model.loras = std::move(loras);
  const runtime::Event loaded = session->wait_for(session->load_image_model(model));
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&loaded.payload)) return e->status;
  const runtime::ImageModelInfo info = *session->image_model();
  std::fprintf(stderr, "image model: %s, %s\n", info.path.c_str(), info.summary.c_str());
  session_ = std::move(session);
  return Status();
}

Expected<PaintOutcome> PaintRunner::paint(std::shared_ptr<const mesh::Mesh> mesh,
                                          const std::string& prompt, uint64_t seed) {
  namespace fs = std::filesystem;
  TESSERA_ASSIGN_OR_RETURN(runtime::PaintJobOptions job, job(prompt, seed));
  TESSERA_ASSIGN_OR_RETURN(const runtime::TextNotes notes, runtime::accept_job_text(&job.image));
  (void)notes;  // the caller said its prompt's notes already
  // The job's LoRAs with its prompt's tags (taken out of the prompt): the list the model was
  // loaded with, so the image lane merges nothing again.
  TESSERA_ASSIGN_OR_RETURN(std::vector<runtime::LoraChoice> loras,
                           runtime::image_job_loras(job.image, &job.image.prompt));
  job.image.loras = std::move(loras);
  TESSERA_RETURN_IF_ERROR(load(prompt));
  job.mesh = std::move(mesh);

  g_paint_cancel.store(false);
  std::optional<SigintGuard> sigint(std::in_place);
  const uint64_t id = session_->submit_paint(job);
  PaintOutcome out;
  std::optional<runtime::Event> end;
  int steps_this_view = 0;
  while (!end) {
    if (g_paint_cancel.exchange(false)) session_->cancel(runtime::Lane::kImage);
    auto event = session_->wait_event(std::chrono::milliseconds(50));
    if (!event || event->job != id) continue;
    if (std::get_if<runtime::ImageStepEvent>(&event->payload) != nullptr) {
      ++steps_this_view;
    } else if (const auto* s = std::get_if<runtime::StageEvent>(&event->payload)) {
      if (s->name == runtime::kStagePaintAtlas || s->name == runtime::kStagePaintFill ||
          s->name == runtime::kStagePaintCheck) {
        std::fprintf(stderr, "%-6s %8.1f ms\n", s->name.c_str(), s->ms);
      }
    } else if (const auto* v = std::get_if<runtime::PaintViewEvent>(&event->payload)) {
      std::fprintf(stderr,
                   "view %d/%d %-8s generated %3.0f %% of its pixels in %d steps, %8.1f ms "
                   "(bake %.1f ms, fill %.1f ms)\n",
                   v->view + 1, v->views, v->name.c_str(), 100.0 * v->generated_share,
                   steps_this_view, v->generate_ms, v->bake_ms, v->fill_ms);
      steps_this_view = 0;
      if (!o_.save_views.empty() && v->image != nullptr) {
        for (const auto& [suffix, img] : {std::pair{".png", v->image}, {"-mask.png", v->mask}}) {
          const std::string path =
              (fs::path(o_.save_views) / (std::to_string(v->view + 1) + "-" + v->name + suffix))
                  .string();
          TESSERA_ASSIGN_OR_RETURN(const std::string png,
                                   encode_png(img->rgb.data(), img->width, img->height, 3));
          TESSERA_RETURN_IF_ERROR(write_file_atomic(path, png.data(), png.size()));
        }
      }
    } else if (const auto* r = std::get_if<runtime::PaintedMeshEvent>(&event->payload)) {
      out.result = *r;
      out.mesh = r->mesh;
    }
    if (event->terminal()) end = std::move(event);
  }
  sigint.reset();
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&end->payload)) return e->status;
  if (const auto* c = std::get_if<runtime::CancelledEvent>(&end->payload)) {
    return cancelled(c->reason + " (nothing written)");
  }
  if (out.mesh == nullptr) return internal_error("the paint job ended without a painted mesh");
  for (const std::string& note : out.result.notes) {
    std::fprintf(stderr, "note: %s\n", note.c_str());
  }
  std::string agreement;
  for (size_t i = 0; i < out.result.agreement_db.size(); ++i) {
    char part[64];
    std::snprintf(part, sizeof(part), "%s%s %.1f", i ? ", " : "", out.result.view_names[i].c_str(),
                  out.result.agreement_db[i]);
    agreement += part;
  }
  std::fprintf(stderr,
               "coverage %.1f %% of the texels; views vs the painted mesh (dB): %s; seams: mean "
               "%.1f, p95 %.1f levels\n",
               100.0 * out.result.coverage, agreement.c_str(), out.result.seam_mean,
               out.result.seam_p95);
  out.record = runtime::paint_settings_json(job, session_->image_model(), out.result.view_size,
                                            out.result.new_atlas);
  return out;
}

}  // namespace tessera::cli
