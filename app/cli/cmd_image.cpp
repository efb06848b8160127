// tessera image: prompt (+ init image, mask, control image or a mesh's depth) -> image (PNG)
// through the runtime's image lane (the SD 1.x-compatible engine), with one progress line per
// denoising step (sigma, ms/step) and a timing summary on stderr. Ctrl-C cancels between steps.
//
// PNG: 8-bit RGB through the engine's shared encoder (core/png.h, deflate-compressed).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "app/cli/commands.h"
#include <nlohmann/json.hpp>

#include "app/cli/shape_cli.h"
#include "core/mapped_file.h"
#include "core/png.h"
#include "core/status.h"
#include "engine/runtime/image_inputs.h"
#include "engine/runtime/provenance.h"
#include "engine/runtime/session.h"
#include "engine/runtime/user_text.h"

#ifdef TESSERA_HAVE_RENDER
#include "engine/mesh/import.h"
#include "ui/render/depth.h"
#endif

namespace tessera::cli {
namespace {

struct ImageCliOptions {
  std::string prompt;
  std::string negative_prompt;
  std::string model;
  std::string output;
  int steps = runtime::kDefaultImageSteps;
  float guidance = runtime::kDefaultImageGuidance;
  std::string sampler = "euler";
  uint64_t seed = 0;
  int64_t width = 0;  // 0: the model's default
  int64_t height = 0;
  bool bf16 = false;
  std::string precision = "auto";
  bool no_metadata = false;
  std::string init;  // image-to-image
  float strength = runtime::kDefaultImageStrength;
  std::string mask;                // inpainting
  std::vector<std::string> loras;  // FILE[:M]
  std::string lora_dir;            // where <lora:NAME> tags look
  bool fast = false;               // LCM + the LCM-LoRA, 4 steps, guidance 1
  std::string taesd;               // the tiny decoder instead of the VAE
  // ControlNet: a control image, or a mesh whose depth the renderer draws from a named view.
  std::string control, control_model, control_mesh, view = "front", save_control;
  float control_scale = runtime::kDefaultControlScale;
  bool control_guess = false;
  DeviceCli device;
};

// A picture the job starts from (PNG, any size), as RGB; errors name the flag and the file.
Expected<std::shared_ptr<const mesh::TextureImage>> read_picture(const std::string& path,
                                                                 const char* flag) {
  auto file = MappedFile::open(path);
  if (!file.ok()) {
    return Status(file.status().code(), std::string(flag) + ": " + file.status().message());
  }
  auto png = decode_png(file->data(), file->size(), 3, path);
  if (!png.ok()) return invalid_argument(std::string(flag) + ": " + png.status().message());
  auto image = std::make_shared<mesh::TextureImage>();
  image->width = png->width;
  image->height = png->height;
  image->rgb = std::move(png->pixels);
  return std::shared_ptr<const mesh::TextureImage>(std::move(image));
}

// ---- the command --------------------------------------------------------------------------------

std::atomic<bool> g_cancel{false};
extern "C" void on_sigint(int) {
  g_cancel.store(true);
}

int run_image(const ImageCliOptions& o) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "tessera image: %s\n", message.c_str());
    return 1;
  };
  namespace fs = std::filesystem;
  std::error_code ec;
  // Everything that can be checked before loading.
  if (fs::path(o.output).extension() != ".png" && fs::path(o.output).extension() != ".PNG") {
    return fail("output '" + o.output + "': write a .png file");
  }
  if (Status st = check_output_file(o.output, "output"); !st.ok()) return fail(st.message());
  auto sampler = runtime::parse_sampler(o.sampler);
  if (!sampler.ok()) return fail("--" + sampler.status().message());
  if (o.width < 0 || o.height < 0) return fail("--width and --height must be positive");
  auto precision = runtime::parse_precision(o.precision);
  if (!precision.ok()) return fail("--" + precision.status().message());
  runtime::ImageJobOptions job;
  // LoRAs: --lora files and the prompt's <lora:NAME:M> tags, merged at load (the runtime takes
  // the tags out of the prompt; taking them here too loads the model once, with them).
  job.lora_dir = o.lora_dir;
  for (const std::string& text : o.loras) {
    auto spec = runtime::parse_lora_choice(text);
    if (!spec.ok()) return fail("--lora " + spec.status().message());
    std::error_code exists_ec;
    if (!fs::is_regular_file(spec->path, exists_ec)) {
      return fail("--lora " + text + ": no such file '" + spec->path + "'");
    }
    job.loras.push_back({spec->path, spec->multiplier});
  }
  if (o.fast) {
    if (Status st = runtime::apply_fast_choice(
            &job, o.lora_dir.empty() ? runtime::default_lora_dir() : o.lora_dir);
        !st.ok()) {
      return fail("--fast: " + st.message());
    }
  }
  job.prompt = o.prompt;
  auto model_loras = runtime::image_job_loras(job, nullptr);
  if (!model_loras.ok()) return fail(model_loras.status().message());
  if (!o.init.empty()) {
    auto init = read_picture(o.init, "--init");
    if (!init.ok()) return fail(init.status().message());
    job.init_image = *init;
    job.strength = o.strength;
  }
  if (!o.mask.empty()) {
    auto mask = read_picture(o.mask, "--mask");
    if (!mask.ok()) return fail(mask.status().message());
    job.mask = *mask;
  }
  if (!o.control.empty() && !o.control_mesh.empty()) {
    return fail("--control and --control-mesh both give the control image: choose one");
  }
  if (!o.control.empty()) {
    auto control = read_picture(o.control, "--control");
    if (!control.ok()) return fail(control.status().message());
    job.control_image = *control;
  }
  std::shared_ptr<const mesh::Mesh> control_mesh;
  if (!o.control_mesh.empty()) {
#ifdef TESSERA_HAVE_RENDER
    if (auto view = render::parse_view(o.view); !view.ok()) {
      return fail("--view: " + view.status().message());
    }
    std::vector<std::string> warnings;
    auto mesh = mesh::import_mesh_file(o.control_mesh, &warnings);
    if (!mesh.ok()) return fail("--control-mesh: " + mesh.status().message());
    if (mesh->triangle_count() == 0) {
      return fail("--control-mesh " + o.control_mesh + ": the mesh has no triangles");
    }
    control_mesh = std::make_shared<const mesh::Mesh>(std::move(*mesh));
    // Stands in for the depth map (rendered once the model's size is known) in the job checks.
    job.control_image = std::make_shared<const mesh::TextureImage>();
#else
    return fail(
        "--control-mesh: this tessera was built without the renderer (configure with "
        "-DTESSERA_WITH_GUI=ON and the GL/EGL packages from scripts/setup.sh)");
#endif
  }
  if (o.control_mesh.empty() && !o.save_control.empty()) {
    return fail("--save-control needs --control-mesh (the depth map it renders)");
  }
  if (!o.control_model.empty()) {
    std::error_code exists_ec;
    if (!fs::exists(o.control_model, exists_ec)) {
      return fail("--control-model: no such file or folder '" + o.control_model + "'");
    }
  }
  job.control_model = o.control_model;
  if (!o.taesd.empty()) {
    std::error_code exists_ec;
    if (!fs::exists(o.taesd, exists_ec)) {
      return fail("--taesd: no such file or folder '" + o.taesd + "'");
    }
    job.tiny_decoder = o.taesd;
  }
  job.control_scale = o.control_scale;
  job.control_guess_mode = o.control_guess;
  if (!o.fast) {
    job.steps = o.steps;
    job.guidance = o.guidance;
    job.sampler = *sampler;
  }
  if (Status st = runtime::check_image_job(job); !st.ok()) return fail(st.message());
  if (!o.save_control.empty()) {
    if (Status st = check_output_file(o.save_control, "--save-control"); !st.ok()) {
      return fail(st.message());
    }
  }
  job.prompt = o.prompt;
  job.negative_prompt = o.negative_prompt;
  auto text_notes = runtime::accept_job_text(&job);
  if (!text_notes.ok()) return fail(text_notes.status().message());
  for (const std::string& note : *text_notes) std::fprintf(stderr, "note: %s\n", note.c_str());

  auto session = runtime::Session::create();
  runtime::ImageModelOptions model;
  model.path = o.model;
  model.bf16 = o.bf16;
  model.precision = *precision;
  model.device = o.device.choice();
  model.loras = *model_loras;
  const runtime::Event loaded = session->wait_for(session->load_image_model(model));
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&loaded.payload)) {
    return fail(e->status.message());
  }
  const runtime::ImageModelInfo info = *session->image_model();
  std::fprintf(stderr, "model: %s (%s), %s, %s compute on %s, loaded in %.0f ms\n",
               info.path.c_str(), info.layout.c_str(), info.summary.c_str(), info.precision.c_str(),
               info.backend.c_str(), std::get<runtime::DoneEvent>(loaded.payload).total_ms);
  if (o.device.verbose && !info.backend_note.empty()) {
    std::fprintf(stderr, "note: %s\n", info.backend_note.c_str());
  }

  job.width = o.width;
  job.height = o.height;
#ifdef TESSERA_HAVE_RENDER
  if (control_mesh != nullptr) {
    // The mesh's depth at the image's size: the size asked for, else the init image's (the
    // runtime's rule), else the model's default.
    int64_t w = o.width, h = o.height;
    if (w <= 0 || h <= 0) {
      const auto& source = job.init_image;
      auto sized = runtime::prepare_image_inputs(o.width, o.height, source, nullptr,
                                                 info.size_multiple, info.default_size);
      if (!sized.ok()) return fail(sized.status().message());
      w = sized->width;
      h = sized->height;
    }
    auto depth = render::render_depth_map(*control_mesh, *render::parse_view(o.view),
                                          static_cast<int>(w), static_cast<int>(h));
    if (!depth.ok()) return fail("--control-mesh: " + depth.status().message());
    job.control_image = std::make_shared<const mesh::TextureImage>(std::move(*depth));
    if (!o.save_control.empty()) {
      auto png = encode_png(job.control_image->rgb.data(), w, h, 3);
      if (!png.ok()) return fail(png.status().message());
      if (Status st = write_file_atomic(o.save_control, png->data(), png->size()); !st.ok()) {
        return fail(st.message());
      }
    }
    std::fprintf(stderr, "control: depth of %s from the %s view, %lldx%lld\n",
                 o.control_mesh.c_str(), o.view.c_str(), static_cast<long long>(w),
                 static_cast<long long>(h));
  }
#endif
  job.seed = o.seed;
  g_cancel.store(false);
  auto previous = std::signal(SIGINT, on_sigint);
  const uint64_t id = session->submit_image(job);
  std::shared_ptr<const mesh::TextureImage> image;
  runtime::ImageEvent timings;
  // Ctrl-C: the handler only sets a flag; this loop turns it into a cancel of the job.
  std::optional<runtime::Event> end;
  while (!end) {
    if (g_cancel.exchange(false)) session->cancel(runtime::Lane::kImage);
    auto event = session->wait_event(std::chrono::milliseconds(50));
    if (!event || event->job != id) continue;
    if (const auto* p = std::get_if<runtime::ImageStepEvent>(&event->payload)) {
      std::fprintf(stderr, "step %d/%d  sigma %8.4f  %8.1f ms\n", p->step + 1, p->steps, p->sigma,
                   p->ms);
      std::fflush(stderr);
    } else if (const auto* r = std::get_if<runtime::ImageEvent>(&event->payload)) {
      image = r->image;
      timings = *r;
      for (const std::string& note : r->notes) std::fprintf(stderr, "note: %s\n", note.c_str());
    }
    if (event->terminal()) end = std::move(event);
  }
  std::signal(SIGINT, previous == SIG_ERR ? SIG_DFL : previous);
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&end->payload)) {
    return fail(e->status.message());
  }
  if (const auto* c = std::get_if<runtime::CancelledEvent>(&end->payload)) {
    return fail(c->reason);
  }
  if (image == nullptr) return fail("internal error: the job ended without an image");
  // How the image was made, as PNG text: Tessera's JSON and A1111's "parameters" (the privacy
  // switch leaves only the Software entry).
  runtime::ImageProvenance provenance = runtime::image_provenance(job, timings, info);
  provenance.init_name = fs::path(o.init).filename().string();
  provenance.mask_name = fs::path(o.mask).filename().string();
  provenance.control_name =
      o.control_mesh.empty()
          ? fs::path(o.control).filename().string()
          : "depth of " + fs::path(o.control_mesh).filename().string() + ", " + o.view + " view";
  auto png = runtime::image_png(timings, provenance, !o.no_metadata);
  if (!png.ok()) return fail(png.status().message());
  if (Status st = write_file_atomic(o.output, png->data(), png->size()); !st.ok()) {
    return fail(st.message());
  }
  const int run = std::max(1, timings.steps_run);
  std::string encode;
  if (job.init_image != nullptr) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), ", VAE encode %.1f ms (strength %.2f: %d of %d steps)",
                  timings.encode_ms, static_cast<double>(o.strength), run, job.steps);
    encode = buf;
  }
  std::fprintf(stderr,
               "%lldx%lld, %d steps (%s, guidance %.2f, seed %llu): text %.1f ms%s, denoise %.1f "
               "ms (%.1f ms/step), VAE %.1f ms -> %s\n",
               static_cast<long long>(image->width), static_cast<long long>(image->height), run,
               runtime::sampler_kind_name(job.sampler), static_cast<double>(job.guidance),
               static_cast<unsigned long long>(o.seed), timings.text_ms, encode.c_str(),
               timings.denoise_ms, timings.denoise_ms / run, timings.vae_ms, o.output.c_str());
  return 0;
}

}  // namespace

void register_image(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ImageCliOptions>();
  CLI::App* cmd = app.add_subcommand("image", "Generate an image from a text prompt (SD 1.x)");
  cmd->add_option("--prompt,-p", o->prompt, "The text prompt")->required();
  cmd->add_option("--negative-prompt,-n", o->negative_prompt,
                  "What to steer away from (default: \"\", unconditional)");
  cmd->add_option("--model,-m", o->model,
                  "Diffusers folder, CompVis .safetensors, or a name from the Hugging Face cache "
                  "(stable-diffusion-v1-5/stable-diffusion-v1-5); default: the embedded "
                  "tessera-tiny/diffusion)");
  cmd->add_option("--output,-o", o->output, "PNG file to write")->required();
  cmd->add_option("--steps", o->steps, "Denoising steps (default 20)");
  cmd->add_option("--guidance,-g", o->guidance,
                  "Classifier-free guidance scale; 1: no guidance, one UNet pass (default 7.5)");
  cmd->add_option("--sampler", o->sampler,
                  "euler, euler_a, dpmpp_2m (Karras) or lcm (4-8 steps, guidance 1, for "
                  "LCM-distilled weights) (default euler)");
  cmd->add_option("--seed", o->seed, "Noise seed (default 0)");
  cmd->add_option("--width,-W", o->width, "Image width in pixels (default: the model's)");
  cmd->add_option("--height,-H", o->height, "Image height in pixels (default: the model's)");
  cmd->add_flag("--bf16", o->bf16, "Run the linear layers in bf16");
  cmd->add_option("--precision", o->precision,
                  "UNet/VAE products: auto (bf16 for SD-size models on AVX-512 BF16 CPUs, else "
                  "f32; f32 on a GPU), f32 or bf16 (on a GPU: the weights' products on the bf16 "
                  "tensor cores, attention's in TF32) (default auto)");
  cmd->add_option("--init,-i", o->init,
                  "Image-to-image: start from this PNG (any size: resized to --width/--height, "
                  "else to its own size rounded to the model's size step)");
  cmd->add_option("--strength", o->strength,
                  "Image-to-image: how much of the init image is repainted, in (0, 1]: the last "
                  "floor(steps x strength) steps run (default 0.75)");
  cmd->add_option("--mask", o->mask,
                  "Inpainting (with --init): a PNG whose white part (>= 128) is repainted and "
                  "black part kept");
  cmd->add_option("--lora", o->loras,
                  "A LoRA file (kohya/A1111 or diffusers/PEFT .safetensors) merged into the "
                  "weights, FILE or FILE:MULTIPLIER (default 1); repeat for several. Prompt tags "
                  "<lora:NAME:M> work too");
  cmd->add_flag("--fast", o->fast,
                "LCM with the LCM-LoRA: 4 steps, guidance 1 (the LoRA from --lora, else "
                "lcm-lora-sdv1-5.safetensors in --lora-dir); overrides --steps, --guidance, "
                "--sampler");
  cmd->add_option("--taesd", o->taesd,
                  "Decode with this tiny decoder (TAESD: taesd_decoder.safetensors, or diffusers' "
                  "AutoencoderTiny file or folder) instead of the VAE: about 20x less decode work, "
                  "a softer image. --fast takes taesd_decoder.safetensors from --lora-dir when it "
                  "is there");
  cmd->add_option("--lora-dir", o->lora_dir,
                  "Where <lora:NAME> tags in the prompt look (default: the user's data folder's "
                  "loras/)");
  cmd->add_option("--control", o->control,
                  "ControlNet: the control image (PNG, any size: resized; a depth map: near "
                  "white, far black)");
  cmd->add_option("--control-model", o->control_model,
                  "The ControlNet: a .safetensors file (v1.1 control_model.* or diffusers names) "
                  "or a diffusers folder (default: the model's own depth ControlNet; the "
                  "embedded model ships one)");
  cmd->add_option("--control-scale", o->control_scale,
                  "How strongly the control image steers, in [0, 2] (default 1)");
  cmd->add_flag("--control-guess", o->control_guess,
                "ControlNet's guess mode, for empty or weak prompts: the residuals of the first "
                "(high-resolution) blocks weakened down to 0.1, the middle block's kept, and none "
                "on the negative prompt's pass (with guidance > 1)");
  cmd->add_option("--control-mesh", o->control_mesh,
                  "ControlNet: render this mesh's depth as the control image (any mesh Tessera "
                  "opens), from --view");
  cmd->add_option("--view", o->view,
                  "The --control-mesh view: front, back, left, right, three-quarter or top "
                  "(default front)");
  cmd->add_option("--save-control", o->save_control,
                  "Also write the depth map --control-mesh rendered to this PNG");
  cmd->add_flag("--no-metadata", o->no_metadata,
                "Write no prompt or settings into the PNG (its text chunks)");
  add_device_options(cmd, &o->device);
  cmd->callback([o, exit_code] { *exit_code = run_image(*o); });
}

}  // namespace tessera::cli
