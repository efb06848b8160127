#include "engine/runtime/session.h"
#include "engine/runtime/engine_types_internal.h"
#include "engine/runtime/image_inputs.h"
#include "engine/runtime/models.h"
#include "engine/runtime/session_internal.h"
#include "engine/runtime/user_text.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#include "core/process_memory.h"
#include "core/trace.h"

namespace tessera::runtime {

const char* lane_name(Lane lane) {
  switch (lane) {
    case Lane::kShape:
      return "shape";
    case Lane::kImage:
      return "image";
    case Lane::kTexture:
      return "texture";
  }
  return "?";
}

const char* graph_mode_name(GraphMode mode) {
  switch (mode) {
    case GraphMode::kOn:
      return "on";
    case GraphMode::kOff:
      return "off";
    case GraphMode::kUnavailable:
      return "n/a";
  }
  return "?";
}

const char* sampler_kind_name(SamplerKind kind) {
  return diffusion::sampler_kind_name(to_diffusion(kind));
}

Expected<int> resolution_base(int resolution) {
  return shape::resolution_base(resolution);
}

int64_t tokens_to_generate(int64_t requested, int64_t num_latents) {
  return shape::tokens_to_generate(requested, num_latents);
}

Expected<SamplerKind> parse_sampler(const std::string& name) {
  for (SamplerKind kind : kImageSamplers) {
    if (name == sampler_kind_name(kind)) return kind;
  }
  return invalid_argument("sampler '" + name + "': expected euler, euler_a, dpmpp_2m or lcm");
}

Expected<ImagePrecision> parse_precision(const std::string& name) {
  if (name == "auto") return ImagePrecision::kAuto;
  if (name == "f32") return ImagePrecision::kF32;
  if (name == "bf16") return ImagePrecision::kBf16;
  return invalid_argument("precision '" + name + "': expected auto, f32 or bf16");
}

namespace {

// "parent/name" of a model path (e.g. tessera-tiny/diffusion), short enough for a status line.
std::string short_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  const std::string parent = p.parent_path().filename().string();
  return parent.empty() ? p.filename().string() : parent + "/" + p.filename().string();
}

}  // namespace

// ---- construction
// --------------------------------------------------------------------------------

Session::Impl::Impl(SessionOptions options) : options_(std::move(options)) {
  auto lane_for = [this](Lane lane) {
    return std::make_unique<LaneWorker>(
        [this, lane](uint64_t id, const std::string& reason) {
          emit(id, lane, CancelledEvent{reason});
        },
        [this, lane](uint64_t id, std::exception_ptr error) { on_exception(id, lane, error); });
  };
  texture_lane_ = lane_for(Lane::kTexture);
  image_lane_ = lane_for(Lane::kImage);
  shape_lane_ = lane_for(Lane::kShape);
}

Session::Impl::~Impl() {
  // Shape first: a shape job ending releases an image job held by the scheduler.
  shape_lane_.reset();
  image_lane_.reset();
  texture_lane_.reset();
}

Session::Session(SessionOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Session::~Session() = default;

std::unique_ptr<Session> Session::create(SessionOptions options) {
  return std::unique_ptr<Session>(new Session(std::move(options)));
}

std::unique_ptr<Session> Session::create(std::unique_ptr<shape::ShapePipeline> pipeline,
                                         SessionOptions options) {
  auto session = create(std::move(options));
  session->impl_->install_shape(std::move(pipeline), "");
  return session;
}

namespace {

Expected<std::string> shape_model_path(const std::string& given) {
  if (!given.empty()) return resolve_model_path(given, ModelKind::kShape);
  const std::string dir = default_shape_model_dir();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return not_found(
        "no model given and the default model directory '" + dir +
        "' does not exist (the embedded tessera-tiny model is not installed in this build); give "
        "a Cube 3D model directory (shape_gpt.safetensors, shape_tokenizer.safetensors and a CLIP "
        "text encoder): --model DIR on the command line, Settings > Model in the studio");
  }
  return dir;
}

shape::PipelineOptions pipeline_options(const ShapeModelOptions& o, ShapeWeights resolved) {
  shape::PipelineOptions p;
  p.weights = resolved == ShapeWeights::kF32 ? WeightFormat::kF32 : WeightFormat::kBF16;
  p.gpt_int8 = resolved == ShapeWeights::kInt8;
  p.device = to_kernels(o.device);
  p.release_idle_pages = o.release_idle_pages;
  // Real CLIP checkpoints usually come without the vocabulary: use the bundled one.
  p.clip_vocab_fallback =
      o.clip_vocab_fallback.empty() ? default_clip_vocab_file() : o.clip_vocab_fallback;
  return p;
}

Expected<std::unique_ptr<shape::ShapePipeline>> load_shape(const ShapeModelOptions& o,
                                                           std::string* path) {
  TESSERA_ASSIGN_OR_RETURN(*path, shape_model_path(o.path));
  std::error_code ec;
  if (!std::filesystem::is_directory(*path, ec)) {
    return not_found("model directory '" + *path + "' does not exist or is not a directory");
  }
  TESSERA_ASSIGN_OR_RETURN(const ShapeWeights resolved,
                           resolve_shape_weights(*path, o.weights, o.device));
  return shape::ShapePipeline::load(*path, pipeline_options(o, resolved));
}

}  // namespace

Expected<ShapeWeights> parse_shape_weights(const std::string& name) {
  for (ShapeWeights w : {ShapeWeights::kAuto, ShapeWeights::kF32, ShapeWeights::kBF16,
                         ShapeWeights::kInt8, ShapeWeights::kFast}) {
    if (name == shape_weights_name(w)) return w;
  }
  return invalid_argument("weights '" + name + "': expected auto, fast, f32, bf16 or int8");
}

const char* shape_weights_name(ShapeWeights weights) {
  switch (weights) {
    case ShapeWeights::kAuto:
      return "auto";
    case ShapeWeights::kF32:
      return "f32";
    case ShapeWeights::kBF16:
      return "bf16";
    case ShapeWeights::kInt8:
      return "int8";
    case ShapeWeights::kFast:
      return "fast";
  }
  return "?";
}

Expected<ShapeWeights> resolve_shape_weights(const std::string& dir, ShapeWeights weights,
                                             DeviceChoice device) {
  if (weights == ShapeWeights::kFast) {
    if (device == DeviceChoice::kAuto) device = probe_capabilities().auto_device;
    return device == DeviceChoice::kCuda ? ShapeWeights::kBF16 : ShapeWeights::kInt8;
  }
  if (weights != ShapeWeights::kAuto) return weights;
  TESSERA_ASSIGN_OR_RETURN(const shape::ModelPaths paths, shape::locate_model_dir(dir));
  auto gpt = SafeTensors::open(paths.shape_gpt);
  if (!gpt.ok()) return gpt.status();
  for (const TensorInfo& t : gpt->tensors()) {
    if (t.dtype == DType::kI8) return ShapeWeights::kInt8;
  }
  return gpt->total_elements() >= static_cast<uint64_t>(kAutoBf16Parameters) ? ShapeWeights::kBF16
                                                                             : ShapeWeights::kF32;
}

Expected<std::unique_ptr<Session>> Session::open(const ShapeModelOptions& model,
                                                 SessionOptions options) {
  std::string path;
  TESSERA_ASSIGN_OR_RETURN(auto pipeline, load_shape(model, &path));
  auto session = create(std::move(options));
  session->impl_->install_shape(std::move(pipeline), path);
  return session;
}

void Session::Impl::install_shape(std::unique_ptr<shape::ShapePipeline> pipeline,
                                  const std::string& path) {
  ShapeModelInfo info;
  info.path = path;
  info.backend = pipeline->backend().name();
  info.backend_note = pipeline->backend_note();
  info.on_gpu = pipeline->backend().device() != Device::kCpu;
  info.can_record_graphs = pipeline->backend().can_record();
  info.num_latents = pipeline->num_latents();
  info.codebook_size = pipeline->codebook_size();
  info.uses_bbox = pipeline->gpt_config().use_bbox;
  info.default_resolution = pipeline->default_resolution();
  const shape::CubeGpt& gpt = pipeline->gpt();
  info.weights = gpt.int8_weights() ? "int8" : gpt.weight_dtype() == DType::kBF16 ? "bf16" : "f32";
  info.gpt_weight_bytes = gpt.decode_weight_bytes();
  info.resident_bytes = resident_memory_bytes();
  info.fill_token_id = pipeline->fill_token_id();
  info.decoder_codes = pipeline->decoder_codes();
  info.example_prompts = pipeline->example_prompts();
  info.shape_gpt_file = pipeline->paths().shape_gpt;
  info.shape_tokenizer_file = pipeline->paths().shape_tokenizer;
  shape_ = std::move(pipeline);  // the shape worker's (or, before any job, the creator's)
  std::lock_guard<std::mutex> lock(mutex_);
  shape_info_ = std::move(info);
  preview_cost_ = {};
  update_sharing();
}

void Session::Impl::update_sharing() {
  // Exclusive unless the two engines are known to run on different devices.
  const bool both = shape_info_ && image_info_;
  scheduler_.set_exclusive(!both || shape_info_->on_gpu == image_info_->on_gpu);
}

// ---- queries
// -------------------------------------------------------------------------------------

std::optional<ShapeModelInfo> Session::Impl::shape_model() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shape_info_;
}

std::optional<ImageModelInfo> Session::Impl::image_model() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return image_info_;
}

int64_t Session::num_latents() const {
  const std::optional<ShapeModelInfo> info = shape_model();
  return info ? info->num_latents : 0;
}

int64_t Session::codebook_size() const {
  const std::optional<ShapeModelInfo> info = shape_model();
  return info ? info->codebook_size : 0;
}

int Session::default_resolution() const {
  const std::optional<ShapeModelInfo> info = shape_model();
  return info ? info->default_resolution : 0;
}

Status Session::check_tokens(const std::vector<int32_t>& ids) const {
  const std::optional<ShapeModelInfo> info = shape_model();
  if (!info) return not_found("no shape model is loaded");
  return shape::validate_token_ids(ids, info->num_latents, info->decoder_codes);
}

void Session::Impl::set_image_step_hook(ImageStepHook hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  image_step_hook_ = std::move(hook);
}

MemoryUse Session::Impl::memory() const {
  bool gpu = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    gpu = (shape_info_ && shape_info_->on_gpu) || (image_info_ && image_info_->on_gpu);
  }
  return memory_use(gpu);
}

// ---- submission
// ----------------------------------------------------------------------------------

uint64_t Session::Impl::load_shape_model(ShapeModelOptions options) {
  const uint64_t id = next_id_++;
  shape_lane_->submit_load(
      id, [this, o = std::move(options)](uint64_t job, auto&) { run_shape_load(job, o); });
  return id;
}

uint64_t Session::Impl::load_image_model(ImageModelOptions options) {
  const uint64_t id = next_id_++;
  image_lane_->submit_load(
      id, [this, o = std::move(options)](uint64_t job, auto&) { run_image_load(job, o); });
  return id;
}

// Every job's text passes the product's rule (user_text.h) here, whatever front end built it: the
// engine and the files only ever see repaired text, and a refused job ends with its Error before
// any work.
uint64_t Session::Impl::submit(JobOptions job) {
  const uint64_t id = next_id_++;
  scheduler_.shape_submitted(id);
  Expected<TextNotes> text = accept_job_text(&job);
  shape_lane_->submit_job(
      id, [this, o = std::move(job), refused = text.status()](uint64_t j, auto& cancel) {
        if (!refused.ok()) return emit(j, Lane::kShape, ErrorEvent{refused});
        run_shape_job(j, o, cancel);
      });
  return id;
}

uint64_t Session::Impl::submit_image(ImageJobOptions job) {
  const uint64_t id = next_id_++;
  Expected<TextNotes> text = accept_job_text(&job);
  image_lane_->submit_job(
      id, [this, o = std::move(job), refused = text.status()](uint64_t j, auto& cancel) {
        if (!refused.ok()) return emit(j, Lane::kImage, ErrorEvent{refused});
        run_image_job(j, o, cancel);
      });
  return id;
}

uint64_t Session::Impl::submit_paint(PaintJobOptions job) {
  const uint64_t id = next_id_++;
  image_lane_->submit_job(
      id, [this, o = std::move(job)](uint64_t j, auto& cancel) { run_paint_job(j, o, cancel); });
  return id;
}

uint64_t Session::Impl::submit_texture(TextureJobOptions job) {
  const uint64_t id = next_id_++;
  texture_lane_->submit_job(
      id, [this, o = std::move(job)](uint64_t j, auto& cancel) { run_texture_job(j, o, cancel); });
  return id;
}

void Session::Impl::cancel() {
  shape_lane_->cancel();
  image_lane_->cancel();
  texture_lane_->cancel();
}

void Session::Impl::cancel(Lane lane) {
  switch (lane) {
    case Lane::kShape:
      shape_lane_->cancel();
      break;
    case Lane::kImage:
      image_lane_->cancel();
      break;
    case Lane::kTexture:
      texture_lane_->cancel();
      break;
  }
}

bool Session::Impl::idle() const {
  return shape_lane_->idle() && image_lane_->idle() && texture_lane_->idle();
}

// ---- events
// --------------------------------------------------------------------------------------

std::optional<Event> Session::Impl::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.empty()) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<Event> Session::Impl::wait_event(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!event_cv_.wait_for(lock, timeout, [this] { return !events_.empty(); })) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

Event Session::wait_for(uint64_t id, const std::function<void(const Event&)>& on_event) {
  for (;;) {
    auto event = wait_event(std::chrono::milliseconds(200));
    if (!event || event->job != id) continue;
    if (on_event) on_event(*event);
    if (event->terminal()) return std::move(*event);
  }
}

void Session::Impl::emit(uint64_t job, Lane lane, EventPayload payload) {
  Event event{job, lane, std::move(payload)};
  // A shape job's end releases held image work only after its terminal event is out, so a front end
  // sees the shape end before the image resumes.
  const bool shape_ended = lane == Lane::kShape && event.terminal();
  if (options_.on_event) {
    options_.on_event(event);
  } else {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events_.push_back(std::move(event));
    }
    event_cv_.notify_all();
  }
  if (shape_ended) scheduler_.shape_finished(job);
}

void Session::Impl::on_exception(uint64_t job, Lane lane, std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    emit(job, lane, ErrorEvent{out_of_memory("out of memory while running the job")});
  } catch (const std::exception& e) {
    emit(job, lane, ErrorEvent{internal_error(std::string("unexpected exception: ") + e.what())});
  } catch (...) {
    emit(job, lane, ErrorEvent{internal_error("unexpected exception")});
  }
}

// ---- loads
// ---------------------------------------------------------------------------------------

void Session::Impl::run_shape_load(uint64_t id, const ShapeModelOptions& options) {
  Stopwatch total;
  std::string path;
  auto pipeline = load_shape(options, &path);
  if (!pipeline.ok()) return emit(id, Lane::kShape, ErrorEvent{pipeline.status()});
  install_shape(std::move(pipeline).value(), path);
  const ShapeModelInfo info = *shape_model();
  ModelLoadedEvent loaded;
  loaded.lane = Lane::kShape;
  loaded.path = path;
  loaded.backend = info.backend;
  loaded.backend_note = info.backend_note;
  loaded.description = short_name(path) + ", " + std::to_string(info.num_latents) +
                       " tokens per shape, " + info.weights + " weights, " + info.backend;
  emit(id, Lane::kShape, std::move(loaded));
  emit(id, Lane::kShape, DoneEvent{total.elapsed_ms()});
}

Status Session::Impl::load_image_model_now(const std::string& path,
                                           const ImageModelOptions& options) {
  diffusion::DiffusionLoadOptions o;
  o.weights = options.bf16 ? WeightFormat::kBF16 : WeightFormat::kF32;
  o.precision = to_diffusion(options.precision);
  o.device = to_kernels(options.device);
  o.clip_vocab_fallback =
      options.clip_vocab_fallback.empty() ? default_clip_vocab_file() : options.clip_vocab_fallback;
  for (const LoraChoice& l : options.loras) o.loras.push_back({l.path, l.multiplier});
  auto loaded = diffusion::DiffusionModel::load(path, o);
  if (!loaded.ok()) return loaded.status();
  image_ = std::move(loaded).value();
  ImageModelInfo info;
  info.path = path;
  info.layout = diffusion::model_layout_name(image_->files().layout);
  info.backend = image_->backend().name();
  info.backend_note = image_->device_note();
  info.on_gpu = image_->backend().device() != Device::kCpu;
  info.precision = image_->compute_precision_label();
  info.default_size = image_->default_image_size();
  info.size_multiple = image_->size_multiple();
  info.summary =
      "UNet " + image_->unet_config().summary() + ", VAE " + image_->vae_config().summary();
  info.loras = options.loras;
  for (const diffusion::LoraMerged& l : image_->loras()) {
    char m[32];
    std::snprintf(m, sizeof(m), "%g", static_cast<double>(l.multiplier));
    info.summary += ", LoRA " + std::filesystem::path(l.path).filename().string() + " x" + m +
                    " (" + std::to_string(l.unet_modules + l.text_modules) + " modules)";
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    image_info_ = info;
    update_sharing();
  }
  image_options_ = options;
  image_path_ = path;
  return Status();
}

void Session::Impl::run_image_load(uint64_t id, const ImageModelOptions& options) {
  Stopwatch total;
  std::string path = default_diffusion_model_dir();
  if (!options.path.empty()) {
    auto resolved = resolve_model_path(options.path, ModelKind::kImage);
    if (!resolved.ok()) return emit(id, Lane::kImage, ErrorEvent{resolved.status()});
    path = std::move(resolved).value();
  }
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return emit(id, Lane::kImage,
                ErrorEvent{not_found(
                    "No diffusion model: '" + path + "' does not exist" +
                    (options.path.empty()
                         ? " (the embedded tessera-tiny diffusion model is not installed in this "
                           "build); give a diffusers folder or an SD 1.x .safetensors file"
                         : ""))});
  }
  if (Status st = load_image_model_now(path, options); !st.ok()) {
    return emit(id, Lane::kImage, ErrorEvent{st});
  }
  const ImageModelInfo info = *image_model();
  ModelLoadedEvent event;
  event.lane = Lane::kImage;
  event.path = path;
  event.backend = info.backend;
  event.backend_note = info.backend_note;
  event.description = short_name(path) + " (" + info.layout + "), " +
                      std::to_string(info.default_size) + "x" + std::to_string(info.default_size) +
                      " px, " + info.precision + ", " + info.backend;
  emit(id, Lane::kImage, std::move(event));
  emit(id, Lane::kImage, DoneEvent{total.elapsed_ms()});
}

// ---- image jobs
// ----------------------------------------------------------------------------------

Expected<Session::Impl::MadeImage> Session::Impl::make_image(uint64_t id, const ImageJobOptions& o,
                                                             std::atomic<bool>& cancel) {
  const Lane lane = Lane::kImage;
  auto on_wait = [&](bool waiting) {
    emit(id, lane, WaitingEvent{waiting, waiting ? "waiting for the shape job" : ""});
  };
  // LoRAs: the job's list and the prompt's <lora:NAME:M> tags; another set than the loaded
  // model's means a reload with it.
  TESSERA_RETURN_IF_ERROR(check_image_job(o));
  // The pictures first: a bad one fails before any reload (a LoRA reload keeps the UNet's and
  // VAE's sizes, so the model's size rules hold after it).
  auto inputs =
      prepare_image_inputs(o.width, o.height, o.init_image, o.mask, image_->size_multiple(),
                           image_->default_image_size(), o.control_image);
  if (!inputs.ok()) return inputs.status();
  std::string prompt;
  std::vector<std::string> notes;  // and the ControlNet's
  {
    auto loras = image_job_loras(o, &prompt);
    if (!loras.ok()) return loras.status();
    const std::vector<LoraChoice>& wanted = *loras;
    if (wanted != image_options_.loras) {
      Stopwatch reload;
      const ImageModelOptions previous = image_options_;
      ImageModelOptions options = previous;
      options.loras = wanted;
      // The old model goes first: an SD model would otherwise be held twice while its
      // replacement loads.
      image_.reset();
      if (Status st = load_image_model_now(image_path_, options); !st.ok()) {
        // Back to the model as it was, so that the next job without these LoRAs runs.
        if (Status back = load_image_model_now(image_path_, previous); !back.ok()) {
          {
            std::lock_guard<std::mutex> lock(mutex_);
            image_info_.reset();
            update_sharing();
          }
          return Status(
              st.code(),
              st.message() + "; reloading the model without them failed too: " + back.message());
        }
        return st;
      }
      char ms[32];
      std::snprintf(ms, sizeof(ms), "%.0f", reload.elapsed_ms());
      notes.push_back("model reloaded with " + std::to_string(wanted.size()) + " LoRA(s) in " + ms +
                      " ms: " + image_model()->summary);
    }
  }
  // ControlNet: the job's, else the model's own depth ControlNet; loaded when another is, and let
  // go by a job without one (an SD 1.5 ControlNet holds 1.4 GB).
  if (o.control_image == nullptr && image_->has_control_net()) image_->unload_control_net();
  if (o.control_image != nullptr) {
    std::string control = o.control_model;
    if (control.empty()) {
      auto own = default_control_net(image_path_);
      if (!own.ok()) return own.status();
      if (own->empty()) {
        return invalid_argument(
            "a control image needs a ControlNet, and " + short_name(image_path_) +
            " ships none: give one (e.g. control_v11f1p_sd15_depth.safetensors)");
      }
      control = *own;
    }
    if (image_->control_net_path() != control) {
      Stopwatch loading;
      TESSERA_RETURN_IF_ERROR(image_->load_control_net(control));
      char ms[32];
      std::snprintf(ms, sizeof(ms), "%.0f", loading.elapsed_ms());
      notes.push_back("ControlNet " + short_name(control) + " loaded in " + ms + " ms");
    }
  }
  // The tiny decoder: the job's, loaded when another is, let go by a job without one.
  if (o.tiny_decoder.empty() && image_->has_tiny_decoder()) image_->unload_tiny_decoder();
  if (!o.tiny_decoder.empty() && image_->tiny_decoder_path() != o.tiny_decoder) {
    Stopwatch loading;
    TESSERA_RETURN_IF_ERROR(image_->load_tiny_decoder(o.tiny_decoder));
    char ms[32];
    std::snprintf(ms, sizeof(ms), "%.0f", loading.elapsed_ms());
    notes.push_back("tiny decoder " + short_name(o.tiny_decoder) + " loaded in " + ms + " ms");
  }
  diffusion::GenerateRequest request;
  request.prompt = prompt;
  request.tiny_decode = !o.tiny_decoder.empty();
  request.negative_prompt = o.negative_prompt;
  request.width = inputs->width;
  request.height = inputs->height;
  diffusion::ImageView init_view, mask_view;
  if (inputs->init) {
    init_view = {inputs->init->rgb.data(), inputs->init->width, inputs->init->height, 3};
    request.init_image = &init_view;
    request.strength = o.strength;
  }
  if (inputs->mask) {
    mask_view = {inputs->mask->rgb.data(), inputs->mask->width, inputs->mask->height, 3};
    request.mask = &mask_view;
  }
  diffusion::ImageView control_view;
  if (inputs->control) {
    control_view = {inputs->control->rgb.data(), inputs->control->width, inputs->control->height,
                    3};
    request.control_image = &control_view;
    request.control_scale = o.control_scale;
    request.control_guess_mode = o.control_guess_mode;
  }
  request.steps = o.steps;
  request.guidance_scale = o.guidance;
  request.sampler = to_diffusion(o.sampler);
  request.seed = o.seed;
  diffusion::GenerateCallbacks callbacks;
  callbacks.cancel = &cancel;
  callbacks.on_step = [&](const diffusion::StepProgress& p) {
    ImageStepEvent step;
    step.step = p.step;
    step.steps = p.steps;
    step.sigma = p.sigma;
    step.ms = p.ms;
    if (p.preview_rgb != nullptr) {
      auto preview = std::make_shared<mesh::TextureImage>();
      preview->width = p.latent_width;
      preview->height = p.latent_height;
      preview->rgb.assign(p.preview_rgb, p.preview_rgb + p.latent_height * p.latent_width * 3);
      step.preview = std::move(preview);
    }
    emit(id, lane, std::move(step));
    ImageStepHook hook;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      hook = image_step_hook_;
    }
    if (hook) hook(p.step, cancel);
    // Between steps: yield to a shape job that started meanwhile (state kept, resumes here).
    scheduler_.wait_image_turn(cancel, on_wait);
  };
  auto image = image_->generate(request, callbacks);
  if (!image.ok()) {
    if (cancel.load() && image.status().code() != ErrorCode::kCancelled) {
      return cancelled(image.status().message());
    }
    return image.status();
  }
  MadeImage made;
  made.image = std::move(*image);
  made.had_init = request.init_image != nullptr;
  if (request.control_image != nullptr) made.control_net = image_->control_net_path();
  made.notes = std::move(notes);
  made.notes.insert(made.notes.end(), inputs->notes.begin(), inputs->notes.end());
  return made;
}

void Session::Impl::run_image_job(uint64_t id, const ImageJobOptions& o,
                                  std::atomic<bool>& cancel) {
  const Lane lane = Lane::kImage;
  Stopwatch total;
  if (image_ == nullptr) {
    return emit(id, lane, ErrorEvent{not_found("no diffusion model is loaded")});
  }
  auto on_wait = [&](bool waiting) {
    emit(id, lane, WaitingEvent{waiting, waiting ? "waiting for the shape job" : ""});
  };
  if (!scheduler_.wait_image_turn(cancel, on_wait)) {
    return emit(id, lane, CancelledEvent{"cancelled before it started"});
  }
  auto made = make_image(id, o, cancel);
  if (!made.ok()) {
    if (made.status().code() == ErrorCode::kCancelled) {
      return emit(id, lane, CancelledEvent{made.status().message()});
    }
    return emit(id, lane, ErrorEvent{made.status()});
  }
  diffusion::GeneratedImage& image = made->image;
  emit(id, lane, StageEvent{kStageImageText, image.text_ms});
  if (made->had_init) emit(id, lane, StageEvent{kStageVaeEncode, image.encode_ms});
  emit(id, lane, StageEvent{kStageDenoise, image.denoise_ms});
  emit(id, lane, StageEvent{kStageVae, image.vae_ms});
  auto rgb = std::make_shared<mesh::TextureImage>();
  rgb->width = image.width;
  rgb->height = image.height;
  rgb->rgb = std::move(image.rgb);
  ImageEvent done{std::move(rgb), o.seed, image.text_ms, image.denoise_ms, image.vae_ms};
  done.encode_ms = image.encode_ms;
  done.steps_run = image.steps_run;
  done.notes = std::move(made->notes);
  done.control_net = made->control_net;
  emit(id, lane, std::move(done));
  emit(id, lane, DoneEvent{total.elapsed_ms()});
}

// ---- texture jobs
// --------------------------------------------------------------------------------

void Session::Impl::run_texture_job(uint64_t id, const TextureJobOptions& o,
                                    std::atomic<bool>& cancel) {
  const Lane lane = Lane::kTexture;
  Stopwatch total;
  if (o.mesh == nullptr) return emit(id, lane, ErrorEvent{invalid_argument("no mesh to texture")});
  if (o.image == nullptr)
    return emit(id, lane, ErrorEvent{invalid_argument("no image to project")});
  if (cancel.load()) return emit(id, lane, CancelledEvent{"cancelled before it started"});
  auto textured = std::make_shared<mesh::Mesh>(*o.mesh);
  std::optional<mesh::ImageRect> object;
  if (Status st = mesh::project_texture_front(*o.image, o.projection, textured.get(), &object);
      !st.ok()) {
    return emit(id, lane, ErrorEvent{st});
  }
  emit(id, lane, TexturedMeshEvent{std::move(textured), object});
  emit(id, lane, DoneEvent{total.elapsed_ms()});
}

// ---- the interface
// --------------------------------------------------------------------------------

uint64_t Session::load_shape_model(ShapeModelOptions options) {
  return impl_->load_shape_model(std::move(options));
}
uint64_t Session::load_image_model(ImageModelOptions options) {
  return impl_->load_image_model(std::move(options));
}
uint64_t Session::submit(JobOptions job) {
  return impl_->submit(std::move(job));
}
uint64_t Session::submit_image(ImageJobOptions job) {
  return impl_->submit_image(std::move(job));
}
uint64_t Session::submit_texture(TextureJobOptions job) {
  return impl_->submit_texture(std::move(job));
}
uint64_t Session::submit_paint(PaintJobOptions job) {
  return impl_->submit_paint(std::move(job));
}
void Session::cancel() {
  impl_->cancel();
}
void Session::cancel(Lane lane) {
  impl_->cancel(lane);
}
std::optional<Event> Session::poll() {
  return impl_->poll();
}
std::optional<Event> Session::wait_event(std::chrono::milliseconds timeout) {
  return impl_->wait_event(timeout);
}
bool Session::idle() const {
  return impl_->idle();
}
std::optional<ShapeModelInfo> Session::shape_model() const {
  return impl_->shape_model();
}
std::optional<ImageModelInfo> Session::image_model() const {
  return impl_->image_model();
}
void Session::set_image_step_hook(ImageStepHook hook) {
  impl_->set_image_step_hook(std::move(hook));
}
bool Session::engines_share_device() const {
  return impl_->scheduler_.exclusive();
}
MemoryUse Session::memory() const {
  return impl_->memory();
}

}  // namespace tessera::runtime
