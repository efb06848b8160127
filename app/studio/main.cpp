// tessera-studio: the desktop studio (Qt 6 Widgets). Interactive by default; with --generate,
// --screenshot and --quit-when-done it runs one generation unattended (tests, demos):
//   tessera-studio --prompt "a torus" --generate --screenshot shot.png --quit-when-done
// --image adds the concept image after the shape (the screenshot then shows it in the Diffusion
// panel), --apply-texture projects it onto the mesh (the screenshot and --export are textured).
#include <QApplication>
#include <QTimer>
#include <QCommandLineParser>
#include <QSurfaceFormat>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "core/assets.h"
#include "engine/runtime/capabilities.h"
#include "engine/runtime/session.h"
#include "ui/studio/import_export_controller.h"
#include "engine/mesh/paint_views.h"
#include "ui/studio/main_window.h"
#include "ui/studio/viewport.h"

namespace {

// A 2^k + 1 lattice size, or an error message.
bool parse_resolution(const QString& text, const char* option, int* out) {
  bool ok = false;
  const int value = text.toInt(&ok);
  if (!ok || !tessera::runtime::resolution_base(value).ok()) {
    std::fprintf(stderr, "tessera-studio: %s %s: expected 2^k + 1 (9, 17, 33, 65, 129, 257, ...)\n",
                 option, qPrintable(text));
    return false;
  }
  *out = value;
  return true;
}

// An integer option in [lo, hi]; the message names the option and the range.
template <typename T>
bool parse_integer(const QString& text, const char* option, long long lo, long long hi, T* out) {
  bool ok = false;
  const long long value = text.toLongLong(&ok);
  if (!ok || value < lo || value > hi) {
    std::fprintf(stderr, "tessera-studio: %s %s: expected %lld to %lld\n", option, qPrintable(text),
                 lo, hi);
    return false;
  }
  *out = static_cast<T>(value);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // GL 3.3 core for the viewport: must be the default before the QApplication exists.
  QSurfaceFormat::setDefaultFormat(tessera::studio::make_default_surface_format());
  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName(QStringLiteral("Tessera"));
  QCoreApplication::setApplicationName(QStringLiteral("tessera-studio"));
  QCoreApplication::setApplicationVersion(QStringLiteral(TESSERA_VERSION));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Tessera Studio: text prompt to 3D asset"));
  parser.addHelpOption();
  parser.addVersionOption();
  const QCommandLineOption prompt({"p", "prompt"}, "Prompt to put in the prompt bar.", "text");
  const QCommandLineOption generate("generate", "Generate the prompt once the model has loaded.");
  const QCommandLineOption screenshot("screenshot",
                                      "When the job ends, save the viewport (with the overlay) "
                                      "as a PNG.",
                                      "file");
  const QCommandLineOption screenshot_window("screenshot-window",
                                             "Make --screenshot capture the whole window.");
  const QCommandLineOption quit("quit-when-done",
                                "Exit when the scripted job ends (0: done, 1: failed).");
  const QCommandLineOption model({"m", "model"}, "Model directory (default: tessera-tiny).", "dir");
  const QCommandLineOption record("record", "Save a viewport frame per partial mesh into dir.",
                                  "dir");
  const QCommandLineOption export_path(
      "export", "When the job ends, write the mesh (.obj, .glb, .fbx).", "file");
  const QCommandLineOption resolution({"r", "resolution"}, "Final resolution, 2^k + 1.", "n");
  const QCommandLineOption preview_resolution("preview-resolution", "Preview resolution, 2^k + 1.",
                                              "n");
  const QCommandLineOption preview_every("preview-every", "Preview every K tokens (0: none).", "k");
  const QCommandLineOption variations("variations",
                                      "Candidates per Generate (1-8), shown side by side.", "n");
  const QCommandLineOption seed_option("seed", "Sampling seed (locked; switches to sampling).",
                                       "n");
  const QCommandLineOption no_grid("no-grid", "Hide the grid and axes.");
  const QCommandLineOption diffusion_model(
      "diffusion-model",
      "Diffusion model: diffusers folder or SD 1.x .safetensors (default: tessera-tiny/diffusion).",
      "path");
  const QCommandLineOption image("image",
                                 "After the shape, generate the concept image (implies "
                                 "--generate); the script ends when it is done.");
  const QCommandLineOption apply_texture("apply-texture",
                                         "Then apply the image to the mesh as a texture (implies "
                                         "--image).");
  const QCommandLineOption paint("paint",
                                 "After the shape, paint it with the image model from views around "
                                 "it (the Diffusion panel's Paint mesh; implies --generate; "
                                 "--image-steps and --image-seed apply).");
  const QCommandLineOption paint_views("paint-views", "Views around the object to paint from.",
                                       "n");
  const QCommandLineOption image_steps("image-steps", "Denoising steps of the concept image.", "n");
  const QCommandLineOption image_seed("image-seed", "Seed of the concept image (default 0).", "n");
  const QCommandLineOption image_from_viewport(
      "image-from-viewport",
      "Image-to-image from the finished mesh as the viewport shows it (implies --image).");
  const QCommandLineOption image_init("image-init",
                                      "Image-to-image from this PNG (implies --image).", "png");
  const QCommandLineOption image_strength(
      "image-strength", "Image-to-image: the share of the steps that repaint, in (0, 1].", "s");
  const QCommandLineOption image_mask("image-mask",
                                      "Inpainting mask PNG (white = repaint) with --image-init or "
                                      "--image-from-viewport.",
                                      "png");
  const QCommandLineOption image_control_depth(
      "image-control-depth",
      "ControlNet: the image follows the finished mesh's depth as the viewport shows it (implies "
      "--image; the model's own depth ControlNet unless --image-control-model).");
  const QCommandLineOption image_control(
      "image-control", "ControlNet: the image follows this PNG (implies --image).", "png");
  const QCommandLineOption image_control_model(
      "image-control-model", "The ControlNet .safetensors (default: the model's own depth one).",
      "file");
  const QCommandLineOption image_control_scale(
      "image-control-scale", "How strongly the image follows the control, in [0, 2].", "s");
  const QCommandLineOption device("device",
                                  "Where the shape and diffusion engines run: cpu (default), cuda "
                                  "(an NVIDIA GPU; the models fail to load with the reason when "
                                  "none is usable) or auto (the GPU when usable).",
                                  "cpu|cuda|auto");
  const QCommandLineOption weights("weights",
                                   "The shape model's weights: auto (bf16 for large models, int8 "
                                   "for quantized ones), fast (int8 on the CPU, bf16 on a GPU), "
                                   "f32 (as stored), bf16 (converted at load) or int8 (quantized "
                                   "at load: half of bf16's memory; CPU). Default: the Settings' "
                                   "choice, auto at first.",
                                   "auto|fast|f32|bf16|int8");
  const QCommandLineOption threads("threads",
                                   "CPU threads for the engines (default: all cores but one, left "
                                   "to the UI and the often software GL rasterizer so the viewport "
                                   "stays smooth while tokens stream).",
                                   "n");
  const QCommandLineOption isa("isa",
                               "Cap the CPU kernels' instruction set (default: TESSERA_ISA, else "
                               "the best this CPU has).",
                               "avx512|avx2|scalar");
  parser.addOptions({isa,
                     prompt,
                     generate,
                     screenshot,
                     screenshot_window,
                     quit,
                     model,
                     record,
                     export_path,
                     resolution,
                     preview_resolution,
                     preview_every,
                     variations,
                     seed_option,
                     no_grid,
                     diffusion_model,
                     image,
                     apply_texture,
                     paint,
                     paint_views,
                     image_steps,
                     image_seed,
                     image_from_viewport,
                     image_init,
                     image_strength,
                     image_mask,
                     image_control_depth,
                     image_control,
                     image_control_model,
                     image_control_scale,
                     device,
                     weights,
                     threads});
  parser.addPositionalArgument(
      "file", "A mesh to open (any format File > Open lists; the desktop entry passes it)",
      "[file]");
  parser.process(app);

  tessera::studio::LaunchOptions options;
  options.prompt = parser.value(prompt);
  options.generate = parser.isSet(generate);
  options.screenshot = parser.value(screenshot);
  options.screenshot_window = parser.isSet(screenshot_window);
  options.quit_when_done = parser.isSet(quit);
  options.model_dir = parser.value(model);
  options.record_dir = parser.value(record);
  options.export_path = parser.value(export_path);
  options.no_grid = parser.isSet(no_grid);
  options.diffusion_model = parser.value(diffusion_model);
  if (parser.isSet(device)) {
    const auto choice = tessera::runtime::parse_device(parser.value(device).toStdString());
    if (!choice.ok()) {
      std::fprintf(stderr, "tessera-studio: --device: %s\n", choice.status().message().c_str());
      return 2;
    }
    options.device = *choice;
  }
  if (parser.isSet(weights)) {
    const QString w = parser.value(weights);
    if (!tessera::runtime::parse_shape_weights(w.toStdString()).ok()) {
      std::fprintf(stderr,
                   "tessera-studio: --weights: '%s' is not one of auto, fast, f32, bf16, int8\n",
                   w.toUtf8().constData());
      return 2;
    }
    options.weights = w;
  }
  options.apply_texture = parser.isSet(apply_texture);
  options.paint = parser.isSet(paint);
  if (parser.isSet(paint_views) &&
      !parse_integer(parser.value(paint_views), "--paint-views", tessera::mesh::kMinPaintRing,
                     tessera::mesh::kMaxPaintRing, &options.paint_views)) {
    return 2;
  }
  options.image_from_viewport = parser.isSet(image_from_viewport);
  options.image_init = parser.value(image_init);
  options.image_mask = parser.value(image_mask);
  if (parser.isSet(image_strength)) {
    bool ok = false;
    options.image_strength = parser.value(image_strength).toFloat(&ok);
    if (!ok || !(options.image_strength > 0.0f && options.image_strength <= 1.0f)) {
      std::fprintf(stderr, "tessera-studio: --image-strength %s: expected a number in (0, 1]\n",
                   qPrintable(parser.value(image_strength)));
      return 2;
    }
  }
  options.image_control_depth = parser.isSet(image_control_depth);
  options.image_control = parser.value(image_control);
  options.image_control_model = parser.value(image_control_model);
  if (parser.isSet(image_control_scale)) {
    bool ok = false;
    options.image_control_scale = parser.value(image_control_scale).toFloat(&ok);
    if (!ok || !(options.image_control_scale >= 0.0f &&
                 options.image_control_scale <= tessera::runtime::kMaxControlScale)) {
      std::fprintf(stderr,
                   "tessera-studio: --image-control-scale %s: expected a number in [0, %g]\n",
                   qPrintable(parser.value(image_control_scale)),
                   static_cast<double>(tessera::runtime::kMaxControlScale));
      return 2;
    }
  }
  if (options.image_control_depth && !options.image_control.isEmpty()) {
    std::fprintf(stderr,
                 "tessera-studio: --image-control-depth and --image-control both give the control "
                 "image: choose one\n");
    return 2;
  }
  if (!options.image_mask.isEmpty() && !options.image_from_viewport &&
      options.image_init.isEmpty()) {
    std::fprintf(stderr,
                 "tessera-studio: --image-mask needs --image-init or --image-from-viewport\n");
    return 2;
  }
  options.image = parser.isSet(image) || options.apply_texture || options.image_from_viewport ||
                  !options.image_init.isEmpty() || options.image_control_depth ||
                  !options.image_control.isEmpty();
  if (options.image || options.paint) options.generate = true;
  if (parser.isSet(image_steps) &&
      !parse_integer(parser.value(image_steps), "--image-steps", 1, 200, &options.image_steps)) {
    return 2;
  }
  if (parser.isSet(image_seed)) {
    bool ok = false;
    options.image_seed = parser.value(image_seed).toULongLong(&ok);
    if (!ok) {
      std::fprintf(stderr, "tessera-studio: --image-seed %s: expected a number >= 0\n",
                   qPrintable(parser.value(image_seed)));
      return 2;
    }
  }
  if (parser.isSet(resolution) &&
      !parse_resolution(parser.value(resolution), "--resolution", &options.resolution)) {
    return 2;
  }
  if (parser.isSet(preview_resolution) &&
      !parse_resolution(parser.value(preview_resolution), "--preview-resolution",
                        &options.preview_resolution)) {
    return 2;
  }
  if (parser.isSet(preview_every) && !parse_integer(parser.value(preview_every), "--preview-every",
                                                    0, 1 << 20, &options.preview_every)) {
    return 2;
  }
  if (parser.isSet(variations) &&
      !parse_integer(parser.value(variations), "--variations", 1, tessera::runtime::kMaxVariations,
                     &options.variations)) {
    return 2;
  }
  if (parser.isSet(seed_option) &&
      !parse_integer(parser.value(seed_option), "--seed", 0, 2147483647, &options.seed)) {
    return 2;
  }
  if (options.generate && options.prompt.isNull()) options.prompt = QString("");
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  int cpu_threads = cores > 1 ? cores - 1 : 1;
  if (parser.isSet(threads) &&
      !parse_integer(parser.value(threads), "--threads", 1, 256, &cpu_threads)) {
    return 2;
  }
  tessera::runtime::set_cpu_threads(cpu_threads);
  if (const tessera::Status s =
          tessera::runtime::set_cpu_isa(parser.isSet(isa) ? parser.value(isa).toStdString() : "");
      !s.ok()) {
    std::fprintf(stderr, "tessera-studio: %s\n", s.message().c_str());
    return 2;
  }

  tessera::studio::MainWindow window(options);
  window.show();
  // A file given on the command line (or by the desktop: Exec=tessera-studio %F) opens once the
  // window is up; its errors show as any Open's do.
  const QStringList files = parser.positionalArguments();
  if (!files.isEmpty()) {
    if (files.size() > 1) {
      std::fprintf(stderr, "tessera-studio: %lld files given; opening the first, %s\n",
                   static_cast<long long>(files.size()), qPrintable(files.front()));
    }
    QTimer::singleShot(0, &window,
                       [&window, file = files.front()] { window.files().open_mesh_file(file); });
  }
  return app.exec();
}
