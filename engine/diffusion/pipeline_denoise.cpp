// The UNet stage (pipeline.h): the denoising loop, the UNet's passes with classifier-free
// guidance and the sampler's steps (engine/diffusion/scheduler.h), with the step callbacks.
#include <algorithm>
#include <atomic>
#include <string>

#include "engine/diffusion/pipeline_internal.h"

namespace tessera::diffusion {

using pipeline_detail::Clock;
using pipeline_detail::ms_since;

Status DiffusionModel::Impl::denoise(Impl& m, const GenerateRequest& request,
                                     const GenerateCallbacks& callbacks, Sampler& sampler,
                                     const LatentGrid& grid, int64_t context_length,
                                     int64_t text_width, GeneratedImage* out) {
  const int64_t lh = grid.height, lw = grid.width, channels = grid.channels;
  const int64_t n = lh * lw * channels;
  const auto cancelled_now = [&] {
    return callbacks.cancel != nullptr && callbacks.cancel->load(std::memory_order_relaxed);
  };
  const bool guided = request.guidance_scale != 1.0f;
  const int64_t batch = guided ? 2 : 1;
  const int64_t length = context_length;
  // An inpainting UNet takes [latents | mask | masked image latents] per latent pixel.
  const int64_t unet_in = m.unet->config().in_channels;
  const int64_t extra = unet_in - channels;
  const int64_t lp = lh * lw, n_in = lp * unet_in;
  // Batch 1 uses the prompt's row (row 1) alone. The context goes to the backend once.
  const int64_t context_floats = batch * length * text_width;
  TESSERA_ASSIGN_OR_RETURN(float* context, m.dev.get(Impl::kDevContext, context_floats));
  TESSERA_RETURN_IF_ERROR(m.backend->upload(context,
                                            m.context.data() + (guided ? 0 : length * text_width),
                                            static_cast<size_t>(context_floats) * sizeof(float)));
  TESSERA_ASSIGN_OR_RETURN(float* x_dev, m.dev.get(Impl::kDevX, batch * n_in));
  TESSERA_ASSIGN_OR_RETURN(float* eps_dev, m.dev.get(Impl::kDevEps, batch * n));
  m.x.resize(static_cast<size_t>(n));
  m.x_in.resize(static_cast<size_t>(batch * n_in));
  m.eps.resize(static_cast<size_t>(batch * n));
  m.guided.resize(static_cast<size_t>(n));
  m.t.resize(static_cast<size_t>(batch));
  // The start: noise at the first step's sigma, added to the init image's latents when there is
  // one. The same noise re-noises the kept part of an inpainting run after every step.
  const int first = sampler.first_step();
  const bool from_image = !m.init_latents.empty();
  const bool blend = !m.latent_mask.empty() && extra == 0;
  m.noise0.resize(static_cast<size_t>(n));
  if (request.initial_noise != nullptr) {
    std::copy(request.initial_noise->begin(), request.initial_noise->end(), m.noise0.begin());
  } else {
    NoiseRng(request.seed).fill(0, m.noise0.data(), n);
  }
  {
    const double s0 = sampler.sigma(first);
    for (int64_t k = 0; k < n; ++k) {
      const double base = from_image ? m.init_latents[static_cast<size_t>(k)] : 0.0;
      m.x[k] = static_cast<float>(base + m.noise0[k] * s0);
    }
  }
  // ControlNet: the control image through its hint encoder once; every pass then gets its
  // residuals for the latents' part of the UNet input.
  // A scale of 0 adds nothing: the ControlNet is not run.
  ControlNet* control =
      request.control_image != nullptr && request.control_scale > 0.0f ? m.control.get() : nullptr;
  std::vector<float> control_scales, row_scales;
  ControlResiduals control_rows;  // the ControlNet's residuals, placed at their rows
  float* x_control = x_dev;
  if (control != nullptr) {
    const ImageView& v = *request.control_image;
    const int64_t pixels = v.width * v.height * 3;
    m.hint.resize(static_cast<size_t>(pixels));
    for (int64_t k = 0; k < pixels; ++k) m.hint[k] = static_cast<float>(v.pixels[k]) / 255.0f;
    TESSERA_ASSIGN_OR_RETURN(float* hint_dev, m.dev.get(Impl::kDevHint, pixels));
    TESSERA_RETURN_IF_ERROR(
        m.backend->upload(hint_dev, m.hint.data(), m.hint.size() * sizeof(float)));
    TESSERA_RETURN_IF_ERROR(control->set_hint(hint_dev, v.height, v.width));
    const int count = control->residual_count();
    control_scales = request.control_guess_mode
                         ? guess_mode_scales(request.control_scale, count)
                         : std::vector<float>(static_cast<size_t>(count), request.control_scale);
    // Guess mode with guidance: the ControlNet runs on the prompt's row only (row 1); the
    // negative prompt's row gets no control.
    row_scales.assign(static_cast<size_t>(guided && request.control_guess_mode ? 1 : batch), 1.0f);
    if (extra != 0) {
      TESSERA_ASSIGN_OR_RETURN(x_control, m.dev.get(Impl::kDevXControl, batch * n));
      m.x_control.resize(static_cast<size_t>(batch * n));
    }
  }
  const bool preview = callbacks.on_step && channels == 4;
  if (preview) m.preview.resize(static_cast<size_t>(lh * lw * 3));
  std::vector<float> denoised(preview ? static_cast<size_t>(n) : 0);

  const auto denoise_start = Clock::now();
  const int run = sampler.steps() - first;
  for (int i = first; i < sampler.steps(); ++i) {
    if (cancelled_now()) {
      return cancelled("image generation cancelled after " + std::to_string(i - first) + " of " +
                       std::to_string(run) + " steps");
    }
    const auto step_start = Clock::now();
    const double sigma = sampler.sigma(i);
    if (extra == 0) {
      scale_model_input(m.x.data(), n, sigma, m.x_in.data());
    } else {
      const double c_in = input_scale(sigma);
      for (int64_t p = 0; p < lp; ++p) {
        float* dst = m.x_in.data() + p * unet_in;
        for (int64_t c = 0; c < channels; ++c) {
          dst[c] = static_cast<float>(m.x[p * channels + c] * c_in);
        }
        std::copy_n(m.unet_extra.data() + p * extra, extra, dst + channels);
      }
    }
    if (guided) std::copy(m.x_in.begin(), m.x_in.begin() + n_in, m.x_in.begin() + n_in);
    std::fill(m.t.begin(), m.t.end(), static_cast<float>(sampler.timestep(i)));
    TESSERA_RETURN_IF_ERROR(m.backend->upload(x_dev, m.x_in.data(), m.x_in.size() * sizeof(float)));
    const ControlResiduals* residuals = nullptr;
    if (control != nullptr) {
      if (extra != 0) {
        for (int64_t p = 0; p < batch * lp; ++p) {
          std::copy_n(m.x_in.data() + p * unet_in, channels, m.x_control.data() + p * channels);
        }
        TESSERA_RETURN_IF_ERROR(
            m.backend->upload(x_control, m.x_control.data(), m.x_control.size() * sizeof(float)));
      }
      const auto rows = static_cast<int64_t>(row_scales.size());
      const int64_t first_row = batch - rows;  // 1 in guess mode with guidance, else 0
      TESSERA_ASSIGN_OR_RETURN(
          const ControlResiduals* made,
          control->forward(x_control + first_row * lp * channels, m.t.data() + first_row,
                           context + first_row * length * text_width, rows, lh, lw, length,
                           control_scales, row_scales));
      control_rows = *made;
      control_rows.first_row = first_row;
      residuals = &control_rows;
    }
    TESSERA_RETURN_IF_ERROR(
        m.unet->forward(x_dev, m.t.data(), context, batch, lh, lw, length, eps_dev, residuals));
    TESSERA_RETURN_IF_ERROR(
        m.backend->download(m.eps.data(), eps_dev, m.eps.size() * sizeof(float)));
    if (guided) {
      apply_guidance(m.eps.data(), m.eps.data() + n, n, request.guidance_scale, m.guided.data());
    } else {
      std::copy(m.eps.begin(), m.eps.begin() + n, m.guided.begin());
    }
    if (preview) {
      // The model's current estimate of the clean latents, before the step moves x.
      for (int64_t k = 0; k < n; ++k) {
        denoised[k] = static_cast<float>(m.x[k] - sigma * m.guided[k]);
      }
    }
    TESSERA_RETURN_IF_ERROR(sampler.step(i, m.guided.data(), m.x.data()));
    if (blend) {
      // Kept cells: the init image at the next step's noise level (clean after the last step).
      const double sn = sampler.sigma(i + 1);
      for (int64_t p = 0; p < lp; ++p) {
        if (m.latent_mask[static_cast<size_t>(p)] != 0.0f) continue;
        for (int64_t c = 0; c < channels; ++c) {
          const int64_t k = p * channels + c;
          m.x[k] = static_cast<float>(m.init_latents[static_cast<size_t>(k)] + sn * m.noise0[k]);
        }
      }
    }
    if (callbacks.on_step) {
      StepProgress progress{};
      progress.step = i - first;
      progress.steps = run;
      progress.sigma = sigma;
      progress.ms = ms_since(step_start);
      progress.latents = m.x.data();
      progress.latent_height = lh;
      progress.latent_width = lw;
      progress.latent_channels = channels;
      if (preview) {
        latents_to_rgb_preview(denoised.data(), lh, lw, m.preview.data());
        progress.preview_rgb = m.preview.data();
      }
      callbacks.on_step(progress);
    }
  }
  out->steps_run = run;
  out->denoise_ms = ms_since(denoise_start);
  return Status();
}

}  // namespace tessera::diffusion
