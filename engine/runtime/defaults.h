// The product's defaults, each defined once. Every front end (the CLI's generate and batch, the
// studio's settings, bench, the coming server) starts from these, and the metadata reader assumes
// them for a field a file leaves out, so a prompt with no option given makes the same shape
// everywhere. The engine's own defaults (shape/sampler.h: top-p 1, the reference's) stay the
// engine's; these are what the product asks of it.
#pragma once

#include <cstdint>

namespace tessera::runtime {

// Shape generation. Greedy unless a sampling option is given; when sampling, these apply to the
// options not given (nucleus 0.9: the tail of the code distribution gives lumps and holes).
inline constexpr float kDefaultGuidance = 3.0f;  // classifier-free guidance; 0: off
inline constexpr float kDefaultTemperature = 1.0f;
inline constexpr int64_t kDefaultTopK = 0;  // 0: no top-k filter
inline constexpr float kDefaultTopP = 0.9f;
inline constexpr uint64_t kDefaultSeed = 0;

// Live previews: a preview mesh of this lattice, within this fraction of the job's time.
inline constexpr int kDefaultPreviewResolution = 33;
inline constexpr double kDefaultPreviewBudget = 0.1;

// Images (the diffusion engine).
inline constexpr int kDefaultImageSteps = 20;
inline constexpr float kDefaultImageGuidance = 7.5f;

}  // namespace tessera::runtime
