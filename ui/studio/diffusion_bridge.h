// DiffusionBridge: the studio's door to the concept-image engine (engine/diffusion/pipeline.h).
// Owns one worker thread that loads the DiffusionModel and runs its generate() calls; the UI
// thread only reads an ImageJobState snapshot and receives Qt signals.
//
// Threads: the worker posts every step (index, sigma, ms and the cheap latent->RGB preview) to the
// UI thread with a queued invokeMethod; the UI thread never waits on the engine except in the
// destructor, which raises the cancel flag (honoured before the next denoising step) and joins.
//
// Scheduling (the machine may have 2 cores, and the shape engine's live preview matters most):
// an image job never runs at the same time as a shape job. set_shape_busy(true) holds a submitted
// image job until the shape job ends (the panel says "waiting for the shape job"); a shape job
// that starts while an image runs makes the main window cancel the image (a new prompt replaces
// it anyway). Both engines share the kernels' thread pool, which serialises callers, so running
// them together would only interleave their kernels and slow the token stream the user watches.
// The worker thread also lowers its own scheduling priority (nice +5) as a second line of defence
// for its serial parts (text encoder set-up, sampler updates, preview conversion).
//
// Jobs: submit() cancels the running job and replaces any job still waiting; only the newest
// counts. Every job ends with exactly one imageFinished signal (done, cancelled or failed, with
// the engine's message, e.g. NaN latents "step 3 of 20 ...").
#pragma once

#include <QObject>
#include <QString>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/diffusion/pipeline.h"
#include "ui/studio/generation_stats.h"

namespace tessera::studio {

// The embedded diffusion model: <assets>/models/tessera-tiny/diffusion.
std::string default_diffusion_model_path(const std::string& assets_dir);

// What the panel's controls edit (owned by the main window; read when a job is submitted).
struct ImageSettings {
  int steps = 20;         // 1..200
  float guidance = 7.5f;  // classifier-free guidance scale (1: one UNet pass per step)
  diffusion::SamplerKind sampler = diffusion::SamplerKind::kEuler;
  uint64_t seed = 0;  // used as is when lock_seed, else replaced by a random one per job
  bool lock_seed = false;
  bool auto_after_shape = true;  // generate the image when a shape job finishes
};

enum class DiffusionModelState { kMissing, kLoading, kReady, kFailed };

// UI-thread snapshot of the current (or last) image job.
struct ImageJobState {
  uint64_t job = 0;  // 0: no job yet
  JobState state = JobState::kIdle;
  bool waiting_for_shape = false;  // submitted, held until the shape job ends
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
  QString message;  // why it failed / was cancelled
};

class DiffusionBridge : public QObject {
  Q_OBJECT

 public:
  explicit DiffusionBridge(std::string assets_dir, QObject* parent = nullptr);
  ~DiffusionBridge() override;  // cancels the running job and joins the worker

  // Loads `path` (a diffusers folder, a CompVis file or a folder holding one) on the worker. A
  // path that does not exist sets kMissing with a message saying so (no load is attempted).
  void load_model(const QString& path, const diffusion::DiffusionLoadOptions& options = {});
  DiffusionModelState model_state() const { return model_state_; }
  // The model's description when ready, the reason when missing or failed.
  QString model_message() const { return model_message_; }
  QString model_path() const { return model_path_; }
  int64_t image_size() const { return image_size_; }  // the model's default side (pixels)

  // Queues an image of `prompt` with `settings` (seed already chosen by the caller). Cancels the
  // running job. Returns the job id, or 0 when no model is ready (the state's message says why).
  uint64_t submit(const QString& prompt, const ImageSettings& settings);
  void cancel();  // the running or waiting job ends as kCancelled
  bool busy() const { return state_.state == JobState::kRunning; }
  const ImageJobState& state() const { return state_; }

  // While true, submitted jobs wait (see the scheduling note above).
  void set_shape_busy(bool busy);

  // Test seam: called on the worker after each step's progress has been posted, with the step
  // number and the running job's cancel flag. Tests hold a job at a step until the UI has acted on
  // it, so that no race between the worker's speed and the UI decides the outcome. Empty (no call)
  // unless set; takes effect from the next job.
  using StepHook = std::function<void(int step, const std::atomic<bool>& cancel)>;
  void set_worker_step_hook(StepHook hook);

 Q_SIGNALS:
  void modelStateChanged();
  void imageChanged();  // a step or the final image arrived, or the state changed
  void imageFinished(quint64 job, int state, const QString& message);

 private:
  struct Request {
    uint64_t job = 0;
    diffusion::GenerateRequest request;
  };
  struct LoadRequest {
    uint64_t serial = 0;
    std::string path;
    diffusion::DiffusionLoadOptions options;
  };
  void worker_loop();
  void run_job(const Request& job, const StepHook& hook);
  // UI thread: results from the worker.
  void on_loaded(uint64_t serial, const QString& description, const QString& error,
                 int64_t image_size);
  void on_started(uint64_t job);
  void on_step(uint64_t job, int step, double sigma, double ms, int64_t w, int64_t h,
               std::vector<uint8_t> rgb);
  void on_finished(uint64_t job, int state, const QString& message,
                   std::shared_ptr<diffusion::GeneratedImage> image, double total_ms);

  std::string assets_dir_;
  // UI-thread state.
  DiffusionModelState model_state_ = DiffusionModelState::kMissing;
  QString model_message_, model_path_;
  int64_t image_size_ = 0;
  uint64_t load_serial_ = 0;
  uint64_t next_job_ = 0;
  ImageJobState state_;

  // Shared with the worker (under mutex_).
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool shape_busy_ = false;
  std::optional<LoadRequest> pending_load_;
  std::optional<Request> pending_job_;
  std::atomic<bool> cancel_{false};  // the running job's cancel flag
  StepHook step_hook_;
  uint64_t running_job_ = 0;
  std::unique_ptr<diffusion::DiffusionModel> model_;  // worker thread only
  std::thread worker_;
};

}  // namespace tessera::studio
