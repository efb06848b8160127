// Session: a ShapePipeline on its own worker thread, fed jobs (prompt + options), reporting what
// happens as a stream of events that the UI or the CLI polls (or receives through a callback).
//
// Per job, in this order (every event carries the job's id):
//   Stage{"text"}, Stage{"prefill"} (condition projection + first step), Token{0..N-1} (with
//   PartialMesh after every `preview_every` tokens, decoded at `preview_resolution` from the prefix
//   filled with the model's fill token; a prefix whose field has no surface yet gives no preview),
//   Stage{"decode"} (all later steps), Stage{"latent_decode"}, Stage{"extraction"},
//   Stage{"cleanup"}, FinalMesh, and then exactly one terminal event: Done, Cancelled or Error.
//   A job that fails or is cancelled stops wherever it is and emits only its terminal event after
//   what it already reported. Stage ms are wall-clock milliseconds of that stage.
//
// Cancellation and replacement: cancel() cancels the running job and any queued one; submit()
// cancels the running job first, then queues the new one (a job still waiting in the queue is
// replaced and reports Cancelled without running). The worker checks the job's cancel flag before
// every token, between stages and before every batch of occupancy queries, so a cancel takes
// effect within one token step or one query batch. Every submitted job reports exactly one
// terminal event, and events of one job never interleave with those of another.
//
// Threads: submit/cancel/poll/wait_event may be called from any thread. With
// SessionOptions::on_event set, events are delivered by calling it on the worker thread (it must
// not call back into the Session's submit/cancel synchronously with a long wait, and must be
// thread-safe with respect to the caller's own state) and nothing is queued; otherwise they are
// queued for poll()/wait_event(). The destructor cancels everything and joins the worker.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "engine/core/status.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/mesh.h"
#include "engine/shape/pipeline.h"

namespace tessera::runtime {

struct JobOptions {
  std::string prompt;                   // UTF-8; "" is valid (the unconditional shape)
  shape::GenerationOptions generation;  // seed, sampling, guidance, bbox, KV cache, num_tokens
  shape::MeshOptions mesh;              // final mesh: resolution (2^k + 1), clean-up
  int64_t preview_every = 0;            // K: a PartialMesh every K tokens; 0: none
  int preview_resolution = 33;          // 2^k + 1, usually small (a preview costs a latent decode)
};

// Stage names of Stage events.
inline constexpr const char* kStageText = "text";
inline constexpr const char* kStagePrefill = "prefill";
inline constexpr const char* kStageDecode = "decode";
inline constexpr const char* kStageLatentDecode = "latent_decode";
inline constexpr const char* kStageExtraction = "extraction";
inline constexpr const char* kStageCleanup = "cleanup";

struct TokenEvent {
  int64_t index = 0;  // 0-based position in the shape sequence
  int32_t id = 0;     // code in [0, codebook_size)
  double ms = 0;      // time of that generation step
};
struct StageEvent {
  std::string name;  // one of kStage*
  double ms = 0;
};
struct PartialMeshEvent {
  int64_t tokens = 0;                      // prefix length it was decoded from
  std::shared_ptr<const mesh::Mesh> mesh;  // never null
};
struct FinalMeshEvent {
  std::shared_ptr<const mesh::Mesh> mesh;  // never null
  std::vector<int32_t> tokens;             // the generated shape tokens
  mesh::ExtractionStats extraction;
  int prompt_tokens = 0;  // CLIP tokens of the prompt (BOS/EOS included), before truncation
  bool prompt_truncated = false;
  int image_only_tokens = 0;  // colour / material / background words the shape model left out
};
struct ErrorEvent {
  Status status;  // never ok, never kCancelled
};
struct DoneEvent {
  double total_ms = 0;
};
struct CancelledEvent {
  std::string reason;
};

using EventPayload = std::variant<TokenEvent, StageEvent, PartialMeshEvent, FinalMeshEvent,
                                  ErrorEvent, DoneEvent, CancelledEvent>;

struct Event {
  uint64_t job = 0;  // id returned by submit()
  EventPayload payload;

  // Done, Cancelled or Error: the job's last event.
  bool terminal() const {
    return std::holds_alternative<DoneEvent>(payload) ||
           std::holds_alternative<CancelledEvent>(payload) ||
           std::holds_alternative<ErrorEvent>(payload);
  }
};

struct SessionOptions {
  // Called on the worker thread for every event instead of queueing it (may be empty).
  std::function<void(const Event&)> on_event;
};

class Session {
 public:
  // Takes the pipeline over (not null) and starts the worker thread.
  static std::unique_ptr<Session> create(std::unique_ptr<shape::ShapePipeline> pipeline,
                                         SessionOptions options = {});
  // ShapePipeline::load() on the calling thread, then create().
  static Expected<std::unique_ptr<Session>> open(
      const std::string& model_dir, const shape::PipelineOptions& pipeline_options = {},
      SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Queues a job, cancelling the running one (and replacing a queued one). Returns its id (> 0,
  // increasing). Options are checked when the job runs (errors arrive as an Error event).
  uint64_t submit(JobOptions job);
  // Cancels the running job and any queued one (each reports Cancelled). No-op when idle.
  void cancel();

  // Next queued event, if any (never blocks).
  std::optional<Event> poll();
  // Waits up to `timeout` for the next event.
  std::optional<Event> wait_event(std::chrono::milliseconds timeout);
  // True when no job is running or queued (its events may still be waiting in the queue). The
  // worker becomes idle just after emitting a job's terminal event, not atomically with it.
  bool idle() const;

  // The pipeline's model facts (immutable after load; safe from any thread).
  int64_t num_latents() const { return num_latents_; }
  int64_t codebook_size() const { return codebook_size_; }
  // The final-mesh resolution a job with mesh.resolution == 0 gets (ShapePipeline's).
  int default_resolution() const { return default_resolution_; }

 private:
  struct Job {
    uint64_t id = 0;
    JobOptions options;
    std::shared_ptr<std::atomic<bool>> cancel;
  };

  Session(std::unique_ptr<shape::ShapePipeline> pipeline, SessionOptions options);
  void worker_loop();
  void run_job(const Job& job);
  void emit(uint64_t job, EventPayload payload);

  std::unique_ptr<shape::ShapePipeline> pipeline_;  // used by the worker thread only
  SessionOptions options_;
  const int64_t num_latents_;
  const int64_t codebook_size_;
  const int default_resolution_;

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;   // worker waits for a job or stop
  std::condition_variable event_cv_;  // wait_event waits for an event
  std::optional<Job> pending_;        // guarded by mutex_
  // Jobs replaced or cancelled before they ran: the worker reports them Cancelled (so that every
  // event comes from the worker thread, in order). Guarded by mutex_.
  std::vector<std::pair<uint64_t, std::string>> dropped_;
  std::shared_ptr<std::atomic<bool>> running_cancel_;  // guarded by mutex_; null when none runs
  bool busy_ = false;         // guarded by mutex_: the worker is running or reporting
  uint64_t next_id_ = 1;      // guarded by mutex_
  bool stop_ = false;         // guarded by mutex_
  std::deque<Event> events_;  // guarded by mutex_
  std::thread worker_;        // last: started once everything above exists
};

}  // namespace tessera::runtime
