// ImGuiOverlay: the Dear ImGui (1.86) panels drawn over the studio viewport: per-token latency
// plot, TPOT mean/p50/p99 and tokens/s, the stage breakdown, memory in use, backend and mode, and
// the diffusion image panel (ui/studio/diffusion_panel.h). Panels read a GenerationStats snapshot,
// never the engine.
//
// Context: init(), render() and shutdown() need the viewport's GL 3.3 core context current (the
// renderer is imgui_impl_opengl3, which saves and restores the GL state it touches). Each overlay
// owns its own ImGui context, so several viewports (or test windows) may coexist.
//
// Input: ImGui 1.86 has no Qt backend and no event API (io.AddMousePosEvent is 1.87+): the
// viewport feeds positions (logical pixels), buttons, wheel steps and keys with the methods below,
// and asks wants_mouse() / wants_keyboard() before letting the camera use an event, so ImGui and
// the camera never act on the same drag.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "engine/runtime/capabilities.h"
#include "ui/studio/diffusion_panel.h"
#include "ui/studio/generation_stats.h"

struct ImGuiContext;

namespace tessera::studio {

// Which panels are visible (View > Overlay panels).
struct OverlayPanels {
  bool timing = true;     // latency plot, TPOT, tokens/s
  bool stages = true;     // per-stage milliseconds
  bool system = true;     // memory, backend, KV cache / CUDA graph mode
  bool diffusion = true;  // the concept-image panel
};

// The overlay's live A/B switches and the device line (owned by the main window, which applies the
// switches to the next job and keeps the Settings panel in step through on_change).
struct OverlayControls {
  bool kv_cache = true;             // next job: KV cache on
  bool graphs = true;               // next job: replay the recorded decode step (CUDA graphs)
  bool graphs_available = false;    // the loaded model's backend records graphs
  std::string graphs_reason;        // why not, when unavailable (from the runtime)
  std::string device;               // where the shape model runs, or "(no model)"
  std::string model;                // which: "Roblox/cube3d-v0.5 @ 1111111", "tessera-tiny"
  bool on_gpu = false;              // also read the device's memory
  std::function<void()> on_change;  // called (during render) after a switch changed
};

// Where the timing panel first appears (logical pixels from the viewport's top-left corner), so
// screenshot checks know where to look for overlay pixels.
inline constexpr int kTimingPanelX = 8, kTimingPanelY = 8;
inline constexpr int kTimingPanelWidth = 330, kTimingPanelHeight = 196;

// Keys the overlay understands (its own indices into io.KeysDown).
enum class OverlayKey {
  kTab = 1,
  kLeft,
  kRight,
  kUp,
  kDown,
  kPageUp,
  kPageDown,
  kHome,
  kEnd,
  kInsert,
  kDelete,
  kBackspace,
  kSpace,
  kEnter,
  kEscape,
  kA,
  kC,
  kV,
  kX,
  kY,
  kZ,
  kCount
};

class ImGuiOverlay {
 public:
  ImGuiOverlay() = default;
  ~ImGuiOverlay();  // calls shutdown(): the GL context should be current
  ImGuiOverlay(const ImGuiOverlay&) = delete;
  ImGuiOverlay& operator=(const ImGuiOverlay&) = delete;

  // Creates the ImGui context and the GL3 renderer objects (kInternal when the backend fails).
  Status init();
  void shutdown();
  bool initialized() const { return context_ != nullptr; }

  void mouse_move(float x, float y);
  void mouse_leave();
  void mouse_button(int button, bool down);  // 0 left, 1 right, 2 middle
  void mouse_wheel(float steps);             // + away from the user
  void key(OverlayKey key, bool down);
  void modifiers(bool ctrl, bool shift, bool alt);
  void text(const std::string& utf8);

  // As of the last frame: ImGui uses the mouse / keyboard (hovering or dragging a panel, a
  // focused widget), so the camera must ignore it.
  bool wants_mouse() const;
  bool wants_keyboard() const;

  // Builds and draws one frame of panels into the current framebuffer (logical size w x h, device
  // pixel ratio dpr). `diffusion` (may be null: the panel then only says that no diffusion engine
  // is attached) is read and its settings edited; its on_action runs during this call.
  void render(const GenerationStats& stats, const OverlayPanels& panels, int width, int height,
              float device_pixel_ratio, DiffusionPanelData* diffusion = nullptr,
              OverlayControls* controls = nullptr);

 private:
  ImGuiContext* context_ = nullptr;
  DiffusionPanel diffusion_panel_;
  std::chrono::steady_clock::time_point last_frame_{};
  std::chrono::steady_clock::time_point last_memory_read_{};
  runtime::MemoryUse memory_;
};

}  // namespace tessera::studio
