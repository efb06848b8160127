// Session's insides (engine/runtime internal): the models, the lanes' workers, the event queue and
// the scheduler behind session.h's interface. Defined in session.cpp (construction, queries,
// submission, events, loads, image and texture jobs) and session_shape_job.cpp (shape jobs).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/diffusion/pipeline.h"
#include "engine/runtime/lane_internal.h"
#include "engine/runtime/session.h"
#include "engine/shape/pipeline.h"

namespace tessera {
class Trace;
}  // namespace tessera

namespace tessera::runtime {

struct Session::Impl {
  explicit Impl(SessionOptions options);
  ~Impl();

  uint64_t load_shape_model(ShapeModelOptions options);
  uint64_t load_image_model(ImageModelOptions options);
  uint64_t submit(JobOptions job);
  uint64_t submit_image(ImageJobOptions job);
  uint64_t submit_texture(TextureJobOptions job);
  uint64_t submit_paint(PaintJobOptions job);
  void cancel();
  void cancel(Lane lane);
  std::optional<Event> poll();
  std::optional<Event> wait_event(std::chrono::milliseconds timeout);
  bool idle() const;
  std::optional<ShapeModelInfo> shape_model() const;
  std::optional<ImageModelInfo> image_model() const;
  void set_image_step_hook(ImageStepHook hook);
  MemoryUse memory() const;

  void emit(uint64_t job, Lane lane, EventPayload payload);
  void on_exception(uint64_t job, Lane lane, std::exception_ptr error);
  void install_shape(std::unique_ptr<shape::ShapePipeline> pipeline, const std::string& path);
  void update_sharing();  // mutex_ held
  void run_shape_load(uint64_t id, const ShapeModelOptions& options);
  void run_image_load(uint64_t id, const ImageModelOptions& options);
  // Loads the diffusion model at `path` with `options` into image_ / image_info_ (and remembers
  // the options for a reload with other LoRAs).
  Status load_image_model_now(const std::string& path, const ImageModelOptions& options);
  void run_image_job(uint64_t id, const ImageJobOptions& job, std::atomic<bool>& cancel);
  // An image job's work after its turn came, without its closing events: the job checked, the
  // model reloaded for its LoRAs, its ControlNet and tiny decoder loaded, the image generated
  // (step and waiting events along the way). kCancelled when cancelled. Paint jobs call it per
  // view.
  struct MadeImage {
    diffusion::GeneratedImage image;
    std::vector<std::string> notes;
    bool had_init = false;
    std::string control_net;  // the ControlNet used, "" when none
  };
  Expected<MadeImage> make_image(uint64_t id, const ImageJobOptions& job,
                                 std::atomic<bool>& cancel);
  void run_texture_job(uint64_t id, const TextureJobOptions& job, std::atomic<bool>& cancel);
  // Paint jobs (session_paint_job.cpp).
  void run_paint_job(uint64_t id, const PaintJobOptions& job, std::atomic<bool>& cancel);

  // Shape jobs (session_shape_job.cpp): checked, then the tokens generated (or given), then the
  // candidates meshed.
  struct ShapeTokens {
    std::vector<std::vector<int32_t>> tokens;  // per candidate
    shape::EncodedPrompt prompt;               // empty when decoding given tokens
  };
  void run_shape_job(uint64_t id, const JobOptions& job, std::atomic<bool>& cancel);
  Status generate_shape_tokens(uint64_t id, const JobOptions& job, int64_t n,
                               std::atomic<bool>& cancel, Trace& trace, ShapeTokens* out,
                               bool* preview_failed);
  bool mesh_shape_candidates(uint64_t id, const JobOptions& job, int resolution,
                             ShapeTokens& generated, std::atomic<bool>& cancel,
                             const std::function<void(const Status&)>& finish_with);

  SessionOptions options_;
  std::atomic<uint64_t> next_id_{1};
  Scheduler scheduler_;
  // Models: each used by its lane's worker only; replaced by that worker after a load.
  std::unique_ptr<shape::ShapePipeline> shape_;
  std::unique_ptr<diffusion::DiffusionModel> image_;

  mutable std::mutex mutex_;
  std::condition_variable event_cv_;
  std::deque<Event> events_;                  // guarded by mutex_
  std::optional<ShapeModelInfo> shape_info_;  // guarded by mutex_
  std::optional<ImageModelInfo> image_info_;  // guarded by mutex_
  ImageModelOptions image_options_;           // the loaded model's (image lane only)
  std::string image_path_;
  ImageStepHook image_step_hook_;  // guarded by mutex_
  // What the last whole preview took at that preview resolution on the shape model (the next
  // job's first estimate for JobOptions::preview_budget; reset when a shape model is installed).
  struct PreviewCost {
    int resolution = 0;
    double ms = 0.0;
  } preview_cost_;  // guarded by mutex_

  // Last: the lanes' workers start once everything above exists, and are joined first.
  std::unique_ptr<LaneWorker> texture_lane_;
  std::unique_ptr<LaneWorker> image_lane_;
  std::unique_ptr<LaneWorker> shape_lane_;
};

}  // namespace tessera::runtime
