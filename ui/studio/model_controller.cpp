#include "ui/studio/model_controller.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QTimer>
#include <string>

#include "engine/runtime/models.h"
#include "ui/studio/diffusion_bridge.h"
#include "ui/studio/engine_bridge.h"
#include "ui/studio/models_dialog.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/studio_text.h"

namespace tessera::studio {

ModelController::ModelController(EngineBridge& engine, DiffusionBridge& diffusion, ModelViews views,
                                 QObject* parent)
    : QObject(parent), engine_(engine), diffusion_(diffusion), views_(views) {
  overlay_controls_.on_change = [this] {
    // Called inside the viewport's paintGL: act after the frame.
    QTimer::singleShot(0, this, [this] {
      views_.settings->set_kv_cache(overlay_controls_.kv_cache);
      views_.settings->set_graphs(overlay_controls_.graphs);
    });
  };
  connect(&engine_, &EngineBridge::modelLoading, this, &ModelController::on_loading);
  connect(&engine_, &EngineBridge::modelLoaded, this, &ModelController::on_loaded);
  connect(&engine_, &EngineBridge::modelFailed, this, &ModelController::on_failed);
}

void ModelController::choose_model_dir() {
  const QString dir = QFileDialog::getExistingDirectory(views_.dialog_parent, tr("Model directory"),
                                                        views_.path->text());
  if (!dir.isEmpty()) load_model(dir);
}

void ModelController::load_model(const QString& dir) {
  views_.path->setText(dir);
  engine_.load_model(dir);
}

void ModelController::report_missing(const QString& dir, const QString& message) {
  views_.path->setText(dir);
  views_.state->setText(message);
  views_.state->setStyleSheet(QStringLiteral("color: #d05050;"));
  Q_EMIT status(message, true);
}

QString ModelController::state_text() const {
  return views_.state->text();
}

void ModelController::on_loading(const QString& dir) {
  views_.state->setStyleSheet(QString());
  views_.state->setText(tr("Loading %1 ...").arg(dir));
  Q_EMIT status(tr("Loading model %1 ...").arg(dir), false);
}

void ModelController::on_loaded(const QString& dir) {
  views_.state->setStyleSheet(QStringLiteral("color: #40a040;"));
  views_.state->setText(tr("Loaded: %1 tokens per shape, codebook %2, %3 bounding box; %4; "
                           "weights %5")
                            .arg(engine_.num_latents())
                            .arg(engine_.codebook_size())
                            .arg(engine_.model_uses_bbox() ? tr("with") : tr("no"))
                            .arg(engine_.backend_name(), engine_.weights_label()));
  views_.status_name->setText(tr("Model: %1").arg(QFileInfo(dir).fileName()));
  views_.status_name->setToolTip(dir);
  views_.settings->set_model_facts(engine_.num_latents(), engine_.codebook_size(),
                                   engine_.model_uses_bbox());
  sync_overlay_controls();
  Q_EMIT loaded(dir);
}

QString ModelController::ready_text(const QString& dir) const {
  QString ready =
      engine_.example_prompts().isEmpty()
          ? tr("Model ready. Type a prompt and press Ctrl+Enter.")
          : tr("Model ready. Type a prompt and press Ctrl+Enter, or pick one under Examples.");
  // First run with the embedded model only: say where the real ones are.
  if (QFileInfo(dir) == QFileInfo(QString::fromStdString(runtime::default_shape_model_dir()))) {
    bool real_here = false;
    for (const runtime::KnownModel& m : runtime::known_models()) {
      auto cached = runtime::find_cached_model(m.name);
      real_here |= m.kind == runtime::ModelKind::kShape && cached.ok() && cached->complete();
    }
    if (!real_here) ready += tr(" The real Cube 3D models: File > Models.");
  }
  return ready;
}

void ModelController::on_failed(const QString& dir, const QString& message) {
  views_.state->setStyleSheet(QStringLiteral("color: #d05050;"));
  views_.state->setText(tr("Not a usable model directory: %1").arg(message));
  Q_EMIT status(
      tr("Model %1 failed to load: %2%3")
          .arg(dir, one_line(message, 120),
               engine_.has_model() ? tr(" (still using %1)").arg(engine_.model_dir()) : QString()),
      true);
  Q_EMIT changed();
}

void ModelController::set_device(runtime::DeviceChoice device) {
  engine_.set_device(device);
  const QString dir = views_.path->text().trimmed();
  if (!dir.isEmpty()) load_model(dir);
  if (diffusion_.model_state() == DiffusionModelState::kReady ||
      diffusion_.model_state() == DiffusionModelState::kFailed) {
    diffusion_.load_model(diffusion_.model_path(), device);
  }
  Q_EMIT status(tr("Device: %1; reloading the models").arg(runtime::device_name(device)), false);
}

void ModelController::set_weights(const QString& weights) {
  engine_.set_weights(weights);
  const QString dir = views_.path->text().trimmed();
  if (!dir.isEmpty()) load_model(dir);
  Q_EMIT status(tr("Weights: %1; reloading the shape model").arg(weights), false);
}

void ModelController::sync_overlay_controls() {
  const runtime::Capabilities& caps = engine_.capabilities();
  overlay_controls_.kv_cache = views_.settings->kv_cache();
  overlay_controls_.graphs = views_.settings->graphs();
  overlay_controls_.graphs_available = engine_.has_model() && engine_.model_can_record_graphs();
  overlay_controls_.graphs_reason =
      engine_.has_model() && !engine_.model_can_record_graphs()
          ? "the model runs on " + engine_.backend_name().toStdString() +
                ": graphs are recorded by the CUDA backend" +
                (caps.cuda.usable ? std::string(" (choose the GPU in Settings)")
                                  : "; " + caps.decode_graphs_reason)
          : caps.decode_graphs_reason;
  overlay_controls_.on_gpu = engine_.model_on_gpu();
  overlay_controls_.device =
      engine_.has_model() ? engine_.backend_name().toStdString() : std::string("(no model)");
  overlay_controls_.model = engine_.has_model()
                                ? runtime::describe_model_path(engine_.model_dir().toStdString())
                                : std::string();
}

ModelsDialog& ModelController::models_dialog() {
  if (models_ == nullptr) {
    models_ = new ModelsDialog(views_.dialog_parent);
    connect(models_, &ModelsDialog::useModel, this, [this](const QString& name) {
      load_model(name);
      models_->hide();
    });
    connect(
        models_, &ModelsDialog::downloadFinished, this,
        [this](const QString&, bool ok, const QString& message) { Q_EMIT status(message, !ok); });
  }
  models_->refresh();
  return *models_;
}

}  // namespace tessera::studio
