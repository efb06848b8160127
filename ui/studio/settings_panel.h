// SettingsPanel: the generation settings (the "Settings" dock): seed with lock / randomise,
// sampling (temperature, top-k, top-p) or greedy, guidance scale, live preview every K tokens and
// its resolution, final resolution, the v0.5 bounding box, KV cache and CUDA graphs, and the device
// (from the runtime's capabilities: the GPU entry is offered when a device is usable, greyed out
// with the runtime's reason when not). Values persist through load()/save().
#pragma once

#include <QSettings>
#include <QWidget>
#include <cstdint>

#include "engine/runtime/provenance.h"
#include "engine/runtime/session.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QSpinBox;

namespace tessera::studio {

class SettingsPanel : public QWidget {
  Q_OBJECT

 public:
  explicit SettingsPanel(QWidget* parent = nullptr);

  // The job for `prompt` from the current values. Unless the seed is locked, a fresh random
  // seed is drawn first (and shown), so every Generate gives a new shape when sampling.
  runtime::JobOptions make_job(const QString& prompt);

  // Adapts ranges to the loaded model (top-k up to the codebook; the bounding box only for
  // models that have the box token).
  void set_model_facts(int64_t num_latents, int64_t codebook_size, bool uses_bbox);

  void load(QSettings& settings);
  void save(QSettings& settings) const;

  // Scripted-mode / test overrides. Resolutions must be 2^k + 1 (added to the lists if absent).
  void set_final_resolution(int resolution);
  void set_preview_resolution(int resolution);
  int preview_resolution() const;
  void set_preview_every(int tokens);
  void set_seed(uint64_t seed, bool locked);
  void set_sampling(bool sample);
  // The settings a Tessera file carries (File > Open of such a file): sampling (the seed locked,
  // so Generate makes that shape again), guidance and final resolution, where present.
  void restore(const runtime::RestoredSettings& r);
  // Candidates per Generate (1, 2, 4 or 6: the Variations box); more than one samples (temperature
  // and top-p from the panel when Sample is on, else 1 and 0.9) with seeds S, S+1, ...
  int variations() const;
  void set_variations(int count);

  // The runtime's answer about devices and graphs (the device list and the graphs switch follow).
  void set_capabilities(const runtime::Capabilities& capabilities);
  runtime::DeviceChoice device() const;
  void set_device(runtime::DeviceChoice device);  // does not emit deviceChanged
  // The engine switches (the overlay's A/B switches edit the same values).
  bool kv_cache() const;
  void set_kv_cache(bool on);
  bool graphs() const;
  void set_graphs(bool on);
  // The shape model's weights: "auto", "f32", "bf16" or "int8" (the Weights box; persisted).
  QString weights() const;
  void set_weights(const QString& weights);  // does not emit weightsChanged
  // One line for the device row: what the selected device is or why it cannot be used.
  QString device_note() const;

 Q_SIGNALS:
  void deviceChanged(tessera::runtime::DeviceChoice device);
  void weightsChanged(const QString& weights);
  void engineSwitchesChanged();

 private:
  static void select_resolution(QComboBox* box, int resolution);

  QSpinBox* seed_ = nullptr;
  QCheckBox* seed_lock_ = nullptr;
  QPushButton* randomise_ = nullptr;
  QCheckBox* sample_ = nullptr;
  QComboBox* variations_ = nullptr;
  QDoubleSpinBox* temperature_ = nullptr;
  QSpinBox* top_k_ = nullptr;
  QDoubleSpinBox* top_p_ = nullptr;
  QDoubleSpinBox* guidance_ = nullptr;
  QSpinBox* preview_every_ = nullptr;
  QComboBox* preview_resolution_ = nullptr;
  QComboBox* final_resolution_ = nullptr;
  QCheckBox* bbox_enabled_ = nullptr;
  QDoubleSpinBox* bbox_[3] = {nullptr, nullptr, nullptr};
  QLabel* bbox_note_ = nullptr;
  QCheckBox* kv_cache_ = nullptr;
  QCheckBox* graphs_ = nullptr;
  QComboBox* device_ = nullptr;
  QLabel* device_note_ = nullptr;
  QComboBox* weights_ = nullptr;
  runtime::Capabilities capabilities_;
  bool model_uses_bbox_ = true;
};

}  // namespace tessera::studio
