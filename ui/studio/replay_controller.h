// ReplayController: watching a finished shape form again. Given the tokens a result was made from,
// it shows the mesh of the first k tokens for any k the artist scrubs to (0: nothing yet, N: the
// result itself), meshed as the live previews were (the runtime's replay jobs through
// EngineBridge::submit_replay, at the preview resolution), and plays them in order at a chosen
// speed. Meshes are cached, so scrubbing back and forth over what was seen is immediate; the
// prefixes not yet meshed are asked for in the order they will be needed (from the cursor on, then
// back), and a seek to one not meshed yet re-orders the request. The cache is bounded by memory
// (the meshes farthest from the cursor go first).
//
// No widgets: ReplayBar draws it, the main window shows its frames. UI thread only.
#pragma once

#include <QObject>
#include <QString>
#include <QTimer>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/mesh/mesh.h"

namespace tessera::studio {

class EngineBridge;

class ReplayController : public QObject {
  Q_OBJECT

 public:
  ReplayController(EngineBridge& engine, QObject* parent = nullptr);

  // Starts a replay of `tokens` (not empty) ending on `result` (the kept mesh), prefixes meshed at
  // `resolution` (2^k + 1). The cursor starts at the end (the result as it was shown), paused.
  void open(std::vector<int32_t> tokens, std::shared_ptr<const mesh::Mesh> result, int resolution);
  // Ends the replay (its job cancelled, its cache dropped).
  void close();
  bool active() const { return !tokens_.empty(); }
  int64_t length() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t position() const { return position_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Moves the cursor to token k (clamped to [0, length]) and shows its mesh, at once when cached,
  // else as soon as it is meshed.
  void seek(int64_t k);
  // Plays from the cursor to the end (from the start when at the end), a token every
  // 1 / speed seconds, waiting on prefixes not meshed yet; stops at the end.
  void play();
  void pause();
  bool playing() const { return timer_.isActive(); }
  // Tokens per second of playback (> 0). The default plays a whole shape in about 5 s.
  void set_speed(double tokens_per_second);
  double speed() const { return speed_; }
  double default_speed() const;
  // Prefixes meshed and kept (1..length-1; the ends need no meshing).
  int64_t cached() const { return static_cast<int64_t>(cache_.size()); }
  bool is_cached(int64_t k) const;
  // Bytes the cache may hold (default 512 MiB); tests lower it.
  void set_cache_limit(int64_t bytes) { cache_limit_ = bytes; }

 Q_SIGNALS:
  // The mesh of the first k tokens (null: none, k = 0 or no surface yet).
  void frame(qint64 k, std::shared_ptr<const tessera::mesh::Mesh> mesh);
  // Position, playing or cache changed (the bar redraws).
  void changed();
  void failed(const QString& message);

 private:
  void on_mesh(quint64 job, qint64 k, std::shared_ptr<const mesh::Mesh> mesh);
  void on_ended(quint64 job, bool ok, const QString& message);
  void tick();
  void show(int64_t k);
  // Asks for every prefix not cached, from the cursor on, then back (replacing the running ask).
  void request_missing();
  void trim_cache();

  EngineBridge& engine_;
  std::vector<int32_t> tokens_;
  std::shared_ptr<const mesh::Mesh> result_;
  int resolution_ = 0;
  int64_t position_ = 0;
  int64_t shown_ = -1;  // the k whose mesh is on screen (-1: none yet)
  double speed_ = 16.0;
  std::map<int64_t, std::shared_ptr<const mesh::Mesh>> cache_;
  int64_t cache_bytes_ = 0;
  int64_t cache_limit_ = int64_t{512} << 20;
  uint64_t job_ = 0;  // the running replay job (0: none)
  QTimer timer_;
};

}  // namespace tessera::studio
