// ShapeController: the studio's shape lane. It owns what a shape job means to the artist: it
// starts jobs (the product's text rule first), keeps the last job (More like this continues it),
// every candidate's newest mesh, seed and tokens, which candidate is the current one, re-mesh jobs
// of the current shape, and the settings the shown shape's files carry. It reaches the engine
// through EngineBridge (the shape lane's bridge) and tells the window what to show through
// signals; the window only draws. The image and texture lanes have theirs (DiffusionBridge,
// TextureBridge). UI thread only.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/mesh/mesh.h"
#include "engine/runtime/session.h"
#include "engine/runtime/user_text.h"

namespace tessera::studio {

class EngineBridge;

class ShapeController : public QObject {
  Q_OBJECT

 public:
  explicit ShapeController(EngineBridge& engine, QObject* parent = nullptr);

  // Starts `job`, replacing the running one, after the product's text rule: the repairs made come
  // back (one note each). Errors: no model loaded (or still loading), a prompt the rule refuses;
  // nothing starts then.
  Expected<runtime::TextNotes> start(runtime::JobOptions job);
  // The last job's prompt and settings with the next seeds (S + V .. S + 2V - 1 after seeds
  // S .. S + V - 1), sampled with the product's defaults after a greedy job. kNotFound before a
  // first job.
  Expected<runtime::TextNotes> more_like_this();
  // Makes candidate i the current one; false when it has no mesh yet.
  bool choose(int i);
  // Meshes the current shape again from its tokens at `resolution` (2^k + 1), with `settings`'
  // clean-up, through a decode job. Errors: no model, no tokens (an opened file, a gallery item),
  // a bad resolution.
  Status remesh(int resolution, runtime::JobOptions settings);
  // The viewport shows something this controller did not make (an opened file, a gallery item):
  // no tokens to re-mesh, no settings for its files.
  void show_other();
  // The viewport shows a kept result (the library's): its tokens can be re-meshed (and replayed),
  // and its files carry `settings`, the ones it was kept with.
  void show_kept(const QString& prompt, std::vector<int32_t> tokens, nlohmann::json settings);

  bool has_last_job() const { return has_last_job_; }
  const runtime::JobOptions& last_job() const { return last_job_; }
  const QString& prompt() const { return prompt_; }  // the last job's, after the text rule
  int variations() const { return static_cast<int>(candidates_.size()); }
  int chosen() const { return chosen_; }
  struct Candidate {
    std::shared_ptr<const mesh::Mesh> mesh;  // newest: a preview, then the final mesh
    bool final = false;
    uint64_t seed = 0;
    std::vector<int32_t> tokens;  // once final
  };
  const Candidate& candidate(int i) const { return candidates_.at(static_cast<size_t>(i)); }
  // The current shape's tokens (empty: nothing to re-mesh).
  const std::vector<int32_t>& current_tokens() const { return current_tokens_; }
  bool remeshing() const { return remesh_job_ != 0; }
  // The settings the shown shape's files carry (runtime/provenance.h): the last job's with the
  // chosen candidate's seed and the shown resolution; null when the shown mesh is not a finished
  // shape of this session or the model cannot be identified.
  nlohmann::json shown_settings_json();
  // The settings candidate i's files carry (its seed, the job's final resolution); null when the
  // model cannot be identified.
  nlohmann::json candidate_settings_json(int i);

 Q_SIGNALS:
  // A job started: the window resets its grid (`variations` tiles from `first_seed`), progress
  // and token strip; `notes` are the text rule's repairs.
  void started(int variations, quint64 first_seed, const QStringList& notes);
  // The main viewport shows this now (the current candidate's newest mesh, or a re-mesh).
  void showMesh(std::shared_ptr<const tessera::mesh::Mesh> mesh);
  // Candidate 0's shape moved on: a preview from `tokens` tokens, or (`final`) its finished mesh
  // (the window frames the decoder's cube once per job, updates the status, records a frame).
  void previewed(qint64 tokens, bool final);
  // Candidate i's newest mesh, for its tile (jobs of several variations).
  void candidateMesh(int candidate, std::shared_ptr<const tessera::mesh::Mesh> mesh, bool final);
  // A finished result for the gallery: `candidate` >= 0 is a tile's (its thumbnail), -1 the main
  // viewport's (a single job or a re-mesh). `generated`: a candidate of a job (the library keeps
  // it), not a re-mesh.
  void result(const QString& label, std::shared_ptr<const tessera::mesh::Mesh> mesh, int candidate,
              bool generated);
  // What the controller offers changed (More like this, re-mesh, the chosen candidate).
  void changed();

 private:
  void on_partial(std::shared_ptr<const mesh::Mesh> mesh, qint64 tokens);
  void on_final(std::shared_ptr<const mesh::Mesh> mesh, std::vector<int32_t> tokens);
  void on_candidate_partial(int candidate, std::shared_ptr<const mesh::Mesh> mesh);
  void on_candidate_final(int candidate, quint64 seed, std::shared_ptr<const mesh::Mesh> mesh,
                          std::vector<int32_t> tokens);
  Candidate* slot(int i);

  EngineBridge& engine_;
  runtime::JobOptions last_job_;
  bool has_last_job_ = false;
  QString prompt_;
  std::vector<Candidate> candidates_;  // one per variation (one for a single job)
  int chosen_ = 0;
  std::vector<int32_t> current_tokens_;
  uint64_t remesh_job_ = 0;
  int remesh_resolution_ = 0;
  // What the viewport shows: a finished shape of last_job_ (candidate chosen_) at this final
  // resolution (0: the model's), or something else.
  bool shown_generated_ = false;
  nlohmann::json kept_settings_;  // a kept result's, while it is shown (null otherwise)
  int shown_resolution_ = 0;
};

}  // namespace tessera::studio
