// tessera image: prompt -> image (PNG) through the SD 1.x-compatible pipeline
// (engine/diffusion/pipeline.h), with one progress line per denoising step (sigma, ms/step) and a
// timing summary on stderr. Ctrl-C cancels between steps.
//
// PNG: 8-bit RGB through the engine's shared encoder (engine/core/png.h, deflate-compressed).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "app/cli/shape_cli.h"
#include "engine/core/mapped_file.h"
#include "engine/core/png.h"
#include "engine/core/status.h"
#include "engine/diffusion/pipeline.h"

namespace tessera::cli {
namespace {

struct ImageCliOptions {
  std::string prompt;
  std::string negative_prompt;
  std::string model;
  std::string output;
  int steps = 20;
  float guidance = 7.5f;
  std::string sampler = "euler";
  uint64_t seed = 0;
  int64_t width = 0;  // 0: the model's default
  int64_t height = 0;
  bool bf16 = false;
  std::string precision = "auto";
  DeviceCli device;
};

// ---- the command --------------------------------------------------------------------------------

std::atomic<bool> g_cancel{false};
extern "C" void on_sigint(int) {
  g_cancel.store(true);
}

Expected<diffusion::SamplerKind> parse_sampler(const std::string& name) {
  for (auto kind : {diffusion::SamplerKind::kEuler, diffusion::SamplerKind::kEulerAncestral,
                    diffusion::SamplerKind::kDpmpp2m}) {
    if (name == diffusion::sampler_kind_name(kind)) return kind;
  }
  return invalid_argument("--sampler '" + name + "': expected euler, euler_a or dpmpp_2m");
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
  fs::path parent = fs::path(o.output).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec)) {
    return fail("output '" + o.output + "': directory '" + parent.string() + "' does not exist");
  }
  auto sampler = parse_sampler(o.sampler);
  if (!sampler.ok()) return fail(sampler.status().message());
  if (o.steps < 1) return fail("--steps must be >= 1, got " + std::to_string(o.steps));
  if (o.width < 0 || o.height < 0) return fail("--width and --height must be positive");

  std::string model = o.model;
  if (model.empty()) {
    model = assets_dir() + "/models/tessera-tiny/diffusion";
    if (!fs::exists(model, ec)) {
      return fail("no --model given and the default diffusion model '" + model +
                  "' is missing (the embedded tessera-tiny diffusion model is not installed in "
                  "this build yet); pass --model with a diffusers folder or a CompVis SD 1.x "
                  ".safetensors file");
    }
  }
  diffusion::DiffusionLoadOptions load_options;
  load_options.weights = o.bf16 ? WeightFormat::kBF16 : WeightFormat::kF32;
  if (o.precision == "f32") {
    load_options.precision = diffusion::ComputePrecision::kF32;
  } else if (o.precision == "bf16") {
    load_options.precision = diffusion::ComputePrecision::kBf16;
  } else if (o.precision != "auto") {
    return fail("--precision must be auto, f32 or bf16, not '" + o.precision + "'");
  }
  load_options.clip_vocab_fallback = assets_dir() + "/vocab/clip/bpe_simple_vocab_16e6.txt.gz";
  load_options.device = o.device.choice();
  const auto load_start = std::chrono::steady_clock::now();
  auto loaded = diffusion::DiffusionModel::load(model, load_options);
  if (!loaded.ok()) return fail(loaded.status().message());
  diffusion::DiffusionModel& m = **loaded;
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start)
          .count();
  std::fprintf(stderr, "model: %s (%s), UNet %s, VAE %s, %s compute on %s, loaded in %.0f ms\n",
               model.c_str(), diffusion::model_layout_name(m.files().layout),
               m.unet_config().summary().c_str(), m.vae_config().summary().c_str(),
               m.compute_precision_label(), m.backend().name().c_str(), load_ms);
  if (o.device.verbose && !m.device_note().empty()) {
    std::fprintf(stderr, "note: %s\n", m.device_note().c_str());
  }

  diffusion::GenerateRequest request;
  request.prompt = o.prompt;
  request.negative_prompt = o.negative_prompt;
  request.width = o.width > 0 ? o.width : m.default_image_size();
  request.height = o.height > 0 ? o.height : m.default_image_size();
  request.steps = o.steps;
  request.guidance_scale = o.guidance;
  request.sampler = *sampler;
  request.seed = o.seed;
  diffusion::GenerateCallbacks callbacks;
  callbacks.cancel = &g_cancel;
  callbacks.on_step = [](const diffusion::StepProgress& p) {
    std::fprintf(stderr, "step %d/%d  sigma %8.4f  %8.1f ms\n", p.step + 1, p.steps, p.sigma, p.ms);
    std::fflush(stderr);
  };
  g_cancel.store(false);
  auto previous = std::signal(SIGINT, on_sigint);
  auto image = m.generate(request, callbacks);
  std::signal(SIGINT, previous == SIG_ERR ? SIG_DFL : previous);
  if (!image.ok()) return fail(image.status().message());
  auto png = encode_png(image->rgb.data(), image->width, image->height, 3);
  if (!png.ok()) return fail(png.status().message());
  if (Status st = write_file_atomic(o.output, png->data(), png->size()); !st.ok()) {
    return fail(st.message());
  }
  std::fprintf(stderr,
               "%lldx%lld, %d steps (%s, guidance %.2f, seed %llu): text %.1f ms, denoise %.1f ms "
               "(%.1f ms/step), VAE %.1f ms -> %s\n",
               static_cast<long long>(image->width), static_cast<long long>(image->height), o.steps,
               o.sampler.c_str(), static_cast<double>(o.guidance),
               static_cast<unsigned long long>(o.seed), image->text_ms, image->denoise_ms,
               image->denoise_ms / o.steps, image->vae_ms, o.output.c_str());
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
                  "Diffusers folder or CompVis .safetensors (default: the embedded "
                  "tessera-tiny/diffusion)");
  cmd->add_option("--output,-o", o->output, "PNG file to write")->required();
  cmd->add_option("--steps", o->steps, "Denoising steps (default 20)");
  cmd->add_option("--guidance,-g", o->guidance,
                  "Classifier-free guidance scale; 1: no guidance, one UNet pass (default 7.5)");
  cmd->add_option("--sampler", o->sampler, "euler, euler_a or dpmpp_2m (Karras) (default euler)");
  cmd->add_option("--seed", o->seed, "Noise seed (default 0)");
  cmd->add_option("--width,-W", o->width, "Image width in pixels (default: the model's)");
  cmd->add_option("--height,-H", o->height, "Image height in pixels (default: the model's)");
  cmd->add_flag("--bf16", o->bf16, "Run the linear layers in bf16");
  cmd->add_option("--precision", o->precision,
                  "UNet/VAE products: auto (bf16 for SD-size models on AVX-512 BF16 CPUs, TF32 "
                  "tensor cores on a GPU, else f32), f32 or bf16 (default auto)");
  add_device_options(cmd, &o->device);
  cmd->callback([o, exit_code] { *exit_code = run_image(*o); });
}

}  // namespace tessera::cli
