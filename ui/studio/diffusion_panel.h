// DiffusionPanel: the ImGui "Diffusion" panel of the viewport overlay: the concept image of the
// current prompt refining step by step (each step's latent->RGB preview, then the final image,
// drawn from a GL texture), per-step timings (ms/step, total, a bar per step), the seed (lock /
// randomise), steps, guidance and sampler controls, "generate after each shape" and the Generate
// image / Cancel / Apply as texture buttons; "Paint mesh" (views around the shown mesh, each
// landing on it in the viewport; the panel lists them with their timings). When no diffusion model
// is present it says so in red.
//
// The panel only draws and edits: it reads a DiffusionPanelData (snapshot owned by the main
// window), writes the control values into data.settings, and reports button presses through
// data.on_action, which is called during ImGuiOverlay::render() (inside the viewport's paintGL):
// the callee must only queue work (the main window posts it with a zero-delay timer).
//
// GL: draw() and release_gl() need the viewport's context current (the overlay calls them); the
// texture is re-uploaded only when data.job->image_version changes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ui/studio/diffusion_bridge.h"

namespace tessera::studio {

enum class DiffusionAction {
  kGenerate,
  kCancel,
  kApplyTexture,
  kPaint,               // paint the shown mesh from views around it
  kChooseInitFile,      // a file dialog for image-to-image's picture
  kChooseMaskFile,      // ... for the inpainting mask
  kAddLora,             // ... for a LoRA file
  kChooseControlFile,   // ... for the ControlNet's control image
  kChooseControlModel,  // ... for the ControlNet
};

struct DiffusionPanelData {
  DiffusionModelState model_state = DiffusionModelState::kMissing;
  std::string model_message;           // description when ready, the reason otherwise
  const ImageJobState* job = nullptr;  // null: no job yet
  ImageSettings* settings = nullptr;   // edited by the controls; null hides them
  bool can_generate = false;           // a model is ready (and the prompt may be empty)
  bool can_apply = false;              // a final image and a mesh to project it on
  std::string apply_note;              // shown under the buttons (e.g. why Apply is disabled)
  bool can_paint = false;              // a model is ready, a mesh is shown, no shape job runs
  std::string paint_note;              // why Paint is disabled, or what the last paint gave
  std::function<void(DiffusionAction)> on_action;
};

// Where the panel first appears: the right-hand column, below the System panel (logical pixels
// from the viewport's right edge / top).
inline constexpr int kDiffusionPanelWidth = 260;
inline constexpr int kDiffusionPanelRight = 268;  // x = viewport width - this
inline constexpr int kDiffusionPanelY = 126;
inline constexpr int kDiffusionImageSide = 128;  // drawn size of the concept image

// A fresh random seed (what "randomise" and unlocked seeds use).
uint64_t next_random_seed();

class DiffusionPanel {
 public:
  DiffusionPanel() = default;
  DiffusionPanel(const DiffusionPanel&) = delete;
  DiffusionPanel& operator=(const DiffusionPanel&) = delete;

  // Builds the panel's ImGui window (call between ImGui::NewFrame and ImGui::Render).
  void draw(DiffusionPanelData& data, int viewport_width, int viewport_height);
  void release_gl();

 private:
  void upload(const ImageJobState& job);
  uint32_t texture_ = 0;  // GLuint, 0 until the first image
  uint64_t uploaded_job_ = 0, uploaded_version_ = 0;
  uint64_t unfolded_for_job_ = 0;  // the image job the panel last unfolded for
  int64_t texture_width_ = 0, texture_height_ = 0;
};

}  // namespace tessera::studio
