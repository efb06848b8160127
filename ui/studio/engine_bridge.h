// EngineBridge: the studio's only door to the engine. Owns the runtime::Session, loads model
// directories on a background thread, and turns the Session's worker-thread events into Qt
// signals on the UI thread.
//
// Threads: the Session calls its on_event callback on the worker thread; the callback only
// appends to a mutex-protected queue. A QTimer on the UI thread (~60 Hz) drains that queue, folds
// the events into a GenerationStats snapshot and emits signals. The UI thread therefore never
// waits on the engine, except when a Session is destroyed (switching models, closing): the
// destructor cancels the job, which takes effect within one token step, and joins the worker.
//
// Model loading: load_model() starts ShapePipeline::load on its own thread and reports
// modelLoaded or modelFailed (with the loader's message, which names the file and the problem).
// The previous model stays in use until a new one has loaded; only the newest request counts.
#pragma once

#include <QObject>
#include <QString>
#include <QTimer>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/mesh/mesh.h"
#include "engine/runtime/session.h"
#include "kernels/backend.h"
#include "ui/studio/generation_stats.h"

namespace tessera::studio {

// The default model directory and CLIP vocabulary fallback, like the CLI's: `assets_dir` is
// $TESSERA_ASSETS, else <exe>/../share/tessera/assets, else the source tree's assets/.
std::string default_model_dir(const std::string& assets_dir);

// True when this build has CUDA and a usable device (else the GPU choice is greyed out); `why`
// (may be null) receives the reason when it is false.
bool gpu_available(std::string* why);

class EngineBridge : public QObject {
  Q_OBJECT

 public:
  explicit EngineBridge(std::string assets_dir, QObject* parent = nullptr);
  ~EngineBridge() override;

  // Starts loading `dir` in the background (emits modelLoading now, then modelLoaded or
  // modelFailed). An empty `dir` fails with a message.
  void load_model(const QString& dir);
  // Where later loads run the model (studio --device; default the CPU).
  void set_device(kernels::DeviceChoice device) { device_ = device; }
  bool loading() const { return loading_; }
  bool has_model() const { return session_ != nullptr; }
  QString model_dir() const { return model_dir_; }
  QString backend_name() const { return backend_name_; }
  int64_t num_latents() const { return num_latents_; }
  int64_t codebook_size() const { return codebook_size_; }
  bool model_uses_bbox() const { return use_bbox_; }

  // Submits a job (cancelling the running one). Returns its id, or 0 when no model is loaded.
  uint64_t submit(const runtime::JobOptions& job);
  // Cancels the running job, if any.
  void cancel();
  // True from submit() until the current job's terminal event has been drained.
  bool busy() const { return stats_.state == JobState::kRunning; }
  const GenerationStats& stats() const { return stats_; }

  // Drains the event queue now (the timer calls it; tests may too).
  void drain();
  // Off (default): of the partial meshes drained together only the newest is emitted, and none
  // when the final mesh is among them (the viewport needs the latest shape only). On (the studio's
  // frame recording): every partial mesh is emitted, in order, so a recording holds each step of
  // the shape forming however the drains fall.
  void set_emit_every_partial(bool on) { emit_every_partial_ = on; }

 Q_SIGNALS:
  void modelLoading(const QString& dir);
  void modelLoaded(const QString& dir);
  void modelFailed(const QString& dir, const QString& message);
  // Newest partial mesh of the current job (older ones in the same drain are skipped).
  void partialMesh(std::shared_ptr<const tessera::mesh::Mesh> mesh, qint64 tokens);
  void finalMesh(std::shared_ptr<const tessera::mesh::Mesh> mesh);
  // The current job ended: state is kDone, kCancelled or kFailed; message says why for the last
  // two.
  void jobFinished(quint64 job, int state, const QString& message);
  // The stats snapshot changed (tokens, stages, state).
  void statsChanged();

 private:
  // Events tagged with the session generation that produced them: a new Session restarts job ids
  // at 1, so events of a replaced Session must not be mistaken for the new one's.
  struct Queue {
    std::mutex mutex;
    std::deque<std::pair<uint64_t, runtime::Event>> events;
  };

  void on_model_loaded(uint64_t serial, const QString& dir,
                       std::shared_ptr<std::unique_ptr<shape::ShapePipeline>> pipeline,
                       const QString& error);

  std::string assets_dir_;
  kernels::DeviceChoice device_ = kernels::DeviceChoice::kCpu;
  std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
  uint64_t session_generation_ = 0;
  std::unique_ptr<runtime::Session> session_;
  QString model_dir_, backend_name_;
  int64_t num_latents_ = 0, codebook_size_ = 0;
  bool use_bbox_ = false;
  bool loading_ = false;
  bool emit_every_partial_ = false;
  uint64_t load_serial_ = 0;
  std::vector<std::thread> loaders_;  // joined in the destructor
  GenerationStats stats_;
  QTimer drain_timer_;
};

}  // namespace tessera::studio
