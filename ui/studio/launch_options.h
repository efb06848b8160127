// LaunchOptions: what tessera-studio's command line asks of a run (app/studio/main.cpp fills it).
// Interactive runs use a few (the model, the device); scripted runs (scripted() true) are driven by
// ScriptRunner (script_runner.h): load a model, generate one prompt, save a screenshot / the
// recorded frames / an export, and quit with exit code 0 on success or 1 when the model or the job
// failed. Scripted runs neither read nor write QSettings, so they are reproducible.
#pragma once

#include <QString>
#include <cstdint>

#include "engine/runtime/capabilities.h"

namespace tessera::studio {

struct LaunchOptions {
  QString model_dir;  // empty: the saved one, else the embedded default (runtime capabilities.h)
  QString prompt;
  bool generate = false;           // generate `prompt` once the model has loaded
  QString screenshot;              // PNG of the viewport (overlay included) when the job ends
  bool screenshot_window = false;  // ... of the whole window instead
  bool quit_when_done = false;     // exit after the scripted job (0: done, 1: failed)
  QString record_dir;              // a viewport frame per partial mesh (and the final one)
  QString export_path;             // write the final mesh (.obj/.glb/.fbx) when the job ends
  int resolution = 0;              // > 0: final resolution override
  int preview_resolution = 0;      // > 0: preview resolution override
  int preview_every = -1;          // >= 0: preview interval override
  int variations = 0;              // > 0: the Variations setting (candidates per Generate)
  int64_t seed = -1;               // >= 0: the seed, locked (sampling on)
  bool no_grid = false;            // hide grid and axes (plain background, for screenshot checks)
  QString diffusion_model;         // empty: <assets>/models/tessera-tiny/diffusion
  bool image = false;              // scripted: generate the concept image after the shape
  bool apply_texture = false;      // scripted: then project it onto the mesh (implies image)
  bool paint = false;              // scripted: paint the shape from views around it (Paint mesh)
  int paint_views = 0;             // > 0: the views around it (plus top and bottom)
  int image_steps = 0;             // > 0: denoising steps override
  uint64_t image_seed = 0;         // scripted runs lock the seed to this
  // Image-to-image: start from the finished mesh's view (--image-from-viewport) or a PNG
  // (--image-init), with a strength (> 0: override) and an inpainting mask.
  bool image_from_viewport = false;
  QString image_init, image_mask;
  float image_strength = 0;
  // ControlNet: follow the finished mesh's depth in the viewport, or a control PNG; the
  // ControlNet file ("" = the model's own) and scale (< 0: the settings').
  bool image_control_depth = false;
  QString image_control, image_control_model;
  float image_control_scale = -1;
  // Where both engines run (--device): cpu (default), cuda, or auto.
  runtime::DeviceChoice device = runtime::DeviceChoice::kCpu;
  // The shape model's weights (--weights): "auto", "fast", "f32", "bf16", "int8"; empty: the
  // Settings'.
  QString weights;
  bool scripted() const { return generate || quit_when_done || !screenshot.isEmpty(); }
};

}  // namespace tessera::studio
