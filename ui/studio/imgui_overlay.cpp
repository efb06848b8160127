#include "ui/studio/imgui_overlay.h"

#include <imgui.h>
#include <backends/imgui_impl_opengl3.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::studio {

namespace {

// Makes our context current for the duration of a call (several overlays may exist).
class ContextScope {
 public:
  explicit ContextScope(ImGuiContext* context) : previous_(ImGui::GetCurrentContext()) {
    ImGui::SetCurrentContext(context);
  }
  ~ContextScope() { ImGui::SetCurrentContext(previous_); }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  ImGuiContext* previous_;
};

const char* stage_label(size_t i) {
  static const char* const kLabels[] = {"text (CLIP)",   "prefill",    "decode",
                                        "latent decode", "extraction", "cleanup"};
  return i < sizeof(kLabels) / sizeof(kLabels[0]) ? kLabels[i] : "?";
}

}  // namespace

ImGuiOverlay::~ImGuiOverlay() {
  shutdown();
}

Status ImGuiOverlay::init() {
  if (context_ != nullptr) return Status();
  ImGuiContext* previous = ImGui::GetCurrentContext();
  context_ = ImGui::CreateContext();
  ImGui::SetCurrentContext(context_);
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // panel layout is not persisted in a file next to the binary
  io.LogFilename = nullptr;
  io.BackendPlatformName = "tessera_qt";
  const std::pair<ImGuiKey_, OverlayKey> keymap[] = {{ImGuiKey_Tab, OverlayKey::kTab},
                                                     {ImGuiKey_LeftArrow, OverlayKey::kLeft},
                                                     {ImGuiKey_RightArrow, OverlayKey::kRight},
                                                     {ImGuiKey_UpArrow, OverlayKey::kUp},
                                                     {ImGuiKey_DownArrow, OverlayKey::kDown},
                                                     {ImGuiKey_PageUp, OverlayKey::kPageUp},
                                                     {ImGuiKey_PageDown, OverlayKey::kPageDown},
                                                     {ImGuiKey_Home, OverlayKey::kHome},
                                                     {ImGuiKey_End, OverlayKey::kEnd},
                                                     {ImGuiKey_Insert, OverlayKey::kInsert},
                                                     {ImGuiKey_Delete, OverlayKey::kDelete},
                                                     {ImGuiKey_Backspace, OverlayKey::kBackspace},
                                                     {ImGuiKey_Space, OverlayKey::kSpace},
                                                     {ImGuiKey_Enter, OverlayKey::kEnter},
                                                     {ImGuiKey_Escape, OverlayKey::kEscape},
                                                     {ImGuiKey_A, OverlayKey::kA},
                                                     {ImGuiKey_C, OverlayKey::kC},
                                                     {ImGuiKey_V, OverlayKey::kV},
                                                     {ImGuiKey_X, OverlayKey::kX},
                                                     {ImGuiKey_Y, OverlayKey::kY},
                                                     {ImGuiKey_Z, OverlayKey::kZ}};
  for (const auto& [imgui_key, ours] : keymap) io.KeyMap[imgui_key] = static_cast<int>(ours);
  ImGui::StyleColorsDark();
  ImGui::GetStyle().WindowRounding = 4.0f;
  const bool ok = ImGui_ImplOpenGL3_Init("#version 330 core");
  ImGui::SetCurrentContext(previous);
  if (!ok) {
    shutdown();
    return internal_error("ImGui OpenGL 3 backend failed to initialise (GL 3.3 core needed)");
  }
  last_frame_ = std::chrono::steady_clock::now();
  return Status();
}

void ImGuiOverlay::shutdown() {
  if (context_ == nullptr) return;
  {
    ContextScope scope(context_);
    diffusion_panel_.release_gl();
    if (ImGui::GetIO().BackendRendererUserData != nullptr) ImGui_ImplOpenGL3_Shutdown();
  }
  ImGui::DestroyContext(context_);
  context_ = nullptr;
}

void ImGuiOverlay::mouse_move(float x, float y) {
  if (!context_) return;
  ContextScope scope(context_);
  ImGui::GetIO().MousePos = ImVec2(x, y);
}

void ImGuiOverlay::mouse_leave() {
  if (!context_) return;
  ContextScope scope(context_);
  ImGui::GetIO().MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
}

void ImGuiOverlay::mouse_button(int button, bool down) {
  if (!context_ || button < 0 || button >= 5) return;
  ContextScope scope(context_);
  ImGui::GetIO().MouseDown[button] = down;
}

void ImGuiOverlay::mouse_wheel(float steps) {
  if (!context_) return;
  ContextScope scope(context_);
  ImGui::GetIO().MouseWheel += steps;
}

void ImGuiOverlay::key(OverlayKey key, bool down) {
  if (!context_) return;
  ContextScope scope(context_);
  ImGui::GetIO().KeysDown[static_cast<int>(key)] = down;
}

void ImGuiOverlay::modifiers(bool ctrl, bool shift, bool alt) {
  if (!context_) return;
  ContextScope scope(context_);
  ImGuiIO& io = ImGui::GetIO();
  io.KeyCtrl = ctrl;
  io.KeyShift = shift;
  io.KeyAlt = alt;
}

void ImGuiOverlay::text(const std::string& utf8) {
  if (!context_ || utf8.empty()) return;
  ContextScope scope(context_);
  ImGui::GetIO().AddInputCharactersUTF8(utf8.c_str());
}

bool ImGuiOverlay::wants_mouse() const {
  if (!context_) return false;
  ContextScope scope(context_);
  return ImGui::GetIO().WantCaptureMouse;
}

bool ImGuiOverlay::wants_keyboard() const {
  if (!context_) return false;
  ContextScope scope(context_);
  return ImGui::GetIO().WantCaptureKeyboard;
}

void ImGuiOverlay::render(const GenerationStats& stats, const OverlayPanels& panels, int width,
                          int height, float device_pixel_ratio, DiffusionPanelData* diffusion,
                          OverlayControls* controls) {
  if (!context_) return;
  ContextScope scope(context_);
  ImGuiIO& io = ImGui::GetIO();
  const auto now = std::chrono::steady_clock::now();
  io.DeltaTime = std::max(1e-4f, std::chrono::duration<float>(now - last_frame_).count());
  last_frame_ = now;
  io.DisplaySize =
      ImVec2(static_cast<float>(std::max(width, 1)), static_cast<float>(std::max(height, 1)));
  io.DisplayFramebufferScale = ImVec2(device_pixel_ratio, device_pixel_ratio);
  // /proc reads are cheap but not free: four times a second is plenty for a memory readout.
  if (now - last_memory_read_ > std::chrono::milliseconds(250)) {
    memory_ = runtime::memory_use(controls != nullptr && controls->on_gpu);
    last_memory_read_ = now;
  }

  ImGui_ImplOpenGL3_NewFrame();
  ImGui::NewFrame();
  const ImGuiWindowFlags flags =
      ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoFocusOnAppearing;
  const int64_t tokens = static_cast<int64_t>(stats.token_ms.size());

  if (panels.timing) {
    ImGui::SetNextWindowPos(ImVec2(kTimingPanelX, kTimingPanelY), ImGuiCond_FirstUseEver);
    ImGui::SetNextWindowSize(ImVec2(kTimingPanelWidth, kTimingPanelHeight), ImGuiCond_FirstUseEver);
    ImGui::SetNextWindowBgAlpha(0.85f);
    if (ImGui::Begin("Timing", nullptr, flags)) {
      // Scale to the decode steps: token 0 includes the prefill, and the steps that also decode a
      // preview are spikes; either would flatten the rest. The scale is 1.5x the p95 of the decode
      // steps (spikes are clipped at the top), never below 1.15x their median.
      std::vector<float> steps(
          stats.token_ms.size() > 1 ? stats.token_ms.begin() + 1 : stats.token_ms.begin(),
          stats.token_ms.end());
      const float p95 = static_cast<float>(percentile(steps, 95));
      const float p50 = static_cast<float>(percentile(steps, 50));
      // The previous job's curve stays as a faint line under this one (same scale), so the KV cache
      // / graph switches' A/B is seen at a glance.
      const std::vector<float>& before = stats.previous_token_ms;
      std::vector<float> before_steps(before.size() > 1 ? before.begin() + 1 : before.begin(),
                                      before.end());
      const float before_p95 = static_cast<float>(percentile(before_steps, 95));
      const float max_ms = std::max({0.01f, 1.5f * p95, 1.15f * p50, 1.5f * before_p95});
      char overlay[96];
      std::snprintf(overlay, sizeof(overlay), "ms per token (0 - %.2f), %lld tokens%s", max_ms,
                    static_cast<long long>(tokens), before.empty() ? "" : "; faint: previous");
      // One sample per token index (not per frame): the plot's x axis is the token index. An
      // explicit width: a negative one collapses in a window whose size ImGui is still settling.
      const float plot_width = std::max(120.0f, ImGui::GetContentRegionAvail().x);
      const int samples = static_cast<int>(std::max<size_t>(before.size(), stats.token_ms.size()));
      const ImVec2 origin = ImGui::GetCursorPos();
      if (!before.empty()) {
        ImGui::PushStyleColor(ImGuiCol_PlotLines, ImVec4(0.75f, 0.75f, 0.75f, 0.35f));
        ImGui::PlotLines("##previous", before.data(), static_cast<int>(before.size()), 0, nullptr,
                         0.0f, max_ms, ImVec2(plot_width, 80));
        ImGui::PopStyleColor();
        ImGui::SetCursorPos(origin);
      }
      // The current curve over it on the same x scale: a plot as wide as its share of the samples.
      const float width_share =
          before.empty() || samples == 0
              ? 1.0f
              : std::max(0.05f, static_cast<float>(tokens) / static_cast<float>(samples));
      if (!before.empty()) ImGui::PushStyleColor(ImGuiCol_FrameBg, ImVec4(0, 0, 0, 0));
      ImGui::PlotLines("##latency", stats.token_ms.data(), static_cast<int>(tokens), 0, overlay,
                       0.0f, max_ms, ImVec2(plot_width * width_share, 80));
      if (!before.empty()) ImGui::PopStyleColor();
      if (stats.cursor >= 0 && tokens > 1) {
        // A replay's cursor: a line at the shown token over the plot just drawn.
        const ImVec2 lo = ImGui::GetItemRectMin(), hi = ImGui::GetItemRectMax();
        const float t = static_cast<float>(std::min<int64_t>(stats.cursor, tokens - 1)) /
                        static_cast<float>(tokens - 1);
        const float x = lo.x + t * (hi.x - lo.x);
        ImGui::GetWindowDrawList()->AddLine(ImVec2(x, lo.y), ImVec2(x, hi.y),
                                            IM_COL32(255, 200, 60, 255), 2.0f);
      }
      if (stats.cursor >= 0) {
        ImGui::Text("replay  token %lld / %lld", static_cast<long long>(stats.cursor),
                    static_cast<long long>(stats.expected_tokens));
      } else {
        ImGui::Text("progress  %lld / %lld  (%s)", static_cast<long long>(tokens),
                    static_cast<long long>(stats.expected_tokens), job_state_name(stats.state));
      }
      ImGui::Text("TPOT mean %.2f  p50 %.2f  p99 %.2f ms", stats.tpot_mean_ms(),
                  stats.tpot_percentile_ms(50), stats.tpot_percentile_ms(99));
      if (stats.candidates > 1) {
        // One step serves every candidate: the plot and TPOT are per step, the rate counts all.
        ImGui::Text("tokens/s  %.1f over %d candidates (%.1f each)", stats.tokens_per_second(),
                    stats.candidates, stats.tokens_per_second() / stats.candidates);
      } else {
        ImGui::Text("tokens/s  %.1f", stats.tokens_per_second());
      }
      if (stats.cursor >= 0) {
        ImGui::TextDisabled("timings as made; the line: shown token");
      } else if (stats.first_partial_ms >= 0) {
        ImGui::Text("first preview %.0f ms after Generate (%lld previews)", stats.first_partial_ms,
                    static_cast<long long>(stats.partial_meshes));
      } else if (stats.state == JobState::kRunning) {
        ImGui::TextDisabled("no preview mesh yet");
      } else {
        // Previews share the job's time (10 % by default): a short job is done before one fits.
        ImGui::TextDisabled("no preview: the job was too short");
      }
    }
    ImGui::End();
  }

  if (panels.stages) {
    ImGui::SetNextWindowPos(ImVec2(kTimingPanelX, kTimingPanelY + kTimingPanelHeight + 8),
                            ImGuiCond_FirstUseEver);
    ImGui::SetNextWindowSize(ImVec2(kTimingPanelWidth, 150), ImGuiCond_FirstUseEver);
    // Panels other than Timing start folded to their title line: the viewport stays visible.
    ImGui::SetNextWindowCollapsed(true, ImGuiCond_FirstUseEver);
    ImGui::SetNextWindowBgAlpha(0.85f);
    // Folded, the title line still says where the time went; "###Stages" keeps the window's
    // identity while the label changes.
    const std::string summary = stats.stages_summary();
    const std::string title =
        (summary.empty() ? std::string("Stages") : "Stages: " + summary) + "###Stages";
    if (ImGui::Begin(title.c_str(), nullptr, flags)) {
      for (size_t i = 0; i < kStageNames.size(); ++i) {
        const double ms = stats.stage_ms[i];
        if (ms >= 0 && kStageNames[i] == std::string_view(runtime::kStageExtraction) &&
            stats.extraction_queries > 0) {
          ImGui::Text("%-14s %9.1f ms  %.0fk queries", stage_label(i), ms,
                      static_cast<double>(stats.extraction_queries) / 1000.0);
        } else if (ms >= 0) {
          ImGui::Text("%-14s %9.1f ms", stage_label(i), ms);
        } else {
          ImGui::TextDisabled("%-14s         -", stage_label(i));
        }
      }
      if (stats.state == JobState::kDone)
        ImGui::Text("%-14s %9.1f ms", "job total", stats.total_ms);
    }
    ImGui::End();
  }

  if (panels.system) {
    ImGui::SetNextWindowPos(ImVec2(static_cast<float>(width) - 268, 8), ImGuiCond_FirstUseEver);
    ImGui::SetNextWindowSize(ImVec2(260, 110), ImGuiCond_FirstUseEver);
    ImGui::SetNextWindowCollapsed(true, ImGuiCond_FirstUseEver);
    ImGui::SetNextWindowBgAlpha(0.85f);
    // Folded, the title line still says where and how the job runs (device, weights, KV cache,
    // graphs);
    // "###System" keeps the window's identity while the label changes.
    const std::string device_line = stats.backend.empty()
                                        ? (controls ? controls->device : std::string("(no model)"))
                                        : stats.backend;
    const std::string weights_format = stats.weights.substr(0, stats.weights.find(','));
    const std::string title = "System: " + device_line.substr(0, device_line.find(" (")) +
                              (weights_format.empty() ? "" : ", " + weights_format) + ", KV " +
                              (stats.kv_cache ? "on" : "off") + ", graph " +
                              runtime::graph_mode_name(stats.graphs) + "###System";
    if (ImGui::Begin(title.c_str(), nullptr, flags)) {
      ImGui::Text("memory  %.1f MiB resident",
                  static_cast<double>(memory_.resident_bytes) / (1 << 20));
      if (memory_.device_used_bytes >= 0) {
        ImGui::Text("GPU     %.0f / %.0f MiB",
                    static_cast<double>(memory_.device_used_bytes) / (1 << 20),
                    static_cast<double>(memory_.device_total_bytes) / (1 << 20));
      }
      if (controls && !controls->model.empty())
        ImGui::TextWrapped("model   %s", controls->model.c_str());
      ImGui::TextWrapped("device  %s", stats.backend.empty()
                                           ? (controls ? controls->device.c_str() : "(no model)")
                                           : stats.backend.c_str());
      if (!stats.weights.empty()) ImGui::TextWrapped("weights %s", stats.weights.c_str());
      ImGui::Text("KV cache   %s", stats.kv_cache ? "on" : "off");
      ImGui::Text("CUDA graph %s", runtime::graph_mode_name(stats.graphs));
      if (stats.graphs != runtime::GraphMode::kOn && !stats.graphs_reason.empty() &&
          ImGui::IsItemHovered()) {
        ImGui::SetTooltip("%s", stats.graphs_reason.c_str());
      }
      if (stats.graphs == runtime::GraphMode::kUnavailable) {
        ImGui::TextDisabled("  (%s)", stats.graphs_reason.empty() ? "no job yet" : "CPU: eager");
      }
      if (controls != nullptr) {
        // A/B switches for the next job (the Settings panel shows the same switches).
        ImGui::Separator();
        ImGui::TextDisabled("next job:");
        bool changed = ImGui::Checkbox("KV cache", &controls->kv_cache);
        ImGui::SameLine();
        if (!controls->graphs_available) ImGui::BeginDisabled();
        changed |= ImGui::Checkbox("CUDA graphs", &controls->graphs);
        if (!controls->graphs_available) {
          ImGui::EndDisabled();
          if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
            ImGui::SetTooltip("%s", controls->graphs_reason.c_str());
          }
        }
        if (changed && controls->on_change) controls->on_change();
      }
    }
    ImGui::End();
  }

  if (panels.diffusion) {
    if (diffusion != nullptr) {
      diffusion_panel_.draw(*diffusion, width, height);
    } else {
      ImGui::SetNextWindowPos(
          ImVec2(static_cast<float>(width - kDiffusionPanelRight), kDiffusionPanelY),
          ImGuiCond_FirstUseEver);
      ImGui::SetNextWindowSize(ImVec2(kDiffusionPanelWidth, 70), ImGuiCond_FirstUseEver);
      ImGui::SetNextWindowCollapsed(true, ImGuiCond_FirstUseEver);
      ImGui::SetNextWindowBgAlpha(0.85f);
      if (ImGui::Begin("Diffusion", nullptr, flags)) {
        ImGui::TextDisabled("concept image: no diffusion engine attached");
      }
      ImGui::End();
    }
  }

  ImGui::Render();
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

}  // namespace tessera::studio
