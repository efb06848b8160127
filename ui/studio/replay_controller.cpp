#include "ui/studio/replay_controller.h"

#include <algorithm>
#include <cstdlib>

#include "ui/studio/engine_bridge.h"

namespace tessera::studio {

namespace {

int64_t mesh_bytes(const mesh::Mesh& m) {
  return static_cast<int64_t>((m.positions.size() + m.normals.size() + m.uvs.size()) *
                                  sizeof(float) +
                              m.triangles.size() * sizeof(uint32_t));
}

}  // namespace

ReplayController::ReplayController(EngineBridge& engine, QObject* parent)
    : QObject(parent), engine_(engine) {
  connect(&engine_, &EngineBridge::replayMesh, this, &ReplayController::on_mesh);
  connect(&engine_, &EngineBridge::replayEnded, this, &ReplayController::on_ended);
  connect(&timer_, &QTimer::timeout, this, &ReplayController::tick);
}

double ReplayController::default_speed() const {
  // A whole shape in about 5 s, never slower than 4 tokens a second.
  return std::max(4.0, static_cast<double>(length()) / 5.0);
}

void ReplayController::open(std::vector<int32_t> tokens, std::shared_ptr<const mesh::Mesh> result,
                            int resolution) {
  close();
  tokens_ = std::move(tokens);
  result_ = std::move(result);
  resolution_ = resolution;
  position_ = length();
  speed_ = default_speed();
  shown_ = length();  // the result is what is on screen
  Q_EMIT changed();
}

void ReplayController::close() {
  timer_.stop();
  if (job_ != 0) engine_.cancel_replay();
  job_ = 0;
  tokens_.clear();
  result_.reset();
  cache_.clear();
  cache_bytes_ = 0;
  position_ = 0;
  shown_ = -1;
  Q_EMIT changed();
}

bool ReplayController::is_cached(int64_t k) const {
  return k <= 0 || k >= length() || cache_.count(k) != 0;
}

void ReplayController::set_speed(double tokens_per_second) {
  if (!(tokens_per_second > 0)) return;
  speed_ = tokens_per_second;
  if (timer_.isActive()) timer_.start(static_cast<int>(std::max(1.0, 1000.0 / speed_)));
  Q_EMIT changed();
}

void ReplayController::seek(int64_t k) {
  if (!active()) return;
  position_ = std::clamp<int64_t>(k, 0, length());
  if (is_cached(position_)) {
    show(position_);
  } else if (job_ == 0 || !playing()) {
    // Re-order the ask so that this prefix comes first (a play in progress already asks in order).
    request_missing();
  }
  Q_EMIT changed();
}

void ReplayController::play() {
  if (!active()) return;
  if (position_ >= length()) seek(0);
  timer_.start(static_cast<int>(std::max(1.0, 1000.0 / speed_)));
  if (job_ == 0) request_missing();
  Q_EMIT changed();
}

void ReplayController::pause() {
  timer_.stop();
  Q_EMIT changed();
}

void ReplayController::tick() {
  if (!active() || position_ >= length()) {
    pause();
    return;
  }
  // Waits on a prefix still being meshed rather than skipping it: every step is seen.
  if (!is_cached(position_ + 1)) {
    if (job_ == 0) request_missing();
    return;
  }
  ++position_;
  show(position_);
  if (position_ >= length()) timer_.stop();
  Q_EMIT changed();
}

void ReplayController::show(int64_t k) {
  if (k == shown_) return;
  shown_ = k;
  if (k <= 0) {
    Q_EMIT frame(0, nullptr);
  } else if (k >= length()) {
    Q_EMIT frame(length(), result_);
  } else {
    const auto& m = cache_.at(k);
    Q_EMIT frame(k, m->triangle_count() > 0 ? m : nullptr);
  }
}

void ReplayController::request_missing() {
  std::vector<int64_t> order;
  for (int64_t k = std::max<int64_t>(position_, 1); k < length(); ++k) {
    if (!cache_.count(k)) order.push_back(k);
  }
  for (int64_t k = std::min(position_, length()) - 1; k >= 1; --k) {
    if (!cache_.count(k)) order.push_back(k);
  }
  if (order.empty()) {
    if (job_ != 0) engine_.cancel_replay();
    job_ = 0;
    return;
  }
  job_ = engine_.submit_replay(tokens_, std::move(order), resolution_);
  if (job_ == 0) Q_EMIT failed(tr("No model is loaded: the replay cannot mesh the tokens"));
}

void ReplayController::on_mesh(quint64 job, qint64 k, std::shared_ptr<const mesh::Mesh> mesh) {
  if (job != job_ || !active() || k < 1 || k >= length() || !mesh) return;
  if (cache_.emplace(k, mesh).second) cache_bytes_ += mesh_bytes(*mesh);
  trim_cache();
  if (k == position_) show(k);
  Q_EMIT changed();
}

void ReplayController::on_ended(quint64 job, bool ok, const QString& message) {
  if (job != job_) return;
  job_ = 0;
  if (!ok && !message.isEmpty()) {
    pause();
    Q_EMIT failed(message);
  }
  Q_EMIT changed();
}

void ReplayController::trim_cache() {
  while (cache_bytes_ > cache_limit_ && cache_.size() > 1) {
    // The prefix farthest from the cursor goes first.
    auto far = cache_.begin();
    if (std::llabs(std::prev(cache_.end())->first - position_) > std::llabs(far->first - position_))
      far = std::prev(cache_.end());
    if (far->first == position_) break;
    cache_bytes_ -= mesh_bytes(*far->second);
    cache_.erase(far);
  }
}

}  // namespace tessera::studio
