// DiffusionBridge: the studio's view of the runtime's image lane (engine/runtime/session.h). It
// owns no thread, queue or cancel logic: loads and image jobs are jobs of the one runtime::Session
// that EngineBridge owns; the runtime runs them on its image lane and schedules them against the
// shape jobs (an image waits between its denoising steps while a shape job runs on the same
// device). This class turns the image lane's events, drained on the UI thread by EngineBridge, into
// the ImageJobState snapshot the Diffusion panel reads and into Qt signals.
//
// Jobs: submit() cancels the running image job and replaces a queued one (the runtime's lane
// semantics); every job ends with exactly one imageFinished signal (done, cancelled or failed, with
// the engine's message, e.g. NaN latents "step 3 of 20 ...").
#pragma once

#include <QObject>
#include <QString>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/session.h"
#include "ui/studio/generation_stats.h"

namespace tessera::studio {

class EngineBridge;

// What the panel's controls edit (owned by the main window; read when a job is submitted).
struct ImageSettings {
  int steps = runtime::kDefaultImageSteps;  // 1..200
  float guidance =
      runtime::kDefaultImageGuidance;  // classifier-free guidance scale (1: one UNet pass per step)
  runtime::SamplerKind sampler = runtime::SamplerKind::kEuler;
  uint64_t seed = 0;  // used as is when lock_seed, else replaced by a random one per job
  bool lock_seed = false;
  bool auto_after_shape = true;  // generate the image when a shape job finishes
  // Image-to-image: what the image starts from, how much of it is repainted, and an optional
  // inpainting mask (white = repaint) from a PNG.
  enum class InitSource { kNone, kViewport, kFile };
  InitSource init_source = InitSource::kNone;
  std::string init_file;  // kFile: a PNG
  float strength = runtime::kDefaultImageStrength;
  std::string mask_file;  // "" = no mask
  // LoRAs merged into the model for these images, each with a multiplier (a change of the list
  // reloads the model on the next image; <lora:NAME:M> tags in the prompt add to it).
  std::vector<runtime::LoraChoice> loras;
  // The "fast" choice (runtime::apply_fast_choice): LCM, 4 steps, guidance 1 with the LCM-LoRA
  // (from the list, else the user's loras folder), over steps, guidance and sampler; the tiny
  // decoder too when taesd_decoder.safetensors is in that folder.
  bool fast = false;
  // ControlNet: what the image follows (the viewport's depth of the shown mesh, or a PNG such as
  // a depth map), the ControlNet ("" = the model's own depth ControlNet), how strongly, guess mode.
  enum class ControlSource { kNone, kViewportDepth, kFile };
  ControlSource control_source = ControlSource::kNone;
  std::string control_file;
  std::string control_model;
  float control_scale = runtime::kDefaultControlScale;
  bool control_guess = false;
  // Painting the shown mesh (submit_paint): the views around it (plus top and bottom).
  int paint_views = 4;
};

// One painted view as the panel lists it.
struct PaintViewRow {
  QString name;
  double generated = 0;                                // share of its object pixels
  double render_ms = 0, generate_ms = 0, bake_ms = 0;  // bake_ms: the bake and the fill
};

enum class DiffusionModelState { kMissing, kLoading, kReady, kFailed };

// UI-thread snapshot of the current (or last) image job.
struct ImageJobState {
  uint64_t job = 0;  // 0: no job yet
  JobState state = JobState::kIdle;
  bool waiting_for_shape = false;  // held by the runtime's scheduler while a shape job runs
  QString prompt;
  uint64_t seed = 0;
  int steps = 0;               // requested
  std::vector<float> step_ms;  // one per finished step
  std::vector<float> step_sigma;
  // The newest picture: the step preview (latent resolution) or, once done, the final image.
  int64_t image_width = 0, image_height = 0;
  std::vector<uint8_t> image_rgb;  // RGB8, top row first
  bool image_final = false;
  uint64_t image_version = 0;  // bumped on every change (the overlay re-uploads its texture)
  double text_ms = 0, denoise_ms = 0, vae_ms = 0, total_ms = 0;
  double encode_ms = 0;     // image-to-image's VAE encode
  bool from_image = false;  // an image-to-image job
  QString message;          // why it failed / was cancelled; the runtime's notes when done
  // A paint job (submit_paint): each view as it lands (its image is the panel's picture), then
  // the painted mesh with its measures.
  bool paint = false;
  int paint_views = 0;  // views planned (known from the first view event)
  std::vector<PaintViewRow> views;
  std::shared_ptr<const mesh::Mesh> painted;
  double coverage = 0, seam_mean = 0;
};

class DiffusionBridge : public QObject {
  Q_OBJECT

 public:
  // `engine` owns the Session and outlives this bridge.
  explicit DiffusionBridge(EngineBridge& engine, QObject* parent = nullptr);
  ~DiffusionBridge() override;

  // Loads `path` (a diffusers folder, a CompVis file or a folder holding one; empty: the embedded
  // model) on the image lane, on `device`. kLoading until the runtime answers: kReady, kMissing
  // (nothing there: the runtime's kNotFound) or kFailed (the loader's message).
  void load_model(const QString& path, runtime::DeviceChoice device = runtime::DeviceChoice::kCpu);
  DiffusionModelState model_state() const { return model_state_; }
  // The model's description when ready, the reason when missing or failed.
  QString model_message() const { return model_message_; }
  QString model_path() const { return model_path_; }
  int64_t image_size() const { return image_size_; }  // the model's default side (pixels)

  // Queues an image of `prompt` with `settings` (seed already chosen by the caller). Cancels the
  // running job. Returns the job id, or 0 when no model is ready (the state's message says why).
  // `init` / `mask`: image-to-image's picture and inpainting's mask (null: none; any size, the
  // runtime resizes and says so in the job's notes).
  // `control`: the ControlNet's control image (null: none). `error` (may be null): why no job was
  // queued when the settings cannot run (the fast choice without an LCM-LoRA).
  uint64_t submit(const QString& prompt, const ImageSettings& settings,
                  std::shared_ptr<const mesh::TextureImage> init = nullptr,
                  std::shared_ptr<const mesh::TextureImage> mask = nullptr,
                  std::shared_ptr<const mesh::TextureImage> control = nullptr,
                  QString* error = nullptr);
  // Paints `mesh` (runtime::Session::submit_paint) with `prompt` and the settings that apply
  // (steps, guidance, sampler, seed, LoRAs, fast, the ControlNet and its scale, the views): cancels
  // the running job like submit(). Returns the job id, or 0 with `error` set (no model ready, the
  // settings refused by runtime::check_paint_job, the fast choice without an LCM-LoRA).
  uint64_t submit_paint(std::shared_ptr<const mesh::Mesh> mesh, const QString& prompt,
                        const ImageSettings& settings, QString* error = nullptr);
  void cancel();  // the running or waiting job ends as kCancelled
  bool busy() const { return state_.state == JobState::kRunning; }
  const ImageJobState& state() const { return state_; }

  // Test seam (runtime::Session::set_image_step_hook): called on the runtime's image worker after
  // each step's event, with the step and the job's cancel flag. Empty: none.
  using StepHook = std::function<void(int step, const std::atomic<bool>& cancel)>;
  void set_worker_step_hook(StepHook hook);

 Q_SIGNALS:
  void modelStateChanged();
  void imageChanged();  // a step or the final image arrived, or the state changed
  void imageFinished(quint64 job, int state, const QString& message);
  // A paint job's view landed: the mesh as painted so far.
  void paintView(std::shared_ptr<const tessera::mesh::Mesh> painted);
  // A paint job's result (before its imageFinished).
  void painted(std::shared_ptr<const tessera::mesh::Mesh> mesh);

 private:
  void on_event(const runtime::Event& event);  // image-lane events, UI thread
  // A new job `id` in the state: the previous one (when still open) ends as replaced, `why`.
  void start_state(uint64_t id, uint64_t previous, bool previous_open, const QString& why,
                   const QString& prompt, const ImageSettings& settings);

  EngineBridge& engine_;
  DiffusionModelState model_state_ = DiffusionModelState::kMissing;
  QString model_message_, model_path_;
  int64_t image_size_ = 0;
  uint64_t load_job_ = 0;  // the newest load; older ones' results are ignored
  ImageJobState state_;
};

}  // namespace tessera::studio
