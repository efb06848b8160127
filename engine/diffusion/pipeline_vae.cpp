// The VAE stages (pipeline.h): the init image and mask encoded (image-to-image, inpainting), the
// final latents decoded to the image, and the latent and image conversions to RGB8 (the step
// previews' cheap linear map, the decoded image).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/diffusion/pipeline_internal.h"

namespace tessera::diffusion {

using pipeline_detail::Clock;
using pipeline_detail::ms_since;

namespace {
uint8_t to_u8(float v01) {
  if (!(v01 > 0.0f)) return 0;  // also NaN
  if (v01 >= 1.0f) return 255;
  return static_cast<uint8_t>(std::lround(v01 * 255.0f));
}
}  // namespace

void latents_to_rgb_preview(const float* latents, int64_t height, int64_t width, uint8_t* rgb) {
  for (int64_t p = 0; p < height * width; ++p) {
    const float* z = latents + 4 * p;
    for (int c = 0; c < 3; ++c) {
      float v = 0;
      for (int k = 0; k < 4; ++k) v += z[k] * kLatentRgb[k][c];
      rgb[3 * p + c] = to_u8((v + 1.0f) * 0.5f);
    }
  }
}

void image_to_rgb8(const float* image, int64_t pixels, uint8_t* rgb) {
  for (int64_t k = 0; k < pixels * 3; ++k) rgb[k] = to_u8((image[k] + 1.0f) * 0.5f);
}

Status DiffusionModel::Impl::encode_image(Impl& m, const LatentGrid& grid, int64_t width,
                                          int64_t height, std::vector<float>* latents) {
  const int64_t lp = grid.height * grid.width;
  const int64_t z = m.encoder->config().z_channels;
  m.moments.resize(static_cast<size_t>(lp * 2 * z));
  {
    TESSERA_ASSIGN_OR_RETURN(float* image_dev,
                             m.dev.get(Impl::kDevImage, static_cast<int64_t>(m.image_in.size())));
    TESSERA_ASSIGN_OR_RETURN(float* moments_dev,
                             m.dev.get(Impl::kDevEps, static_cast<int64_t>(m.moments.size())));
    TESSERA_RETURN_IF_ERROR(
        m.backend->upload(image_dev, m.image_in.data(), m.image_in.size() * sizeof(float)));
    TESSERA_RETURN_IF_ERROR(m.encoder->encode(image_dev, 1, height, width, moments_dev));
    TESSERA_RETURN_IF_ERROR(
        m.backend->download(m.moments.data(), moments_dev, m.moments.size() * sizeof(float)));
  }
  for (size_t k = 0; k < m.moments.size(); ++k) {
    if (!std::isfinite(m.moments[k])) {
      return corrupt_data("VAE encode: the latents have " +
                          std::string(std::isnan(m.moments[k]) ? "NaN" : "an infinity") +
                          " at element " + std::to_string(k));
    }
  }
  latents->resize(static_cast<size_t>(lp * z));
  // The posterior's mode (its mean): reproducible, and SD's posterior std is a small fraction of
  // the latents' (diffusers and stable-diffusion.cpp draw a sample instead).
  posterior_latents(m.moments.data(), lp, z, nullptr, m.encoder->config().latent_scale,
                    latents->data());
  return Status();
}

Status DiffusionModel::Impl::encode_inputs(Impl& m, const GenerateRequest& request,
                                           const LatentGrid& grid, GeneratedImage* out) {
  m.init_latents.clear();
  m.latent_mask.clear();
  m.unet_extra.clear();
  const bool inpainting_unet = m.unet->config().in_channels != m.unet->config().out_channels;
  if (request.init_image == nullptr && !inpainting_unet) return Status();
  const auto t0 = Clock::now();
  const int64_t width = request.width, height = request.height, pixels = width * height;
  const int64_t lh = grid.height, lw = grid.width, lp = lh * lw, z = grid.channels;
  const int64_t f = height / lh;
  m.image_in.resize(static_cast<size_t>(pixels * 3));
  if (request.init_image != nullptr) {
    rgb8_to_image(request.init_image->pixels, pixels, m.image_in.data());
    TESSERA_RETURN_IF_ERROR(encode_image(m, grid, width, height, &m.init_latents));
  }
  // The pixel mask (1 = repaint) and the latent one: a cell repaints when any of its pixels does.
  std::vector<uint8_t> repaint;
  if (request.mask != nullptr) {
    const ImageView& v = *request.mask;
    repaint.resize(static_cast<size_t>(pixels));
    m.latent_mask.assign(static_cast<size_t>(lp), 0.0f);
    int64_t any = 0;
    for (int64_t p = 0; p < pixels; ++p) {
      int value = v.pixels[p * v.channels];
      if (v.channels == 3) value = (value + v.pixels[p * 3 + 1] + v.pixels[p * 3 + 2] + 1) / 3;
      repaint[p] = value >= 128 ? 1 : 0;
      if (repaint[p]) {
        ++any;
        const int64_t y = p / width, x = p % width;
        m.latent_mask[static_cast<size_t>((y / f) * lw + x / f)] = 1.0f;
      }
    }
    if (any == 0) {
      return invalid_argument(
          "mask: no pixel is white (>= 128), so nothing would be repainted "
          "(white = repaint, black = keep)");
    }
  }
  if (inpainting_unet) {
    // The masked image: the init with the repainted pixels at 0 (grey); with no init or no mask,
    // everything is repainted (a grey image, a mask of ones).
    std::vector<float> masked_latents;
    if (request.init_image == nullptr || repaint.empty()) {
      std::fill(m.image_in.begin(), m.image_in.end(), 0.0f);
    } else {
      for (int64_t p = 0; p < pixels; ++p) {
        if (repaint[p]) std::fill_n(m.image_in.begin() + 3 * p, 3, 0.0f);
      }
    }
    TESSERA_RETURN_IF_ERROR(encode_image(m, grid, width, height, &masked_latents));
    m.unet_extra.resize(static_cast<size_t>(lp * (1 + z)));
    for (int64_t p = 0; p < lp; ++p) {
      float* e = m.unet_extra.data() + p * (1 + z);
      e[0] = m.latent_mask.empty() ? 1.0f : m.latent_mask[static_cast<size_t>(p)];
      std::copy_n(masked_latents.data() + p * z, z, e + 1);
    }
  }
  out->encode_ms = ms_since(t0);
  return Status();
}

Status DiffusionModel::Impl::decode_latents(Impl& m, const GenerateRequest& request,
                                            const LatentGrid& grid, GeneratedImage* out) {
  const int64_t lh = grid.height, lw = grid.width;
  const int64_t n = lh * lw * grid.channels;
  const auto t0 = Clock::now();
  out->width = request.width;
  out->height = request.height;
  const int64_t pixels = request.width * request.height;
  out->decoded.resize(static_cast<size_t>(pixels * m.vae->config().out_channels));
  {
    TESSERA_ASSIGN_OR_RETURN(float* z_dev, m.dev.get(Impl::kDevX, n));
    TESSERA_ASSIGN_OR_RETURN(float* image_dev,
                             m.dev.get(Impl::kDevImage, static_cast<int64_t>(out->decoded.size())));
    TESSERA_RETURN_IF_ERROR(m.backend->upload(z_dev, m.x.data(), m.x.size() * sizeof(float)));
    if (request.tiny_decode) {
      TESSERA_RETURN_IF_ERROR(m.tiny->decode(z_dev, 1, lh, lw, image_dev));
    } else {
      TESSERA_RETURN_IF_ERROR(m.vae->decode(z_dev, 1, lh, lw, image_dev));
    }
    TESSERA_RETURN_IF_ERROR(
        m.backend->download(out->decoded.data(), image_dev, out->decoded.size() * sizeof(float)));
  }
  out->vae_ms = ms_since(t0);
  for (size_t k = 0; k < out->decoded.size(); ++k) {
    if (!std::isfinite(out->decoded[k])) {
      return corrupt_data(std::string(request.tiny_decode ? "tiny decoder" : "VAE decode") +
                          ": the image has " +
                          std::string(std::isnan(out->decoded[k]) ? "NaN" : "an infinity") +
                          " at pixel " + std::to_string(k / 3) + " (latents were finite)");
    }
  }
  out->rgb.resize(static_cast<size_t>(pixels * 3));
  image_to_rgb8(out->decoded.data(), pixels, out->rgb.data());
  out->latents = m.x;
  return Status();
}

}  // namespace tessera::diffusion
