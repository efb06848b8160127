#include "ui/studio/settings_panel.h"

#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QRandomGenerator>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QVBoxLayout>
#include <limits>

namespace tessera::studio {

namespace {
constexpr int kResolutions[] = {9, 17, 33, 65, 129, 257};
}

SettingsPanel::SettingsPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);

  auto* sampling = new QGroupBox(tr("Sampling"), this);
  auto* sf = new QFormLayout(sampling);
  seed_ = new QSpinBox(sampling);
  seed_->setRange(0, std::numeric_limits<int>::max());
  seed_lock_ = new QCheckBox(tr("Lock"), sampling);
  seed_lock_->setToolTip(
      tr("Locked: every Generate reuses this seed. Unlocked: a new random seed "
         "each time."));
  randomise_ = new QPushButton(tr("Randomise"), sampling);
  connect(randomise_, &QPushButton::clicked, this, [this] {
    seed_->setValue(
        static_cast<int>(QRandomGenerator::global()->bounded(std::numeric_limits<int>::max())));
  });
  auto* seed_row = new QHBoxLayout;
  seed_row->addWidget(seed_, 1);
  seed_row->addWidget(seed_lock_);
  seed_row->addWidget(randomise_);
  sf->addRow(tr("Seed"), seed_row);
  sample_ = new QCheckBox(tr("Sample (off: greedy, the reference)"), sampling);
  sf->addRow(sample_);
  variations_ = new QComboBox(sampling);
  for (int v : {1, 2, 4, 6}) variations_->addItem(QString::number(v), v);
  variations_->setToolTip(
      tr("Candidates per Generate, decoded together (one decode step serves them all) and shown "
         "side by side; they sample with seeds S, S+1, ... (Sample's settings when it is on, else "
         "temperature 1 and top-p 0.9). Click one to make it the current mesh."));
  sf->addRow(tr("Variations"), variations_);
  temperature_ = new QDoubleSpinBox(sampling);
  temperature_->setRange(0.05, 5.0);
  temperature_->setSingleStep(0.05);
  temperature_->setValue(runtime::kDefaultSampling.temperature);
  sf->addRow(tr("Temperature"), temperature_);
  top_k_ = new QSpinBox(sampling);
  top_k_->setRange(0, 1 << 16);
  top_k_->setSpecialValueText(tr("off"));
  sf->addRow(tr("Top-k"), top_k_);
  top_p_ = new QDoubleSpinBox(sampling);
  top_p_->setRange(0.01, 1.0);
  top_p_->setSingleStep(0.01);
  top_p_->setValue(runtime::kDefaultSampling.top_p);
  sf->addRow(tr("Top-p"), top_p_);
  guidance_ = new QDoubleSpinBox(sampling);
  guidance_->setRange(0.0, 20.0);
  guidance_->setSingleStep(0.5);
  guidance_->setValue(runtime::kDefaultSampling.guidance);
  guidance_->setToolTip(tr("Classifier-free guidance scale (0: off)"));
  sf->addRow(tr("Guidance"), guidance_);
  auto update_sampling = [this] {
    const bool on = sample_->isChecked();
    temperature_->setEnabled(on);
    top_k_->setEnabled(on);
    top_p_->setEnabled(on);
    seed_->setEnabled(on);
    seed_lock_->setEnabled(on);
    randomise_->setEnabled(on);
  };
  connect(sample_, &QCheckBox::toggled, this, update_sampling);
  update_sampling();
  layout->addWidget(sampling);

  auto* mesh = new QGroupBox(tr("Mesh"), this);
  auto* mf = new QFormLayout(mesh);
  preview_every_ = new QSpinBox(mesh);
  preview_every_->setRange(0, 4096);
  preview_every_->setValue(16);
  preview_every_->setSpecialValueText(tr("no live preview"));
  preview_every_->setSuffix(tr(" tokens"));
  mf->addRow(tr("Preview every"), preview_every_);
  preview_resolution_ = new QComboBox(mesh);
  final_resolution_ = new QComboBox(mesh);
  for (int r : kResolutions) {
    preview_resolution_->addItem(QString::number(r), r);
    final_resolution_->addItem(QString::number(r), r);
  }
  select_resolution(preview_resolution_, 33);
  select_resolution(final_resolution_, 129);
  mf->addRow(tr("Preview resolution"), preview_resolution_);
  mf->addRow(tr("Final resolution"), final_resolution_);
  layout->addWidget(mesh);

  auto* box = new QGroupBox(tr("Bounding box (v0.5 models)"), this);
  auto* bf = new QFormLayout(box);
  bbox_enabled_ = new QCheckBox(tr("Use proportions"), box);
  bf->addRow(bbox_enabled_);
  auto* bbox_row = new QHBoxLayout;
  for (int i = 0; i < 3; ++i) {
    bbox_[i] = new QDoubleSpinBox(box);
    bbox_[i]->setRange(0.0, 1.0);
    bbox_[i]->setSingleStep(0.05);
    bbox_[i]->setValue(1.0);
    bbox_[i]->setPrefix(QStringLiteral("%1 ").arg(QChar("XYZ"[i])));
    bbox_row->addWidget(bbox_[i]);
  }
  bf->addRow(bbox_row);
  bbox_note_ = new QLabel(box);
  bbox_note_->setWordWrap(true);
  bf->addRow(bbox_note_);
  auto update_bbox = [this] {
    for (auto* s : bbox_) s->setEnabled(bbox_enabled_->isChecked() && model_uses_bbox_);
    bbox_enabled_->setEnabled(model_uses_bbox_);
    bbox_note_->setText(model_uses_bbox_ ? QString()
                                         : tr("This model (v0.1) has no bounding-box token."));
    bbox_note_->setVisible(!model_uses_bbox_);
  };
  connect(bbox_enabled_, &QCheckBox::toggled, this, update_bbox);
  update_bbox();
  layout->addWidget(box);

  auto* engine = new QGroupBox(tr("Engine"), this);
  auto* ef = new QFormLayout(engine);
  kv_cache_ = new QCheckBox(tr("KV cache (off: recompute every step, the baseline)"), engine);
  kv_cache_->setChecked(true);
  ef->addRow(kv_cache_);
  graphs_ = new QCheckBox(tr("CUDA graphs (replay the recorded decode step)"), engine);
  graphs_->setChecked(true);
  ef->addRow(graphs_);
  connect(kv_cache_, &QCheckBox::toggled, this, [this] { Q_EMIT engineSwitchesChanged(); });
  connect(graphs_, &QCheckBox::toggled, this, [this] { Q_EMIT engineSwitchesChanged(); });
  device_ = new QComboBox(engine);
  device_->setObjectName(QStringLiteral("device"));
  device_->addItem(tr("CPU"), static_cast<int>(runtime::DeviceChoice::kCpu));
  device_->addItem(tr("GPU (CUDA)"), static_cast<int>(runtime::DeviceChoice::kCuda));
  device_->addItem(tr("Auto (GPU when usable)"), static_cast<int>(runtime::DeviceChoice::kAuto));
  connect(device_, &QComboBox::activated, this, [this] { Q_EMIT deviceChanged(device()); });
  device_note_ = new QLabel(engine);
  device_note_->setObjectName(QStringLiteral("device_note"));
  device_note_->setWordWrap(true);
  device_note_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  ef->addRow(tr("Device"), device_);
  ef->addRow(device_note_);
  weights_ = new QComboBox(engine);
  weights_->setObjectName(QStringLiteral("weights"));
  weights_->addItem(tr("Auto (bf16 for large models)"), QStringLiteral("auto"));
  weights_->addItem(tr("Fast (8-bit on the CPU)"), QStringLiteral("fast"));
  weights_->addItem(tr("f32 (as stored)"), QStringLiteral("f32"));
  weights_->addItem(tr("bf16 (half the memory)"), QStringLiteral("bf16"));
  weights_->addItem(tr("int8 (a quarter; CPU)"), QStringLiteral("int8"));
  weights_->setToolTip(
      tr("The shape model's weights. Auto: int8 for a model written by tessera quantize, bf16 "
         "for large models (Cube 3D), f32 for small ones. Fast: int8 on the CPU (tokens 1.5-1.9x "
         "faster; shapes keep their family but may differ in detail), bf16 on a GPU. bf16: "
         "converted once at load. int8: "
         "the GPT quantized once at load (a scale per 128 weights), half of bf16's memory and "
         "faster tokens on the CPU; shapes may differ slightly. The model reloads when this "
         "changes."));
  connect(weights_, &QComboBox::activated, this, [this] { Q_EMIT weightsChanged(weights()); });
  ef->addRow(tr("Weights"), weights_);
  set_capabilities(runtime::Capabilities{});
  layout->addWidget(engine);
  layout->addStretch(1);
}

void SettingsPanel::select_resolution(QComboBox* box, int resolution) {
  int index = box->findData(resolution);
  if (index < 0) {
    box->addItem(QString::number(resolution), resolution);
    index = box->count() - 1;
  }
  box->setCurrentIndex(index);
}

int SettingsPanel::preview_resolution() const {
  return preview_resolution_->currentData().toInt();
}

runtime::JobOptions SettingsPanel::make_job(const QString& prompt) {
  runtime::JobOptions job;
  job.prompt = prompt.toStdString();
  SamplingSettings& sampling = job.generation.sampling;
  job.variations = variations();
  sampling.sample = sample_->isChecked() || job.variations > 1;
  if (sampling.sample && !seed_lock_->isChecked()) randomise_->click();
  sampling.seed = static_cast<uint64_t>(seed_->value());
  // Sample off (variations alone sample): the product's temperature, top-k and top-p, the job's
  // defaults.
  if (sample_->isChecked()) {
    sampling.temperature = static_cast<float>(temperature_->value());
    sampling.top_k = top_k_->value();
    sampling.top_p = static_cast<float>(top_p_->value());
  }
  sampling.guidance = static_cast<float>(guidance_->value());
  if (model_uses_bbox_ && bbox_enabled_->isChecked()) {
    job.generation.bbox = std::array<float, 3>{static_cast<float>(bbox_[0]->value()),
                                               static_cast<float>(bbox_[1]->value()),
                                               static_cast<float>(bbox_[2]->value())};
  }
  job.generation.use_kv_cache = kv_cache_->isChecked();
  job.generation.use_graphs = graphs_->isChecked();
  job.preview_every = preview_every_->value();
  job.preview_resolution = preview_resolution_->currentData().toInt();
  job.mesh.resolution = final_resolution_->currentData().toInt();
  return job;
}

int SettingsPanel::variations() const {
  return variations_->currentData().toInt();
}

void SettingsPanel::set_variations(int count) {
  const int index = variations_->findData(count);
  if (index >= 0) {
    variations_->setCurrentIndex(index);
  } else {
    variations_->addItem(QString::number(count), count);
    variations_->setCurrentIndex(variations_->count() - 1);
  }
}

void SettingsPanel::set_model_facts(int64_t num_latents, int64_t codebook_size, bool uses_bbox) {
  top_k_->setMaximum(static_cast<int>(std::max<int64_t>(codebook_size, 1)));
  preview_every_->setMaximum(static_cast<int>(std::max<int64_t>(num_latents, 1)));
  model_uses_bbox_ = uses_bbox;
  Q_EMIT bbox_enabled_->toggled(bbox_enabled_->isChecked());
}

void SettingsPanel::load(QSettings& s) {
  s.beginGroup(QStringLiteral("generation"));
  seed_->setValue(s.value("seed", 0).toInt());
  seed_lock_->setChecked(s.value("seed_locked", false).toBool());
  sample_->setChecked(s.value("sample", false).toBool());
  temperature_->setValue(
      s.value("temperature", static_cast<double>(runtime::kDefaultSampling.temperature))
          .toDouble());
  top_k_->setValue(
      s.value("top_k", static_cast<qlonglong>(runtime::kDefaultSampling.top_k)).toInt());
  top_p_->setValue(
      s.value("top_p", static_cast<double>(runtime::kDefaultSampling.top_p)).toDouble());
  set_variations(std::clamp(s.value("variations", 1).toInt(), 1, runtime::kMaxVariations));
  guidance_->setValue(
      s.value("guidance", static_cast<double>(runtime::kDefaultSampling.guidance)).toDouble());
  preview_every_->setValue(s.value("preview_every", 16).toInt());
  select_resolution(preview_resolution_, s.value("preview_resolution", 33).toInt());
  select_resolution(final_resolution_, s.value("final_resolution", 129).toInt());
  bbox_enabled_->setChecked(s.value("bbox_enabled", false).toBool());
  for (int i = 0; i < 3; ++i)
    bbox_[i]->setValue(s.value(QStringLiteral("bbox%1").arg(i), 1.0).toDouble());
  kv_cache_->setChecked(s.value("kv_cache", true).toBool());
  graphs_->setChecked(s.value("graphs", true).toBool());
  set_weights(s.value("weights", "auto").toString());
  s.endGroup();
}

void SettingsPanel::save(QSettings& s) const {
  s.beginGroup(QStringLiteral("generation"));
  s.setValue("seed", seed_->value());
  s.setValue("seed_locked", seed_lock_->isChecked());
  s.setValue("sample", sample_->isChecked());
  s.setValue("temperature", temperature_->value());
  s.setValue("top_k", top_k_->value());
  s.setValue("top_p", top_p_->value());
  s.setValue("variations", variations());
  s.setValue("guidance", guidance_->value());
  s.setValue("preview_every", preview_every_->value());
  s.setValue("preview_resolution", preview_resolution_->currentData().toInt());
  s.setValue("final_resolution", final_resolution_->currentData().toInt());
  s.setValue("bbox_enabled", bbox_enabled_->isChecked());
  for (int i = 0; i < 3; ++i) s.setValue(QStringLiteral("bbox%1").arg(i), bbox_[i]->value());
  s.setValue("kv_cache", kv_cache_->isChecked());
  s.setValue("graphs", graphs_->isChecked());
  s.setValue("weights", weights());
  s.endGroup();
}

void SettingsPanel::set_capabilities(const runtime::Capabilities& c) {
  capabilities_ = c;
  const int gpu = device_->findData(static_cast<int>(runtime::DeviceChoice::kCuda));
  if (auto* model = qobject_cast<QStandardItemModel*>(device_->model())) {
    model->item(gpu)->setEnabled(c.cuda.usable);
  }
  device_->setItemData(gpu,
                       c.cuda.usable
                           ? QString::fromStdString(c.cuda.name)
                           : tr("Unavailable: %1").arg(QString::fromStdString(c.cuda.reason)),
                       Qt::ToolTipRole);
  graphs_->setEnabled(c.decode_graphs_available);
  graphs_->setToolTip(c.decode_graphs_available
                          ? tr("Off: launch every op of each step (the eager baseline)")
                          : QString::fromStdString(c.decode_graphs_reason));
  device_note_->setText(device_note());
}

runtime::DeviceChoice SettingsPanel::device() const {
  return static_cast<runtime::DeviceChoice>(device_->currentData().toInt());
}

void SettingsPanel::set_device(runtime::DeviceChoice device) {
  const QSignalBlocker block(device_);
  device_->setCurrentIndex(std::max(0, device_->findData(static_cast<int>(device))));
  device_note_->setText(device_note());
}

QString SettingsPanel::device_note() const {
  const runtime::Capabilities& c = capabilities_;
  QString note = tr("CPU: %1").arg(QString::fromStdString(c.cpu.name));
  note += c.cuda.usable ? tr("\nGPU: %1").arg(QString::fromStdString(c.cuda.name))
                        : tr("\nGPU not usable: %1").arg(QString::fromStdString(c.cuda.reason));
  return note;
}

QString SettingsPanel::weights() const {
  return weights_->currentData().toString();
}

void SettingsPanel::set_weights(const QString& weights) {
  const QSignalBlocker block(weights_);
  weights_->setCurrentIndex(std::max(0, weights_->findData(weights)));
}

bool SettingsPanel::kv_cache() const {
  return kv_cache_->isChecked();
}
void SettingsPanel::set_kv_cache(bool on) {
  kv_cache_->setChecked(on);
}
bool SettingsPanel::graphs() const {
  return graphs_->isChecked();
}
void SettingsPanel::set_graphs(bool on) {
  graphs_->setChecked(on);
}

void SettingsPanel::set_final_resolution(int r) {
  select_resolution(final_resolution_, r);
}
void SettingsPanel::set_preview_resolution(int r) {
  select_resolution(preview_resolution_, r);
}
void SettingsPanel::set_preview_every(int tokens) {
  preview_every_->setValue(tokens);
}
void SettingsPanel::set_seed(uint64_t seed, bool locked) {
  seed_->setValue(static_cast<int>(std::min<uint64_t>(seed, std::numeric_limits<int>::max())));
  seed_lock_->setChecked(locked);
}
void SettingsPanel::set_sampling(bool sample) {
  sample_->setChecked(sample);
}

void SettingsPanel::restore(const runtime::RestoredSettings& r) {
  const SamplingSettings& s = r.sampling;  // checked by restored_settings
  if (r.has_sampling) {
    sample_->setChecked(s.sample);
    if (s.sample) {
      temperature_->setValue(s.temperature);
      top_p_->setValue(s.top_p);
      top_k_->setValue(static_cast<int>(std::min<int64_t>(s.top_k, top_k_->maximum())));
    }
    if (r.has_seed) set_seed(s.seed, true);
  }
  if (r.has_guidance) guidance_->setValue(s.guidance);
  if (r.resolution > 0) set_final_resolution(r.resolution);
  set_variations(1);
}

}  // namespace tessera::studio
