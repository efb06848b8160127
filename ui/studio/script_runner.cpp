// ScriptRunner (ui/studio/script_runner.h): scripted mode.
#include "ui/studio/script_runner.h"

#include <QCoreApplication>
#include <QImage>
#include <QTimer>
#include <cstdio>

#include "ui/studio/diffusion_bridge.h"
#include "ui/studio/engine_bridge.h"
#include "ui/studio/generation_controller.h"
#include "ui/studio/image_controller.h"
#include "ui/studio/import_export_controller.h"
#include "ui/studio/launch_options.h"
#include "ui/studio/texture_bridge.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

ScriptRunner::ScriptRunner(ScriptedParts parts, const LaunchOptions& launch, QObject* parent)
    : QObject(parent), parts_(std::move(parts)), launch_(launch) {
  EngineBridge& engine = *parts_.engine;
  connect(&engine, &EngineBridge::modelLoaded, this, &ScriptRunner::on_model_loaded);
  connect(&engine, &EngineBridge::modelFailed, this, &ScriptRunner::on_model_failed);
  connect(&engine, &EngineBridge::jobFinished, this,
          [this](quint64, int state, const QString& message) { on_job_finished(state, message); });
  connect(&parts_.image->diffusion(), &DiffusionBridge::modelStateChanged, this,
          &ScriptRunner::advance_image);
  connect(&parts_.image->diffusion(), &DiffusionBridge::imageFinished, this,
          &ScriptRunner::advance_image);
  connect(&parts_.image->texture(), &TextureBridge::finished, this, &ScriptRunner::advance_image);
}

void ScriptRunner::on_model_loaded() {
  if (started_) return;
  started_ = true;
  if (!launch_.generate) {
    QTimer::singleShot(100, this, [this] { finish(0, QString()); });
    return;
  }
  // Start once the window is up and the viewport has drawn a few frames (GL set-up and the first
  // composition are slow on software GL and are not the generation's cost).
  auto* waiter = new QObject(this);
  connect(parts_.viewport, &Viewport::frameRendered, waiter, [this, waiter] {
    if (parts_.viewport->frames() < 3 || waiter->property("fired").toBool()) return;
    waiter->setProperty("fired", true);
    waiter->deleteLater();
    QTimer::singleShot(0, this, [this] { parts_.generation->generate(); });
  });
}

void ScriptRunner::on_model_failed(const QString& dir, const QString& message) {
  if (started_) return;
  started_ = true;
  finish(1, tr("model %1: %2").arg(dir, message));
}

void ScriptRunner::on_job_finished(int state, const QString& message) {
  if (!started_ || done_ || parts_.engine->busy()) return;
  const auto job_state = static_cast<JobState>(state);
  if (job_state == JobState::kDone && (launch_.image || launch_.apply_texture || launch_.paint)) {
    shape_done_ = true;
    advance_image();
  } else {
    finish(job_state == JobState::kDone ? 0 : 1,
           job_state == JobState::kDone ? QString() : message);
  }
}

void ScriptRunner::advance_image() {
  if (done_ || !shape_done_) return;
  DiffusionBridge& diffusion = parts_.image->diffusion();
  switch (diffusion.model_state()) {
    case DiffusionModelState::kLoading:
      return;  // modelStateChanged calls again
    case DiffusionModelState::kMissing:
    case DiffusionModelState::kFailed:
      finish(1, tr("concept image: %1").arg(diffusion.model_message()));
      return;
    case DiffusionModelState::kReady:
      break;
  }
  if (launch_.paint) {
    if (!paint_submitted_) {
      paint_submitted_ = true;
      if (launch_.paint_views > 0) parts_.image->settings().paint_views = launch_.paint_views;
      if (Status st = parts_.image->paint_mesh(); !st.ok()) {
        finish(1, tr("paint: %1").arg(QString::fromStdString(st.message())));
      }
      return;  // imageFinished calls again
    }
    const ImageJobState& p = diffusion.state();
    if (p.state == JobState::kRunning) return;
    if (p.state != JobState::kDone) {
      finish(1, tr("paint %1: %2").arg(QString::fromLatin1(job_state_name(p.state)), p.message));
    } else {
      finish(0, QString());
    }
    return;
  }
  if (diffusion.state().job == 0) {  // not submitted with the shape (the model was loading)
    parts_.image->generate();
    return;
  }
  const ImageJobState& s = diffusion.state();
  if (s.state == JobState::kRunning) return;  // imageFinished calls again
  if (s.state != JobState::kDone) {
    finish(1,
           tr("concept image %1: %2").arg(QString::fromLatin1(job_state_name(s.state)), s.message));
    return;
  }
  if (launch_.apply_texture) {
    if (!texture_submitted_) {
      texture_submitted_ = true;
      if (Status st = parts_.image->apply_as_texture(); !st.ok()) {
        finish(1, tr("apply texture: %1").arg(QString::fromStdString(st.message())));
      }
      return;  // the texture bridge's finished() calls again
    }
    if (parts_.image->texture().busy()) return;
    if (!parts_.image->texture().last_error().isEmpty()) {
      finish(1, tr("apply texture: %1").arg(parts_.image->texture().last_error()));
      return;
    }
  }
  finish(0, QString());
}

void ScriptRunner::finish(int code, const QString& message) {
  if (done_) return;
  done_ = true;
  if (!message.isEmpty()) std::fprintf(stderr, "tessera-studio: %s\n", qPrintable(message));
  if (!launch_.export_path.isEmpty() && code == 0) {
    if (Status st = parts_.files->export_mesh(launch_.export_path, {}); !st.ok()) {
      std::fprintf(stderr, "tessera-studio: export: %s\n", st.message().c_str());
      code = 1;
    }
  }
  if (!launch_.screenshot.isEmpty()) {
    const QImage shot = parts_.screenshot();
    if (shot.isNull() || !shot.save(launch_.screenshot)) {
      std::fprintf(stderr, "tessera-studio: cannot write the screenshot %s\n",
                   qPrintable(launch_.screenshot));
      code = 1;
    }
  }
  if (launch_.paint) {
    const ImageJobState& p = parts_.image->diffusion().state();
    const auto shown = parts_.viewport->mesh();
    std::printf(
        "paint %s: %zu views, %zu steps, coverage %.1f %%, seams %.1f; mesh uvs %zu, "
        "texture %lldx%lld\n",
        job_state_name(p.state), p.views.size(), p.step_ms.size(), 100 * p.coverage, p.seam_mean,
        shown ? shown->uvs.size() / 2 : 0, static_cast<long long>(shown ? shown->texture.width : 0),
        static_cast<long long>(shown ? shown->texture.height : 0));
  }
  if (launch_.image || launch_.apply_texture) {
    const ImageJobState& img = parts_.image->diffusion().state();
    const auto shown = parts_.viewport->mesh();
    std::printf(
        "image %s: %zu steps, %.1f ms total, denoise %.1f ms, %lldx%lld, seed %llu; "
        "mesh uvs %zu, texture %lldx%lld\n",
        job_state_name(img.state), img.step_ms.size(), img.total_ms, img.denoise_ms,
        static_cast<long long>(img.image_final ? img.image_width : 0),
        static_cast<long long>(img.image_final ? img.image_height : 0),
        static_cast<unsigned long long>(img.seed), shown ? shown->uvs.size() / 2 : 0,
        static_cast<long long>(shown ? shown->texture.width : 0),
        static_cast<long long>(shown ? shown->texture.height : 0));
  }
  if (launch_.generate) {
    const GenerationStats& s = parts_.engine->stats();
    char first_preview[64] = "no preview";  // none fitted the budget (tessera-tiny: common)
    if (s.first_partial_ms >= 0) {
      std::snprintf(first_preview, sizeof first_preview, "first preview %.0f ms",
                    s.first_partial_ms);
    }
    std::printf(
        "job %s: %lld tokens, %lld vertices, %lld triangles, %s, %lld viewport frames, max "
        "frame gap %.1f ms\n",
        job_state_name(s.state), static_cast<long long>(s.token_ms.size()),
        static_cast<long long>(s.final_vertices), static_cast<long long>(s.final_triangles),
        first_preview, static_cast<long long>(parts_.generation->last_job_frames()),
        parts_.generation->last_job_max_frame_gap_ms());
    std::fflush(stdout);
  }
  Q_EMIT finished(code);
  if (launch_.quit_when_done) {
    QTimer::singleShot(0, qApp, [code] { QCoreApplication::exit(code); });
  }
}

}  // namespace tessera::studio
