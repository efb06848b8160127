// TextureBridge: the studio's texture lane, the third bridge beside EngineBridge (shape) and
// DiffusionBridge (image). It projects an image onto a mesh through the runtime's texture lane
// (engine/runtime/session.h submit_texture, mesh/texture.h) and reports the result as Qt signals
// on the UI thread. One projection at a time: a new one replaces the running one's result (only
// the newest job's events count).
//
// Threads: UI thread only; the Session's texture events reach it through EngineBridge's listener.
#pragma once

#include <QObject>
#include <QString>
#include <cstdint>
#include <memory>
#include <optional>

#include "engine/mesh/mesh.h"
#include "engine/mesh/texture.h"
#include "engine/runtime/events.h"

namespace tessera::studio {

class EngineBridge;

class TextureBridge : public QObject {
  Q_OBJECT

 public:
  // `engine` must outlive this bridge.
  explicit TextureBridge(EngineBridge& engine, QObject* parent = nullptr);
  ~TextureBridge() override;

  // Projects `image` onto `mesh` (not null, not empty) with `projection`. Returns the job id.
  uint64_t apply(std::shared_ptr<const mesh::Mesh> mesh, mesh::TextureImage image,
                 const mesh::ProjectionOptions& projection);
  bool busy() const { return job_ != 0; }
  uint64_t job() const { return job_; }
  // The last projection's failure ("" after a success or before any).
  const QString& last_error() const { return last_error_; }

 Q_SIGNALS:
  // The textured copy of `source` (the mesh given to apply()); `fitted` is the image rectangle
  // the object fit used, if any.
  void textured(std::shared_ptr<const tessera::mesh::Mesh> source,
                std::shared_ptr<const tessera::mesh::Mesh> textured,
                std::optional<tessera::mesh::ImageRect> fitted);
  void failed(const QString& message);
  // The job ended (after textured or failed, or cancelled).
  void finished();

 private:
  void on_event(const runtime::Event& event);

  EngineBridge& engine_;
  uint64_t job_ = 0;
  std::shared_ptr<const mesh::Mesh> source_;
  QString last_error_;
};

}  // namespace tessera::studio
