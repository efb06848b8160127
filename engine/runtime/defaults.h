// The product's defaults, each defined once. Every front end (the CLI's generate and batch, the
// studio's settings, bench, the server) starts from these, and the metadata reader assumes them
// for a field a file leaves out, so a prompt with no option given makes the same shape everywhere.
// The engine's own defaults (core/sampling.h: top-p 1, the reference's) stay the engine's; these
// are what the product asks of it.
#pragma once

#include <cstdint>

#include "core/sampling.h"

namespace tessera::runtime {

// Shape generation: greedy unless a sampling option is given; when sampling, these apply to the
// options not given. The reference's settings (core/sampling.h) but for one departure: nucleus 0.9
// (the tail of the code distribution gives lumps and holes). Each value is written once: the
// reference's in core/sampling.h, the product's departures here.
inline constexpr SamplingSettings kDefaultSampling = [] {
  SamplingSettings s;
  s.top_p = 0.9f;
  return s;
}();

// `s` switched to sampling with the product's temperature, top-k and top-p (its seed and guidance
// kept): what "sample around this" means when `s` was greedy (variations, "more like this").
inline SamplingSettings sampled_with_defaults(SamplingSettings s) {
  s.sample = true;
  s.temperature = kDefaultSampling.temperature;
  s.top_k = kDefaultSampling.top_k;
  s.top_p = kDefaultSampling.top_p;
  return s;
}

// Live previews: a preview mesh of this lattice, within this fraction of the job's time.
inline constexpr int kDefaultPreviewResolution = 33;
inline constexpr double kDefaultPreviewBudget = 0.1;

// Images (the diffusion engine).
inline constexpr int kDefaultImageSteps = 20;
// The most denoising steps an image job may ask for (SD's schedule has 1000 training steps: more
// would repeat timesteps).
inline constexpr int kMaxImageSteps = 1000;
inline constexpr float kDefaultImageGuidance = 7.5f;
// Image-to-image: the share of the steps that repaint the init image (stable-diffusion.cpp's
// default; diffusers uses 0.8).
inline constexpr float kDefaultImageStrength = 0.75f;
// ControlNet: how strongly the control image steers (diffusers' and ControlNet's own default).
inline constexpr float kDefaultControlScale = 1.0f;
inline constexpr float kMaxControlScale = 2.0f;  // the range every front end offers: [0, 2]
// The "fast" choice: LCM with the LCM-LoRA, 4 steps, no guidance pass (the LoRA's published
// settings: 2-8 steps, guidance 1-2), and the file name it is known by (what stable-diffusion.cpp's
// and A1111's guides tell users to call it).
inline constexpr int kFastImageSteps = 4;
inline constexpr float kFastImageGuidance = 1.0f;
inline constexpr const char* kLcmLoraFile = "lcm-lora-sdv1-5.safetensors";
// The tiny decoder (TAESD) the "fast" choice also takes when this file is beside the LCM-LoRA.
inline constexpr const char* kTinyDecoderFile = "taesd_decoder.safetensors";
// Paint jobs: the texture's side (an atlas size: 1024, 2048 or 4096).
inline constexpr int kDefaultPaintTextureSize = 1024;
// Paint jobs simplify a mesh of more triangles to this many first (and say so): the atlas and the
// bake grow with the triangles (1.3 s of atlas at 188k), the paint's detail does not.
inline constexpr int64_t kMaxPaintTriangles = 500000;

}  // namespace tessera::runtime
