// tessera paint MESH --prompt TEXT -o OUT [options]: paints any mesh Tessera opens from views
// around it with the image model (docs/texture-painting.md) and writes it textured (.glb, .fbx,
// .obj + .mtl + .png). Progress per view on stderr; Ctrl-C cancels and the mesh is not written
// (views already saved with --save-views stay: they are progress, written as each view ends).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/cli/commands.h"
#include "app/cli/shape_cli.h"
#include "core/mapped_file.h"
#include "core/png.h"
#include "engine/mesh/import.h"
#include "engine/runtime/image_inputs.h"
#include "engine/runtime/session.h"
#include "engine/runtime/user_text.h"

namespace tessera::cli {
namespace {

struct PaintCliOptions {
  std::string input, output, prompt, negative_prompt, model;
  int steps = runtime::kDefaultImageSteps;
  float guidance = runtime::kDefaultImageGuidance;
  std::string sampler = "euler";
  uint64_t seed = 0;
  bool fast = false;
  std::string lora_dir, taesd, control_model;
  std::vector<std::string> loras;
  float control_scale = runtime::kDefaultControlScale;
  mesh::ViewSetOptions views;
  bool no_top = false, no_bottom = false;
  int view_size = 0;
  int texture_size = runtime::kDefaultPaintTextureSize;
  bool new_atlas = false;
  std::string save_views;
  std::string precision = "auto";
  DeviceCli device;
};

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

int run_paint(const PaintCliOptions& o) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "tessera paint: %s\n", message.c_str());
    return 1;
  };
  namespace fs = std::filesystem;
  if (Status st = check_mesh_output(o.output); !st.ok()) return fail(st.message());
  if (!o.save_views.empty()) {
    std::error_code ec;
    fs::create_directories(o.save_views, ec);
    if (ec) return fail("--save-views " + o.save_views + ": " + ec.message());
  }
  auto sampler = runtime::parse_sampler(o.sampler);
  if (!sampler.ok()) return fail("--" + sampler.status().message());
  auto precision = runtime::parse_precision(o.precision);
  if (!precision.ok()) return fail("--" + precision.status().message());
  std::vector<std::string> warnings;
  auto m = mesh::import_mesh_file(o.input, &warnings);
  if (!m.ok()) return fail(m.status().message());
  for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (m->empty()) return fail(o.input + ": the file holds no triangles");

  runtime::PaintJobOptions job;
  job.mesh = std::make_shared<const mesh::Mesh>(std::move(*m));
  runtime::ImageJobOptions& image = job.image;
  image.prompt = o.prompt;
  image.negative_prompt = o.negative_prompt;
  image.steps = o.steps;
  image.guidance = o.guidance;
  image.sampler = *sampler;
  image.seed = o.seed;
  image.lora_dir = o.lora_dir;
  image.control_model = o.control_model;
  image.control_scale = o.control_scale;
  image.tiny_decoder = o.taesd;
  for (const std::string& text : o.loras) {
    auto spec = runtime::parse_lora_choice(text);
    if (!spec.ok()) return fail("--lora " + text + ": " + spec.status().message());
    image.loras.push_back(*spec);
  }
  if (o.fast) {
    if (Status st = runtime::apply_fast_choice(
            &image, o.lora_dir.empty() ? runtime::default_lora_dir() : o.lora_dir);
        !st.ok()) {
      return fail("--fast: " + st.message());
    }
  }
  auto text_notes = runtime::accept_job_text(&image);
  if (!text_notes.ok()) return fail(text_notes.status().message());
  if (Status st = runtime::check_image_job(image); !st.ok()) return fail(st.message());
  auto model_loras = runtime::image_job_loras(image, nullptr);
  if (!model_loras.ok()) return fail(model_loras.status().message());
  job.views = o.views;
  job.views.top = !o.no_top;
  job.views.bottom = !o.no_bottom;
  job.view_size = o.view_size;
  job.texture_size = o.texture_size;
  job.new_atlas = o.new_atlas;

  auto session = runtime::Session::create();
  runtime::ImageModelOptions model;
  model.path = o.model;
  model.precision = *precision;
  model.device = o.device.choice();
  model.loras = *model_loras;
  const runtime::Event loaded = session->wait_for(session->load_image_model(model));
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&loaded.payload)) {
    return fail(e->status.message());
  }
  const runtime::ImageModelInfo info = *session->image_model();
  std::fprintf(stderr, "model: %s, %s\n", info.path.c_str(), info.summary.c_str());

  g_paint_cancel.store(false);
  std::optional<SigintGuard> sigint(std::in_place);
  const uint64_t id = session->submit_paint(job);
  std::shared_ptr<const mesh::Mesh> painted;
  runtime::PaintedMeshEvent result;
  std::optional<runtime::Event> end;
  int steps_this_view = 0;
  while (!end) {
    if (g_paint_cancel.exchange(false)) session->cancel(runtime::Lane::kImage);
    auto event = session->wait_event(std::chrono::milliseconds(50));
    if (!event || event->job != id) continue;
    if (std::get_if<runtime::ImageStepEvent>(&event->payload) != nullptr) {
      ++steps_this_view;
    } else if (const auto* s = std::get_if<runtime::StageEvent>(&event->payload)) {
      if (s->name == runtime::kStagePaintAtlas || s->name == runtime::kStagePaintFill) {
        std::fprintf(stderr, "%-6s %8.1f ms\n", s->name.c_str(), s->ms);
      }
    } else if (const auto* v = std::get_if<runtime::PaintViewEvent>(&event->payload)) {
      std::fprintf(stderr,
                   "view %d/%d %-8s generated %3.0f %% of its pixels in %d steps, %8.1f ms "
                   "(bake %.1f ms)\n",
                   v->view + 1, v->views, v->name.c_str(), 100.0 * v->generated_share,
                   steps_this_view, v->generate_ms, v->bake_ms);
      steps_this_view = 0;
      if (!o.save_views.empty() && v->image != nullptr) {
        for (const auto& [suffix, img] : {std::pair{".png", v->image}, {"-mask.png", v->mask}}) {
          const std::string path =
              (fs::path(o.save_views) / (std::to_string(v->view + 1) + "-" + v->name + suffix))
                  .string();
          auto png = encode_png(img->rgb.data(), img->width, img->height, 3);
          if (!png.ok()) return fail(png.status().message());
          if (Status st = write_file_atomic(path, png->data(), png->size()); !st.ok()) {
            return fail(st.message());
          }
        }
      }
    } else if (const auto* r = std::get_if<runtime::PaintedMeshEvent>(&event->payload)) {
      result = *r;
      painted = r->mesh;
    }
    if (event->terminal()) end = std::move(event);
  }
  sigint.reset();
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&end->payload)) {
    return fail(e->status.message());
  }
  if (const auto* c = std::get_if<runtime::CancelledEvent>(&end->payload)) {
    return fail(c->reason + " (nothing written)");
  }
  if (painted == nullptr) return fail("internal error: the job ended without a painted mesh");
  for (const std::string& note : result.notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  std::string agreement;
  for (size_t i = 0; i < result.agreement_db.size(); ++i) {
    char part[64];
    std::snprintf(part, sizeof(part), "%s%s %.1f", i ? ", " : "", result.view_names[i].c_str(),
                  result.agreement_db[i]);
    agreement += part;
  }
  std::fprintf(stderr, "coverage %.1f %% of the texels; views vs the painted mesh (dB): %s\n",
               100.0 * result.coverage, agreement.c_str());
  MeshExportCli exporting;
  auto export_options = checked_export_options(exporting, o.output);
  if (!export_options.ok()) return fail(export_options.status().message());
  if (Status st = write_cli_mesh(*painted, o.output, *export_options, exporting, nullptr);
      !st.ok()) {
    return fail(st.message());
  }
  std::printf("wrote %s (%lld triangles, %lldx%lld texture, %s uvs)\n", o.output.c_str(),
              static_cast<long long>(painted->triangle_count()),
              static_cast<long long>(painted->texture.width),
              static_cast<long long>(painted->texture.height),
              result.new_atlas ? "new" : "its own");
  return 0;
}

}  // namespace

void register_paint(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<PaintCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "paint",
      "Paint a mesh (any format Tessera opens) from views around it with the image model: a UV "
      "atlas, a depth-ControlNet image per view inpainted over what earlier views painted, "
      "baked into one texture; writes .glb, .fbx or .obj (+ .mtl + .png)");
  cmd->add_option("mesh", o->input, "Mesh file to paint")->required();
  cmd->add_option("-p,--prompt", o->prompt, "What the object looks like")->required();
  cmd->add_option("-o,--output", o->output, "Textured mesh to write (.glb, .fbx, .obj)")
      ->required();
  cmd->add_option("-m,--model", o->model,
                  "Image model (default: the embedded tessera-tiny, which ships its depth "
                  "ControlNet)");
  cmd->add_option("--negative-prompt", o->negative_prompt, "What to keep out of the views");
  cmd->add_option("--steps", o->steps, "Denoising steps per view (default 20)");
  cmd->add_option("--guidance", o->guidance, "Guidance scale (default 7.5)");
  cmd->add_option("--sampler", o->sampler, "euler, euler_a, dpmpp_2m or lcm");
  cmd->add_option("--seed", o->seed, "Seed of the first view (view k uses seed + k)");
  cmd->add_flag("--fast", o->fast,
                "LCM with the LCM-LoRA, 4 steps per view (and the tiny decoder when "
                "taesd_decoder.safetensors is in --lora-dir)");
  cmd->add_option("--lora", o->loras, "A LoRA, FILE or FILE:MULTIPLIER; repeat for several");
  cmd->add_option("--lora-dir", o->lora_dir, "Where <lora:NAME> tags and --fast look");
  cmd->add_option("--taesd", o->taesd, "Decode the views with this tiny decoder (TAESD)");
  cmd->add_option("--control-model", o->control_model,
                  "The depth ControlNet (default: the model's own)");
  cmd->add_option("--control-scale", o->control_scale,
                  "How strongly each view follows the mesh's depth, in [0, 2] (default 1)");
  cmd->add_option("--views", o->views.ring, "Views around the object (1..16, default 4)");
  cmd->add_option("--elevation", o->views.ring_elevation_deg,
                  "Their height above the horizon, degrees (-60..60, default 15)");
  cmd->add_flag("--no-top", o->no_top, "No view from above");
  cmd->add_flag("--no-bottom", o->no_bottom, "No view from below");
  cmd->add_option("--view-size", o->view_size,
                  "Pixels per view side (default: the model's image size)");
  cmd->add_option("--texture-size", o->texture_size, "1024 (default), 2048 or 4096");
  cmd->add_flag("--new-atlas", o->new_atlas, "Replace the mesh's own uvs with a new atlas");
  cmd->add_option("--save-views", o->save_views, "Also write each view and its mask here (PNG)");
  cmd->add_option("--precision", o->precision, "auto (default), f32 or bf16");
  add_device_options(cmd, &o->device);
  cmd->callback([o, exit_code] { *exit_code = run_paint(*o); });
}

}  // namespace tessera::cli
