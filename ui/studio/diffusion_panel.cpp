#include "ui/studio/diffusion_panel.h"

#include "engine/mesh/paint_views.h"

#include <GL/gl.h>
#include <imgui.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace tessera::studio {

namespace {

const ImVec4 kErrorColor(0.95f, 0.42f, 0.42f, 1.0f);
const ImVec4 kNoteColor(0.75f, 0.75f, 0.55f, 1.0f);

uint64_t random_seed() {
  static std::mt19937_64 rng{std::random_device{}()};
  return rng() >> 1;  // positive in every signed reading of the value (shown with %llu anyway)
}

}  // namespace

void DiffusionPanel::release_gl() {
  if (texture_ != 0) {
    const GLuint name = texture_;
    glDeleteTextures(1, &name);
  }
  texture_ = 0;
  uploaded_job_ = uploaded_version_ = 0;
  texture_width_ = texture_height_ = 0;
}

void DiffusionPanel::upload(const ImageJobState& job) {
  if (job.image_rgb.empty() || job.image_width <= 0 || job.image_height <= 0 ||
      static_cast<int64_t>(job.image_rgb.size()) != job.image_width * job.image_height * 3) {
    return;
  }
  if (texture_ != 0 && job.job == uploaded_job_ && job.image_version == uploaded_version_) return;
  // imgui_impl_opengl3 restores its own bindings, but not ours: keep the caller's binding and
  // unpack alignment (RGB8 rows are not 4-byte aligned for odd widths).
  GLint previous_texture = 0, previous_alignment = 4;
  glGetIntegerv(GL_TEXTURE_BINDING_2D, &previous_texture);
  glGetIntegerv(GL_UNPACK_ALIGNMENT, &previous_alignment);
  if (texture_ == 0) {
    GLuint name = 0;
    glGenTextures(1, &name);
    texture_ = name;
  }
  glBindTexture(GL_TEXTURE_2D, texture_);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
  // Step previews are latent-sized (8x smaller than the image): nearest keeps them honest blocks
  // rather than a blur that looks like a finished low-detail image.
  const GLint filter = job.image_final ? GL_LINEAR : GL_NEAREST;
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, filter);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, filter);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGB8, static_cast<GLsizei>(job.image_width),
               static_cast<GLsizei>(job.image_height), 0, GL_RGB, GL_UNSIGNED_BYTE,
               job.image_rgb.data());
  glPixelStorei(GL_UNPACK_ALIGNMENT, previous_alignment);
  glBindTexture(GL_TEXTURE_2D, static_cast<GLuint>(previous_texture));
  uploaded_job_ = job.job;
  uploaded_version_ = job.image_version;
  texture_width_ = job.image_width;
  texture_height_ = job.image_height;
}

void DiffusionPanel::draw(DiffusionPanelData& data, int viewport_width, int viewport_height) {
  ImGui::SetNextWindowPos(
      ImVec2(static_cast<float>(viewport_width - kDiffusionPanelRight), kDiffusionPanelY),
      ImGuiCond_FirstUseEver);
  // As tall as the view allows (the content scrolls below that): image and buttons come first.
  const float height =
      std::clamp(static_cast<float>(viewport_height - kDiffusionPanelY - 8), 120.0f, 520.0f);
  ImGui::SetNextWindowSize(ImVec2(kDiffusionPanelWidth, height), ImGuiCond_FirstUseEver);
  // Folded at first (the viewport keeps the room); unfolded when an image job starts, so its steps
  // and picture show without a click.
  const uint64_t image_job = data.job != nullptr ? data.job->job : 0;
  if (image_job != 0 && image_job != unfolded_for_job_) {
    unfolded_for_job_ = image_job;
    ImGui::SetNextWindowCollapsed(false, ImGuiCond_Always);
  } else {
    ImGui::SetNextWindowCollapsed(true, ImGuiCond_FirstUseEver);
  }
  ImGui::SetNextWindowBgAlpha(0.85f);
  const ImGuiWindowFlags flags =
      ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoFocusOnAppearing;
  if (!ImGui::Begin("Diffusion", nullptr, flags)) {
    ImGui::End();
    return;
  }
  auto act = [&](DiffusionAction a) {
    if (data.on_action) data.on_action(a);
  };

  // Model line.
  switch (data.model_state) {
    case DiffusionModelState::kReady:
      ImGui::TextWrapped("%s", data.model_message.c_str());
      break;
    case DiffusionModelState::kLoading:
      ImGui::TextDisabled("%s", data.model_message.c_str());
      break;
    case DiffusionModelState::kMissing:
    case DiffusionModelState::kFailed:
      ImGui::PushStyleColor(ImGuiCol_Text, kErrorColor);
      ImGui::TextWrapped("%s", data.model_message.c_str());
      ImGui::PopStyleColor();
      break;
  }

  const ImageJobState* job = data.job;
  // The image (or an empty frame of the same size, so the layout does not jump).
  if (job != nullptr) upload(*job);
  const bool have_image = texture_ != 0 && job != nullptr && job->job == uploaded_job_;
  const ImVec2 side(kDiffusionImageSide, kDiffusionImageSide);
  if (have_image) {
    ImGui::Image(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(texture_)), side, ImVec2(0, 0),
                 ImVec2(1, 1), ImVec4(1, 1, 1, 1), ImVec4(0.5f, 0.5f, 0.5f, 1.0f));
  } else {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::GetWindowDrawList()->AddRect(p, ImVec2(p.x + side.x, p.y + side.y),
                                        IM_COL32(110, 110, 110, 255));
    ImGui::Dummy(side);
  }
  ImGui::SameLine();
  ImGui::BeginGroup();
  if (job != nullptr && job->job != 0) {
    const int done = static_cast<int>(job->step_ms.size());
    if (job->waiting_for_shape) {
      ImGui::TextDisabled("waiting for\nthe shape job");
    } else if (job->paint) {
      // A paint: the views so far (the picture is the newest view), steps summed over them.
      ImGui::Text("view %d / %d", static_cast<int>(job->views.size()), job->paint_views);
      ImGui::Text("%d steps", done);
    } else {
      ImGui::Text("step %d / %d", done, job->steps);
      if (!job->step_sigma.empty()) ImGui::Text("sigma %.3f", job->step_sigma.back());
    }
    ImGui::Text("%s", job_state_name(job->state));
    ImGui::Text("seed %llu", static_cast<unsigned long long>(job->seed));
    if (texture_width_ > 0 && have_image) {
      ImGui::TextDisabled("%lldx%lld %s", static_cast<long long>(texture_width_),
                          static_cast<long long>(texture_height_),
                          job->paint         ? "view"
                          : job->image_final ? "final"
                                             : "preview");
    }
  } else {
    ImGui::TextDisabled("no image yet");
  }
  ImGui::EndGroup();

  // Why the last job failed or stopped, right under the image.
  if (job != nullptr && !job->message.isEmpty() && job->state != JobState::kRunning) {
    ImGui::PushStyleColor(ImGuiCol_Text,
                          job->state == JobState::kFailed ? kErrorColor : kNoteColor);
    ImGui::TextWrapped("%s", job->message.toUtf8().constData());
    ImGui::PopStyleColor();
  }

  // Buttons.
  const bool running = job != nullptr && job->state == JobState::kRunning;
  ImGui::BeginDisabled(!data.can_generate);
  if (ImGui::Button("Generate image")) act(DiffusionAction::kGenerate);
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::BeginDisabled(!running);
  if (ImGui::Button("Cancel")) act(DiffusionAction::kCancel);
  ImGui::EndDisabled();
  ImGui::BeginDisabled(!data.can_apply);
  if (ImGui::Button("Apply as texture")) act(DiffusionAction::kApplyTexture);
  ImGui::EndDisabled();
  if (!data.apply_note.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, kNoteColor);
    ImGui::TextWrapped("%s", data.apply_note.c_str());
    ImGui::PopStyleColor();
  }
  // Painting the shown mesh: views around it, each inpainted over the paint so far.
  ImGui::BeginDisabled(!data.can_paint || running);
  if (ImGui::Button("Paint mesh")) act(DiffusionAction::kPaint);
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
    ImGui::SetTooltip(
        "paint the shown mesh with the prompt from views around it (the depth "
        "ControlNet, each view inpainted over the paint so far), baked into a UV "
        "atlas");
  }
  if (data.settings != nullptr) {
    ImGui::SameLine();
    ImGui::PushItemWidth(-70.0f);
    ImGui::SliderInt("views", &data.settings->paint_views, mesh::kMinPaintRing, mesh::kMaxPaintRing,
                     "%d", ImGuiSliderFlags_AlwaysClamp);
    ImGui::PopItemWidth();
  }
  if (job != nullptr && job->paint) {
    for (const PaintViewRow& v : job->views) {
      ImGui::Text("%-7s %3.0f %% %6.0f ms", v.name.toUtf8().constData(), 100 * v.generated,
                  v.render_ms + v.generate_ms + v.bake_ms);
    }
    if (job->state == JobState::kRunning && job->paint_views > 0) {
      ImGui::TextDisabled("view %d / %d ...", static_cast<int>(job->views.size()) + 1,
                          job->paint_views);
    }
  }
  if (!data.paint_note.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, kNoteColor);
    ImGui::TextWrapped("%s", data.paint_note.c_str());
    ImGui::PopStyleColor();
  }

  // Timings: a bar per step (the scale follows the slowest step), ms/step and the totals.
  if (job != nullptr && !job->step_ms.empty()) {
    const std::vector<float>& ms = job->step_ms;
    double sum = 0;
    for (float v : ms) sum += v;
    const float max_ms = std::max(0.01f, *std::max_element(ms.begin(), ms.end()) * 1.15f);
    char overlay[64];
    std::snprintf(overlay, sizeof(overlay), "%.1f ms/step", sum / static_cast<double>(ms.size()));
    const float width = std::max(120.0f, ImGui::GetContentRegionAvail().x);
    ImGui::PlotHistogram("##step_ms", ms.data(), static_cast<int>(ms.size()), 0, overlay, 0.0f,
                         max_ms, ImVec2(width, 40));
    if (job->image_final) {
      ImGui::Text("total %.0f ms", job->total_ms);
      if (job->from_image) {
        ImGui::TextDisabled("text %.0f, encode %.0f, denoise %.0f, VAE %.0f ms", job->text_ms,
                            job->encode_ms, job->denoise_ms, job->vae_ms);
      } else {
        ImGui::TextDisabled("text %.0f, denoise %.0f, VAE %.0f ms", job->text_ms, job->denoise_ms,
                            job->vae_ms);
      }
    } else {
      ImGui::Text("denoise so far %.0f ms", sum);
    }
  }

  // Controls.
  if (data.settings != nullptr) {
    ImageSettings& s = *data.settings;
    ImGui::Separator();
    ImGui::PushItemWidth(-70.0f);
    ImGui::SliderInt("steps", &s.steps, 1, 100, "%d", ImGuiSliderFlags_AlwaysClamp);
    ImGui::SliderFloat("guidance", &s.guidance, 1.0f, 15.0f, "%.1f", ImGuiSliderFlags_AlwaysClamp);
    if (ImGui::BeginCombo("sampler", runtime::sampler_kind_name(s.sampler))) {
      for (runtime::SamplerKind k : runtime::kImageSamplers) {
        if (ImGui::Selectable(runtime::sampler_kind_name(k), k == s.sampler)) s.sampler = k;
      }
      ImGui::EndCombo();
    }
    ImGui::BeginDisabled(!s.lock_seed);
    ImGui::InputScalar("seed", ImGuiDataType_U64, &s.seed);
    ImGui::EndDisabled();
    ImGui::PopItemWidth();
    ImGui::Checkbox("lock seed", &s.lock_seed);
    ImGui::SameLine();
    if (ImGui::Button("randomise")) s.seed = random_seed();
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("a new random seed now");
    ImGui::Checkbox("image after each shape", &s.auto_after_shape);
    ImGui::Checkbox("fast (LCM-LoRA, 4 steps)", &s.fast);
    if (ImGui::IsItemHovered()) {
      ImGui::SetTooltip(
          "LCM with the LCM-LoRA: 4 steps, no guidance pass, over the settings above; the LoRA "
          "from the list, else lcm-lora-sdv1-5.safetensors in your loras folder");
    }
    // Image-to-image: start from the viewport or a file, with a strength and a mask.
    ImGui::Separator();
    using Source = ImageSettings::InitSource;
    static const char* kSources[] = {"text only", "the viewport", "a file"};
    int source = static_cast<int>(s.init_source);
    ImGui::PushItemWidth(-70.0f);
    if (ImGui::Combo("start from", &source, kSources, 3)) {
      s.init_source = static_cast<Source>(source);
    }
    if (ImGui::IsItemHovered()) {
      ImGui::SetTooltip(
          "image-to-image: repaint the shown mesh (the viewport's view, as you see "
          "it) or a picture, guided by the prompt");
    }
    if (s.init_source != Source::kNone) {
      ImGui::SliderFloat("strength", &s.strength, 0.05f, 1.0f, "%.2f",
                         ImGuiSliderFlags_AlwaysClamp);
      if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip("how much is repainted: 0.3 keeps the picture, 1 repaints it fully");
      }
    }
    ImGui::PopItemWidth();
    const auto file_name = [](const std::string& path) {
      const size_t slash = path.find_last_of('/');
      return slash == std::string::npos ? path : path.substr(slash + 1);
    };
    if (s.init_source == Source::kFile) {
      if (ImGui::Button("picture...")) act(DiffusionAction::kChooseInitFile);
      ImGui::SameLine();
      ImGui::TextDisabled("%s",
                          s.init_file.empty() ? "(none chosen)" : file_name(s.init_file).c_str());
    }
    if (s.init_source != Source::kNone) {
      if (ImGui::Button("mask...")) act(DiffusionAction::kChooseMaskFile);
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("a PNG: white is repainted, black kept");
      ImGui::SameLine();
      if (s.mask_file.empty()) {
        ImGui::TextDisabled("no mask (all repainted)");
      } else {
        ImGui::TextDisabled("%s", file_name(s.mask_file).c_str());
        ImGui::SameLine();
        if (ImGui::SmallButton("x")) s.mask_file.clear();
      }
    }
    // ControlNet: follow the viewport's depth of the shown mesh, or a picture.
    ImGui::Separator();
    using Control = ImageSettings::ControlSource;
    static const char* kControls[] = {"nothing", "viewport depth", "a file"};
    int control = static_cast<int>(s.control_source);
    ImGui::PushItemWidth(-70.0f);
    if (ImGui::Combo("follow", &control, kControls, 3)) {
      s.control_source = static_cast<Control>(control);
    }
    if (ImGui::IsItemHovered()) {
      ImGui::SetTooltip(
          "ControlNet: the image follows the shown mesh's depth (as the viewport sees it) or "
          "a control picture");
    }
    if (s.control_source != Control::kNone) {
      ImGui::SliderFloat("control", &s.control_scale, 0.0f, runtime::kMaxControlScale, "%.2f",
                         ImGuiSliderFlags_AlwaysClamp);
      if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip("how strongly the image follows: 1 closely, 0.5 loosely");
      }
    }
    ImGui::PopItemWidth();
    if (s.control_source == Control::kFile) {
      if (ImGui::Button("control picture...")) act(DiffusionAction::kChooseControlFile);
      ImGui::SameLine();
      ImGui::TextDisabled(
          "%s", s.control_file.empty() ? "(none chosen)" : file_name(s.control_file).c_str());
    }
    if (s.control_source != Control::kNone) {
      if (ImGui::Button("ControlNet...")) act(DiffusionAction::kChooseControlModel);
      if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip("a ControlNet .safetensors (SD 1.5, v1.1 or diffusers names)");
      }
      ImGui::SameLine();
      if (s.control_model.empty()) {
        ImGui::TextDisabled("the model's own (depth)");
      } else {
        ImGui::TextDisabled("%s", file_name(s.control_model).c_str());
        ImGui::SameLine();
        if (ImGui::SmallButton("x##control")) s.control_model.clear();
      }
      ImGui::Checkbox("guess mode", &s.control_guess);
      if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip("for an empty or weak prompt: the control leads, the prompt follows");
      }
    }
    // LoRAs: one row each (multiplier, remove), then "add".
    ImGui::Separator();
    int remove = -1;
    for (size_t i = 0; i < s.loras.size(); ++i) {
      ImGui::PushID(static_cast<int>(i));
      ImGui::PushItemWidth(-70.0f);
      ImGui::SliderFloat(file_name(s.loras[i].path).substr(0, 12).c_str(), &s.loras[i].multiplier,
                         -1.0f, 2.0f, "%.2f");
      ImGui::PopItemWidth();
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", s.loras[i].path.c_str());
      ImGui::SameLine();
      if (ImGui::SmallButton("x")) remove = static_cast<int>(i);
      ImGui::PopID();
    }
    if (remove >= 0) s.loras.erase(s.loras.begin() + remove);
    if (ImGui::Button("add LoRA...")) act(DiffusionAction::kAddLora);
    if (ImGui::IsItemHovered()) {
      ImGui::SetTooltip(
          "a LoRA .safetensors (kohya/A1111 or diffusers), merged into the model for "
          "the next image; <lora:NAME:M> in the prompt works too");
    }
  }
  ImGui::End();
}

uint64_t next_random_seed() {
  return random_seed();
}

}  // namespace tessera::studio
