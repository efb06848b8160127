#include "ui/studio/texture_bridge.h"

#include <utility>
#include <variant>

#include "ui/studio/engine_bridge.h"

namespace tessera::studio {

TextureBridge::TextureBridge(EngineBridge& engine, QObject* parent)
    : QObject(parent), engine_(engine) {
  engine_.set_lane_listener(runtime::Lane::kTexture,
                            [this](const runtime::Event& event) { on_event(event); });
}

TextureBridge::~TextureBridge() {
  engine_.set_lane_listener(runtime::Lane::kTexture, {});
}

uint64_t TextureBridge::apply(std::shared_ptr<const mesh::Mesh> mesh, mesh::TextureImage image,
                              const mesh::ProjectionOptions& projection) {
  runtime::TextureJobOptions job;
  job.mesh = mesh;
  job.image = std::make_shared<const mesh::TextureImage>(std::move(image));
  job.projection = projection;
  last_error_.clear();
  source_ = std::move(mesh);
  job_ = engine_.session().submit_texture(std::move(job));
  return job_;
}

void TextureBridge::on_event(const runtime::Event& event) {
  if (event.job != job_) return;
  if (const auto* t = std::get_if<runtime::TexturedMeshEvent>(&event.payload)) {
    Q_EMIT textured(source_, t->mesh, t->fitted_object);
  } else if (const auto* e = std::get_if<runtime::ErrorEvent>(&event.payload)) {
    last_error_ = QString::fromStdString(e->status.message());
    Q_EMIT failed(last_error_);
  }
  if (event.terminal()) {
    job_ = 0;
    source_.reset();
    Q_EMIT finished();
  }
}

}  // namespace tessera::studio
