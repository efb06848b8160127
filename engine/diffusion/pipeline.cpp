// The diffusion model (pipeline.h): its accessors and precision, and generate(), which checks the
// request and runs the stages in order (text, UNet loop, VAE; pipeline.h says where each lives).
#include "engine/diffusion/pipeline.h"

#include <atomic>
#include <cmath>
#include <string>
#include <utility>

#include "engine/diffusion/pipeline_internal.h"
#include "kernels/backend.h"

namespace tessera::diffusion {

using pipeline_detail::Clock;
using pipeline_detail::ms_since;

const char* model_layout_name(ModelLayout layout) {
  return layout == ModelLayout::kDiffusers ? "diffusers" : "compvis";
}

DiffusionModel::DiffusionModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiffusionModel::~DiffusionModel() = default;

const UNetConfig& DiffusionModel::unet_config() const {
  return impl_->unet->config();
}
const VaeDecoderConfig& DiffusionModel::vae_config() const {
  return impl_->vae->config();
}
bool DiffusionModel::has_encoder() const {
  return impl_->encoder != nullptr;
}
const VaeEncoderConfig* DiffusionModel::encoder_config() const {
  return impl_->encoder ? &impl_->encoder->config() : nullptr;
}
bool DiffusionModel::is_inpainting() const {
  return unet_config().in_channels != unet_config().out_channels;
}
int64_t DiffusionModel::text_width() const {
  return impl_->text->config().width;
}
int64_t DiffusionModel::context_length() const {
  return impl_->text->config().max_positions;
}
int64_t DiffusionModel::size_multiple() const {
  return vae_config().upscale() * unet_config().size_multiple();
}
int64_t DiffusionModel::default_image_size() const {
  const int64_t multiple = size_multiple();
  const int64_t side = unet_config().model_channels >= 320 ? 512 : 64;
  return (side + multiple - 1) / multiple * multiple;
}
void DiffusionModel::set_kernel_options(const KernelOptions& options) {
  impl_->unet->set_options(options);
  impl_->vae->set_options(options);
  if (impl_->encoder) impl_->encoder->set_options(options);
  if (impl_->control) impl_->control->set_options(options);
  if (impl_->tiny) impl_->tiny->set_options(options);
}
kernels::Precision DiffusionModel::compute_precision() const {
  const KernelOptions& o = impl_->unet->options();
  return use_bf16(o, *impl_->backend) || use_tf32(o, *impl_->backend) ? kernels::Precision::kBf16
                                                                      : kernels::Precision::kF32;
}

const char* DiffusionModel::compute_precision_label() const {
  const KernelOptions& o = impl_->unet->options();
  if (use_bf16(o, *impl_->backend)) return "bf16";
  if (use_device_bf16(o, *impl_->backend)) return "bf16 tensor cores (tf32 attention)";
  return use_tf32(o, *impl_->backend) ? "tf32" : "f32";
}

const std::vector<LoraMerged>& DiffusionModel::loras() const {
  return impl_->loras;
}

const kernels::Backend& DiffusionModel::backend() const {
  return *impl_->backend;
}

const std::string& DiffusionModel::device_note() const {
  return impl_->device_note;
}

const char* compute_precision_name(ComputePrecision p) {
  switch (p) {
    case ComputePrecision::kF32:
      return "f32";
    case ComputePrecision::kBf16:
      return "bf16";
    case ComputePrecision::kAuto:
      break;
  }
  return "auto";
}

kernels::Precision resolve_precision(ComputePrecision p, int64_t model_channels) {
  const bool want =
      p == ComputePrecision::kBf16 || (p == ComputePrecision::kAuto && model_channels >= 320);
  return want && kernels::cpu::bf16_compute_available() ? kernels::Precision::kBf16
                                                        : kernels::Precision::kF32;
}

kernels::Precision resolve_precision(ComputePrecision p, int64_t model_channels,
                                     const kernels::Backend& backend) {
  const kernels::DiffusionOps* d = backend.diffusion();
  if (d == nullptr || d->bf16_compute() || !d->tf32_products_available()) {
    return resolve_precision(p, model_channels);
  }
  // A GPU: kBf16 only when asked for. Its kBf16 was TF32 products when the H200 ablation of
  // 2026-12-04 (SD 1.5 512x512) measured it slower than f32 (UNet step 119.3 against 116.5 ms,
  // VAE 94.9 against 58.8 ms); it is now bf16 tensor-core products for every weight
  // (use_device_bf16), not measured yet, so auto stays f32 until a device run says otherwise.
  (void)model_channels;
  return p == ComputePrecision::kBf16 ? kernels::Precision::kBf16 : kernels::Precision::kF32;
}

Status DiffusionModel::check_image_inputs(const GenerateRequest& request) const {
  const auto check_view = [&](const ImageView* v, const char* what, bool mask) -> Status {
    if (v == nullptr) return Status();
    if (v->pixels == nullptr) return invalid_argument(std::string(what) + ": no pixels");
    if (v->width != request.width || v->height != request.height) {
      return invalid_argument(std::string(what) + " is " + std::to_string(v->width) + "x" +
                              std::to_string(v->height) + ", the image " +
                              std::to_string(request.width) + "x" + std::to_string(request.height) +
                              " (resize it first)");
    }
    if (v->channels != 3 && !(mask && v->channels == 1)) {
      return invalid_argument(std::string(what) + " has " + std::to_string(v->channels) +
                              " channels; it needs " + (mask ? "1 or 3" : "3 (RGB)"));
    }
    return Status();
  };
  TESSERA_RETURN_IF_ERROR(check_view(request.init_image, "init image", false));
  TESSERA_RETURN_IF_ERROR(check_view(request.mask, "mask", true));
  TESSERA_RETURN_IF_ERROR(check_view(request.control_image, "control image", false));
  if (request.control_image != nullptr && impl_->control == nullptr) {
    return invalid_argument("a control image needs a ControlNet (load one first)");
  }
  if (request.tiny_decode && impl_->tiny == nullptr) {
    return invalid_argument("tiny_decode needs a tiny decoder (load one first)");
  }
  if (!(request.control_scale >= 0.0f) || !std::isfinite(request.control_scale)) {
    return invalid_argument("control scale " + std::to_string(request.control_scale) +
                            " must be a finite number >= 0");
  }
  if (request.mask != nullptr && request.init_image == nullptr) {
    return invalid_argument(
        "a mask needs an init image (the picture whose masked part is repainted)");
  }
  const bool needs_encoder = request.init_image != nullptr || is_inpainting();
  if (needs_encoder && impl_->encoder == nullptr) {
    return not_found(files_.vae + ": image-to-image needs the VAE encoder (tensors '" + kVaePrefix +
                     "encoder.*'), and this VAE has only the decoder");
  }
  return Status();
}

Expected<GeneratedImage> DiffusionModel::generate(const GenerateRequest& request,
                                                  const GenerateCallbacks& callbacks) {
  Impl& m = *impl_;
  const int64_t multiple = size_multiple();
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"width", request.width},
                                    std::pair<const char*, int64_t>{"height", request.height}}) {
    if (value <= 0 || value % multiple != 0) {
      return invalid_argument(std::string("image ") + name + " " + std::to_string(value) +
                              " is not a positive multiple of " + std::to_string(multiple) +
                              " (the VAE's " + std::to_string(vae_config().upscale()) +
                              "x upscale times the UNet's " +
                              std::to_string(unet_config().size_multiple()) + "x downsampling)");
    }
  }
  if (request.steps < 1) {
    return invalid_argument("steps must be >= 1, got " + std::to_string(request.steps));
  }
  if (!std::isfinite(request.guidance_scale)) {
    return invalid_argument("guidance scale must be finite");
  }
  const auto cancelled_now = [&] {
    return callbacks.cancel != nullptr && callbacks.cancel->load(std::memory_order_relaxed);
  };
  const int64_t upscale = vae_config().upscale();
  const int64_t lh = request.height / upscale, lw = request.width / upscale;
  const int64_t channels =
      unet_config().out_channels;  // the latents (an inpainting UNet takes more)
  const int64_t n = lh * lw * channels;
  TESSERA_RETURN_IF_ERROR(check_image_inputs(request));
  if (request.initial_noise != nullptr &&
      static_cast<int64_t>(request.initial_noise->size()) != n) {
    return invalid_argument("initial noise has " + std::to_string(request.initial_noise->size()) +
                            " values, expected " + std::to_string(n) + " (" + std::to_string(lh) +
                            " x " + std::to_string(lw) + " x " + std::to_string(channels) + ")");
  }
  const SigmaSchedule schedule = request.schedule.value_or(
      request.sampler == SamplerKind::kDpmpp2m ? SigmaSchedule::kKarras : SigmaSchedule::kNormal);
  TESSERA_ASSIGN_OR_RETURN(Sampler sampler,
                           Sampler::create(NoiseSchedule::sd(), request.sampler, schedule,
                                           request.steps, n, request.seed));
  if (request.init_image != nullptr) {
    TESSERA_RETURN_IF_ERROR(sampler.set_strength(request.strength));
  }
  GeneratedImage out;
  if (cancelled_now()) return cancelled("image generation cancelled before the text encoder");
  auto t0 = Clock::now();
  TESSERA_RETURN_IF_ERROR(encode_prompts(request.prompt, request.negative_prompt, &m.context));
  out.text_ms = ms_since(t0);

  const Impl::LatentGrid grid{lh, lw, channels};
  if (cancelled_now()) return cancelled("image generation cancelled before the VAE encode");
  TESSERA_RETURN_IF_ERROR(Impl::encode_inputs(m, request, grid, &out));
  TESSERA_RETURN_IF_ERROR(
      Impl::denoise(m, request, callbacks, sampler, grid, context_length(), text_width(), &out));
  if (cancelled_now()) return cancelled("image generation cancelled before the VAE decode");
  TESSERA_RETURN_IF_ERROR(Impl::decode_latents(m, request, grid, &out));
  return out;
}

}  // namespace tessera::diffusion
