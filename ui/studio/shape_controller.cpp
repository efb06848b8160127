#include "ui/studio/shape_controller.h"

#include <algorithm>
#include <utility>

#include "engine/runtime/provenance.h"
#include "ui/studio/engine_bridge.h"

namespace tessera::studio {

ShapeController::ShapeController(EngineBridge& engine, QObject* parent)
    : QObject(parent), engine_(engine) {
  connect(&engine_, &EngineBridge::partialMesh, this, &ShapeController::on_partial);
  connect(&engine_, &EngineBridge::finalMesh, this, &ShapeController::on_final);
  connect(&engine_, &EngineBridge::candidatePartialMesh, this,
          [this](int candidate, std::shared_ptr<const mesh::Mesh> mesh, qint64) {
            on_candidate_partial(candidate, std::move(mesh));
          });
  connect(&engine_, &EngineBridge::candidateFinalMesh, this, &ShapeController::on_candidate_final);
  connect(&engine_, &EngineBridge::jobFinished, this, [this](quint64 job, int, const QString&) {
    // A re-mesh that did not finish (cancelled, failed) leaves the shown mesh as it was.
    if (job == remesh_job_) {
      remesh_job_ = 0;
      Q_EMIT changed();
    }
  });
}

Expected<runtime::TextNotes> ShapeController::start(runtime::JobOptions job) {
  if (!engine_.has_model()) {
    return not_found(engine_.loading() ? "the model is still loading" : "no model is loaded");
  }
  // The studio's door for every shape job (Generate, More like this, a script): the sampling
  // settings checked as every front end checks them.
  TESSERA_RETURN_IF_ERROR(check_sampling(job.generation.sampling));
  TESSERA_ASSIGN_OR_RETURN(runtime::TextNotes notes, runtime::accept_job_text(&job));
  prompt_ = QString::fromStdString(job.prompt);
  last_job_ = job;
  has_last_job_ = true;
  chosen_ = 0;
  candidates_.assign(static_cast<size_t>(std::max(job.variations, 1)), Candidate{});
  for (size_t i = 0; i < candidates_.size(); ++i) {
    candidates_[i].seed = job.generation.sampling.seed + i;
  }
  current_tokens_.clear();
  shown_generated_ = false;
  kept_settings_ = nullptr;
  remesh_job_ = 0;
  engine_.submit(job);
  QStringList shown_notes;
  for (const std::string& note : notes) shown_notes << QString::fromStdString(note);
  Q_EMIT started(job.variations, job.generation.sampling.seed, shown_notes);
  Q_EMIT changed();
  return notes;
}

Expected<runtime::TextNotes> ShapeController::more_like_this() {
  if (!has_last_job_) return not_found("no shape has been generated yet");
  runtime::JobOptions job = last_job_;
  SamplingSettings& sampling = job.generation.sampling;
  // After a greedy job: sample around it with the product's defaults.
  if (!sampling.sample) sampling = runtime::sampled_with_defaults(sampling);
  sampling.seed += static_cast<uint64_t>(std::max(job.variations, 1));
  return start(std::move(job));
}

bool ShapeController::choose(int i) {
  if (candidates_.size() <= 1 || i < 0 || i >= variations()) return false;
  const Candidate& c = candidates_[static_cast<size_t>(i)];
  if (!c.mesh) return false;
  chosen_ = i;
  current_tokens_ = c.tokens;
  shown_generated_ = c.final;
  kept_settings_ = nullptr;
  shown_resolution_ = last_job_.mesh.resolution;
  Q_EMIT showMesh(c.mesh);
  Q_EMIT changed();
  return true;
}

Status ShapeController::remesh(int resolution, runtime::JobOptions settings) {
  if (!engine_.has_model()) return not_found("no model loaded");
  if (current_tokens_.empty()) {
    return invalid_argument(
        "the current mesh has no shape tokens (re-mesh works on shapes generated in this session)");
  }
  if (auto k = runtime::resolution_base(resolution); !k.ok()) return k.status();
  settings.prompt = prompt_.toStdString();
  settings.tokens = current_tokens_;
  settings.variations = 1;
  settings.mesh.resolution = resolution;
  settings.preview_every = 0;
  remesh_resolution_ = resolution;
  remesh_job_ = engine_.submit(settings);
  Q_EMIT changed();
  return Status();
}

void ShapeController::show_other() {
  current_tokens_.clear();
  shown_generated_ = false;
  kept_settings_ = nullptr;
  Q_EMIT changed();
}

void ShapeController::show_kept(const QString& prompt, std::vector<int32_t> tokens,
                                nlohmann::json settings) {
  prompt_ = prompt;
  current_tokens_ = std::move(tokens);
  shown_generated_ = false;
  kept_settings_ = std::move(settings);
  Q_EMIT changed();
}

nlohmann::json ShapeController::shown_settings_json() {
  if (!kept_settings_.is_null()) return kept_settings_;
  if (!shown_generated_ || !has_last_job_) return nullptr;
  const std::optional<runtime::ModelIdentity> identity = engine_.model_identity();
  if (!identity) return nullptr;
  const uint64_t seed = last_job_.generation.sampling.seed + static_cast<uint64_t>(chosen_);
  return runtime::shape_settings_json(last_job_, seed, shown_resolution_, identity->name,
                                      identity->gpt_sha256);
}

nlohmann::json ShapeController::candidate_settings_json(int i) {
  if (!has_last_job_) return nullptr;
  const std::optional<runtime::ModelIdentity> identity = engine_.model_identity();
  if (!identity) return nullptr;
  const uint64_t seed = last_job_.generation.sampling.seed + static_cast<uint64_t>(std::max(i, 0));
  return runtime::shape_settings_json(last_job_, seed, last_job_.mesh.resolution, identity->name,
                                      identity->gpt_sha256);
}

ShapeController::Candidate* ShapeController::slot(int i) {
  if (i < 0 || i >= variations()) return nullptr;
  return &candidates_[static_cast<size_t>(i)];
}

void ShapeController::on_partial(std::shared_ptr<const mesh::Mesh> mesh, qint64 tokens) {
  // Candidate 0's newest preview; with variations its tile follows from on_candidate_partial.
  if (variations() == 1) candidates_[0].mesh = mesh;
  if (chosen_ == 0) Q_EMIT showMesh(std::move(mesh));
  Q_EMIT previewed(tokens, false);
}

void ShapeController::on_final(std::shared_ptr<const mesh::Mesh> mesh,
                               std::vector<int32_t> tokens) {
  if (remesh_job_ != 0 && engine_.stats().job == remesh_job_) {
    // A re-mesh: the shown shape at a finer lattice becomes the current mesh (and its tile's).
    remesh_job_ = 0;
    shown_resolution_ = remesh_resolution_;
    if (kept_settings_.is_null()) {  // a kept result is no candidate of the last job
      if (Candidate* c = slot(chosen_)) c->mesh = mesh;
      if (variations() > 1) Q_EMIT candidateMesh(chosen_, mesh, true);
    }
    Q_EMIT showMesh(mesh);
    Q_EMIT result(tr("%1 (%2)").arg(prompt_, QString::number(remesh_resolution_) + QChar(0x00b3)),
                  std::move(mesh), -1, false);
    Q_EMIT changed();
    return;
  }
  if (candidates_.empty()) candidates_.resize(1);
  Candidate& first = candidates_[0];
  first.tokens = tokens;
  if (variations() == 1) {
    first.mesh = mesh;
    first.final = true;
  }
  if (chosen_ == 0) {
    current_tokens_ = std::move(tokens);
    shown_generated_ = true;
    shown_resolution_ = last_job_.mesh.resolution;
    Q_EMIT showMesh(mesh);
  }
  Q_EMIT previewed(0, true);
  // Variations go to the gallery from their tiles (on_candidate_final), candidate 0 included.
  if (variations() == 1) Q_EMIT result(prompt_, std::move(mesh), -1, true);
  Q_EMIT changed();
}

void ShapeController::on_candidate_partial(int candidate, std::shared_ptr<const mesh::Mesh> mesh) {
  Candidate* c = slot(candidate);
  if (c == nullptr) return;
  c->mesh = mesh;
  c->final = false;
  if (candidate == chosen_ && candidate != 0) Q_EMIT showMesh(mesh);
  Q_EMIT candidateMesh(candidate, std::move(mesh), false);
}

void ShapeController::on_candidate_final(int candidate, quint64 seed,
                                         std::shared_ptr<const mesh::Mesh> mesh,
                                         std::vector<int32_t> tokens) {
  Candidate* c = slot(candidate);
  if (c == nullptr) return;
  c->mesh = mesh;
  c->final = true;
  c->seed = seed;
  c->tokens = tokens;
  if (candidate == chosen_) {
    current_tokens_ = std::move(tokens);
    shown_generated_ = true;
    shown_resolution_ = last_job_.mesh.resolution;
    if (candidate != 0) Q_EMIT showMesh(mesh);
  }
  Q_EMIT candidateMesh(candidate, mesh, true);
  Q_EMIT result(tr("%1 (seed %2)").arg(prompt_).arg(seed), std::move(mesh), candidate, true);
  Q_EMIT changed();
}

}  // namespace tessera::studio
