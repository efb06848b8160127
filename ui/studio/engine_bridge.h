// EngineBridge: the studio's only door to the engine. Owns the one runtime::Session (both engines:
// shape and image lanes, engine/runtime/session.h), loads models through it, and turns its
// worker-thread events into Qt signals and snapshots on the UI thread. The image lane's events go
// to the listener DiffusionBridge registers; the shape lane's are folded here.
//
// Threads: the Session calls its on_event callback on its worker threads; the callback only
// appends to a mutex-protected queue. A QTimer on the UI thread (~60 Hz) drains that queue, folds
// the events into a GenerationStats snapshot and emits signals. The UI thread therefore never
// waits on the engine, except when the bridge is destroyed (closing): the Session's destructor
// cancels the jobs, which takes effect within one token or denoising step, and joins the workers.
//
// Model loading: load_model() is a job of the shape lane (modelLoaded or modelFailed, with the
// loader's message, which names the file and the problem). The previous model stays in use until
// a new one has loaded; only the newest request counts.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/mesh/mesh.h"
#include "engine/runtime/provenance.h"
#include "engine/runtime/session.h"
#include "ui/studio/generation_stats.h"

namespace tessera::studio {

class EngineBridge : public QObject {
  Q_OBJECT

 public:
  explicit EngineBridge(QObject* parent = nullptr);
  ~EngineBridge() override;

  // Starts loading `dir` in the background (emits modelLoading now, then modelLoaded or
  // modelFailed). An empty `dir` fails with a message.
  void load_model(const QString& dir);
  // Where later loads run the model (studio --device or the Settings' device; default the CPU).
  void set_device(runtime::DeviceChoice device) { device_ = device; }
  runtime::DeviceChoice device() const { return device_; }
  // The shape model's weights for later loads: "auto", "fast", "f32", "bf16" or "int8"
  // (runtime::ShapeWeights).
  void set_weights(const QString& weights) { weights_ = weights; }
  QString weights() const { return weights_; }
  // The loaded model's weights as the overlay shows them, e.g. "int8, 6.3 MB per token".
  QString weights_label() const { return weights_label_; }
  // The machine's devices and graphs (probed once, at construction).
  const runtime::Capabilities& capabilities() const { return capabilities_; }
  // Receives every event of `lane` (other than shape) on the UI thread, in order; empty: none.
  void set_lane_listener(runtime::Lane lane, std::function<void(const runtime::Event&)> listener);
  bool loading() const { return loading_; }
  bool has_model() const { return has_model_; }
  QString model_dir() const { return model_dir_; }
  QString backend_name() const { return backend_name_; }
  bool model_on_gpu() const { return on_gpu_; }
  bool model_can_record_graphs() const { return can_record_graphs_; }
  int64_t num_latents() const { return num_latents_; }
  int64_t codebook_size() const { return codebook_size_; }
  bool model_uses_bbox() const { return use_bbox_; }
  // Prompts the loaded model is known to answer (its model card's; empty without one).
  const QStringList& example_prompts() const { return example_prompts_; }
  // The loaded shape model's identity for a file's metadata (its folder name and the SHA-256 of
  // its GPT file; runtime/provenance.h), computed once per model; nullopt without a model or when
  // the file cannot be read.
  std::optional<runtime::ModelIdentity> model_identity();

  // Submits a job (cancelling the running one). Returns its id, or 0 when no model is loaded.
  uint64_t submit(const runtime::JobOptions& job);
  // Cancels the running job, if any.
  void cancel();
  // Replays `tokens` (runtime JobOptions::replay_prefixes): the meshes of `prefixes`, in that
  // order, at `resolution`, each as replayMesh, then replayEnded. It replaces the running shape job
  // and any earlier replay (the studio replays only when no generation runs) and leaves stats()
  // alone. Returns the job id (0: no model loaded).
  uint64_t submit_replay(const std::vector<int32_t>& tokens, std::vector<int64_t> prefixes,
                         int resolution);
  void cancel_replay();
  bool replaying() const { return replay_job_ != 0; }
  // True from submit() until the current job's terminal event has been drained.
  bool busy() const { return stats_.state == JobState::kRunning; }
  const GenerationStats& stats() const { return stats_; }

  // Drains the event queue now (the timer calls it; tests may too).
  void drain();
  // Off (default): of the partial meshes drained together only the newest is emitted, and none
  // when the final mesh is among them (the viewport needs the latest shape only). On (the studio's
  // frame recording): every partial mesh is emitted, in order, so a recording holds each step of
  // the shape forming however the drains fall, and jobs run with no preview budget
  // (JobOptions::preview_budget 1: every due preview).
  void set_emit_every_partial(bool on) { emit_every_partial_ = on; }

 Q_SIGNALS:
  void modelLoading(const QString& dir);
  void modelLoaded(const QString& dir);
  void modelFailed(const QString& dir, const QString& message);
  // Newest partial mesh of the current job (older ones in the same drain are skipped).
  void partialMesh(std::shared_ptr<const tessera::mesh::Mesh> mesh, qint64 tokens);
  // With its shape tokens (candidate 0's with variations; the given ones for a decode job).
  void finalMesh(std::shared_ptr<const tessera::mesh::Mesh> mesh, std::vector<int32_t> tokens);
  // Jobs of several variations: partialMesh / finalMesh above carry candidate 0 (the current mesh
  // by default); these carry every candidate, each partial mesh in order (for the candidate grid).
  void candidatePartialMesh(int candidate, std::shared_ptr<const tessera::mesh::Mesh> mesh,
                            qint64 tokens);
  void candidateFinalMesh(int candidate, quint64 seed,
                          std::shared_ptr<const tessera::mesh::Mesh> mesh,
                          std::vector<int32_t> tokens);
  // A replay's mesh of its first `tokens` tokens (empty: no surface yet), and its end.
  void replayMesh(quint64 job, qint64 tokens, std::shared_ptr<const tessera::mesh::Mesh> mesh);
  void replayEnded(quint64 job, bool ok, const QString& message);
  // The current job ended: state is kDone, kCancelled or kFailed; message says why for the last
  // two.
  void jobFinished(quint64 job, int state, const QString& message);
  // The stats snapshot changed (tokens, stages, state).
  void statsChanged();

 private:
  // The one Session (both engines), for the other lanes' bridges only: the window and its
  // controllers never reach around the bridges.
  friend class DiffusionBridge;
  friend class TextureBridge;
  runtime::Session& session() { return *session_; }

  struct Queue {
    std::mutex mutex;
    std::deque<runtime::Event> events;
  };
  void on_shape_event(const runtime::Event& event, bool* changed,
                      const runtime::PartialMeshEvent** newest_partial);

  runtime::Capabilities capabilities_;
  runtime::DeviceChoice device_ = runtime::DeviceChoice::kCpu;
  QString weights_ = QStringLiteral("auto");
  QString weights_label_;
  std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
  std::function<void(const runtime::Event&)> image_listener_, texture_listener_;
  QString model_dir_, loading_dir_, backend_name_;
  int64_t num_latents_ = 0, codebook_size_ = 0;
  bool use_bbox_ = false, on_gpu_ = false, can_record_graphs_ = false;
  QStringList example_prompts_;
  std::optional<runtime::ModelIdentity> model_identity_;  // of the loaded model, once computed
  bool has_model_ = false;
  bool loading_ = false;
  bool emit_every_partial_ = false;
  uint64_t load_job_ = 0;
  uint64_t replay_job_ = 0;  // the running replay (0: none)
  GenerationStats stats_;
  QTimer drain_timer_;
  std::unique_ptr<runtime::Session> session_;  // last: destroyed (workers joined) first
};

}  // namespace tessera::studio
