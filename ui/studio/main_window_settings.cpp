// MainWindow, part: QSettings persistence (interactive runs only): window layout, prompt history,
// generation, view and image settings (ui/studio/main_window.h).
#include "ui/studio/main_window.h"

#include <QAction>
#include <QSettings>
#include <algorithm>

#include "ui/render/renderer.h"
#include "ui/studio/engine_bridge.h"
#include "ui/studio/image_controller.h"
#include "ui/studio/prompt_edit.h"
#include "ui/studio/settings_panel.h"
#include "ui/studio/viewport.h"

namespace tessera::studio {

void MainWindow::load_settings() {
  QSettings s;
  restoreGeometry(s.value(QStringLiteral("window/geometry")).toByteArray());
  restoreState(s.value(QStringLiteral("window/state")).toByteArray());
  prompt_->set_history(s.value(QStringLiteral("prompt/history")).toStringList());
  if (prompt_->toPlainText().isEmpty()) prompt_->setPlainText(s.value("prompt/last").toString());
  settings_->load(s);
  s.beginGroup(QStringLiteral("view"));
  auto& o = viewport_->render_options();
  if (auto mode =
          render::parse_shading_mode(s.value("shading", "lit").toString().toStdString().c_str());
      mode.ok()) {
    o.shading = *mode;
  }
  o.wireframe = s.value("wireframe", false).toBool();
  o.grid = o.axes = s.value("grid", true).toBool();
  auto& p = viewport_->panels();
  p.timing = s.value("panel_timing", true).toBool();
  p.stages = s.value("panel_stages", true).toBool();
  p.system = s.value("panel_system", true).toBool();
  p.diffusion = s.value("panel_diffusion", true).toBool();
  s.endGroup();
  s.beginGroup(QStringLiteral("image"));
  ImageSettings& im = image_->settings();
  im.steps = std::clamp(s.value("steps", im.steps).toInt(), 1, runtime::kMaxImageSteps);
  im.guidance =
      std::clamp(s.value("guidance", static_cast<double>(im.guidance)).toFloat(), 1.0f, 30.0f);
  const auto sampler = runtime::parse_sampler(
      s.value("sampler", runtime::sampler_kind_name(im.sampler)).toString().toStdString());
  if (sampler.ok()) im.sampler = *sampler;
  im.seed = s.value("seed", static_cast<qulonglong>(im.seed)).toULongLong();
  im.lock_seed = s.value("lock_seed", im.lock_seed).toBool();
  im.auto_after_shape = s.value("auto_after_shape", im.auto_after_shape).toBool();
  const int source = s.value("init_source", static_cast<int>(im.init_source)).toInt();
  if (source >= 0 && source <= static_cast<int>(ImageSettings::InitSource::kFile)) {
    im.init_source = static_cast<ImageSettings::InitSource>(source);
  }
  im.init_file =
      s.value("init_file", QString::fromStdString(im.init_file)).toString().toStdString();
  im.mask_file =
      s.value("mask_file", QString::fromStdString(im.mask_file)).toString().toStdString();
  im.strength =
      std::clamp(s.value("strength", static_cast<double>(im.strength)).toFloat(), 0.05f, 1.0f);
  const int control = s.value("control_source", static_cast<int>(im.control_source)).toInt();
  if (control >= 0 && control <= static_cast<int>(ImageSettings::ControlSource::kFile)) {
    im.control_source = static_cast<ImageSettings::ControlSource>(control);
  }
  im.control_file =
      s.value("control_file", QString::fromStdString(im.control_file)).toString().toStdString();
  im.control_model =
      s.value("control_model", QString::fromStdString(im.control_model)).toString().toStdString();
  im.control_scale =
      std::clamp(s.value("control_scale", static_cast<double>(im.control_scale)).toFloat(), 0.0f,
                 runtime::kMaxControlScale);
  im.control_guess = s.value("control_guess", im.control_guess).toBool();
  im.fast = s.value("fast", im.fast).toBool();
  // LoRAs as "path" entries with a "multiplier" each.
  const int loras = s.beginReadArray("loras");
  im.loras.clear();
  for (int i = 0; i < loras; ++i) {
    s.setArrayIndex(i);
    const std::string path = s.value("path").toString().toStdString();
    if (!path.empty()) im.loras.push_back({path, s.value("multiplier", 1.0).toFloat()});
  }
  s.endArray();
  s.endGroup();
  // Reflect the loaded values in the View menu.
  for (QAction* a : findChildren<QAction*>()) {
    const QString id = a->objectName();
    if (id.startsWith("shading_"))
      a->setChecked(id == QStringLiteral("shading_%1").arg(render::shading_mode_name(o.shading)));
    if (id == "view_wireframe") a->setChecked(o.wireframe);
    if (id == "view_grid") a->setChecked(o.grid);
    if (id == "panel_timing") a->setChecked(p.timing);
    if (id == "panel_stages") a->setChecked(p.stages);
    if (id == "panel_system") a->setChecked(p.system);
    if (id == "panel_diffusion") a->setChecked(p.diffusion);
  }
}

void MainWindow::save_settings() {
  if (launch_.scripted()) return;
  QSettings s;
  s.setValue(QStringLiteral("window/geometry"), saveGeometry());
  s.setValue(QStringLiteral("window/state"), saveState());
  s.setValue(QStringLiteral("prompt/history"), prompt_->history());
  s.setValue(QStringLiteral("prompt/last"), prompt_->toPlainText());
  if (engine_ && engine_->has_model())
    s.setValue(QStringLiteral("model/dir"), engine_->model_dir());
  settings_->save(s);
  s.beginGroup(QStringLiteral("view"));
  const auto& o = viewport_->render_options();
  s.setValue("shading", render::shading_mode_name(o.shading));
  s.setValue("wireframe", o.wireframe);
  s.setValue("grid", o.grid);
  const auto& p = viewport_->panels();
  s.setValue("panel_timing", p.timing);
  s.setValue("panel_stages", p.stages);
  s.setValue("panel_system", p.system);
  s.setValue("panel_diffusion", p.diffusion);
  s.endGroup();
  s.beginGroup(QStringLiteral("image"));
  const ImageSettings& im = image_->settings();
  s.setValue("steps", im.steps);
  s.setValue("guidance", static_cast<double>(im.guidance));
  s.setValue("sampler", runtime::sampler_kind_name(im.sampler));
  s.setValue("seed", static_cast<qulonglong>(im.seed));
  s.setValue("lock_seed", im.lock_seed);
  s.setValue("auto_after_shape", im.auto_after_shape);
  s.setValue("init_source", static_cast<int>(im.init_source));
  s.setValue("init_file", QString::fromStdString(im.init_file));
  s.setValue("mask_file", QString::fromStdString(im.mask_file));
  s.setValue("strength", static_cast<double>(im.strength));
  s.setValue("control_source", static_cast<int>(im.control_source));
  s.setValue("control_file", QString::fromStdString(im.control_file));
  s.setValue("control_model", QString::fromStdString(im.control_model));
  s.setValue("control_scale", static_cast<double>(im.control_scale));
  s.setValue("control_guess", im.control_guess);
  s.setValue("fast", im.fast);
  s.beginWriteArray("loras", static_cast<int>(im.loras.size()));
  for (size_t i = 0; i < im.loras.size(); ++i) {
    s.setArrayIndex(static_cast<int>(i));
    s.setValue("path", QString::fromStdString(im.loras[i].path));
    s.setValue("multiplier", static_cast<double>(im.loras[i].multiplier));
  }
  s.endArray();
  s.endGroup();
}

}  // namespace tessera::studio
