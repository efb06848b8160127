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
  // Batch 1 uses the prompt's row (row 1) alone. The context goes to the backend once.
  const int64_t context_floats = batch * length * text_width;
  TESSERA_ASSIGN_OR_RETURN(float* context, m.dev.get(Impl::kDevContext, context_floats));
  TESSERA_RETURN_IF_ERROR(m.backend->upload(context,
                                            m.context.data() + (guided ? 0 : length * text_width),
                                            static_cast<size_t>(context_floats) * sizeof(float)));
  TESSERA_ASSIGN_OR_RETURN(float* x_dev, m.dev.get(Impl::kDevX, batch * n));
  TESSERA_ASSIGN_OR_RETURN(float* eps_dev, m.dev.get(Impl::kDevEps, batch * n));
  m.x.resize(static_cast<size_t>(n));
  m.x_in.resize(static_cast<size_t>(batch * n));
  m.eps.resize(static_cast<size_t>(batch * n));
  m.guided.resize(static_cast<size_t>(n));
  m.t.resize(static_cast<size_t>(batch));
  if (request.initial_noise != nullptr) {
    const double s0 = sampler.sigma(0);
    for (int64_t k = 0; k < n; ++k) {
      m.x[k] = static_cast<float>((*request.initial_noise)[k] * s0);
    }
  } else {
    sampler.init_latents(m.x.data());
  }
  const bool preview = callbacks.on_step && channels == 4;
  if (preview) m.preview.resize(static_cast<size_t>(lh * lw * 3));
  std::vector<float> denoised(preview ? static_cast<size_t>(n) : 0);

  const auto denoise_start = Clock::now();
  for (int i = 0; i < sampler.steps(); ++i) {
    if (cancelled_now()) {
      return cancelled("image generation cancelled after " + std::to_string(i) + " of " +
                       std::to_string(sampler.steps()) + " steps");
    }
    const auto step_start = Clock::now();
    const double sigma = sampler.sigma(i);
    scale_model_input(m.x.data(), n, sigma, m.x_in.data());
    if (guided) std::copy(m.x_in.begin(), m.x_in.begin() + n, m.x_in.begin() + n);
    std::fill(m.t.begin(), m.t.end(), static_cast<float>(sampler.timestep(i)));
    TESSERA_RETURN_IF_ERROR(m.backend->upload(x_dev, m.x_in.data(), m.x_in.size() * sizeof(float)));
    TESSERA_RETURN_IF_ERROR(
        m.unet->forward(x_dev, m.t.data(), context, batch, lh, lw, length, eps_dev));
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
    if (callbacks.on_step) {
      StepProgress progress{};
      progress.step = i;
      progress.steps = sampler.steps();
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
  out->denoise_ms = ms_since(denoise_start);
  return Status();
}

}  // namespace tessera::diffusion
